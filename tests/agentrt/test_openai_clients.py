"""`agentrt serve` as a drop-in OpenAI endpoint, driven by real clients: the `openai` SDK, LangChain's
`ChatOpenAI` and smolagents' `OpenAIServerModel`, against a real server on 127.0.0.1 with the embedded model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import httpx
import pytest
from _servers import openai_client, record_of, running_server

AGENTRT = str(Path(sys.executable).parent / "agentrt")
NAMES = ["agentrt", "smol-chat"]

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("clients-home")
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    with running_server([AGENTRT, "serve", "--served-model-name", *NAMES], home, env, poll_s=0.5) as base:
        yield base, home


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server[0])


_record = record_of


def _ask(client, question: str, **kw):
    return client.chat.completions.create(model="agentrt", messages=[{"role": "user", "content": question}], **kw)


# -- the openai SDK ------------------------------------------------------------------------------------------------

def test_served_model_names_and_unknown_model_404(client):
    import openai

    assert [m.id for m in client.models.list().data] == [*NAMES, "all-MiniLM-L6-v2"]  # + the embedding model
    resp = client.chat.completions.create(model="smol-chat", messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=8)
    assert resp.model == "smol-chat"
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
    assert "gpt-4o" in str(e.value) and "agentrt" in str(e.value) and "smol-chat" in str(e.value)


def test_stream_arrives_token_by_token(server, client):
    _, home = server
    chunks = list(_ask(client, "Say hello in one short sentence.", stream=True,
                       stream_options={"include_usage": True}, extra_body={"route": "direct"}))
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(deltas) >= 5, deltas  # one delta per token (or small group), not the whole answer at the end
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish[-1].choices[0].finish_reason in ("stop", "length")
    extra = finish[-1].model_extra["agentrt"]
    assert "answer" not in extra  # the streamed content is the recorded answer
    assert "".join(deltas) == _record(home, extra["trajectory_id"])["answer"]
    assert chunks[-1].usage.completion_tokens == _record(home, extra["trajectory_id"])["usage"]["completion_tokens"]


def test_thoughts_stream_as_reasoning_content(server, client):
    _, home = server
    # no number in it: the safe tools offer no calculator, so reason thinks (what this test is about)
    chunks = list(_ask(client, "What colour is the sky on a clear day?", stream=True,
                       stream_options={"include_usage": True}, extra_body={"route": "reason", "budget": 500}))
    reasoning = "".join(c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    extra = [c for c in chunks if c.choices and c.choices[0].finish_reason][-1].model_extra["agentrt"]
    record = _record(home, extra["trajectory_id"])
    assert extra["route"] == "reason" and record["thought"]
    assert reasoning.strip() and record["thought"].split()[0] in reasoning  # the thought, as reasoning
    assert content.strip() == record["answer"]  # the answer, as content
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens > 0


def test_max_tokens_caps_the_completion(client):
    resp = _ask(client, "Write a long story about a dragon.", max_tokens=5)
    assert resp.usage.completion_tokens <= 5  # every generated token, as in OpenAI's API
    assert resp.model_extra["agentrt"]["route"] == "direct"  # a capped request with no route: nothing but the answer
    assert resp.choices[0].finish_reason == "length" and resp.choices[0].message.content
    resp = _ask(client, "Write a long story about a dragon.", max_completion_tokens=3, extra_body={"route": "direct"})
    assert resp.usage.completion_tokens <= 3


def test_stop_ends_the_answer_before_the_stop_string(client):
    full = _ask(client, "What is the capital of France?", extra_body={"route": "direct"}).choices[0].message.content
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]
    resp = _ask(client, "What is the capital of France?", stop=[stop], extra_body={"route": "direct"})
    assert resp.choices[0].message.content == full[:full.index(stop)].strip()
    assert resp.choices[0].finish_reason == "stop"


def test_seed_makes_sampling_repeatable(server, client):
    _, home = server
    asks = [_ask(client, "Invent a name for a cat.", temperature=1.2, seed=1234, max_tokens=12) for _ in range(2)]
    assert asks[0].choices[0].message.content == asks[1].choices[0].message.content
    call = [s for s in _record(home, asks[0].model_extra["agentrt"]["trajectory_id"])["steps"]
            if s["kind"] == "model_call"][-1]
    assert call["params"]["temperature"] == 1.2 and call["params"]["seed"] is not None


def test_n_gives_n_choices(client):
    resp = _ask(client, "Name a fruit.", n=2, temperature=1.0, seed=5, max_tokens=8)
    assert [c.index for c in resp.choices] == [0, 1]
    assert all(c.message.content for c in resp.choices)


def test_response_format_json(client):
    resp = _ask(client, "Describe a cat as JSON with a name and an age.", response_format={"type": "json_object"},
                max_tokens=60)
    assert isinstance(json.loads(resp.choices[0].message.content), dict)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
              "required": ["city"], "additionalProperties": False}
    resp = _ask(client, "What is the capital of France?", max_tokens=40,
                response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    assert set(json.loads(resp.choices[0].message.content)) == {"city"}


def test_tools_with_a_named_tool_choice(client):
    resp = _ask(client, "What is the weather in Paris?", tools=[WEATHER], max_tokens=40,
                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    # streamed: OpenAI's tool-call deltas (name first, then the arguments), reassembled by index
    chunks = list(_ask(client, "What is the weather in Rome?", tools=[WEATHER], tool_choice="required",
                       max_tokens=40, stream=True))
    parts = [t for c in chunks if c.choices and c.choices[0].delta.tool_calls for t in c.choices[0].delta.tool_calls]
    assert parts[0].function.name == "get_weather" and parts[0].id
    assert "city" in json.loads("".join(p.function.arguments or "" for p in parts))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_a_client_tool_loop_goes_on_after_the_tool_result(server, client):
    _, home = server
    messages = [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 C"}]
    resp = client.chat.completions.create(model="agentrt", messages=messages, tools=[WEATHER], max_tokens=30)
    record = _record(home, resp.model_extra["agentrt"]["trajectory_id"])
    assert '<tool_response name="get_weather">\nsunny, 24 C' in record["question"]
    assert '"get_weather"' in record["metadata"]["history"][-1]["content"]
    assert resp.choices[0].message.content or resp.choices[0].message.tool_calls


def test_logprobs_name_the_answer_tokens(client):
    resp = _ask(client, "What is the capital of France?", logprobs=True, top_logprobs=1,
                extra_body={"route": "direct"})
    content = resp.choices[0].logprobs.content
    assert content and all(t.logprob <= 0 and t.top_logprobs[0].token == t.token for t in content)
    assert "".join(t.token for t in content).strip() == resp.choices[0].message.content


@pytest.mark.parametrize("extra, words", [
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "bogus"}}}},
     "bogus"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "nope"),
    ({"tools": [WEATHER], "route": "plan"}, "route"),
    ({"top_logprobs": 2}, "logprobs"),
])
def test_unsupported_or_inconsistent_fields_are_a_400(server, extra, words):
    base, _ = server
    r = httpx.post(f"{base}/v1/chat/completions", timeout=120,
                   json={"model": "agentrt", "messages": [{"role": "user", "content": "Hi"}], **extra})
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]["message"]


# -- LangChain -----------------------------------------------------------------------------------------------------

def test_langchain_chat_openai(server):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="agentrt", base_url=f"{server[0]}/v1", api_key="unused", max_tokens=30, max_retries=0)
    assert llm.invoke("What is the capital of France?").content.strip()
    chunks = list(llm.stream("Say hello in one short sentence."))
    assert len([c for c in chunks if c.content]) >= 5 and "".join(c.content for c in chunks).strip()

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    bound = llm.bind_tools([multiply], tool_choice="multiply")
    [call] = bound.invoke("What is 6 times 7?").tool_calls
    assert call["name"] == "multiply" and set(call["args"]) == {"a", "b"}
    chunks = list(bound.stream("What is 3 times 5?"))
    merged = chunks[0]
    for c in chunks[1:]:
        merged = merged + c
    assert [c["name"] for c in merged.tool_calls] == ["multiply"]


# -- smolagents ----------------------------------------------------------------------------------------------------

def test_smolagents_openai_server_model(server):
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool
    from smolagents.models import ChatMessage

    model = OpenAIServerModel(model_id="agentrt", api_base=f"{server[0]}/v1", api_key="unused", max_tokens=40)
    reply = model.generate([ChatMessage(role="user", content=[{"type": "text", "text": "What is 2 + 2?"}])])
    assert reply.content.strip() and reply.token_usage.output_tokens <= 40
    calls: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: the city's name
        """
        calls.append(city)
        return f"sunny in {city}"

    # one step of a ToolCallingAgent: smolagents sends its tools with tool_choice "required"; the server's reply
    # must be a call smolagents can parse and run (which tool a 135M model picks is the model's business)
    agent_model = OpenAIServerModel(model_id="agentrt", api_base=f"{server[0]}/v1", api_key="unused", max_tokens=120)
    agent = ToolCallingAgent(tools=[get_weather], model=agent_model, max_steps=1, verbosity_level=0)
    agent.run("What is the weather in Paris?")
    [step] = [s for s in agent.memory.steps if type(s).__name__ == "ActionStep"][:1]
    assert step.error is None and step.tool_calls
    assert step.tool_calls[0].name in ("get_weather", "final_answer")
    if step.tool_calls[0].name == "get_weather":
        assert calls == [step.tool_calls[0].arguments["city"]]
