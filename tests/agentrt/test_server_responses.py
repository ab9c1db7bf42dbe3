"""`/v1/responses` on a real `agentrt serve` (embedded model, 127.0.0.1), driven by the `openai` SDK's
`responses.create` and by the OpenAI Agents SDK with its default model class (`OpenAIResponsesModel`)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx
import openai
import pytest
from _servers import openai_client, record_of, running_server

from agentrt.app.server.responses import ResponseStore
from agentrt.app.server.responses_out import ResponseStream

AGENTRT = str(Path(sys.executable).parent / "agentrt")

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
FORCED = {"type": "function", "name": "get_weather"}
ASSUMED_TOKENS_PER_S = 10


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("responses-home")
    # the decode speed max_latency_s goes by before this server has measured a run (the setting; default 8)
    env = {**os.environ, "AGENTRT_HOME": str(home), "AGENTRT_SERVE_DECODE_TOKENS_PER_S": str(ASSUMED_TOKENS_PER_S)}
    with running_server([AGENTRT, "serve"], home, env, poll_s=0.5) as base:
        yield base, home


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server[0])


_record = record_of


# -- the openai SDK ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_max_latency_before_any_run_goes_by_the_assumed_speed_then_by_the_measured(server, client):
    # first in this module on purpose: the server has measured no run yet (no probe call either)
    _, home = server
    first = client.responses.create(model="agentrt", input="Explain why the sky is blue.",
                                    extra_body={"max_latency_s": 10, "route": "direct"})
    extra = first.model_extra["agentrt"]
    allowance = 10 * ASSUMED_TOKENS_PER_S
    assumed = [w for w in extra["warnings"] if w.startswith("max_latency_s 10 capped the budget to")]
    assert len(assumed) == 1 and f"({allowance} beyond the prompt at an assumed {ASSUMED_TOKENS_PER_S} tokens/s " \
        "(the serve_decode_tokens_per_s setting: no run of this server has been measured yet))" in assumed[0]
    record = _record(home, extra["trajectory_id"])
    assert record["usage"]["total_tokens"] <= extra["budget"] == record["budget"]["total"]
    # that run was measured: the next cap goes by the speed this server saw
    try:
        second = client.responses.create(model="agentrt", input="Explain why the sky is blue.",
                                         extra_body={"max_latency_s": 6, "route": "direct"})
        warned = " ".join(second.model_extra["agentrt"]["warnings"])
    except openai.BadRequestError as e:  # a loaded machine: 6 s at the measured speed leaves no route room
        warned = str(e)
        assert "max_latency_s 6 leaves" in warned, warned
    assert "measured" in warned and "assumed" not in warned, warned
    # a cap no route can meet is a 400 naming the field, as in chat
    r = httpx.post(f"{server[0]}/v1/responses", json={"model": "agentrt", "input": "Hi", "max_latency_s": 0.01},
                   timeout=120)
    assert r.status_code == 400 and r.json()["error"]["code"] == "max_latency_unreachable"
    assert r.json()["error"]["param"] == "max_latency_s"


@pytest.mark.slow
def test_vllm_fields_are_honoured_or_warned_and_recorded(server, client):
    _, home = server
    resp = client.responses.create(model="agentrt", input="Name a colour.", max_output_tokens=8,
                                   extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1,
                                               "ignore_eos": True, "route": "direct"})
    extra = resp.model_extra["agentrt"]
    assert resp.status in ("completed", "incomplete")
    assert any(w.startswith("ignore_eos is ignored") for w in extra["warnings"])
    [call] = [s for s in _record(home, extra["trajectory_id"])["steps"] if s["kind"] == "model_call"]
    assert (call["params"]["top_k"], call["params"]["min_p"], call["params"]["repetition_penalty"]) == (20, 0.05, 1.1)
    r = httpx.post(f"{server[0]}/v1/responses", json={"model": "agentrt", "input": "Hi", "top_kk": 3}, timeout=120)
    assert r.status_code == 400 and "top_kk" in r.json()["error"]["message"]


@pytest.mark.slow
def test_max_model_len_and_the_streamed_route_headers(server):
    base, _ = server
    r = httpx.post(f"{base}/v1/responses", json={"model": "agentrt", "input": "word " * 8300, "max_output_tokens": 8},
                   timeout=120)
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert "maximum context length is 8192 tokens" in error["message"]
    with httpx.stream("POST", f"{base}/v1/responses", timeout=600, json={
            "model": "agentrt", "input": "Name a color.", "stream": True, "max_output_tokens": 8,
            "route": "direct"}) as r:
        assert r.headers["x-agentrt-route"] == "direct" and r.headers["x-agentrt-route-reason"] == "the request's route"
        text = "".join(r.iter_text())
    assert "event: response.completed" in text or "event: response.incomplete" in text


@pytest.mark.slow
def test_create_returns_a_response_object(server, client):
    _, home = server
    resp = client.responses.create(model="agentrt", input="What is the capital of France?", max_output_tokens=30,
                                   instructions="Answer in one short sentence.")
    extra = resp.model_extra["agentrt"]
    record = _record(home, extra["trajectory_id"])
    assert resp.id == f"resp_{extra['trajectory_id']}" and resp.object == "response"
    assert resp.status == "completed" and resp.model == "agentrt" and extra["route"] == "direct"  # capped: direct
    [message] = resp.output
    assert message.type == "message" and message.role == "assistant" and message.content[0].type == "output_text"
    assert resp.output_text.strip() and resp.output_text == record["answer"]
    assert resp.usage.input_tokens == record["usage"]["prompt_tokens"]
    assert resp.usage.output_tokens == record["usage"]["completion_tokens"] <= 30
    assert "Answer in one short sentence." in record["metadata"]["system"]
    # the stored response comes back by id
    got = httpx.get(f"{server[0]}/v1/responses/{resp.id}", timeout=30).json()
    assert got["id"] == resp.id and got["output"][0]["content"][0]["text"] == resp.output_text
    # and a user's verdict on it reaches the run (POST /v1/feedback takes the response id)
    verdict = httpx.post(f"{server[0]}/v1/feedback", json={"id": resp.id, "correct": True}, timeout=30)
    assert verdict.status_code == 200 and verdict.json()["run_id"] == extra["trajectory_id"]


@pytest.mark.slow
def test_a_cut_answer_is_incomplete_and_ignored_fields_are_warned(client):
    raw = client.responses.with_raw_response.create(model="agentrt", input="Write a long story about a dragon.",
                                                    max_output_tokens=5, reasoning={"effort": "high"})
    resp = raw.parse()
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text and resp.usage.output_tokens <= 5
    assert raw.headers["x-agentrt-route"] == resp.model_extra["agentrt"]["route"] == "direct"
    assert any(w.startswith("reasoning is ignored") for w in resp.model_extra["agentrt"]["warnings"])


@pytest.mark.slow
def test_a_thought_is_a_reasoning_item(server, client):
    _, home = server
    # no number in it: the safe tools offer no calculator, so reason thinks
    resp = client.responses.create(model="agentrt", input="What colour is the sky on a clear day?",
                                   extra_body={"route": "reason", "budget": 500})
    record = _record(home, resp.model_extra["agentrt"]["trajectory_id"])
    assert record["route"] == "reason" and record["thought"]
    reasoning, message = resp.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == record["thought"]
    assert message.type == "message" and resp.output_text == record["answer"]
    assert resp.usage.output_tokens_details.reasoning_tokens > 0


@pytest.mark.slow
def test_stream_events_in_the_sdk_order(server, client):
    _, home = server
    events = list(client.responses.create(model="agentrt", input="Say hello in one short sentence.", stream=True,
                                          extra_body={"route": "direct"}))
    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 5, kinds  # token by token, not the whole answer at the end
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    record = _record(home, done.model_extra["agentrt"]["trajectory_id"])
    assert "".join(deltas) == events[-4].text == done.output_text == record["answer"]
    assert done.id == events[0].response.id and done.usage.output_tokens == record["usage"]["completion_tokens"]


@pytest.mark.slow
def test_forced_function_call_then_chained_output(server, client):
    _, home = server
    first = client.responses.create(model="agentrt", input="What is the weather in Paris?", tools=[WEATHER],
                                    tool_choice=FORCED, max_output_tokens=40)
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id.startswith("call_")
    assert isinstance(json.loads(call.arguments)["city"], str)
    # the client ran the tool; the next turn sends only its output, chained to the first response
    second = client.responses.create(model="agentrt", previous_response_id=first.id, tools=[WEATHER],
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": "sunny, 24 C"}], max_output_tokens=40)
    assert second.previous_response_id == first.id and second.status in ("completed", "incomplete")
    record = _record(home, second.model_extra["agentrt"]["trajectory_id"])
    assert '<tool_response name="get_weather">\nsunny, 24 C' in record["question"]
    history = record["metadata"]["history"]
    assert history[0]["content"] == "What is the weather in Paris?" and '"get_weather"' in history[-1]["content"]


@pytest.mark.slow
def test_streamed_function_call(client):
    events = list(client.responses.create(model="agentrt", input="What is the weather in Rome?", tools=[WEATHER],
                                          tool_choice="required", max_output_tokens=40, stream=True))
    kinds = [e.type for e in events]
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather"
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == arguments and "city" in json.loads(arguments)
    assert kinds[-2:] == ["response.output_item.done", "response.completed"]
    assert events[-1].response.output[0].call_id == added.item.call_id


@pytest.mark.slow
def test_store_false_is_not_kept(server, client):
    import openai

    resp = client.responses.create(model="agentrt", input="Name a fruit.", max_output_tokens=8, store=False)
    assert resp.store is False and resp.output_text
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model="agentrt", input="And another?", previous_response_id=resp.id)
    assert e.value.body["code"] == "previous_response_not_found" and e.value.body["param"] == "previous_response_id"
    assert httpx.get(f"{server[0]}/v1/responses/{resp.id}", timeout=30).status_code == 404


@pytest.mark.slow
def test_chained_text_turns_keep_the_conversation(server, client):
    _, home = server
    first = client.responses.create(model="agentrt", input="My name is Ada.", max_output_tokens=20,
                                    extra_body={"route": "direct"})
    # a reasoning item echoed back (as the Agents SDK does) is context the run does not need: left out
    echoed = {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]}
    second = client.responses.create(model="agentrt", input=[echoed, {"role": "user", "content": [
        {"type": "input_text", "text": "What is my name?"}]}], previous_response_id=first.id, max_output_tokens=20)
    history = _record(home, second.model_extra["agentrt"]["trajectory_id"])["metadata"]["history"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[0]["content"] == "My name is Ada." and history[1]["content"] == first.output_text
    deleted = httpx.delete(f"{server[0]}/v1/responses/{first.id}", timeout=30).json()
    assert deleted == {"id": first.id, "object": "response", "deleted": True}
    assert httpx.get(f"{server[0]}/v1/responses/{first.id}", timeout=30).status_code == 404


@pytest.mark.slow
@pytest.mark.parametrize("body, status, param, words", [
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                             {"type": "input_image", "image_url": "http://x/y.png"}]}]},
     400, "input.0.content.1", "input_image"),
    ({"input": "Hi", "tools": [{"type": "web_search"}]}, 400, "tools.0.type", "function tools"),
    ({"input": "Hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice",
     "nope"),
    ({"input": "Hi", "tools": [{**WEATHER, "name": "bad name!"}]}, 400, "tools.0.name", "name"),
    ({"input": "Hi", "background": True}, 400, "background", "previous_response_id"),
    ({"input": "Hi", "max_output_tokens": 0}, 400, "max_output_tokens", "max_output_tokens"),
    ({"input": "Hi", "frobnicate": 1}, 400, "frobnicate", "unknown option"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, 400, "input.0.type", "item_reference"),
    ({"input": [{"role": "assistant", "content": "Hello"}]}, 400, "input", "last message"),
    ({"input": "Hi", "router": "/etc/passwd"}, 400, "router", "router"),
    ({"input": "Hi", "model": "gpt-4o"}, 404, "model", "gpt-4o"),
    ({"input": "Hi", "previous_response_id": "resp_nope"}, 404, "previous_response_id", "resp_nope"),
])
def test_bad_requests_are_4xx_json(server, body, status, param, words):
    r = httpx.post(f"{server[0]}/v1/responses", json={"model": "agentrt", **body}, timeout=120)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"] and isinstance(error["code"], str)


# -- the OpenAI Agents SDK, default model class (Responses) ------------------------------------------------------

def _agents_sdk(base: str):
    from agents import set_default_openai_api, set_default_openai_client, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    set_default_openai_api("responses")
    set_default_openai_client(AsyncOpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600),
                              use_for_tracing=False)


def _multiplying_agent(calls: list):
    from agents import Agent, ModelSettings, function_tool

    @function_tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        calls.append((a, b))
        return a * b

    # tool_choice required for the first turn (the SDK resets it after the call, so the model then answers)
    return Agent(name="calculator", instructions="Use the tools, then answer with the result.", model="agentrt",
                 tools=[multiply], model_settings=ModelSettings(tool_choice="required", max_tokens=60))


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_agents_sdk_default_model_runs_a_tool_turn(server, streamed):
    from agents import Runner
    from agents.models.openai_responses import OpenAIResponsesModel

    base, home = server
    _agents_sdk(base)
    calls: list = []
    agent = _multiplying_agent(calls)

    async def run():
        if not streamed:
            return await Runner.run(agent, "What is 6 times 7?", max_turns=3)
        result = Runner.run_streamed(agent, "What is 6 times 7?", max_turns=3)
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(run())
    from agents import MultiProvider

    assert isinstance(MultiProvider().get_model("agentrt"), OpenAIResponsesModel)  # the default class, not chat
    assert len(calls) == 1 and all(isinstance(x, int) for x in calls[0])  # the tool ran, with the model's arguments
    [first, last] = result.raw_responses
    assert first.output[0].type == "function_call"
    assert isinstance(result.final_output, str) and result.final_output.strip()
    record = _record(home, last.response_id.removeprefix("resp_"))
    assert f'<tool_response name="multiply">\n{calls[0][0] * calls[0][1]}' in record["question"]
    assert record["answer"] == result.final_output


# -- the store's limits (no server) ----------------------------------------------------------------------------------

def test_store_expires_and_drops_the_oldest():
    now = [0.0]
    store = ResponseStore(ttl_s=10, max_items=2, clock=lambda: now[0])
    for rid in ("a", "b", "c"):
        store.put(rid, [{"role": "user", "content": rid}], {"id": rid})
    assert store.get("a") is None and store.get("b").response == {"id": "b"} and len(store) == 2
    now[0] = 10.0
    assert store.get("b") is None and store.get("c") is None and len(store) == 0
    small = ResponseStore(max_bytes=200)
    small.put("x", [{"role": "user", "content": "x" * 80}], {})
    small.put("y", [{"role": "user", "content": "y" * 80}], {})
    assert small.get("x") is None and small.get("y") is not None


def _events(frames: list[dict | str]) -> list[dict]:
    """The Responses events ``ResponseStream`` makes of chat stream frames (dicts: ``data:`` JSON payloads)."""
    from agentrt.app.server.responses import ResponsesRequest

    async def chunks():
        for frame in frames:
            yield frame if isinstance(frame, str) else f"data: {json.dumps(frame)}\n\n"

    async def collect():
        stream = ResponseStream(ResponsesRequest(input="Hi"), "agentrt", 0,
                                lambda response, _reply: kept.append(response))
        return [json.loads(e.split("data: ", 1)[1]) async for e in stream.events(chunks())]

    kept: list = []
    return asyncio.run(collect()), kept


def _chunk(**delta) -> dict:
    return {"id": "chatcmpl-run1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def test_stream_retells_reasoning_then_the_answer():
    events, kept = _events([_chunk(role="assistant", content=""), _chunk(reasoning_content="Paris is "),
                            _chunk(reasoning_content="the capital."), _chunk(content="Paris"),
                            {"id": "chatcmpl-run1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                             "agentrt": {"route": "reason"}},
                            {"id": "chatcmpl-run1", "choices": [], "usage": {
                                "prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8,
                                "completion_tokens_details": {"reasoning_tokens": 4}}}, "data: [DONE]\n\n"])
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
        "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    done = events[-1]["response"]
    assert done["id"] == "resp_run1" and [i["type"] for i in done["output"]] == ["reasoning", "message"]
    assert done["output"][0]["content"][0]["text"] == "Paris is the capital."
    assert done["usage"]["output_tokens_details"]["reasoning_tokens"] == 4 and done["agentrt"] == {"route": "reason"}
    assert len(kept) == 1  # stored for previous_response_id


def test_stream_failure_is_an_error_then_response_failed():
    events, kept = _events([_chunk(role="assistant", content=""), _chunk(content="Par"),
                            {"error": {"message": "the run took longer than 1 s", "type": "timeout",
                                       "param": None, "code": "request_timeout"}}, "data: [DONE]\n\n"])
    assert [e["type"] for e in events][-5:] == ["response.output_text.done", "response.content_part.done",
                                                "response.output_item.done", "error", "response.failed"]
    assert events[-2]["code"] == "request_timeout"
    assert events[-1]["response"]["status"] == "failed" and events[-1]["response"]["error"]["code"] == "request_timeout"
    assert kept == []  # a failed response is not stored
