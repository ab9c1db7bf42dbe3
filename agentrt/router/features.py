"""Transparent features of a request, shared by every router.

Cheap by design (regexes and counts: well under a millisecond), so deciding costs nothing next to a
model call. Optional signals come from callables the agent wires in: what the private index holds for
the question (``index_signals``: BM25 and vector scores of the top hits, word coverage, the question's
named entities found in them; a few ms) and similar past runs from episodic memory.
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
_UNKNOWABLE = re.compile(r"\b(?:tomorrow|next (?:year|week|month|season|election)|will .* win|lottery|right now"
                         r"|i will|i'll|thinking of)\b|\b(?:20[4-9]\d|2[1-9]\d\d)\b", re.I)
# the asker's own life ("Where did I park my car?", "How old am I?"): what only the user knows
_ABOUT_USER = re.compile(r"\b(?:i|my|me|mine|myself)\b", re.I)
# a pronoun with nothing to point at ("Can I return it?", "Which one should I buy?")
_POINTER = re.compile(r"\b(?:it|this|that|these|those|they|them|he|she|him|her|one)\b", re.I)

_PERSONAL = re.compile(r"\bmy (password|name|age)\b", re.I)
# a follow-up that leans on the conversation ("Where was he born?", "And the second one?")
_REFERS_BACK = re.compile(r"\b(?:he|she|it|they|him|her|them|his|its|their|that|this|those|these|there|then)\b"
                          r"|^\s*(?:and|what about|how about)\b", re.I)
# A greeting, a thank-you, a goodbye or an introduction ("Hi, my name is Kai."): small talk that
# wants a short direct reply, never a tool loop or a search (the router's guard sends it to direct)
_SMALL_TALK = re.compile(
    r"^\W*(?:hi|hello|hey|hiya|howdy|greetings|good (?:morning|afternoon|evening|night)|thanks?(?: you)?|thx|"
    r"cheers|bye|goodbye|see you|nice to meet you|my name is|i am [a-z]+\W*$|i'm [a-z]+\W*$)(?:\b|$)", re.I)
_ALONE = re.compile(r"^\W*(?:(?:hi|hello|hey)?\W*how are you(?: doing)?(?: today)?|ok(?:ay)?|great|cool|nice|"
                    r"got it|sounds good)\W*$", re.I)


def is_chitchat(question: str) -> bool:
    """A greeting, thanks or introduction that asks nothing: "Hi, my name is Kai.", "Thanks!", "How are you?"."""
    text = question.strip()
    if _ALONE.match(text):
        return True
    return bool(_SMALL_TALK.match(text)) and "?" not in text and len(text.split()) <= 12


_ASKS = re.compile(r"\?\s*$|^\s*(?:what|who|how|which|when|where|tell me)\b", re.I)


def _role(message: Any) -> str:
    return message["role"] if isinstance(message, dict) else message.role


def _content(message: Any) -> str:
    return message["content"] if isinstance(message, dict) else message.content


NUMERIC_FEATURES = (
    "log_chars", "words", "numbers", "arithmetic", "code", "multi_hop", "multi_step", "instruction",
    "ambiguous", "unknowable", "question_mark", "yes_no", "comparison", "coverage", "past_success", "past_runs", "turn",
    "refers_back", "has_index", "index_bm25", "index_vector", "entity_overlap", "entity_miss", "entity_titled",
    "about_user", "unresolved_ref", "chitchat",
)
# Read off the logged run when a router is trained (they depend on the index and the episodes at run time);
# every other feature is a function of the question and its conversation, recomputed by ``extract``
STATEFUL_FEATURES = ("past_success", "past_runs")
# the 0/1 features that say what kind of question it is: the rules route on them, and a learned router out of
# evidence claims what its training runs of the question's rarest cue achieved (evidence.cue_prior). Not yes/no or
# comparison: they say how a question is put, not what answers it
CUES = ("unknowable", "ambiguous", "code", "arithmetic", "multi_hop", "multi_step")
# What ``index_signals`` returns (all 0 when no index is consulted, so a router trained with and without an
# index reads "no index" apart from "the index lacks it": has_index says which)
INDEX_FEATURES = ("coverage", "has_index", "index_bm25", "index_vector", "entity_overlap", "entity_miss",
                  "entity_titled")
HASH_DIM = 128


def extract(question: str, *, index: Callable[[str], dict[str, float]] | None = None,
            similar_runs: Callable[[str], list[dict[str, Any]]] | None = None,
            history: Sequence[Any] = ()) -> dict[str, float]:
    """Numeric features of ``question`` (names in ``NUMERIC_FEATURES``) in its conversation.

    ``history`` (earlier messages, objects with ``role``/``content`` or dicts) is context, not question:
    it sets ``turn`` (prior user turns) and ``refers_back`` (a follow-up leaning on them), resolves
    references ("it", "that") that would otherwise make a question ambiguous, and makes "my name"-style
    questions answerable when the user said so before. ``index``: the private index's signals for the
    question (``index_signals`` over its top hits; names in ``INDEX_FEATURES``).
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
        "past_success": 0.0,
        "past_runs": 0.0,
        "turn": float(turn),
        "refers_back": float(bool(history) and bool(_REFERS_BACK.search(question))),
        "about_user": float(bool(_ASKS.search(question)) and bool(_ABOUT_USER.search(question)) and not said),
        "unresolved_ref": float(bool(_POINTER.search(question)) and not history and not entities(question)),
        "chitchat": float(is_chitchat(question)),
        **dict.fromkeys(INDEX_FEATURES, 0.0),
    }
    if index is not None:
        f.update({k: float(v) for k, v in index(question).items() if k in INDEX_FEATURES})
    if similar_runs:
        runs = similar_runs(question)
        rewards = [r["reward"] for r in runs if r.get("reward") is not None]
        f["past_runs"] = float(len(runs))
        f["past_success"] = sum(rewards) / len(rewards) if rewards else 0.0
    return {name: f[name] for name in NUMERIC_FEATURES}  # one order everywhere: trajectories read alike


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


