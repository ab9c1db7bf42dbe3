"""Parallel samples with selection for the ``reason`` route: N samples in one batched call
(``GenParams(n=N, temperature>0)``), then a majority vote over the samples' answer spans, or the best score of
a verifier callable when the task has one (ties broken by votes, then by order).

Each sample's answer is found by ``agentrt.core.answer.answer_span``, the extractor the verifiers grade
with ("Final answer: 42" -> "42", also when the thought was never closed); the vote runs over their
normalized forms, and the record's sample_selection step keeps every span and the one that won. A majority
vote needs a strict majority of the samples behind one answer; when no answer has one, or no sample states a
real answer, the route returns none (the run ends ``no_answer``: the vote found no answer; the plurality's
span is kept as the run's ``partial``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from agentrt.core.answer import answer_span, check_answer
from agentrt.routes._confidence import read_tail, tail_params, wants_tail, with_instruction
from agentrt.routes.context import RouteOutput, RunContext
from agentrt.trajectory import SampleSelectionStep
from agentrt.routes.thinking import REASON_SYSTEM, THINK_OPEN, split_thought
from agentrt.core.types import GenParams, Message

Verifier = Callable[[str], Any]  # answer -> bool or a score (higher is better)


def normalize(answer: str) -> str:
    """The vote key of an answer: a number if it ends in one, else lowercased words without punctuation."""
    text = answer.strip().lower()
    nums = re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))
    if nums and len(text) < 40:
        return nums[-1].rstrip("0").rstrip(".") if "." in nums[-1] else nums[-1]
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def select(answers: list[str], verifier: Verifier | None = None) -> tuple[int, dict[str, Any]]:
    """Index of the chosen answer and what decided it (votes per key, verifier scores)."""
    keys = [normalize(a) for a in answers]
    votes = Counter(k for k in keys if k)
    info: dict[str, Any] = {"votes": dict(votes)}
    if not answers:
        return 0, info
    order = range(len(answers))
    if verifier is not None:
        scores = [float(verifier(a)) for a in answers]
        info["scores"] = scores
        return max(order, key=lambda i: (scores[i], votes.get(keys[i], 0), -i)), info
    return max(order, key=lambda i: (votes.get(keys[i], 0), -i)), info


async def reason_samples(ctx: RunContext, samples: int, *, thinking_cap: int,
                         temperature: float = 0.7, verifier: Verifier | None = None) -> RouteOutput:
    """Think-and-answer ``samples`` times in one call (the batcher decodes them together), then select."""
    prefill = THINK_OPEN + "\n"
    tail = wants_tail(ctx)  # each sample ends with its stated confidence; the chosen one's is the run's
    conversation = ctx.conversation(REASON_SYSTEM)
    messages = (with_instruction(conversation) if tail else conversation) + [Message("assistant", prefill)]
    per_sample = thinking_cap + ctx.settings.answer_max_tokens
    params = GenParams(max_tokens=per_sample, n=samples, temperature=temperature)
    completion = await ctx.call_model("sample", messages, tail_params(params) if tail else params)
    outputs, spans = [], []
    for c in completion.choices:
        output = read_tail(c.text, None) if tail else RouteOutput(c.text)  # the confidence tail comes off first
        thought, answer = split_thought(prefill + output.answer)
        span = sample_span(output.answer, answer, thought, cut=c.finish_reason == "length")
        spans.append(span)
        outputs.append(RouteOutput(span, thought, confidence=output.confidence,
                                   confidence_status=output.confidence_status))
    best, info = select(spans, verifier)
    found = bool(spans) and check_answer(spans[best], ctx.question).ok
    if found and verifier is None:  # a plurality of 2 in 4 is no majority: the samples disagree
        found = info["votes"].get(normalize(spans[best]), 0) * 2 > len(spans)
    ctx.record(SampleSelectionStep(method="verifier" if verifier else "majority", answers=spans, chosen=best,
                                   won=spans[best] if found else None, **info))
    if not found:  # no sample stated an answer: say so (the contract ends the run no_answer), never a thought line
        ctx.best_answer = ""
        return RouteOutput("", outputs[best].thought if outputs else None,
                           partial=spans[best] if spans and spans[best].strip() else None)
    ctx.best_answer = spans[best]
    return outputs[best]


def sample_span(text: str, answer: str, thought: str | None, *, cut: bool = False) -> str:
    """A sample's answer: the span after its answer marker (anywhere in the sample: an unclosed thought
    still states "Final answer: 42"), else what followed its thought, else its thought's last line, unless
    the sample was ``cut`` at its token cap: then that line is where the cap fell, not an answer ("" instead;
    a model that thinks at length, as Qwen2.5 does, votes "1. Identify" otherwise)."""
    body = text.replace(THINK_OPEN, "").replace("</think>", "\n")
    span, marked = answer_span(body)
    if marked and span.strip():
        return span.strip()
    if answer.strip():
        return answer.strip()
    if cut:
        return ""
    return (thought or "").strip().splitlines()[-1].strip() if (thought or "").strip() else ""
