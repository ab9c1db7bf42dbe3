"""Agent.run end to end on the real embedded model: routes, budget, trajectories."""

import pytest

from agentrt.core.errors import InputError
from agentrt.core.types import ROUTES
from agentrt.trajectory import find_record

pytestmark = pytest.mark.slow


def test_direct_answer_with_usage_and_trajectory(agent):
    r = agent.run("What is the capital of France?", budget=512)
    assert "Paris" in r.answer
    assert r.route == "direct" and not r.truncated
    assert 0 < r.usage.total_tokens <= 512
    rec = find_record(agent.writer.path, r.trajectory_id)
    assert rec is not None and rec.answer == r.answer and rec.status == "ok"
    call = [s for s in rec.steps if s["kind"] == "model_call"][0]
    assert len(call["completion_token_ids"][0]) == len(call["completion_logprobs"][0]) > 0
    assert rec.usage["total_tokens"] == r.usage.total_tokens == rec.budget["spent"]


def test_reason_with_tiny_thinking_cap_still_answers_within_budget(agent):
    r = agent.run("What is 12 + 30?", budget=400, route="reason", thinking_cap=10)
    assert r.route == "reason" and r.answer
    assert r.usage.total_tokens <= 400
    rec = find_record(agent.writer.path, r.trajectory_id)
    think, answer = [s for s in rec.steps if s["kind"] == "model_call"]
    assert think["name"] == "think" and len(think["completion_token_ids"][0]) <= 10
    # budget forcing: the thought is closed and the answer generated after it
    assert "</think>" in answer["messages"][-1]["content"]
    assert rec.thought is not None and rec.answer == r.answer


def test_budget_exhaustion_returns_truncated_best_answer(agent):
    r = agent.run("Why is the sky blue? Explain in detail.", budget=60, route="direct")
    assert r.truncated and r.status == "truncated"
    assert r.usage.total_tokens <= 60


def test_every_budget_is_a_hard_bound(agent):
    for budget in (45, 80, 150):
        for route in ("direct", "reason"):
            r = agent.run("Explain why 7 is a prime number.", budget=budget, route=route)
            assert r.usage.total_tokens <= budget, (budget, route, r.usage)


def test_bad_input_writes_no_trajectory(agent):
    for kwargs in ({"budget": 0}, {"budget": 5}, {"route": "teleport"}):
        with pytest.raises(InputError):
            agent.run("hello", **kwargs)
    with pytest.raises(InputError, match="empty"):
        agent.run("   ")
    with pytest.raises(InputError, match="context"):
        agent.run("word " * 9000, budget=100000)
    assert not agent.writer.path.exists()


def test_sampled_runs_differ_by_seed_and_repeat_with_the_same_seed(agent):
    q = "Write one sentence about the sea."
    a = agent.run(q, budget=300, route="direct", temperature=1.0, seed=1)
    b = agent.run(q, budget=300, route="direct", temperature=1.0, seed=1)
    c = agent.run(q, budget=300, route="direct", temperature=1.0, seed=2)
    assert a.answer == b.answer
    assert c.answer != a.answer
    rec = find_record(agent.writer.path, a.trajectory_id)
    call = next(s for s in rec.steps if s["kind"] == "model_call")
    assert call["params"]["temperature"] == 1.0 and call["params"]["seed"] is not None
    with pytest.raises(InputError, match="temperature"):
        agent.run(q, temperature=5.0)


def test_the_readme_session_remembers_the_name(agent):
    # README: chat = agent.session(budget=400); chat.ask("My name is Ada."); chat.ask("What is my name?")
    chat = agent.session(budget=400)
    first = chat.ask("My name is Ada.")
    assert first.route != "abstain"  # telling the agent something is not an unanswerable question
    second = chat.ask("What is my name?")
    assert "Ada" in second.answer and second.route != "abstain", (second.route, second.answer)
    rec = find_record(agent.writer.path, second.trajectory_id)
    # the router saw the bare question; the history rode as messages, not folded into the question
    assert rec.question == "What is my name?"
    call = [s for s in rec.steps if s["kind"] == "model_call"][-1]
    assert [m["role"] for m in call["messages"]][1:4] == ["user", "assistant", "user"]
    assert call["messages"][1]["content"] == "My name is Ada."


def test_a_router_that_cannot_pay_for_its_scoring_still_writes_the_trajectory(agent):
    # the self router scores its labels with the model, through the run's budget: 40 tokens cannot pay for it
    r = agent.run("What is the capital of France?", router="self", budget=40)
    assert r.truncated and r.status == "truncated" and r.usage.total_tokens <= 40
    rec = find_record(agent.writer.path, r.trajectory_id)
    assert rec is not None and rec.status == "truncated" and "budget" in rec.error
    # with room to pay, the scoring pass is a recorded, charged step
    r = agent.run("What is the capital of France?", router="self", budget=600)
    rec = find_record(agent.writer.path, r.trajectory_id)
    [score] = [s for s in rec.steps if s["kind"] == "score"]
    assert score["usage"]["prompt_tokens"] > 0 and len(score["scores"]) == len(ROUTES)  # one label per action
    assert rec.budget["spent"] == rec.usage["total_tokens"] <= 600
