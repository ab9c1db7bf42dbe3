"""OpenTelemetry spans (GenAI semantic conventions), checked with the in-memory exporter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _spans():
    from agentrt.app.tracing import memory_exporter

    return list(memory_exporter().get_finished_spans())


@pytest.mark.slow
def test_run_spans_share_ids_with_the_trajectory(embedded, agentrt_home):
    from agentrt import Agent
    from agentrt.app.tracing import memory_exporter

    memory_exporter().clear()
    agent = Agent(policy=embedded, tracing="memory")
    result = agent.run("What is 12 + 30?", budget=300, route="reason", thinking_cap=24)
    spans = _spans()
    root = [s for s in spans if s.name == "invoke_agent agentrt"]
    assert len(root) == 1
    root = root[0]
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["agentrt.run_id"] == result.trajectory_id
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert [c.attributes["agentrt.step"] for c in chats] == ["think", "answer"]
    for c in chats:
        assert c.parent is not None and c.parent.span_id == root.context.span_id
        assert c.context.trace_id == root.context.trace_id
        assert c.name == f"chat {embedded.name}"
        assert c.attributes["gen_ai.request.model"] == embedded.name
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == result.usage.prompt_tokens
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats) == result.usage.completion_tokens
    assert root.attributes["gen_ai.usage.input_tokens"] == result.usage.prompt_tokens
    record = json.loads((agentrt_home / "trajectories" / "trajectories.jsonl").read_text().splitlines()[-1])
    assert record["metadata"]["trace_id"] == format(root.context.trace_id, "032x")


def test_tool_and_plan_steps_become_spans():
    """Control flow only: the typed events the tool loop and the plan route emit."""
    from agentrt.app.tracing import RunTracer, memory_exporter, provider
    from agentrt.core.events import RunFinished, RunStarted, StepStarted, step_events

    memory_exporter().clear()
    tracer = RunTracer(provider("memory").get_tracer("test"))
    meta: dict = {}
    tracer(RunStarted("r1", "plan", 100, "m", metadata=meta))
    for step in ({"kind": "plan", "planner": "heuristic", "plan": {}, "latency_s": 0.01},
                 {"kind": "tool_call", "name": "calculator", "call_id": "c1", "latency_s": 0.02},
                 {"kind": "tool_call", "name": "fetch", "error": "timeout"}):
        for event in step_events(step):
            tracer(event)
    tracer(StepStarted("answer", "b", 0, 8))  # then cancelled
    tracer(RunFinished("r1", "cancelled", "plan", "", {"prompt_tokens": 1, "completion_tokens": 2}, "cancelled"))
    spans = {s.name: s for s in _spans()}
    assert set(spans) == {"invoke_agent agentrt", "plan", "execute_tool calculator", "execute_tool fetch", "chat m"}
    tool = spans["execute_tool calculator"]
    assert tool.attributes["gen_ai.tool.name"] == "calculator" and tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert not spans["execute_tool fetch"].status.is_ok
    assert not spans["invoke_agent agentrt"].status.is_ok
    assert meta["trace_id"] == format(spans["plan"].context.trace_id, "032x")


def test_tracing_is_off_by_default_and_not_imported():
    code = (
        "import sys\n"
        "from agentrt import Agent\n"
        "from agentrt.backends.scripted import ScriptedBackend\n"
        "r = Agent(policy=ScriptedBackend(['Paris'])).run('Capital of France?', budget=100)\n"
        "print(r.answer, ','.join(m for m in ('opentelemetry', 'fastapi', 'uvicorn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["Paris"]


def test_bad_exporter_is_a_config_error():
    from agentrt import ConfigError, load_settings

    with pytest.raises(ConfigError, match="tracing"):
        load_settings(tracing="jaeger")
