"""Token-level views of a trajectory: one multi-turn sequence with its loss mask, and the continuity check.

A multi-turn run is one sequence when each model call's prompt extends the previous call's prompt +
completion: the extension is the observation (tool results, the next user turn, template tokens),
masked 0; the completions are masked by their loss mask (1 for sampled tokens). When a prompt does NOT
extend the history (the runtime re-rendered text and the tokenizer merged differently), the sequence
breaks there; exports then start a new segment and the continuity check reports the place.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from agentrt.trajectory import ModelCallStep, TrajectoryRecord


@dataclass
class TokenSegment:
    """A continuous stretch of a run: prompt ids, then response ids (model + observation tokens)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)  # indices (among model calls) covered

    def add_completion(self, call: ModelCallStep) -> None:
        ids = call.completion_token_ids[0] or []
        lps = call.completion_logprobs[0] or [0.0] * len(ids)
        self.response_ids += ids
        self.response_mask += call.mask(0)
        self.response_logprobs += [float(x) for x in lps]

    def history(self) -> list[int]:
        return self.prompt_ids + self.response_ids


def token_segments(record: TrajectoryRecord) -> tuple[list[TokenSegment], list[str]]:
    """The run's continuous segments (usually one), and a note for every break between them."""
    calls = [c for c in record.model_calls() if c.has_ids()]
    segments: list[TokenSegment] = []
    breaks: list[str] = []
    for i, call in enumerate(calls):
        prompt = call.prompt_token_ids or []
        current = segments[-1] if segments else None
        if current is not None:
            history = current.history()
            if prompt[: len(history)] == history:
                observation = prompt[len(history):]
                current.response_ids += observation
                current.response_mask += [0] * len(observation)
                current.response_logprobs += [0.0] * len(observation)
                current.add_completion(call)
                current.calls.append(i)
                continue
            at = _first_difference(prompt, history)
            breaks.append(f"model call {i} ({call.name}): its prompt does not extend the previous call's "
                          f"prompt+completion (first difference at token {at} of {len(history)})")
        segment = TokenSegment(list(prompt), calls=[i])
        segment.add_completion(call)
        segments.append(segment)
    return segments, breaks


def _first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def final_conversation(record: TrajectoryRecord) -> list[dict[str, Any]]:
    """The last model call's messages plus what it generated (merged into an assistant prefill)."""
    calls = record.model_calls()
    if not calls:
        return [{"role": "user", "content": record.question}, {"role": "assistant", "content": record.answer}]
    last = calls[-1]
    messages = [dict(m) for m in last.messages]
    text = last.completions[0] if last.completions else ""
    if messages and messages[-1].get("role") == "assistant":
        messages[-1]["content"] = (messages[-1].get("content") or "") + text
    else:
        messages.append({"role": "assistant", "content": text})
    return messages


@dataclass
class ContinuityResult:
    """Whether a run's concatenated token ids equal its re-tokenized conversation, and where not."""

    run_id: str
    ok: bool
    detail: str = ""
    mismatch_at: int | None = None


def check_continuity(record: TrajectoryRecord, tokenize: Callable[[list[dict[str, Any]]], list[int]],
                     end_ids: Collection[int] = ()) -> ContinuityResult:
    """Compare the concatenated ids of a run (prompt + completions + observations) with
    ``tokenize(final_conversation(record))``.

    ``tokenize`` must render the conversation with its final assistant message left open (as while it
    was generated) and tokenize it. ``end_ids``: end-of-turn tokens the last completion may end with
    that an open rendering does not contain (e.g. the tokenizer's eos).
    """
    segments, breaks = token_segments(record)
    if not segments:
        return ContinuityResult(record.run_id, True, "no token ids recorded (nothing to check)")
    if breaks:
        return ContinuityResult(record.run_id, False, "; ".join(breaks))
    ids = segments[0].history()
    while ids and ids[-1] in end_ids:
        ids = ids[:-1]
    expected = list(tokenize(final_conversation(record)))
    if ids == expected:
        return ContinuityResult(record.run_id, True)
    at = _first_difference(ids, expected)
    return ContinuityResult(
        record.run_id, False,
        f"token {at}: recorded {ids[at:at + 5]} vs re-tokenized {expected[at:at + 5]} "
        f"(lengths {len(ids)} vs {len(expected)})", at,
    )


def hf_tokenize(backend: Any) -> Callable[[list[dict[str, Any]]], list[int]]:
    """A ``tokenize`` for ``check_continuity`` from a backend with ``.render`` and ``.tokenizer`` (the HF one)."""
    from agentrt.core.types import as_messages

    def tokenize(messages: list[dict[str, Any]]) -> list[int]:
        text = backend.render(as_messages(messages))
        return backend.tokenizer(text, add_special_tokens=False).input_ids

    return tokenize
