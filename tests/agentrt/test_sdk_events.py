"""SDK: typed events from stream/astream, cancellation, per-run overrides, sessions."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.app.streaming import Answer, BudgetUpdate, RouteDecided, RunStarted, StepFinished, StepStarted, TokenDelta
from agentrt.core.events import step_events


def _records(home: Path) -> list[dict]:
    return [json.loads(x) for x in (home / "trajectories" / "trajectories.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_stream_yields_typed_events_on_the_embedded_model(agent, agentrt_home):
    events = list(agent.stream("What is 2 + 2?", budget=300, thinking_cap=16))
    types = [e.type for e in events]
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], Answer)
    # the router decides inside the run: RunStarted names no route (none was given), RouteDecided follows
    assert events[0].route == "" and types[1] == "route_decided" and events[1].route == events[-1].result.route
    starts = [e for e in events if isinstance(e, StepStarted)]
    finishes = [e for e in events if isinstance(e, StepFinished) and e.kind == "model_call"]
    assert len(starts) == len(finishes) >= 1
    budgets = [e for e in events if isinstance(e, BudgetUpdate)]
    assert [b.spent for b in budgets] == sorted(b.spent for b in budgets) and budgets[-1].total == 300
    result = events[-1].result
    assert budgets[-1].spent == result.usage.total_tokens <= 300
    # model calls stream their text token by token; the answer arrives as answer (not thought) text
    deltas = [t for t in events if isinstance(t, TokenDelta)]
    assert len(deltas) > len(starts) and {t.step for t in deltas} <= {s.name for s in starts} | {"answer"}
    assert any(not t.thought and t.route == result.route for t in deltas)
    record = _records(agentrt_home)[-1]
    assert record["run_id"] == events[0].run_id == result.trajectory_id
    assert all(isinstance(e.to_dict()["type"], str) for e in events)
    json.dumps([e.to_dict() for e in events], default=str)


@pytest.mark.slow
def test_session_remembers_prior_turns(agent, agentrt_home):
    chat = agent.session(budget=400)
    first = chat.ask("My favourite colour is green.", route="direct")
    second = chat.ask("What is my favourite colour?", route="direct")
    assert [t.trajectory_id for t in chat.turns] == [first.trajectory_id, second.trajectory_id]
    records = {r["run_id"]: r for r in _records(agentrt_home)}
    said = [m["content"] for m in records[second.trajectory_id]["steps"][-1]["messages"]]
    assert "My favourite colour is green." in said and records[second.trajectory_id]["question"] in said
    assert "green" in second.answer.lower()  # answered from the history (with the "Your ... is" cue)
    assert records[second.trajectory_id]["usage"]["total_tokens"] <= 400
    chat.reset()
    third = chat.ask("Hello", route="direct")
    said = [m["content"] for m in {r["run_id"]: r for r in _records(agentrt_home)}[third.trajectory_id]["steps"][-1]["messages"]]
    assert not any("green" in m for m in said)


def test_session_drops_old_turns_to_fit_its_history_share(agentrt_home):
    backend = ScriptedBackend(["word " * 30])
    chat = Agent(policy=backend).session(budget=200, history_share=0.5)
    for i in range(5):
        chat.ask(f"question number {i}")
    history = chat.history_for()
    said = " ".join(m.content for m in history)
    assert "question number 4" in said and "question number 0" not in said
    assert backend.count_tokens(history) <= 200 * 0.5
    # the last run saw the kept turns as messages and its own question as the last user message
    messages = backend.calls[-1][0]
    assert messages[-1].role == "user" and messages[-1].content == "question number 4"
    assert [m.role for m in messages[1:-1]] == ["user", "assistant"] * ((len(messages) - 2) // 2)
    # the route is decided on the new message, not on the history in front of it
    assert chat.turns[-1].route == "direct"


def test_closing_the_stream_cancels_the_run(agentrt_home):
    agent = Agent(policy=ScriptedBackend(["slow answer"], delay_s=30))

    async def main():
        gen = agent.astream("Hello there", budget=100)
        async for event in gen:
            if isinstance(event, StepStarted):
                break
        await gen.aclose()

    asyncio.run(main())
    assert _records(agentrt_home)[-1]["status"] == "cancelled"


def test_sync_stream_early_exit_cancels(agentrt_home):
    agent = Agent(policy=ScriptedBackend(["slow answer"], delay_s=30))
    for event in agent.stream("Hello there", budget=100):
        if isinstance(event, StepStarted):
            break
    assert _records(agentrt_home)[-1]["status"] == "cancelled"


def test_stream_raises_the_run_error(agentrt_home):
    from agentrt import InputError

    agent = Agent(policy=ScriptedBackend(["x"]))
    with pytest.raises(InputError, match="budget"):
        list(agent.stream("Hello there", budget=2))


def test_per_run_overrides(agentrt_home):
    default, other = ScriptedBackend(["from default"]), ScriptedBackend(["from override"], name="other")
    agent = Agent(policy=default)
    seen: list[str] = []
    r = agent.run("What is the capital of France?", budget=100, route="direct", policy=other,
                  on_event=lambda e: seen.append(e.type))
    assert r.answer == "from override" and not default.calls
    assert seen[0] == "run_started" and seen[-1] == "run_finished" and "step_started" in seen
    assert agent.run("What is the capital of France?", budget=100, route="direct").answer == "from default"


def test_each_step_kind_announces_typed_events():
    assert isinstance(step_events({"kind": "route_decision", "route": "direct"})[0], RouteDecided)
    [finished] = step_events({"kind": "memory_op", "op": "query", "latency_s": 0.5})
    assert finished.name == "query" and finished.kind == "memory_op" and finished.step["op"] == "query"
    assert "step" not in finished.to_dict()  # the step (token ids) stays out of the JSON form


def test_front_ends_stay_out_of_import_agentrt():
    code = ("import sys, agentrt, agentrt.app.cli\nagentrt.app.cli.build_parser()\n"
            "print(','.join(m for m in ('opentelemetry', 'fastapi', 'uvicorn', 'openai', 'pexpect') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.slow
def test_a_compressing_session_summarizes_old_turns_inside_each_turns_budget(agentrt_home):
    from agentrt.core.types import Message

    backend = ScriptedBackend(["word " * 20])
    chat = Agent(policy=backend).session(budget=300, history_share=0.3, history="compress")
    for i in range(6):
        chat.ask(f"question number {i}", route="direct")
    records = _records(agentrt_home)
    compressed = [r for r in records if "history_compression" in r["metadata"]]
    assert compressed, "the conversation outgrew its share and was never compressed"
    step = compressed[0]["metadata"]["history_compression"]
    assert step["op"] == "compress" and step["archived"] >= 2 and step["tokens_after"] <= 300 * 0.3
    # the summary rode in as the first history message; the whole turn (summary + run) kept its budget
    first = compressed[0]["steps"][-1]["messages"]
    assert first[1]["content"].startswith("Summary of earlier turns")
    summary_tokens = (step.get("usage") or {}).get("total_tokens", 0)
    assert all(r["usage"]["total_tokens"] <= r["budget"]["total"] for r in records)
    assert compressed[0]["budget"]["total"] == 300 - summary_tokens
    # the archived turns stay searchable in memory
    hits = chat._archive.search("question number 0", k=3, where={"kind": "message"})
    assert any("question number 0" in h.text for h in hits)
    assert isinstance(chat.history_for()[0], Message)
