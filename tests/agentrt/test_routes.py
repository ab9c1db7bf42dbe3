"""Route control flow on the scripted backend (the real model is covered in test_agent.py). Reason runs of a
question with a number in it pass ``tools=[]`` where they test the thought (by default the calculator is
offered and reason acts through the tool loop instead: test_router_features.py)."""

from agentrt import Agent
from agentrt.backends.scripted import ScriptedBackend
from agentrt.routes.thinking import split_thought


def test_split_thought_forms():
    assert split_thought("<think>a b</think> 42") == ("a b", "42")
    assert split_thought("steps... Final answer: 42") == ("steps...", "42")
    assert split_thought("just 42") == (None, "just 42")
    assert split_thought("<think>unfinished") == ("unfinished", "")


def test_native_thinking_uses_the_template_switch():
    backend = ScriptedBackend(["<think>six times seven</think>", "42"], supports_thinking=True)
    r = Agent(policy=backend).run("What is 6*7?", route="reason", budget=500, tools=[])
    think, answer = backend.calls
    assert think[1].chat_template_kwargs == {"enable_thinking": True}
    assert answer[0][-1].role == "assistant" and answer[0][-1].content.endswith("</think>\n")
    assert r.answer == "42" and r.thought == "six times seven"


def test_reason_degrades_to_an_answer_when_no_room_to_think():
    backend = ScriptedBackend(["42"])
    r = Agent(policy=backend).run("What is 6*7?", route="reason", budget=60, tools=[])
    assert len(backend.calls) == 1 and r.answer == "42" and r.usage.total_tokens <= 60


def test_thought_over_cap_is_closed_and_answer_follows():
    backend = ScriptedBackend(["word " * 100, "42"])
    r = Agent(policy=backend).run("What is 6*7?", route="reason", budget=1000, thinking_cap=16,
                                   tools=[])
    think_params = backend.calls[0][1]
    assert think_params.max_tokens == 16
    assert r.answer == "42" and len(r.thought.split()) == 16


def test_failed_backend_writes_a_failed_record(tmp_path):
    from agentrt.trajectory import read_trajectories

    def boom(messages, params):
        raise ConnectionError("backend went away")

    agent = Agent(policy=ScriptedBackend([boom]))
    try:
        agent.run("hi there", route="direct", budget=100)
    except ConnectionError:
        pass
    [rec] = read_trajectories(agent.writer.path).records
    assert rec.status == "failed" and "backend went away" in rec.error