# Capitalized words that open questions and sentences rather than name anything
_NOT_NAMES = frozenset("what which where when whose who whom why how is are was were do does did can could has have "
                       "had will would should the a an in on at of for to and or but i my me we our you your it "
                       "its this that these those there he she they his her their name give tell list".split())
_NAME = re.compile(r"[A-Z0-9][\w'’.&-]*")
_QUOTED = re.compile(r'"([^"]{2,80})"')


def entities(question: str) -> list[str]:
    """The named things a question asks about: runs of capitalized words (``Scott Derrickson``, ``Ed Wood``)
    and quoted titles, lower-cased; question words and sentence openers are not names."""
    found = [m.lower() for m in _QUOTED.findall(question)]
    run: list[str] = []
    for tok in re.findall(r"[\w'’.&-]+|[^\w\s]", _QUOTED.sub(" ; ", question)) + [""]:
        if tok and _NAME.fullmatch(tok) and tok.lower() not in _NOT_NAMES and not tok.isdigit():
            run.append(tok)
            continue
        if run:
            found.append(" ".join(run).lower())
        run = []
    return list(dict.fromkeys(found))


def entity_overlap(question: str, passages: Sequence[str]) -> tuple[float, float]:
    """(share of the question's entities whose words all appear in ``passages``, entities missing). A
    question naming nothing gives (1.0, 0): there is nothing the index could lack."""
    names = entities(question)
    if not names:
        return 1.0, 0.0
    found = _words(" ".join(passages))
    hit = [_words(n) <= found for n in names]
    return round(sum(hit) / len(hit), 4), float(len(hit) - sum(hit))


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def entity_titled(question: str, titles: Sequence[str]) -> float:
    """Share of the question's entities that a hit is *about*: a title holding all the entity's words (or
    all of its words in the entity). A page that merely mentions a name is not the page on it. 1.0 for a
    question naming nothing."""
    names = entities(question)
    if not names:
        return 1.0
    heads = [h for h in map(_words, titles) if h]
    return round(sum(any(_words(n) <= h or h <= _words(n) for h in heads) for n in names) / len(names), 4)


def index_signals(question: str, lexical: Sequence[tuple[str, str, float]], dense_top: float | None) -> dict[str, float]:
    """The index features of ``question`` from its top BM25 hits ``lexical`` ((title, text, score), best
    first) and the cosine similarity of its best vector hit (None: no vector search)."""
    texts = [f"{title} {text}" for title, text, _ in lexical]
    overlap, missing = entity_overlap(question, texts)
    return {"coverage": index_coverage(question, texts), "has_index": 1.0,
            "index_bm25": round(math.log1p(max((s for _, _, s in lexical), default=0.0)), 4),
            "index_vector": round(max(0.0, dense_top or 0.0), 4),
            "entity_overlap": overlap, "entity_miss": missing, "entity_titled": entity_titled(question, [t for t, _, _ in lexical])}


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
