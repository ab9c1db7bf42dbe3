"""The plan workflow's control flow on the scripted backend: ordering, approval, failure, budget."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _plan_script import reply, searcher
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.budget import Budget
from agentrt.core.config import Settings
from agentrt.core.errors import BudgetExceeded, RunError
from agentrt.routes.context import RunContext
from agentrt.routes.plan import PlanOptions, PlanState, checked, run_plan
from planners import HeuristicPlanner, Plan, Step

COMPARE = "Which magazine was started first, Arthur's Magazine or First for Women?"


def _ctx(backend, total=6000, **callbacks) -> tuple[RunContext, list[dict]]:
    events: list[dict] = []
    ctx = RunContext("run", "q", Budget(total), backend, Settings(), on_event=events.append,
                     callbacks={"searcher": searcher, **callbacks})
    return ctx, events


def _run(ctx, question=COMPARE, **kw):
    return asyncio.run(run_plan(ctx, question, **kw))


def test_comparison_fans_out_and_cites_real_passages():
    ctx, events = _ctx(ScriptedBackend([reply]))
    state = _run(ctx)
    assert [f["step"] for f in sorted(state["findings"], key=lambda f: f["step"])] == ["s1", "s2"]
    assert state["answer"] == "Arthur's Magazine" and state["citations"] == ["p1"]
    # the model's plan (duplicated steps) was replaced by the rules', and recorded before any search
    plan_steps = [s for s in ctx.steps if s["kind"] == "plan"]
    assert plan_steps[0]["planner"].startswith("heuristic (fallback")
    kinds = [(e["type"], e.get("step", {}).get("kind")) for e in events]
    first_search = next(i for i, e in enumerate(events) if e.get("name", "").startswith("search:"))
    assert kinds.index(("step", "plan")) < first_search
    assert ctx.budget.reserved == 0 and ctx.budget.spent <= ctx.budget.total


def test_dependent_step_runs_after_with_finding_substituted():
    backend = ScriptedBackend([reply])
    ctx, events = _ctx(backend, planner=HeuristicPlanner())
    state = _run(ctx, "Who is the director of the film that starred Tom Hanks in 1994?")
    s2 = next(f for f in state["findings"] if f["step"] == "s2")
    assert s2["question"] == "Who is the director of found?"  # s1's answer ("found") substituted
    fan = [e["steps"] for e in events if e["type"] == "fan_out"]
    assert fan == [["s1"], ["s2"]]
    prompts = [m[-1].content for m, _ in backend.calls if "Find out:" in m[1].content]
    assert prompts[0].startswith("Find out: What is the film")


def test_approval_hook_edits_are_honored_and_rejection_stops():
    edited = Plan(goal=COMPARE, steps=[Step(id="s1", question="When was First for Women started?")],
                  answer_choices=["Arthur's Magazine", "First for Women"])
    ctx, events = _ctx(ScriptedBackend([reply]), approve_plan=lambda plan: edited)
    state = _run(ctx)
    assert [f["question"] for f in state["findings"]] == ["When was First for Women started?"]
    assert [s["approval"] for s in ctx.steps if s["kind"] == "plan"] == ["proposed", "edited"]
    assert any(e["type"] == "plan_approved" and e["approved"] for e in events)

    ctx, _ = _ctx(ScriptedBackend([reply]), approve_plan=lambda plan: None)
    state = _run(ctx)
    assert state["answer"] == "" and "rejected" in state["missing"][0] and not state["findings"]


def test_failed_searcher_is_reported_and_synthesis_says_what_is_missing():
    def flaky(messages, params):
        if messages[-1].content.startswith("Find out: First for Women:"):
            raise ConnectionError("backend down")
        return reply(messages, params)

    ctx, events = _ctx(ScriptedBackend([flaky]), planner=HeuristicPlanner())
    state = _run(ctx)
    assert [f["step"] for f in state["failed"]] == ["s2"] and "backend down" in state["failed"][0]["error"]
    assert [f["step"] for f in state["findings"]] == ["s1"]
    assert state["answer"].endswith("(incomplete: no findings for s2)")
    assert any(e["type"] == "searcher_failed" for e in events)


def test_timeout_is_a_failed_searcher():
    ctx, _ = _ctx(ScriptedBackend([reply], delay_s=0.5), planner=HeuristicPlanner())
    state = _run(ctx, options=PlanOptions(step_timeout_s=0.1, planner="heuristic"))
    assert {f["step"] for f in state["failed"]} == {"s1", "s2"} and "timed out" in state["failed"][0]["error"]
    assert ctx.budget.reserved == 0


def test_undeclared_state_key_is_an_error_not_a_silent_drop():
    async def node(state):
        return {"answer": "x", "answr": "typo"}

    with pytest.raises(RunError, match="answr"):
        asyncio.run(checked(node)({}))
    # every key the real nodes return is declared (the wrapper would have raised during these runs)
    assert {"findings", "failed", "plan", "level", "step_budgets", "answer", "citations", "missing"} <= set(
        PlanState.__annotations__)


def test_small_budget_returns_partial_not_overspend():
    ctx, _ = _ctx(ScriptedBackend([reply]), total=700, planner=HeuristicPlanner())
    try:
        state = _run(ctx, options=PlanOptions(planner="heuristic", synth_reserve=300))
    except BudgetExceeded:
        state = None  # the Agent turns this into a truncated result with ctx.best_answer
    assert ctx.budget.spent <= 700 and ctx.budget.reserved == 0
    assert state is None or state["answer"] or state["failed"]


@st.composite
def plans(draw):
    n = draw(st.integers(1, 8))
    steps = []
    for i in range(1, n + 1):
        deps = [f"s{j}" for j in range(1, i) if draw(st.booleans()) and draw(st.booleans())]
        steps.append(Step(id=f"s{i}", question=f"question number {i}", depends_on=deps[:2],
                          budget_share=draw(st.sampled_from([0.2, 0.5, 1.0]))))
    return Plan(goal="g", steps=steps)


class _FixedPlanner:
    name = "fixed"

    def __init__(self, plan):
        self.p = plan

    async def plan(self, question, hits):
        return self.p


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=plans(), total=st.integers(50, 4000), seed=st.integers(0, 10_000))
def test_budget_is_never_overspent(plan, total, seed):
    rnd = random.Random(seed)

    def noisy(messages, params):  # random tool calls, random answers, random lengths, random failures
        if (params.json_schema or {}).get("properties", {}).get("citations"):
            return reply(messages, params)
        r = rnd.random()
        if r < 0.1:
            raise ValueError("random failure")
        if r < 0.5:
            return json.dumps({"name": "search", "arguments": {"query": "word " * rnd.randint(1, 30), "k": 3}})
        return json.dumps({"name": "final_answer", "arguments": {"answer": "x " * rnd.randint(0, 60)}})

    ctx, _ = _ctx(ScriptedBackend([noisy]))
    ctx.budget = Budget(total)
    try:
        state = _run(ctx, planner=_FixedPlanner(plan), options=PlanOptions(max_depth=8, synth_reserve=rnd.randint(0, 500)))
    except BudgetExceeded:
        state = None
    assert ctx.budget.spent <= total and ctx.budget.reserved == 0
    if state is not None:
        assert len(state["findings"]) + len(state["failed"]) == len(plan.steps)


def test_a_separate_planner_backend_writes_the_plan():
    policy, planner = ScriptedBackend([reply], name="policy"), ScriptedBackend([reply], name="planner")
    ctx, _ = _ctx(policy)
    ctx.planner = planner
    _run(ctx)
    plan_calls = [s for s in ctx.steps if s["kind"] == "model_call" and s["name"] == "plan"]
    assert plan_calls and all(s["backend"] == "planner" for s in plan_calls)
    assert all(s["backend"] == "policy" for s in ctx.steps if s["kind"] == "model_call" and s["name"] != "plan")
