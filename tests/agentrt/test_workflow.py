"""The plan workflow's control flow on the scripted backend: ordering, approval, failure, budget."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from _plan_script import reply, searcher, wide_reply
from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.budget import Budget
from agentrt.core.config import Settings, load_settings
from agentrt.core.errors import BudgetExceeded, ConfigError, RunError
from agentrt.trajectory import SearcherFailedStep
from agentrt.routes.context import RunContext
from agentrt.routes.plan import PlanSettings, PlanState, checked, run_plan
from planners import HeuristicPlanner, Plan, Step

COMPARE = "Which magazine was started first, Arthur's Magazine or First for Women?"


def _ctx(backend, total=6000, **callbacks) -> tuple[RunContext, list[dict]]:
    events: list[dict] = []
    ctx = RunContext("run", "q", Budget(total), backend, Settings(), on_event=events.append, callbacks=callbacks)
    return ctx, events


def _run(ctx, question=COMPARE, **kw):
    return asyncio.run(run_plan(ctx, question, **{"searcher": searcher, **kw}))


def test_comparison_fans_out_and_cites_real_passages():
    ctx, events = _ctx(ScriptedBackend([reply]))
    state = _run(ctx)
    assert [f["step"] for f in sorted(state["findings"], key=lambda f: f["step"])] == ["s1", "s2"]
    assert state["answer"] == "Arthur's Magazine" and state["citations"] == ["p1"]
    # the model's plan (duplicated steps) was replaced by the rules', and recorded before any search
    plan_steps = [s for s in ctx.steps if s["kind"] == "plan"]
    assert plan_steps[0]["planner"].startswith("heuristic (fallback")
    first_plan = next(i for i, e in enumerate(events) if e.type == "plan")
    first_search = next(i for i, e in enumerate(events) if getattr(e, "name", "").startswith("search:"))
    assert first_plan < first_search
    assert ctx.budget.reserved == 0 and ctx.budget.spent <= ctx.budget.total


def test_dependent_step_runs_after_with_finding_substituted():
    backend = ScriptedBackend([reply])
    ctx, events = _ctx(backend)
    state = _run(ctx, "Who is the director of the film that starred Tom Hanks in 1994?", planner=HeuristicPlanner())
    s2 = next(f for f in state["findings"] if f["step"] == "s2")
    assert s2["question"] == "Who is the director of found?"  # s1's answer ("found") substituted
    fan = [e.steps for e in events if e.type == "fan_out"]
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
    assert any(e.type == "plan_approved" and e.approved for e in events)

    ctx, _ = _ctx(ScriptedBackend([reply]), approve_plan=lambda plan: None)
    state = _run(ctx)
    assert state["answer"] == "" and "rejected" in state["missing"][0] and not state["findings"]


def test_failed_searcher_is_reported_and_synthesis_says_what_is_missing():
    def flaky(messages, params):
        if messages[-1].content.startswith("Find out: First for Women:"):
            raise ConnectionError("backend down")
        return reply(messages, params)

    ctx, events = _ctx(ScriptedBackend([flaky]))
    state = _run(ctx, planner=HeuristicPlanner())
    assert [f["step"] for f in state["failed"]] == ["s2"] and "backend down" in state["failed"][0]["error"]
    assert [f["step"] for f in state["findings"]] == ["s1"]
    assert state["answer"].endswith("(incomplete: no findings for s2)")
    assert any(e.type == "searcher_failed" for e in events)
    [failed] = [s for s in ctx.steps if s["kind"] == "searcher_failed"]
    assert SearcherFailedStep.model_validate(failed).step == "s2" and "backend down" in failed["error"]


def test_timeout_is_a_failed_searcher():
    ctx, _ = _ctx(ScriptedBackend([reply], delay_s=0.5))
    state = _run(ctx, planner=HeuristicPlanner(), options=PlanSettings(step_timeout_s=0.1, planner="heuristic"))
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
    ctx, _ = _ctx(ScriptedBackend([reply]), total=700)
    try:
        state = _run(ctx, planner=HeuristicPlanner(), options=PlanSettings(planner="heuristic", synth_reserve=300))
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
        state = _run(ctx, planner=_FixedPlanner(plan), options=PlanSettings(max_depth=8, synth_reserve=rnd.randint(0, 500)))
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


def _plan_calls(backend):
    return [p for _, p in backend.calls if "steps" in (p.json_schema or {}).get("properties", {})]


def test_max_fanout_is_honoured_from_the_run_settings():
    backend = ScriptedBackend([wide_reply])
    ctx, events = _ctx(backend, total=20_000)
    assert ctx.settings.plan.max_fanout == 8  # the default, read from the run's settings (no options passed)
    state = _run(ctx, "Where were eight people born?")
    assert _plan_calls(backend)[0].json_schema["properties"]["steps"]["maxItems"] == 8
    [plan] = [s for s in ctx.steps if s["kind"] == "plan"]
    assert plan["planner"] == "llm" and len(plan["plan"]["steps"]) == 8
    assert [e.steps for e in events if e.type == "fan_out"] == [[f"s{i}" for i in range(1, 9)]]
    assert len(state["findings"]) + len(state["failed"]) == 8
    # a smaller cap in the settings is what the planner is asked for
    backend = ScriptedBackend([wide_reply])
    ctx, _ = _ctx(backend, total=20_000)
    ctx.settings = Settings(plan=PlanSettings(max_fanout=3))
    state = _run(ctx, "Where were eight people born?")
    assert len(state["findings"]) + len(state["failed"]) == 3
    assert _plan_calls(backend)[0].json_schema["properties"]["steps"]["maxItems"] == 3


def test_an_impossible_fanout_is_refused_with_the_fix(tmp_path):
    for bad in (0, 17):
        with pytest.raises(ValidationError, match="max_fanout"):
            PlanSettings(max_fanout=bad)
    config = tmp_path / "config.toml"
    config.write_text("[agentrt.plan]\nmax_fanout = 99\n")
    with pytest.raises(ConfigError, match=r"'plan\.max_fanout'.*less than or equal to 16"):
        load_settings(config)
    config.write_text('[agentrt]\ncorpus = "c"\n[agentrt.plan]\nmax_fanout = 5\nplanner = "heuristic"\n')
    assert load_settings(config).plan == PlanSettings(max_fanout=5, planner="heuristic")
    # valid, but more steps than the planner model can write in its context: refused, not cut
    ctx, _ = _ctx(ScriptedBackend([wide_reply], context_length=600))
    with pytest.raises(ConfigError, match=r"max_fanout=8 cannot be honoured.*at most 2 under \[agentrt\.plan\]"):
        _run(ctx)
    assert not ctx.steps  # refused before anything ran


class _Recording:
    name = "recording"

    def __init__(self):
        self.hits = None

    async def plan(self, question, hits):
        self.hits = hits
        return HeuristicPlanner().plan_sync(question)


def test_the_planner_plans_from_the_index_hits():
    planner = _Recording()
    ctx, _ = _ctx(ScriptedBackend([reply]))
    _run(ctx, planner=planner, options=PlanSettings(search_k=2))
    expected = searcher(COMPARE, 2)
    assert planner.hits == [{**h, "score": 1.0} for h in expected]  # the question's top search_k, as dicts
    kinds = [s["kind"] for s in ctx.steps]
    [search] = [s for s in ctx.steps if s["kind"] == "memory_op"]
    assert kinds.index("memory_op") < kinds.index("plan")
    assert (search["op"], search["query"], search["ids"], search["n_results"]) == (
        "search", COMPARE, [h["id"] for h in expected], 2)
    # the model planner shows them to the model as background
    backend = ScriptedBackend([reply])
    ctx, _ = _ctx(backend)
    _run(ctx)
    plan_prompt = next(m for m, p in backend.calls if "steps" in (p.json_schema or {}).get("properties", {}))
    assert "Background:" in plan_prompt[-1].content and '<document title="Arthur\'s Magazine">' in plan_prompt[-1].content


def test_structured_hits_reach_synthesis_unparsed():
    # an id, a title and a text that the old "[id] title (score)" text format could not be read back from
    hit = {"id": "doc]7 [v2]", "title": "Annual report (score 9)", "text": "First part.\n\nSecond part.", "score": 0.5}
    backend = ScriptedBackend([reply])
    ctx, _ = _ctx(backend)
    state = _run(ctx, "What does the annual report say?", searcher=lambda q, k: [hit], planner=HeuristicPlanner())
    [finding] = state["findings"]
    assert finding["passages"] == [{**hit, "text": "First part. Second part."}]
    messages, params = backend.calls[-1]
    assert params.json_schema["properties"]["citations"]["items"]["enum"] == ["doc]7 [v2]"]
    assert ('<document id="doc]7 [v2]" source="corpus" title="Annual report (score 9)">\nFirst part. Second part.\n'
            '</document>') in messages[-1].content
    assert state["citations"] == ["doc]7 [v2]"]


def test_plan_result_and_failures_are_typed_steps(monkeypatch):
    import agentrt.routes.plan as plan_module
    from agentrt.trajectory import STEP_TYPES, PlanResultStep, TrajectoryRecord

    ctx, _ = _ctx(ScriptedBackend([reply]))
    ctx.settings = Settings(plan=PlanSettings(planner="heuristic", verify=True))
    # the route's own entry searches the settings' corpus: stand the script's passages in for it
    monkeypatch.setattr(plan_module, "default_searcher", lambda ctx: searcher)
    out = asyncio.run(plan_module.run(ctx, COMPARE))
    [result] = [s for s in ctx.steps if s["kind"] == "plan_result"]
    typed = PlanResultStep.model_validate(result)
    assert typed.citations == out.citations == ["p1"] and typed.verdict and len(typed.findings) == 2
    assert STEP_TYPES["plan_result"] is PlanResultStep and STEP_TYPES["searcher_failed"] is SearcherFailedStep
    record = TrajectoryRecord(run_id="r", created_at=0.0, question=COMPARE, route="plan", steps=ctx.steps,
                              answer=out.answer, budget={}, usage={}, timings={}, status="ok")
    assert any(isinstance(s, PlanResultStep) for s in record.typed_steps())
