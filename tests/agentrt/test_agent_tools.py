"""The reason route acts through tools when the run is given some (wiring; the real-model tool loop is
covered in tests/tools)."""

import json

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.routes.toolcall import builtin_tools
from agentrt.trajectory import find_record


def test_reason_route_calls_the_calculator_and_records_it():
    backend = ScriptedBackend([
        json.dumps({"name": "calculator", "arguments": {"expression": "1234*5678"}}),
        json.dumps({"name": "final_answer", "arguments": {"answer": "7006652"}}),
    ])
    agent = Agent(policy=backend)
    r = agent.run("What is 1234*5678?", route="reason", budget=3000, tools=builtin_tools(agent.settings))
    assert "7006652" in r.answer and not r.truncated
    rec = find_record(agent.writer.path, r.trajectory_id)
    calls = [s for s in rec.steps if s["kind"] == "tool_call"]
    assert calls[0]["name"] == "calculator" and "7006652" in calls[0]["result"]
    assert r.usage.total_tokens <= 3000


def test_direct_route_ignores_tools_not_on_its_allowlist():
    backend = ScriptedBackend(["Paris"])
    agent = Agent(policy=backend)
    r = agent.run("What is the capital of France?", route="direct", budget=300, tools=builtin_tools(agent.settings))
    assert r.answer == "Paris"
    assert not [s for s in find_record(agent.writer.path, r.trajectory_id).steps if s["kind"] == "tool_call"]
