"""Parallel samples with selection for the ``reason`` route: N samples in one batched call
(``GenParams(n=N, temperature>0)``), then a majority vote over the parsed answers, or the best score of
a verifier callable when the task has one (ties broken by votes, then by order).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from agentrt.routes._confidence import read_tail, tail_params, wants_tail, with_instruction
from agentrt.routes.context import RouteOutput, RunContext
from agentrt.trajectory import SampleSelectionStep
from agentrt.routes.thinking import ANSWER_CUE, REASON_SYSTEM, THINK_OPEN, split_thought
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
    parsed = [split_thought(prefill + c.text) for c in completion.choices]
    outputs = []
    for thought, answer in parsed:
        if not answer and thought and ANSWER_CUE not in (thought or ""):
            answer = thought.strip().splitlines()[-1]  # no cue: the last line is the best guess
        outputs.append(read_tail(answer, thought) if tail else RouteOutput(answer.strip(), thought))
    answers = [o.answer for o in outputs]
    best, info = select(answers, verifier)
    ctx.record(SampleSelectionStep(method="verifier" if verifier else "majority", answers=answers, chosen=best,
                                   **info))
    ctx.best_answer = answers[best] if answers else ""
    return outputs[best] if outputs else RouteOutput("")
