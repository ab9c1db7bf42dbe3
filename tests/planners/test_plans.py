"""Plan schema, validation, rule-based decomposition and the LLM planner's fallback (no model needed)."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentrt.core.types import Choice, Completion, GenParams, Message, Usage
from planners import HeuristicPlanner, LLMPlanner, Plan, PlanError, Step, plan_schema, validate_plan
from planners.llm import max_fanout_for, plan_tokens


def _plan(*steps: tuple[str, list[str]]) -> Plan:
    return Plan(goal="g", steps=[Step(id=i, question=f"question {i}", depends_on=d) for i, d in steps])


def test_valid_plan_levels_follow_dependencies():
    plan = validate_plan(_plan(("s1", []), ("s2", []), ("s3", ["s1", "s2"])), max_depth=2)
    assert [[s.id for s in level] for level in plan.levels()] == [["s1", "s2"], ["s3"]]


@pytest.mark.parametrize("plan,kw,message", [
    (_plan(("s1", ["s2"]), ("s2", ["s1"])), {}, "cycle"),
    (_plan(("s1", ["s1"])), {}, "itself"),
    (_plan(("s1", ["s9"])), {}, "unknown step"),
    (_plan(*[(f"s{i}", []) for i in range(1, 6)]), {"max_fanout": 4}, "max_fanout=4"),
    (_plan(("s1", []), ("s2", ["s1"]), ("s3", ["s2"])), {"max_depth": 2}, "3 levels deep"),
    (_plan(("s1", []), ("s1", [])), {}, "repeat"),
])
def test_invalid_plans_raise_with_the_fix(plan, kw, message):
    with pytest.raises(PlanError, match=message):
        validate_plan(plan, **kw)


def test_placeholder_must_be_a_dependency():
    plan = Plan(goal="g", steps=[Step(id="s1", question="a"), Step(id="s2", question="who is {s1}?")])
    with pytest.raises(PlanError, match="depends_on"):
        validate_plan(plan)


def test_budget_split_never_exceeds_total():
    plan = Plan(goal="g", steps=[Step(id="s1", question="a", budget_share=0.3),
                                 Step(id="s2", question="b", budget_share=0.7), Step(id="s3", question="c")])
    split = plan.budget_split(1001)
    assert sum(split.values()) <= 1001 and split["s3"] > split["s2"] > split["s1"]


def test_heuristic_comparison_bridge_list_and_default():
    h = HeuristicPlanner()
    p = h.plan_sync("Which magazine was started first, Arthur's Magazine or First for Women?")
    assert p.answer_choices == ["Arthur's Magazine", "First for Women"]
    assert [s.question for s in p.steps] == ["Arthur's Magazine: Which magazine was started first?",
                                            "First for Women: Which magazine was started first?"]
    p = h.plan_sync("Were Scott Derrickson and Ed Wood of the same nationality?")
    assert p.answer_choices == ["yes", "no"] and p.steps[0].question.startswith("Scott Derrickson:")
    p = h.plan_sync("Who is the director of the film that starred Tom Hanks in 1994?")
    assert [(s.question, s.depends_on) for s in p.steps] == [
        ("What is the film that starred Tom Hanks in 1994?", []), ("Who is the director of {s1}?", ["s1"])]
    p = h.plan_sync("Where were Alice Smith, Bob Jones and Carol King born?")
    assert [s.question for s in p.steps] == ["Where were Alice Smith born?", "Where were Bob Jones born?",
                                            "Where were Carol King born?"]
    assert len(h.plan_sync("What is the capital of France?").steps) == 1


def _completion(text: str) -> Completion:
    return Completion([Choice(text, [1], None, "stop")], [1], Usage(1, 1))


def _planner(reply: str) -> LLMPlanner:
    async def complete(messages: list[Message], params: GenParams) -> Completion:
        assert params.json_schema == plan_schema(3) and params.max_tokens >= 3 * 60
        return _completion(reply)

    return LLMPlanner(complete, max_fanout=3)


def test_llm_planner_takes_a_good_plan():
    reply = json.dumps({"steps": [{"id": "s1", "question": "When was Arthur's Magazine started?", "depends_on": []},
                                  {"id": "s2", "question": "When was First for Women started?", "depends_on": []}]})
    plan = asyncio.run(_planner(reply).plan("Which magazine was started first, Arthur's Magazine or First for Women?"))
    assert plan.planner == "llm" and len(plan.steps) == 2


@pytest.mark.parametrize("reply,why", [
    (json.dumps({"steps": [{"id": "s1", "question": "what year", "depends_on": []},
                           {"id": "s2", "question": "what year", "depends_on": []}]}), "repeats"),
    (json.dumps({"steps": [{"id": "s1", "question": "abc", "depends_on": ["s2"]},
                           {"id": "s2", "question": "def", "depends_on": ["s1"]}]}), "cycle"),
    ('{"steps": [', "invalid plan"),
])
def test_llm_planner_falls_back_to_rules(reply, why):
    planner = _planner(reply)
    plan = asyncio.run(planner.plan("Which magazine was started first, Arthur's Magazine or First for Women?"))
    assert why in planner.last_fallback and plan.planner.startswith("heuristic (fallback")
    assert plan.answer_choices == ["Arthur's Magazine", "First for Women"]


def test_heuristic_never_cuts_a_decomposition_silently():
    # more items or options than searchers allowed: the whole question is one step, the choices kept
    p = HeuristicPlanner(max_fanout=2).plan_sync("Where were Alice Smith, Bob Jones and Carol King born?")
    assert [s.question for s in p.steps] == ["Where were Alice Smith, Bob Jones and Carol King born?"]
    p = HeuristicPlanner(max_fanout=1).plan_sync("Which magazine was started first, Arthur's Magazine or First for Women?")
    assert len(p.steps) == 1 and p.answer_choices == ["Arthur's Magazine", "First for Women"]


def test_one_yes_no_cue_for_the_router_and_the_rules():
    import agentrt.router.features as features
    import planners.heuristic as heuristic
    from agentrt.core.text import YES_NO

    assert features.YES_NO is heuristic.YES_NO is YES_NO
    assert HeuristicPlanner().plan_sync("Should Paris be the capital of France?").answer_choices == ["yes", "no"]
    assert features.extract("Should Paris be the capital of France?")["yes_no"] == 1.0


def test_llm_planner_plans_up_to_its_fanout():
    steps = [{"id": f"s{i}", "question": f"Where was person {i} born?", "depends_on": []} for i in range(1, 9)]

    async def complete(messages: list[Message], params: GenParams) -> Completion:
        assert params.json_schema["properties"]["steps"]["maxItems"] == 8 and params.max_tokens == plan_tokens(8)
        # the hits it was given, quoted as untrusted data
        assert 'Background:\n<document title="Paris">\nParis is the capital' in messages[-1].content
        return _completion(json.dumps({"steps": steps}))

    hits = [{"id": "d1", "title": "Paris", "text": "Paris is the capital of France.", "score": 0.9}]
    plan = asyncio.run(LLMPlanner(complete, max_fanout=8).plan("Where were eight people born?", hits))
    assert plan.planner == "llm" and len(plan.steps) == 8
    assert max_fanout_for(8192) >= 16 and max_fanout_for(600) == 2 and max_fanout_for(100) == 0
    assert plan_tokens(max_fanout_for(600)) + 256 <= 600 < plan_tokens(max_fanout_for(600) + 1) + 256


def test_plans_carry_no_stop_criteria():
    assert "stop" not in Plan.model_fields
    with pytest.raises(ValueError, match="stop"):
        Plan.model_validate({"goal": "g", "steps": [{"id": "s1", "question": "q"}], "stop": {}})
