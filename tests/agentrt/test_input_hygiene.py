"""Text that is not valid Unicode, and hostile JSON, never crash a front end (issue 19, input hygiene).

CLI: invalid UTF-8 on argv -> exit 2, one line. SDK: a lone surrogate -> InputError. Server (one real
subprocess on the scripted backend, reused by every test here): invalid UTF-8, lone surrogates, deep
nesting, huge integers -> 400 in OpenAI's error shape; a hypothesis fuzz over request bodies gets no
5xx and leaves the server up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentrt.core.errors import InputError
from _servers import running_server

CLI = [sys.executable.encode(), b"-m", b"agentrt.app.cli"]


# -- CLI ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    [b"run", b"hi \xff\xfe"],
    [b"route", b"\xff\xfe"],
    [b"chat", b"--route", b"\xff\xfe"],
    [b"eval", b"--suite", b"gsm8k\xff", b"--out", b"runs"],
    [b"export", b"--format", b"openai", b"--out", b"out\xfe.jsonl"],
])
def test_cli_invalid_utf8_argv_is_one_line_and_exit_2(agentrt_home, args):
    env = {**os.environ, "AGENTRT_HOME": str(agentrt_home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    out = subprocess.run([*CLI, *args], capture_output=True, env=env, timeout=120)
    err = out.stderr.decode("utf-8", "replace")
    assert out.returncode == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "is not valid UTF-8" in err and "UTF-8" in err.split(";")[1]  # what is wrong; how to fix it
    assert not (agentrt_home / "trajectories" / "trajectories.jsonl").exists()


def test_cli_main_refuses_surrogates_in_process(capsys):
    from agentrt.app.cli import main

    assert main(["run", "--route", "direct", "what\udcff"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentrt: error: argument 4 (b'what\\xff') is not valid UTF-8") and err.count("\n") == 1


# -- SDK ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, what", [
    ({"question": "hi \ud800"}, "question"),
    ({"question": "hi", "history": [{"role": "user", "content": "a \udcff"}, {"role": "assistant", "content": "b"}]},
     "history message"),
    ({"question": "hi", "history": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "\udfff"}]},
     "history message"),
    ({"question": "hi", "system": "be brief \ud83d"}, "system prompt"),
])
def test_sdk_lone_surrogate_is_an_input_error(agentrt_home, kwargs, what):
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend

    agent = Agent(policy=ScriptedBackend(["ok"]))
    question = kwargs.pop("question")
    with pytest.raises(InputError, match=f"the {what} is not valid Unicode"):
        agent.run(question, budget=100, route="direct", **kwargs)
    if what == "question":  # a session keeps its own history; its question is checked the same way
        with pytest.raises(InputError, match="the question is not valid Unicode"):
            agent.session(budget=100).ask(question, route="direct")
    assert not (agentrt_home / "trajectories" / "trajectories.jsonl").exists()  # refused before any work


# -- the server ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("hygiene-home")
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_API_KEY"}
    env["AGENTRT_HOME"] = str(home)
    argv = [sys.executable, "-m", "agentrt.app.cli", "serve", "--policy", "scripted:a fine answer"]
    with running_server(argv, home, env, timeout_s=120) as base, httpx.Client(base_url=base, timeout=60) as client:
        yield client, home


def _post(client: httpx.Client, body: bytes) -> httpx.Response:
    return client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})


def _assert_openai_error(r: httpx.Response) -> dict:
    assert r.headers["content-type"].startswith("application/json"), r.text[:300]
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)
    return error


def _msg(content: str, role: str = "user") -> dict:
    return {"role": role, "content": content}


def _body(messages: list[dict], **extra) -> bytes:
    return json.dumps({"messages": messages, "route": "direct", **extra}).encode()  # ensure_ascii: \\udXXX escapes


@pytest.mark.slow
@pytest.mark.parametrize("body, words, param", [
    (b'{"messages": [{"role": "user", "content": "caf\xe9 \xff\xfe"}]}', "not valid UTF-8", None),
    (b"\xff\xfe{\x00}\x00", "not valid UTF-8", None),
    (_body([_msg("hi \ud800")]), "not valid Unicode", "messages.0.content"),
    (_body([_msg("be brief \udfff", "system"), _msg("hi")]), "not valid Unicode", "messages.0.content"),
    (_body([_msg("a"), _msg("b \udc80", "assistant"), _msg("c")]), "not valid Unicode", "messages.1.content"),
    (_body([{"role": "user", "content": [{"type": "text", "text": "\ud83d"}]}]), "not valid Unicode",
     "messages.0.content.0.text"),
    (_body([_msg("hi")], user="\ud800"), "not valid Unicode", "user"),
    (b"[" * 200_000 + b"]" * 200_000, "nests 200000 levels deep", None),
    (b'{"messages": ' + b"[" * 100 + b"]" * 100 + b"}", "limit is 64", None),
    (_body([_msg("hi")])[:-1] + b', "budget": ' + b"9" * 5000 + b"}", "5000-digit integer", None),
    (_body([_msg("hi")])[:-1] + b', "budget": 123456789012345678901}', "21-digit integer", None),
    (_body([_msg("hi")])[:-1] + b', "temperature": NaN}', "NaN", None),
    (b'{"messages": [{"role": "user", "content": "hi"}', "not valid JSON", None),
])
def test_bad_text_and_hostile_json_get_400_in_openai_shape(server, body, words, param):
    client, _ = server
    r = _post(client, body)
    assert r.status_code == 400, r.text[:300]
    error = _assert_openai_error(r)
    assert words in error["message"] and error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert client.get("/healthz").status_code == 200


@pytest.mark.slow
def test_a_good_request_still_works_and_a_bad_path_is_json(server):
    client, home = server
    r = _post(client, _body([_msg("café ☕ — 你好?")]))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "a fine answer"
    r = client.get("/v1/%ff%fe")
    assert r.status_code == 404 and _assert_openai_error(r)


# -- the fuzz: random bodies against the one running server -------------------------------------------------

_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)  # surrogates included
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
                     max_leaves=12)
_part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "x"]), "text": _text | _json})
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer", "tool", "x"]) | _text,
     "content": _text | st.lists(_part, max_size=3) | _json},
    optional={"name": _text | _json, "extra": _json})
# the route is always set (never the router's choice): the plan route would open the vector index
_request = st.fixed_dictionaries(
    {"messages": st.lists(_message, max_size=4) | _json,
     "route": st.sampled_from(["direct", "abstain", "ask", "reason"]) | _text},
    optional={"budget": st.integers() | st.integers(min_value=1, max_value=400) | _json,
              "stream": st.booleans() | _json, "samples": st.integers(-2, 70) | _json,
              "temperature": st.floats(allow_nan=False) | _json, "max_tokens": st.integers() | _json,
              "model": _text | _json, "n": st.integers(0, 3), "stream_options": _json, "metadata": _json,
              "unknown": _json})


# near-valid requests, so that runs do happen: conversations ending with a user turn, small budgets
_turn = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                               "content": st.text(min_size=1, max_size=20) | _text})
_near_valid = st.fixed_dictionaries(
    {"messages": st.tuples(st.lists(_turn, max_size=3), st.text(min_size=1, max_size=20) | _text).map(
        lambda t: [*t[0], {"role": "user", "content": t[1]}]),
     "route": st.sampled_from(["direct", "abstain", "ask", "reason"])},
    optional={"budget": st.integers(1, 400), "stream": st.booleans(), "samples": st.integers(1, 4),
              "max_tokens": st.integers(1, 64), "temperature": st.floats(0, 2)})


def _encode(value) -> bytes:
    return json.dumps(value, ensure_ascii=True).encode()  # lone surrogates travel as \\udXXX escapes


_bodies = (st.binary(max_size=200) | _json.map(_encode) | _request.map(_encode) | _near_valid.map(_encode)
           | _near_valid.map(_encode) | _request.map(lambda r: _encode(r)[:-3]))  # and truncated JSON


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(body=_bodies)
def test_fuzz_request_bodies_never_get_a_5xx(server, body):
    client, _ = server
    r = _post(client, body)
    event(f"HTTP {r.status_code}")  # --hypothesis-show-statistics: how many bodies got how far
    assert r.status_code < 500, (body[:300], r.status_code, r.text[:500])
    if r.status_code >= 400:
        _assert_openai_error(r)
    elif r.headers["content-type"].startswith("text/event-stream"):
        frames = [line[len("data: "):] for line in r.text.splitlines() if line.startswith("data: ")]
        assert frames[-1] == "[DONE]"
        chunks = [json.loads(f) for f in frames[:-1]]
        for chunk in chunks:  # a run refused once streaming began (e.g. a budget below the prompt): a 4xx frame
            if "error" in chunk:
                assert set(chunk["error"]) == {"message", "type", "param", "code"} and chunk["error"]["code"] == "invalid_request"
    else:
        assert r.json()["object"] == "chat.completion"


@pytest.mark.slow
def test_the_server_is_still_up_after_the_fuzz(server):
    client, _ = server
    assert client.get("/healthz").json()["status"] == "ok"
    assert _post(client, _body([_msg("still there?")])).status_code == 200


# -- a true bug is a JSON 500, not plain text (in process) --------------------------------------------------

def test_an_internal_error_is_a_json_500_in_openai_shape(agentrt_home):
    from fastapi.testclient import TestClient

    from agentrt import Agent
    from agentrt.app.server import create_app
    from agentrt.backends.scripted import ScriptedBackend

    class Broken(ScriptedBackend):
        async def chat(self, messages, params):
            raise RuntimeError("a bug")

    client = TestClient(create_app(Agent(policy=Broken())), raise_server_exceptions=False)
    r = client.post("/v1/chat/completions", json={"messages": [_msg("hi")], "route": "direct"})
    assert r.status_code == 500
    error = _assert_openai_error(r)
    assert error["type"] == "server_error" and "RuntimeError" in error["message"]
    assert "a bug" not in error["message"]  # an unexpected error's text stays in the log


def test_metadata_that_cannot_be_written_is_refused_before_the_run(agentrt_home):
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend
    from agentrt.core.errors import InputError

    agent = Agent(policy=ScriptedBackend(["ok"]))
    for bad in ({"note": "\ud800"}, {"x": object()}, {"x": float("nan")}):
        with pytest.raises(InputError, match="metadata"):
            agent.run("hello", route="direct", budget=100, metadata=bad)
    assert not agent.writer.path.exists()
