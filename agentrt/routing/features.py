"""Transparent features of a request, shared by every router.

Cheap by design (regexes and counts: well under a millisecond), so deciding costs nothing next to a
model call. Optional signals come from callables the agent wires in: retrieval coverage of the
private index and similar past runs from episodic memory.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from agentrt.core.text import YES_NO

_ARITHMETIC = re.compile(r"\d\s*[-+*/x×^%]\s*\d|\bhow (many|much)\b|\bcalculate\b|\bsolve\b|\bsum\b|\bproduct\b|\bpercent", re.I)
_CODE = re.compile(r"\bdef |\bfunction\b|\bpython\b|\bcode\b|\bimplement\b|```|\breturn\b", re.I)
_MULTI_HOP = re.compile(
    r"\bwhich (?:\w+ )*(?:was|is|came|were) (?:\w+ )*(?:first|older|younger|earlier|later|larger|longer|taller)\b"
    r"|\bboth\b|\bcompare\b|\bthe (?:director|author|founder|father|mother|wife|husband|creator) of the\b"
    r"|\bwho (?:directed|wrote|founded) the\b|,\s*\w+ or \w+", re.I)
_MULTI_STEP = re.compile(r"\bstep by step\b|\bwhy\b|\bexplain\b|\bprove\b|\bderive\b", re.I)
_INSTRUCTION = re.compile(r"\bwrite\b|\bat least \d+|\bat most \d+|\bwords?\b|\bparagraphs?\b|\bbullet", re.I)
# a choice between named alternatives or a property they share ("Who was born first, A or B?", "Are A and B
# both ...?"): the questions a search of the private index answers best, unlike the bridge questions
_COMPARISON = re.compile(
    r"\b(?:both|same|either|neither|share|shared|in common|different)\b"
    r"|\b(?:first|older|oldest|younger|earlier|later|larger|longer|taller|more|less|higher|lower|bigger|smaller)\b[^?]*\bor\b"
    r"|\b(?:which|who)\b[^?]*\bor\b|\bor\b[^,;.?]*\??\s*$", re.I)
_AMBIGUOUS = re.compile(r"^\s*(?:what about|and|how about|it|this|that|they)\b|\b(?:it|this|that)\?\s*$", re.I)
_UNKNOWABLE = re.compile(r"\b(?:tomorrow|next (?:year|week|month)|will .* win|lottery)\b", re.I)

_PERSONAL = re.compile(r"\bmy (password|name|age)\b", re.I)
_ASKS = re.compile(r"\?\s*$|^\s*(?:what|who|how|which|when|where|tell me)\b", re.I)


def _role(message: Any) -> str:
    return message["role"] if isinstance(message, dict) else message.role


def _content(message: Any) -> str:
    return message["content"] if isinstance(message, dict) else message.content


NUMERIC_FEATURES = (
    "log_chars", "words", "numbers", "arithmetic", "code", "multi_hop", "multi_step", "instruction",
    "ambiguous", "unknowable", "question_mark", "yes_no", "comparison", "coverage", "past_success", "past_runs", "turn",
)
HASH_DIM = 128


def extract(question: str, *, coverage: Callable[[str], float] | None = None,
            similar_runs: Callable[[str], list[dict[str, Any]]] | None = None,
            history: Sequence[Any] = ()) -> dict[str, float]:
    """Numeric features of ``question`` (names in ``NUMERIC_FEATURES``) in its conversation.

    ``history`` (earlier messages, objects with ``role``/``content`` or dicts) is context, not question:
    it sets ``turn`` (prior user turns), resolves references ("it", "that") that would otherwise make a
    question ambiguous, and makes "my name"-style questions answerable when the user said so before.
    """
    words = question.split()
    said = " ".join(_content(m) for m in history if _role(m) == "user").lower()
    turn = sum(1 for m in history if _role(m) == "user")
    # asking for what only the user knows ("What is my name?") is unknowable, unless they said it before;
    # telling it ("My name is Ada.") is not a question at all
    personal = _PERSONAL.search(question) if _ASKS.search(question) else None
    unknowable = bool(_UNKNOWABLE.search(question)) or bool(personal and f"my {personal[1].lower()}" not in said)
    ambiguous = (len(words) <= 2 or bool(_AMBIGUOUS.search(question))) and not history
    f: dict[str, float] = {
        "log_chars": math.log1p(len(question)),
        "words": float(len(words)),
        "numbers": float(len(re.findall(r"\d+(?:\.\d+)?", question))),
        "arithmetic": float(bool(_ARITHMETIC.search(question))),
        "code": float(bool(_CODE.search(question))),
        "multi_hop": float(bool(_MULTI_HOP.search(question))),
        "multi_step": float(bool(_MULTI_STEP.search(question))),
        "instruction": float(bool(_INSTRUCTION.search(question))),
        "ambiguous": float(ambiguous),
        "unknowable": float(unknowable),
        "question_mark": float(question.strip().endswith("?")),
        "yes_no": float(bool(YES_NO.search(question))),
        "comparison": float(bool(_COMPARISON.search(question))),
        "coverage": float(coverage(question)) if coverage else 0.0,
        "past_success": 0.0,
        "past_runs": 0.0,
        "turn": float(turn),
    }
    if similar_runs:
        runs = similar_runs(question)
        rewards = [r["reward"] for r in runs if r.get("reward") is not None]
        f["past_runs"] = float(len(runs))
        f["past_success"] = sum(rewards) / len(rewards) if rewards else 0.0
    return f


_STOP = frozenset("what which where when whose who whom does did have has were was with from that this than there their "
                  "they them then about into also more most many much same both first last after before".split())


def index_coverage(question: str, passages: Sequence[str]) -> float:
    """How much of the question the top passages of the private index cover: the share of the question's
    content words (4+ letters, not question words) found in them. 0 when the index has nothing."""
    words = {w for w in re.findall(r"[a-z0-9]+", question.lower()) if len(w) >= 4 and w not in _STOP}
    if not words or not passages:
        return 0.0
    found = set(re.findall(r"[a-z0-9]+", " ".join(passages).lower()))
    return round(len(words & found) / len(words), 4)


def hashed_words(question: str, dim: int = HASH_DIM) -> list[float]:
    """A bag-of-words vector by the hashing trick: a stable, model-free question embedding."""
    vec = [0.0] * dim
    tokens = re.findall(r"[a-z0-9]+", question.lower())
    for tok in tokens:
        h = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=4).digest(), "little")
        vec[h % dim] += 1.0 if (h >> 31) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def vectorize(features: dict[str, float], question: str) -> list[float]:
    """The learned router's input: the numeric features then the hashed question embedding."""
    return [features.get(name, 0.0) for name in NUMERIC_FEATURES] + hashed_words(question)
