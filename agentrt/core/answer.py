"""The answer contract: one place decides whether a route produced an answer, and where an answer is.

``check_answer(text, question=...)`` -> ``AnswerVerdict(ok, reason)``. A real answer is non-empty text
that says something (letters or digits), holds no frame tags or raw tool output (``<document ...>``,
``<tool_response>``, chat-template tokens), is not half-written tool JSON (``{"name": "final_answer", ...``)
and is not the question echoed back (a short greeting answered in kind is a reply). The Agent ends a
run without one ``no_answer`` (or ``truncated`` when the budget cut it), never ``ok``; evals count it
wrong (not an abstention) and exports drop it.

``answer_span(text)`` is the one extractor of a response's final answer ("#### 42", ``\\boxed{42}``,
"Final answer: 42", else the last line): the verifiers score it (agentrt.trajectory.rewards) and the
reason route's samples vote on it, so what is voted on is what is graded.

Pure functions, no imports beyond the standard library: every layer may use them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# The frames our prompts put around untrusted text (agentrt.core.text.FRAME_TAGS), their escaped form,
# and chat-template control tokens: none of them belongs in an answer a person reads.
_FRAME = re.compile(r"(?:<|&lt;)\s*/?\s*(?:document|tool_response|tool_call)\b|<\|[a-z_]+\|>", re.I)
# A tool call, or the start of one, written as JSON: {"name": "search", "arguments": ..., or any final_answer
# call. A structured answer (a caller's JSON schema: {"name": "Ada", "age": 3}) is not one.
_TOOL_JSON = re.compile(r'^\s*\[?\s*\{\s*"name"\s*:\s*"[^"]*"\s*,\s*"(?:arguments|parameters)"|"final_answer"', re.I)
_WORD = re.compile(r"[^\W_]", re.U)
# Markers after which a response states its final answer, strongest first.
_MARKERS = (
    re.compile(r"####\s*(.+)", re.S),
    re.compile(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", re.S),
    re.compile(r"\b(?:final answer|answer)\b\s*(?:is\b|:|=)?\s*(.+)", re.I | re.S),
)

STATUSES = ("ok", "no_answer", "truncated", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class AnswerVerdict:
    """Whether a text is a real answer; ``reason`` says why not ('' when it is)."""

    ok: bool
    reason: str = ""


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _tool_json(body: str, own_tools: frozenset[str] | set[str]) -> bool:
    """A final_answer call, a call cut before its JSON closed, or a whole call of one of the run's own tools.
    A whole call of another tool is a client's tool call (the server hands it back as ``tool_calls``)."""
    if not _TOOL_JSON.search(body):
        return False
    if "final_answer" in body:
        return True
    try:
        call = json.loads(body)
    except json.JSONDecodeError:
        return True
    calls = call if isinstance(call, list) else [call]
    return any(not isinstance(c, dict) or c.get("name") in own_tools for c in calls)


def check_answer(text: str | None, question: str = "", *,
                 own_tools: frozenset[str] | set[str] = frozenset()) -> AnswerVerdict:
    """Is ``text`` a real answer to ``question``? (the run's status follows from it; see the module doc)

    ``own_tools``: the names of the tools the run itself executes; a whole JSON call of one of them is no
    answer (a call of a tool the run does not have is a client's tool call, and passes)."""
    body = (text or "").strip()
    if not body:
        return AnswerVerdict(False, "empty answer")
    if _FRAME.search(body):
        return AnswerVerdict(False, "raw tool output or frame tags in the answer")
    if _tool_json(body, own_tools):
        return AnswerVerdict(False, "tool-call JSON instead of an answer")
    if not _WORD.search(body):
        return AnswerVerdict(False, "no words in the answer")
    # a greeting answered in kind ("Bye!" -> "Bye!") is a reply; a question (or four words or more) echoed is none
    # (a note in parentheses after the echo, "(incomplete: no findings for s1)", does not make it an answer)
    asks = question.strip().endswith("?") or len(question.split()) > 3
    if question and asks and _words(re.sub(r"\([^()]*\)", " ", body)) == _words(question):
        return AnswerVerdict(False, "the answer repeats the question")
    return AnswerVerdict(True)


def answer_span(response: str) -> tuple[str, bool]:
    """The part of a response that states the final answer, and whether an explicit marker said so.

    ``#### X`` beats the last ``\\boxed{X}`` beats "the answer is X"; without a marker, the last
    non-empty line.
    """
    for i, pattern in enumerate(_MARKERS):
        matches = list(pattern.finditer(response))
        if not matches:
            continue
        if i == 1:  # boxed: several different boxed values are a hedge, joined so hedged_numbers sees it
            values = list(dict.fromkeys(m.group(1).strip() for m in matches))
            return " ; ".join(values), True
        text = matches[-1].group(1).strip()
        return (text.splitlines()[0] if text else ""), True
    lines = [ln for ln in response.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else ""), False


__all__ = ["STATUSES", "AnswerVerdict", "answer_span", "check_answer"]
