"""The shapes real clients send to `agentrt serve` (issue 56): instructor's RESPONSES_TOOLS / TOOLS modes and
pydantic-ai get a validated pydantic object back; tools together with a JSON response_format / text.format are
answered as OpenAI does (a call of an offered tool, or JSON in the format); a `vllm serve` launch line starts
the server; /metrics opens without the key only with --metrics-open; max_tokens alone is reported as the
server's reason for the route, not as the caller's.

One server for the module, started with a vllm-serve-style line, an API key and --metrics-open, on the real
embedded model at 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _servers import running_server
from pydantic import BaseModel

AGENTRT = str(Path(sys.executable).parent / "agentrt")
KEY = "test-key-56"
AUTH = {"Authorization": f"Bearer {KEY}"}

pytestmark = pytest.mark.slow

VLLM_LINE = ["--dtype", "float32", "--gpu-memory-utilization", "0.9", "--tensor-parallel-size", "1",
             "--enable-prefix-caching", "--max-num-seqs", "8", "--seed", "0", "--tokenizer", "HuggingFaceTB/x",
             "--trust-remote-code", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
             "--reasoning-parser", "deepseek_r1", "--disable-log-requests", "--uvicorn-log-level", "info",
             "--generation-config", "auto"]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
QUESTION = "Ada Lovelace is 36 years old. Extract the user."


class User(BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("shapes-home")
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    env.pop("AGENTRT_API_KEY", None)
    argv = [AGENTRT, "serve", "hf:embedded", *VLLM_LINE, "--api-key", KEY, "--metrics-open"]
    with running_server(argv, home, env, poll_s=0.5) as base:
        yield base, home


def _client(base: str):
    from openai import OpenAI

    return OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=600)


def _async_client(base: str):
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=600)


# -- the launch line and the door ----------------------------------------------------------------------------------

def test_a_vllm_serve_launch_line_starts_and_serves_with_one_warning(server):
    base, home = server
    log = (home / "server.log").read_text()
    warnings = [line for line in log.splitlines() if line.startswith("agentrt serve: warning")]
    assert len(warnings) == 1, warnings  # one line names every flag that does nothing here
    for flag in ("--trust-remote-code", "--tool-call-parser hermes", "--reasoning-parser deepseek_r1",
                 "--dtype float32", "--gpu-memory-utilization 0.9", "--generation-config auto"):
        assert flag in warnings[0], flag
    models = httpx.get(f"{base}/v1/models", headers=AUTH, timeout=30)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "agentrt"


def test_the_readme_vllm_line_parses_and_a_bad_flag_points_at_serve_help(tmp_path):
    env = {**os.environ, "AGENTRT_HOME": str(tmp_path)}
    env.pop("AGENTRT_API_KEY", None)
    # README's `vllm serve` line with agentrt in its place: every flag parses; the door then refuses a
    # keyless non-loopback bind (before any model loads), in one line
    readme = [AGENTRT, "serve", "hf:embedded", "--served-model-name", "qwen3-8b", "--host", "0.0.0.0", "--port",
              "8000", "--max-model-len", "16384", "--gpu-memory-utilization", "0.9", "--enable-prefix-caching"]
    out = subprocess.run(readme, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unrecognized" not in out.stderr, out.stderr
    assert "refusing to serve on 0.0.0.0 without an API key" in out.stderr
    bad = subprocess.run([AGENTRT, "serve", "hf:embedded", "--no-such-flag"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "unrecognized arguments: --no-such-flag " in bad.stderr and "(see: agentrt serve --help)" in bad.stderr


def test_engine_flags_go_to_a_vllm_policy_as_its_engine_options():
    from agentrt.app.cli import build_parser
    from agentrt.app.commands._vllm_flags import engine_spec

    args = build_parser().parse_args(["serve", "vllm:/models/q", *VLLM_LINE, "--max-model-len", "4096",
                                      "--no-enable-prefix-caching", "-tp", "2"])
    spec, warning = engine_spec("vllm:/models/q", args)
    assert spec == ("vllm:/models/q?dtype=float32&gpu_memory_utilization=0.9&tensor_parallel_size=2&"
                    "enable_prefix_caching=false&max_num_seqs=8&seed=0&max_model_len=4096")
    assert "--dtype" not in warning and "--trust-remote-code" in warning  # only the flags that do nothing
    from agentrt.backends._checks import parse_options

    engine = {"dtype": str, "gpu_memory_utilization": float, "tensor_parallel_size": int, "max_model_len": int,
              "enable_prefix_caching": bool, "max_num_seqs": int, "seed": int}  # backends.vllm.ENGINE_OPTIONS
    assert parse_options(spec.partition("?")[2], engine, "vLLM")["enable_prefix_caching"] is False


def test_metrics_opens_without_the_key_only_with_metrics_open(server, tmp_path):
    base, _ = server
    assert httpx.get(f"{base}/metrics", timeout=30).status_code == 200  # --metrics-open: a scraper needs no key
    for path in ("/version", "/v1/models"):  # everything else still needs it
        assert httpx.get(f"{base}{path}", timeout=30).status_code == 401, path
    env = {**os.environ, "AGENTRT_HOME": str(tmp_path)}
    with running_server([AGENTRT, "serve", "scripted:ok", "--api-key", KEY], tmp_path, env) as closed:
        assert httpx.get(f"{closed}/metrics", timeout=30).status_code == 401
        assert httpx.get(f"{closed}/metrics", headers=AUTH, timeout=30).status_code == 200
    help_text = subprocess.run([AGENTRT, "serve", "--help"], env=env, capture_output=True, text=True,
                               timeout=120).stdout
    assert "/metrics, /version, /tokenize" in " ".join(help_text.split())


# -- tools with a JSON format --------------------------------------------------------------------------------------

def test_chat_tools_with_a_json_response_format_answer_a_call_or_json_in_the_format(server):
    base, _ = server
    schema = User.model_json_schema()
    body = {"messages": [{"role": "user", "content": QUESTION}], "tools": [WEATHER],
            "response_format": {"type": "json_schema", "json_schema": {"name": "User", "schema": schema}}}
    resp = httpx.post(f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=600)
    assert resp.status_code == 200, resp.text
    message = resp.json()["choices"][0]["message"]
    if message.get("tool_calls"):  # a call of the offered tool, with arguments in its schema
        call = message["tool_calls"][0]["function"]
        assert call["name"] == "get_weather" and isinstance(json.loads(call["arguments"])["city"], str)
    else:  # or the answer, as JSON in the format (the grammar admits nothing else)
        User.model_validate_json(message["content"])


def test_responses_tools_with_text_format_answer_a_call_or_json_in_the_format(server):
    base, _ = server
    fmt = {"type": "json_schema", "name": "User", "schema": User.model_json_schema(), "strict": True}
    body = {"input": QUESTION, "tools": [{"type": "function", **WEATHER["function"]}], "text": {"format": fmt}}
    resp = httpx.post(f"{base}/v1/responses", json=body, headers=AUTH, timeout=600)
    assert resp.status_code == 200, resp.text
    out = resp.json()["output"]
    calls = [item for item in out if item["type"] == "function_call"]
    if calls:
        assert calls[0]["name"] == "get_weather" and isinstance(json.loads(calls[0]["arguments"])["city"], str)
    else:
        text = next(item for item in out if item["type"] == "message")["content"][0]["text"]
        User.model_validate_json(text)


# -- client libraries ----------------------------------------------------------------------------------------------
# The embedded 135M model fills the fields with what it can (the name may be wrong); what is asserted is what
# each library checks: the call completes and returns an object its pydantic model validated.

def test_instructor_responses_tools_mode_returns_a_validated_object(server):
    import instructor

    client = instructor.from_openai(_client(server[0]), mode=instructor.Mode.RESPONSES_TOOLS)
    user = client.responses.create(model="agentrt", input=QUESTION, response_model=User, max_retries=0)
    assert isinstance(user, User) and isinstance(user.age, int)


def test_instructor_tools_mode_returns_a_validated_object(server):
    import instructor

    client = instructor.from_openai(_client(server[0]), mode=instructor.Mode.TOOLS)
    user = client.chat.completions.create(model="agentrt", messages=[{"role": "user", "content": QUESTION}],
                                          response_model=User, max_retries=0)
    assert isinstance(user, User) and isinstance(user.age, int)


def _pydantic_agent(model_class, base: str, output_type):
    from pydantic_ai import Agent
    from pydantic_ai.providers.openai import OpenAIProvider

    return Agent(model_class("agentrt", provider=OpenAIProvider(openai_client=_async_client(base))),
                 output_type=output_type, retries=0)


def test_pydantic_ai_responses_model_returns_a_validated_object(server):
    from pydantic_ai.models.openai import OpenAIResponsesModel

    result = _pydantic_agent(OpenAIResponsesModel, server[0], User).run_sync(QUESTION)
    assert isinstance(result.output, User)


@pytest.mark.parametrize("model_name", ["OpenAIResponsesModel", "OpenAIChatModel"])
def test_pydantic_ai_native_output_with_a_tool_is_accepted(server, model_name):
    """NativeOutput sends the JSON format (text.format / response_format) beside the agent's tools."""
    import pydantic_ai.models.openai as models
    from pydantic_ai import NativeOutput
    from pydantic_ai.usage import UsageLimits

    agent = _pydantic_agent(getattr(models, model_name), server[0], NativeOutput(User))

    @agent.tool_plain
    def lookup_age(name: str) -> int:
        """The age of a person."""
        return 36

    # the model may call lookup_age first (pydantic-ai runs it and asks again) or answer at once: either way
    # the run ends in an object NativeOutput validated (today's code: a 400, "send either tools or ...")
    result = agent.run_sync(QUESTION, usage_limits=UsageLimits(request_limit=3))
    assert isinstance(result.output, User)


# -- the route's reason --------------------------------------------------------------------------------------------

def test_max_tokens_alone_is_the_servers_reason_not_the_callers(server):
    base, _ = server
    body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
    resp = httpx.post(f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=600)
    extra = resp.json()["agentrt"]
    assert extra["route"] == "direct" and extra["reason"].startswith("max_tokens bounds every generated token")
    chunks = httpx.post(f"{base}/v1/chat/completions", json={**body, "stream": True}, headers=AUTH, timeout=600)
    last = [json.loads(line[6:]) for line in chunks.text.splitlines()
            if line.startswith("data: {") and '"agentrt"' in line][-1]
    assert last["agentrt"]["reason"].startswith("max_tokens bounds every generated token")
    named = httpx.post(f"{base}/v1/chat/completions", json={**body, "route": "direct"}, headers=AUTH, timeout=600)
    assert named.json()["agentrt"]["reason"] == "the request's route"
