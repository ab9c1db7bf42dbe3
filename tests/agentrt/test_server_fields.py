"""vLLM's fields and flags on a real `agentrt serve MODEL --route direct` with the embedded model: the sampling
fields honoured, the rest warned, multimodal parts refused, the route headers, `max_latency_s`, the stream's
agentrt events on request only, string error codes, `parallel_tool_calls`, `--max-model-len`, `serve --help`,
and LangGraph's `create_react_agent` through LangChain's `ChatOpenAI` running a tool call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import httpx
import pytest
from _servers import openai_client, record_of, running_server

AGENTRT = str(Path(sys.executable).parent / "agentrt")
MAX_MODEL_LEN = 1024

pytestmark = pytest.mark.slow

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("serve-fields-home")
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    # MODEL positional (vllm serve's shape), a fixed default route, a context cap
    argv = [AGENTRT, "serve", "hf:embedded", "--route", "direct", "--max-model-len", str(MAX_MODEL_LEN)]
    with running_server(argv, home, env, poll_s=0.5) as base:
        yield base, home


@pytest.fixture(scope="module")
def client(server):
    return openai_client(server[0])


_record = record_of


def _post(base: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", json=body, timeout=600)


def _ask(question: str, **extra) -> dict:
    return {"model": "agentrt", "messages": [{"role": "user", "content": question}], **extra}


# -- fields -------------------------------------------------------------------------------------------------

def test_vllm_fields_are_accepted_and_the_ignored_ones_warned(client):
    resp = client.chat.completions.create(
        model="agentrt", messages=[{"role": "user", "content": "Name a fruit."}], max_tokens=16,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": True, "min_tokens": 4,
                    "chat_template_kwargs": {"enable_thinking": False}, "best_of": 2, "length_penalty": 1.0,
                    "skip_special_tokens": True, "use_beam_search": False})
    assert resp.choices[0].message.content.strip()
    warned = {w.split(" ")[0] for w in resp.model_extra["agentrt"]["warnings"]}
    # honoured fields and fields sent with vLLM's default value ask for nothing agentrt does differently
    assert warned == {"ignore_eos", "min_tokens", "chat_template_kwargs", "best_of"}


def test_a_field_neither_openai_nor_vllm_knows_is_still_a_400(server):
    r = _post(server[0], _ask("hi", top_kk=3))
    assert r.status_code == 400 and "top_kk" in r.json()["error"]["message"]


@pytest.mark.parametrize("knob", [{"top_k": 1}, {"min_p": 1.0}])
def test_top_k_1_and_min_p_1_sample_the_greedy_text(client, knob):
    def say(**extra) -> str:
        return client.chat.completions.create(
            model="agentrt", messages=[{"role": "user", "content": "Write a short poem about the sea."}],
            max_tokens=24, extra_body=extra).choices[0].message.content

    greedy = say(temperature=0)
    hot = [say(temperature=1.5, seed=s) for s in (1, 2)]
    assert hot[0] != hot[1]  # the control: at this temperature two seeds sample two different texts
    # only the likeliest token survives: every seed decodes the greedy text
    assert [say(temperature=1.5, seed=s, **knob) for s in (1, 2)] == [greedy, greedy]


def test_repetition_penalty_reaches_the_decoder(client):
    def say(**extra) -> str:
        return client.chat.completions.create(
            model="agentrt", messages=[{"role": "user", "content": "Write the word cat ten times."}],
            max_tokens=24, extra_body=extra).choices[0].message.content

    assert say(repetition_penalty=2.0) != say()  # greedy both times: only the penalty differs


def test_an_image_part_is_a_400_naming_the_part(client):
    from openai import BadRequestError

    with pytest.raises(BadRequestError) as e:
        client.chat.completions.create(model="agentrt", messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}])
    error = e.value.body
    assert error["message"].startswith("messages[0].content[1]: image_url parts are not supported: the model is "
                                       "text-only")
    assert error["code"] == "unsupported_content" and error["param"] == "messages.0.content.1"


def test_error_codes_are_strings(server):
    base, _ = server
    cases = [(_ask("hi", bogus=1), 400, "invalid_request"), (_ask("hi", model="nope"), 404, "model_not_found"),
             (_ask("hi", route="nope"), 400, "invalid_request")]
    for body, status, code in cases:
        r = _post(base, body)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code)
    r = httpx.post(f"{base}/v1/chat/completions", content=b"{not json", timeout=60,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"


def test_max_model_len_caps_the_request(server, client):
    base, _ = server
    assert {m.model_extra["max_model_len"] for m in client.models.list().data if m.id == "agentrt"} == {MAX_MODEL_LEN}
    r = _post(base, _ask("word " * 1100, max_tokens=8))
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "context_length_exceeded"
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in error["message"]
    r = _post(base, _ask("word " * 900, max_tokens=400))  # the messages fit; with the completion they do not
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


# -- routes and latency -------------------------------------------------------------------------------------

def test_the_servers_route_skips_the_router_and_says_so(server):
    base, home = server
    r = _post(base, _ask("What is the capital of France?"))
    assert r.status_code == 200
    assert r.headers["x-agentrt-route"] == "direct"
    assert r.headers["x-agentrt-route-reason"] == "the server's default route (--route direct)"
    record = _record(home, r.json()["agentrt"]["trajectory_id"])
    assert record["route"] == "direct" and not [s for s in record["steps"] if s["kind"] == "route_decision"]


def test_a_request_that_names_a_router_is_routed_and_the_headers_say_why(server):
    base, home = server
    r = _post(base, _ask("What is the capital of France?", router="rules"))
    assert r.status_code == 200
    extra = r.json()["agentrt"]
    record = _record(home, extra["trajectory_id"])
    decision = [s for s in record["steps"] if s["kind"] == "route_decision"]
    assert len(decision) == 1 and r.headers["x-agentrt-route"] == extra["route"] == decision[0]["route"]
    assert r.headers["x-agentrt-route-reason"] == extra["reason"].encode("ascii", "replace").decode()[:300]
    assert r.headers["x-agentrt-route-reason"]


def test_a_stream_carries_the_route_headers(server):
    base, _ = server
    with httpx.stream("POST", f"{base}/v1/chat/completions", timeout=600,
                      json=_ask("Name a color.", stream=True, max_tokens=8, route="direct")) as r:
        assert r.headers["x-agentrt-route"] == "direct"
        assert r.headers["x-agentrt-route-reason"] == "the request's route"
        assert "".join(r.iter_text()).rstrip().endswith("data: [DONE]")


def test_max_latency_caps_the_budget_and_an_impossible_cap_is_a_400(server):
    base, home = server
    r = _post(base, _ask("Explain why the sky is blue.", router="rules", max_latency_s=8))
    assert r.status_code == 200, r.text
    extra = r.json()["agentrt"]
    assert any(w.startswith("max_latency_s 8 capped the budget to") for w in extra["warnings"])
    assert extra["budget"] < 1024  # the default budget, lowered to the prompt plus 8 s of decoding
    assert _record(home, extra["trajectory_id"])["usage"]["total_tokens"] <= extra["budget"]
    r = _post(base, _ask("Explain why the sky is blue.", max_latency_s=0.01))
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "max_latency_unreachable" and error["param"] == "max_latency_s"
    assert "ask for at least" in error["message"]


# -- stream and tool-call shapes ----------------------------------------------------------------------------

@pytest.mark.parametrize("wanted", [False, True])
def test_agentrt_events_stream_only_when_asked(server, wanted):
    base, _ = server
    options = {"include_usage": True, **({"include_agentrt_events": True} if wanted else {})}
    with httpx.stream("POST", f"{base}/v1/chat/completions", timeout=600,
                      json=_ask("Name a color.", stream=True, max_tokens=8, stream_options=options)) as r:
        lines = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    chunks = [json.loads(ln) for ln in lines[:-1]]
    assert lines[-1] == "[DONE]"
    events = [c["agentrt_event"]["type"] for c in chunks if "agentrt_event" in c]
    empty = [c for c in chunks if c["choices"] == [] and "usage" not in c]
    if wanted:
        assert events[0] == "run_started" and "budget" in events and len(empty) == len(events)
    else:
        assert events == [] and empty == []
    assert chunks[-1]["usage"]["total_tokens"] > 0  # include_usage still adds its choices-less chunk


def test_parallel_tool_calls(client):
    def calls(parallel: bool, seed: int) -> list[str]:
        resp = client.chat.completions.create(
            model="agentrt", messages=[{"role": "user", "content": "What is the weather in Paris and in London?"}],
            tools=[WEATHER], tool_choice="required", parallel_tool_calls=parallel, temperature=1.0, seed=seed,
            max_tokens=60)
        return [json.loads(c.function.arguments)["city"] for c in resp.choices[0].message.tool_calls]

    # true: the reply may hold several calls, and some seeded samples of this 135M model do make two
    several = next((s for s in range(12) if len(calls(True, s)) >= 2), None)
    assert several is not None, "no sample made two calls with parallel_tool_calls=true"
    # false: never more than one call in a turn, for the same sample too
    assert all(len(calls(False, s)) == 1 for s in (several, several + 1))


def test_langgraph_react_agent_through_chat_openai_runs_a_tool(server):
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    asked: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather of a city."""
        asked.append(city)
        return f"It is sunny and 22 C in {city}."

    llm = ChatOpenAI(model="agentrt", base_url=f"{server[0]}/v1", api_key="unused", max_tokens=64, temperature=0)
    # the 135M model answers from its own head when a call is optional: the first turn requires one, the
    # turn after the tool's result may answer (LangGraph's dynamic model: a callable of the state)
    must_call, may_answer = llm.bind_tools([get_weather], tool_choice="required"), llm.bind_tools([get_weather])

    def model(state, _runtime):
        return may_answer if isinstance(state["messages"][-1], ToolMessage) else must_call

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LangGraph 1.x: moved to langchain.agents, still shipped and working
        agent = create_react_agent(model, [get_weather])
    out = agent.invoke({"messages": [("user", "What is the weather in Paris?")]}, {"recursion_limit": 6})
    kinds = [type(m).__name__ for m in out["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert asked == ["Paris"] and out["messages"][1].tool_calls[0]["name"] == "get_weather"
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and final.content.strip() and not final.tool_calls


# -- the command line ---------------------------------------------------------------------------------------

def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([AGENTRT, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AGENTRT_HOME": str(home)})


def test_serve_help_is_grouped_as_vllms(tmp_path):
    out = _cli("serve", "--help", home=tmp_path)
    assert out.returncode == 0
    text = out.stdout
    groups = [text.index(f"\n{g}:\n") for g in ("ModelConfig", "Frontend", "agentrt")]
    assert groups == sorted(groups)
    model, front, own = (text[a:b] for a, b in zip(groups, [*groups[1:], len(text)]))
    assert "--max-model-len" in model and "--model" in model
    assert all(f in front for f in ("--chat-template", "--served-model-name", "--api-key", "--port"))
    assert "--route {auto,direct" in own and "--max-budget" in own
    assert "usage: agentrt serve" in text and "[MODEL]" in text


@pytest.mark.parametrize("args, words", [
    (["serve", "Qwen/Qwen3-8B"], "is neither a backend spec"),
    (["serve", "hf:embedded", "--model", "hf:other"], "two models given"),
    (["serve", "--chat-template", "no-such-template.jinja"], "is not a file, nor a jinja template"),
    (["serve", "--max-model-len", "0"], "--max-model-len must be a positive"),
])
def test_serve_refuses_bad_models_and_flags_in_one_line(tmp_path, args, words):
    out = _cli(*args, "--port", "1", home=tmp_path)
    assert out.returncode == 2 and words in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
