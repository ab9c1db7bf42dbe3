"""Parallel samples with selection for the reason route (majority vote, verifier)."""

from __future__ import annotations

import asyncio

from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.budget import Budget
from agentrt.core.config import Settings
from agentrt import Agent
from agentrt.core.request import AnswerOptions
from agentrt.routes.context import RunContext
from agentrt.routes.reason import run as reason
from agentrt.routes.sampling import normalize, select


def test_majority_vote_over_parsed_answers():
    i, info = select(["The answer is 42.", "41", "42", "Paris"])
    assert normalize("The answer is 42.") == "42" and i == 0 and info["votes"]["42"] == 2


def test_verifier_beats_the_majority():
    i, info = select(["41", "41", "42"], verifier=lambda a: a == "42")
    assert i == 2 and info["scores"] == [0.0, 0.0, 1.0]


def test_reason_samples_is_one_batched_call_and_backward_compatible():
    backend = ScriptedBackend(["thinking hard </think> Final answer: 7"])
    ctx = RunContext("r", "What is 3+4?", Budget(4000), backend, Settings(), options=AnswerOptions(samples=5, confidence="off"))
    out = asyncio.run(reason(ctx, "What is 3+4?"))
    assert out.answer == "7" and len(backend.calls) == 1
    params = backend.calls[0][1]
    assert params.n == 5 and params.temperature > 0
    assert [s for s in ctx.steps if s["kind"] == "sample_selection"][0]["votes"] == {"7": 5}
    assert ctx.budget.spent <= 4000
    # samples=1 (the default) is the old two-call think-then-answer route
    backend = ScriptedBackend(["a thought", "7"])
    ctx = RunContext("r", "What is 3+4?", Budget(4000), backend, Settings())
    assert asyncio.run(reason(ctx, "What is 3+4?")).answer == "7" and len(backend.calls) == 2


def test_samples_and_verifier_are_reachable_from_the_sdk(agentrt_home):
    backend = ScriptedBackend(["x </think> Final answer: 41"])
    agent = Agent(policy=backend)
    r = agent.run("What is 6*7?", route="reason", samples=3, verifier=lambda a: a == "41", budget=2000,
                  tools=[])
    assert r.answer == "41" and backend.calls[0][1].n == 3
    [step] = [s for s in r.record.steps if s["kind"] == "sample_selection"]
    assert step["method"] == "verifier" and step["scores"] == [1.0, 1.0, 1.0]
