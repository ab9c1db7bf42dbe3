"""The server's door (issue 19): an API key, no open binding by accident, per-request caps.

One real server (``agentrt serve`` in a subprocess, on the scripted backend; a question containing
"slow" makes its model call wait two minutes) with ``--api-key``, ``--max-budget`` and
``--request-timeout``, driven by the real ``openai`` client and httpx. The bind rules run in process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _servers import running_server

KEY = "sk-test-door-0123456789"
MAX_BUDGET = 300

# `agentrt serve` exactly as a user runs it, except that the scripted backend can be made slow
LAUNCHER = """
import asyncio, sys
import agentrt.backends.scripted as scripted

class Slow(scripted.ScriptedBackend):
    async def chat(self, messages, params):
        if "slow" in messages[-1].content:
            await asyncio.sleep(120)
        return await super().chat(messages, params)

scripted.from_spec = lambda arg, settings: Slow([arg])
from agentrt.app.cli import main
sys.exit(main())
"""



def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_API_KEY"}
    env["AGENTRT_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("door-home")
    launcher = home / "launch.py"
    launcher.write_text(LAUNCHER)
    argv = [sys.executable, str(launcher), "serve", "--policy", "scripted:fine", "--api-key", KEY,
            "--max-budget", str(MAX_BUDGET), "--request-timeout", "1"]
    with running_server(argv, home, _env(home), timeout_s=120) as base:
        yield base, home


def _client(base: str, key: str = KEY):
    from openai import OpenAI

    return OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)


def _records(home: Path) -> dict[str, dict]:
    path = home / "trajectories" / "trajectories.jsonl"
    return {r["run_id"]: r for r in map(json.loads, path.read_text().splitlines()) if "run_id" in r}


def _auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# -- the key ------------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("headers, words", [
    ({}, "missing API key"),
    ({"Authorization": "Bearer wrong"}, "incorrect API key"),
    ({"Authorization": f"Basic {KEY}"}, "missing API key"),
    ({"Authorization": f"Bearer {KEY}x"}, "incorrect API key"),
    ({"Authorization": f"Bearer {KEY[:-1]}"}, "incorrect API key"),
])
def test_v1_needs_the_key_and_401_is_openai_shaped(server, headers, words):
    base, _ = server
    for method, path in (("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/v1/nope")):
        r = httpx.request(method, f"{base}{path}", headers=headers, json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key" and words in error["message"]


@pytest.mark.slow
def test_healthz_stays_open_and_the_openai_client_works_with_the_key(server):
    base, home = server
    from openai import AuthenticationError

    assert httpx.get(f"{base}/healthz").json()["status"] == "ok"  # no key needed
    with pytest.raises(AuthenticationError):
        _client(base, "not-the-key").models.list()
    client = _client(base)
    # agentrt and the policy's name, then the embedding model (/v1/embeddings)
    assert [m.id for m in client.models.list().data] == ["agentrt", "scripted", "all-MiniLM-L6-v2"]
    resp = client.chat.completions.create(model="agentrt", messages=[{"role": "user", "content": "hi"}],
                                          extra_body={"route": "direct"})
    assert resp.choices[0].message.content == "fine"
    # a request without a budget gets min(the default 1024, the server's cap)
    assert _records(home)[resp.model_extra["agentrt"]["trajectory_id"]]["budget"]["total"] == MAX_BUDGET


# -- per-request caps ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_budget_over_the_cap_is_400_saying_the_cap(server):
    base, _ = server
    from openai import BadRequestError

    client = _client(base)
    with pytest.raises(BadRequestError) as err:
        client.chat.completions.create(model="agentrt", messages=[{"role": "user", "content": "hi"}],
                                       extra_body={"route": "direct", "budget": MAX_BUDGET + 1})
    error = err.value.body
    assert f"cap of {MAX_BUDGET} tokens" in error["message"] and error["param"] == "budget"
    resp = client.chat.completions.create(model="agentrt", messages=[{"role": "user", "content": "hi"}],
                                          extra_body={"route": "direct", "budget": MAX_BUDGET})
    assert resp.model_extra["agentrt"]["budget"] == MAX_BUDGET


@pytest.mark.slow
def test_a_run_over_the_request_timeout_is_504_and_saved_as_cancelled(server):
    base, home = server
    r = httpx.post(f"{base}/v1/chat/completions", headers=_auth(), timeout=60,
                   json={"messages": [{"role": "user", "content": "a slow question"}], "route": "direct"})
    assert r.status_code == 504, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "timeout"
    assert "--request-timeout" in error["message"]
    run_id = error["message"].split("its trajectory ")[1].split()[0]
    record = _records(home)[run_id]
    assert record["status"] == "cancelled" and record["question"] == "a slow question"
    # the server is free again
    assert httpx.post(f"{base}/v1/chat/completions", headers=_auth(), timeout=60,
                      json={"messages": [{"role": "user", "content": "quick"}], "route": "direct"}).status_code == 200


@pytest.mark.slow
def test_a_streamed_run_over_the_timeout_ends_with_a_timeout_error_frame(server):
    base, home = server
    from openai import APIError

    stream = _client(base).chat.completions.create(
        model="agentrt", stream=True, messages=[{"role": "user", "content": "slow, streamed"}],
        extra_body={"route": "direct"})
    with pytest.raises(APIError, match="--request-timeout"):
        for _ in stream:
            pass
    cancelled = [r for r in _records(home).values() if r["question"] == "slow, streamed"]
    assert [r["status"] for r in cancelled] == ["cancelled"]


# -- the bind rules -----------------------------------------------------------------------------------------

def test_a_public_bind_without_a_key_is_refused_in_one_line(agentrt_home):
    out = subprocess.run([sys.executable, "-m", "agentrt.app.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
                         capture_output=True, text=True, env=_env(agentrt_home), timeout=120)
    assert out.returncode == 2
    assert out.stderr.startswith("agentrt: error: refusing to serve on 0.0.0.0 without an API key")
    assert "--api-key" in out.stderr and "--insecure" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


@pytest.fixture
def fake_serve(monkeypatch):
    """cmd_serve up to the point where uvicorn would start; returns what serve() was given."""
    import agentrt.app.server as server_module

    calls: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(server_module, "serve", lambda *a, **kw: calls.append((a, kw)))
    monkeypatch.delenv("AGENTRT_API_KEY", raising=False)
    return calls


def test_insecure_public_bind_warns_in_one_line(fake_serve, capsys):
    from agentrt.app.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--insecure", "--policy", "scripted:x"]) == 0
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if "warning" in line]
    assert warnings == ["agentrt serve: warning: serving on 0.0.0.0 without an API key (--insecure): anyone who "
                        "can reach this address can run the model"]
    (_, options), = fake_serve
    assert options["api_key"] is None


def test_the_key_comes_from_the_flag_or_the_environment(fake_serve, capsys, monkeypatch):
    from agentrt.app.cli import main

    monkeypatch.setenv("AGENTRT_API_KEY", "from-env")
    assert main(["serve", "--host", "0.0.0.0", "--policy", "scripted:x", "--max-budget", "50",
                 "--request-timeout", "2.5"]) == 0
    assert main(["serve", "--host", "::", "--api-key", "from-flag", "--policy", "scripted:x"]) == 0
    assert [kw["api_key"] for _, kw in fake_serve] == ["from-env", "from-flag"]
    assert fake_serve[0][1]["max_budget"] == 50 and fake_serve[0][1]["request_timeout"] == 2.5
    err = capsys.readouterr().err
    assert "warning" not in err and "(API key required)" in err
    assert main(["serve", "--api-key", "has space", "--policy", "scripted:x"]) == 2
    assert main(["serve", "--max-budget", "0", "--policy", "scripted:x"]) == 2
    assert main(["serve", "--request-timeout", "-1", "--policy", "scripted:x"]) == 2
    assert len(fake_serve) == 2


@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.168.1.7", False), ("10.0.0.1", False), ("example.com", False), ("", False),
])
def test_loopback_addresses(host, loopback):
    from agentrt.app.server.door import is_loopback

    assert is_loopback(host) is loopback
