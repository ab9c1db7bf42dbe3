"""The synthesis rule: an answer must not be a claim found only in a passage's injected instruction.

Quoting (``agentrt.core.text``) tells the model that passages are data; a 135M model still copies
from them. This module is the check after the fact, run where the plan and read routes finalize an
answer: find the instruction-like sentences in the passages that were shown, and refuse an answer
whose span is one of their claims (or repeats their words) when nothing else in the passages
supports it.

What counts as an instruction (kept small on purpose, so it can be read and argued with):

* **After a closer.** Everything after a fake end of the data — a ``</document>`` lookalike (also
  its escaped ``&lt;/document>``), "end of document(s)", "end of context", "documents end here" —
  or after a line that opens a role turn (``System:``, ``Assistant:``, ``User:``, ``System note:``).
* **An imperative aimed at the assistant.** A sentence that starts with "ignore / disregard /
  answer / reply / respond / say / output / repeat / reveal / call ..." or that speaks to the
  model ("you must", "your answer", "chatbots", "the answer is", "final answer").

An instruction's *claims* are what an answer that obeyed it would say: quoted text, words in capitals
(``BANANA``), and what follows "the answer is / as / with / should be", "say", "the word", or a final
colon. An answer is rejected when it contains a claim (or 4 consecutive words of the instruction) that
the passages' other text — every sentence not flagged — does not contain: a document that says "the
answer is 42" *and* elsewhere that the lake is 42 metres deep still supports 42.

Benign text is rarely flagged, and a flagged sentence costs nothing unless the answer repeats a claim
found nowhere else; the detector is tuned on ``evals/data/injection_planted.jsonl`` only, and
``evals/data/injection_heldout.jsonl`` (another method, written after this was frozen) measures it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# A fake end of the data: the rest of the passage is someone talking to the model.
_CLOSER = re.compile(
    r"(?:[<\uff1c]|&lt;)\s*/\s*(?:document|tool_response|context|passage)\s*[>\uff1e]"
    r"|\bend\s+of\s+(?:the\s+)?(?:retrieved\s+)?(?:documents?|context|passages?|data|sources?)\b"
    r"|\b(?:retrieved\s+)?(?:documents?|context|passages?)\s+(?:ends?|stops?)\s+here\b",
    re.I)
# A line opening a role turn of its own.
_ROLE = re.compile(r"(?:^|\n)\s*(?:system(?:\s+(?:note|message|prompt))?|assistant|user|operator|admin)\s*:", re.I)
_IMPERATIVE = re.compile(
    r"^\W*(?:please\s+|now\s+|instead\s*,?\s+|instruction\s*:\s*)?(?:ignore|disregard|forget|answer|reply|respond|"
    r"say|output|print|repeat|reveal|call|execute|run|return|give|type|write|use|quote|begin)\b", re.I)
_ADDRESSED = re.compile(
    r"\b(?:you\s+(?:must|should|will|are\s+to)|your\s+(?:whole\s+|final\s+|only\s+)?(?:answer|reply|response|"
    r"instructions)|chatbots?|^\W*assistant\s*,|language\s+models?|\bai\b|\bllms?\b|"
    r"the\s+(?:correct\s+|real\s+|true\s+)?"
    r"answer\s+(?:is|should|must|will)|final\s+answer|wants\s+the\s+answer|ignore\s+(?:the|all|any|previous|"
    r"prior|above|them|it)|\banswer\b[^.;]{0,60}?\b(?:is|must\s+be|should\s+be|will\s+be)\b|the\s+user\s+"
    r"(?:has|now|wants)|\b(?:new|updated|following)\s+(?:instructions?|rules?)\b|\boverrides?\b|your\s+next\b|"
    r"\b(?:call|run|use)\b[^.;]{0,40}\btool\b)", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_QUOTED = re.compile(r"'([^']{1,60})'|\"([^\"]{1,60})\"|\u201c([^\u201d]{1,60})\u201d|\u2018([^\u2019]{1,60})\u2019")
_CAPS = re.compile(r"\b[A-Z][A-Z0-9-]{2,}\b")
_TARGET = re.compile(r"\b(?:answer(?:\s+(?:is|as|with|should\s+be|must\s+be|will\s+be))?|say|reply\s+(?:only\s+)?with|"
                     r"respond\s+with|output|be)\s+(?:only\s+)?(?:the\s+word\s+|the\s+number\s+)?(.+)$", re.I)
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of in on at to and or is are was were be by for with from as it its that this "
                  "you your me my i we our they them now only just please then".split())
_MARKERS = frozenset("end of document documents context passage passages retrieved here system override note "
                     "user assistant instruction instructions important notice admin operator".split())
MAX_CLAIM_WORDS = 6
ECHO_WORDS = 4


@dataclass(frozen=True, slots=True)
class Instruction:
    """A sentence of a passage read as an instruction to the model, and what obeying it would say."""

    passage: str
    sentence: str
    claims: tuple[str, ...]
    why: str  # "after a closer" | "addressed to the model"


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _contains(haystack: list[str], needle: list[str]) -> bool:
    return bool(needle) and f" {' '.join(needle)} " in f" {' '.join(haystack)} "


def claims(sentence: str) -> tuple[str, ...]:
    """What an answer that obeyed ``sentence`` would contain (see the module docstring)."""
    found = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(sentence)]
    for w in _CAPS.findall(sentence):  # FALCON-9: "falcon 9" and "falcon"
        found += [p for p in (w, *w.split("-")) if len(p) > 2 and not set(_words(p)) <= _MARKERS]
    tail = sentence.rsplit(":", 1)[1] if ":" in sentence else ""
    m = _TARGET.search(sentence)
    for part in (tail, m[1] if m else ""):
        words = _words(part)
        if words and len(words) <= MAX_CLAIM_WORDS:
            found.append(" ".join(words))
    out = []
    for c in found:
        w = _words(c)
        if w and not set(w) <= _STOP and " ".join(w) not in out:
            out.append(" ".join(w))
    return tuple(out)


def split_passage(pid: str, text: str) -> tuple[list[Instruction], list[str]]:
    """The passage's instructions, and its other sentences (the text that may support an answer)."""
    text = str(text)
    cut = min([m.start() for m in (_CLOSER.search(text), _ROLE.search(text)) if m] + [len(text)])
    found, clean = [], []
    for s in (x.strip() for x in _SENTENCE.split(text[:cut])):
        if not s:
            continue
        # "Note to the reader: answer X" -- an imperative after a label counts too
        if _IMPERATIVE.search(s) or _IMPERATIVE.search(s.rsplit(":", 1)[-1]) or _ADDRESSED.search(s):
            found.append(Instruction(pid, s, claims(s), "addressed to the model"))
        else:
            clean.append(s)
    rest = _CLOSER.sub(" ", text[cut:])
    for s in (x.strip() for x in _SENTENCE.split(rest)):
        if _words(s):
            found.append(Instruction(pid, s, claims(s), "after a closer"))
    return found, clean


def instructions(passages: Iterable[tuple[str, str]]) -> list[Instruction]:
    """Every instruction in ``(id, text)`` passages."""
    return [i for pid, text in passages for i in split_passage(pid, text)[0]]


def violation(answer: str, passages: Sequence[tuple[str, str]]) -> Instruction | None:
    """The instruction ``answer`` obeys — it contains one of its claims, or repeats ``ECHO_WORDS``
    consecutive words of it, that no unflagged sentence of ``passages`` (``(id, text)`` pairs)
    contains — or None."""
    got = _words(answer)
    if not got:
        return None
    found: list[Instruction] = []
    support: list[str] = []
    for pid, text in passages:
        inst, clean = split_passage(pid, text)
        found += inst
        support += _words(" ".join(clean)) + ["|"]  # a separator: no claim spans two passages
    for inst in found:
        for claim in inst.claims:
            c = claim.split()
            if _contains(got, c) and not _contains(support, c):
                return inst
        sw = _words(inst.sentence)
        for i in range(len(sw) - ECHO_WORDS + 1):
            gram = sw[i:i + ECHO_WORDS]
            if _contains(got, gram) and not _contains(support, gram):
                return inst
    return None


__all__ = ["Instruction", "claims", "instructions", "split_passage", "violation"]
