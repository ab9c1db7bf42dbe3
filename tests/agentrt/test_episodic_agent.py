"""Episodic memory wired into the Agent: runs are remembered (real ChromaDB + MiniLM), the router sees them."""

import pytest

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.trajectory import find_record

pytestmark = pytest.mark.slow


def test_runs_are_remembered_and_the_router_sees_similar_past_runs():
    agent = Agent(policy=ScriptedBackend(["Paris"]), episodic_memory=True)
    first = agent.run("What is the capital of France?", budget=200)
    second = agent.run("What is the capital of France?", budget=200)
    rec1 = find_record(agent.writer.path, first.trajectory_id)
    assert any(s["kind"] == "memory_op" and s["op"] == "episode.add" for s in rec1.steps)
    rec2 = find_record(agent.writer.path, second.trajectory_id)
    decision = next(s for s in rec2.steps if s["kind"] == "route_decision")
    assert decision["features"]["past_runs"] >= 1
    assert any(s["kind"] == "memory_op" and s["op"] == "episode.similar" for s in rec2.steps)
    [episode] = [e for e in agent.episodes.similar("capital of France?", k=5) if e.trajectory_id == first.trajectory_id]
    assert episode.route == first.route and episode.answer == "Paris"


def test_episodic_memory_is_off_by_default():
    agent = Agent(policy=ScriptedBackend(["Paris"]))
    r = agent.run("What is the capital of France?", budget=200)
    assert not [s for s in find_record(agent.writer.path, r.trajectory_id).steps if s["kind"] == "memory_op"]
