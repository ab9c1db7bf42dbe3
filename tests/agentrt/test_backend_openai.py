"""The openai backend against a real vLLM OpenAI-compatible server (one per module, on 127.0.0.1).

The server is started by the fixture from the project's ``.venv-vllm`` and stopped by its process
group id. Fault tests put a stdlib forwarding proxy (a separate process, killed by PID) in front of
it as a second endpoint, or kill the server itself at the very end of the module.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentrt.backends import load_backend
from agentrt.backends.vllm_server import free_port, start_vllm_server
from agentrt.backends.openai import OpenAIBackend
from agentrt.core.config import Settings
from agentrt.core.errors import BackendError, ConfigError
from agentrt.trajectory import read_trajectories
from _backend_cases import PROMPTS, SCHEMA
from agentrt.core.types import GenParams, Message

pytestmark = pytest.mark.slow
NAME = "smol"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from agentrt.backends.embedded import embedded_model_path

    srv = start_vllm_server(embedded_model_path(Settings().models_dir), name=NAME,
                            tmp=tmp_path_factory.mktemp("vllm-server"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def backend(server):
    b = OpenAIBackend([server.url], NAME, timeout_s=120)
    yield b
    b.close()


def run(coro):
    return asyncio.run(coro)


def gather(backend, prompts, params):
    async def go():
        return await asyncio.gather(*[backend.chat([Message("user", p)], params) for p in prompts])
    return run(go())


def test_probe_learns_the_server(backend, server):
    assert backend.is_vllm and backend.counting == "local"
    assert backend.context_length == 2048


def test_greedy_output_matches_the_transformers_backend(backend, embedded):
    params = GenParams(max_tokens=32)
    remote = gather(backend, PROMPTS, params)
    local = gather(embedded, PROMPTS, params)
    for p, r, h in zip(PROMPTS, remote, local):
        assert r.choices[0].token_ids == h.choices[0].token_ids, p
        # vLLM's incremental detokenizer holds back a trailing partial UTF-8 character (emoji cut by
        # max_tokens) where transformers prints U+FFFD; the tokens are the same.
        assert r.text == h.text.removesuffix("\ufffd"), p
        assert r.prompt_token_ids == h.prompt_token_ids
        assert r.usage.prompt_tokens == backend.count_tokens([Message("user", p)]) == len(h.prompt_token_ids)
        assert r.usage.completion_tokens == len(r.choices[0].token_ids)
        assert r.choices[0].logprobs == pytest.approx(h.choices[0].logprobs, abs=2e-3)


def test_streaming_n_seed_stop_and_prefill(backend, server):
    msgs = [Message("user", PROMPTS[0])]
    plain = run(backend.chat(msgs, GenParams(max_tokens=24)))
    streaming = OpenAIBackend([server.url], NAME, stream=True)
    try:
        streamed = run(streaming.chat(msgs, GenParams(max_tokens=24)))
    finally:
        streaming.close()
    assert streamed.text == plain.text and streamed.choices[0].token_ids == plain.choices[0].token_ids
    assert streamed.usage == plain.usage and len(streamed.choices[0].logprobs) == len(plain.choices[0].token_ids)

    sampled = run(backend.chat(msgs, GenParams(max_tokens=12, n=3, temperature=1.0, seed=7)))
    again = run(backend.chat(msgs, GenParams(max_tokens=12, n=3, temperature=1.0, seed=7)))
    assert len(sampled.choices) == 3 and [c.text for c in sampled.choices] == [c.text for c in again.choices]
    assert sampled.usage.completion_tokens == sum(len(c.token_ids) for c in sampled.choices)

    cut = run(backend.chat(msgs, GenParams(max_tokens=24, stop=["France"])))
    assert "France" not in cut.text and cut.finish_reason == "stop"

    prefill = msgs + [Message("assistant", "The capital of France is")]
    cont = run(backend.chat(prefill, GenParams(max_tokens=8)))
    assert "Paris" in cont.text and not cont.text.startswith("The capital")
    assert cont.usage.prompt_tokens == backend.count_tokens(prefill)


def test_on_token_streams_the_same_completion_token_by_token(backend):
    """A caller that wants tokens gets vLLM's SSE deltas as they come, and the same Completion as without."""
    import dataclasses

    msgs = [Message("user", PROMPTS[0])]
    for params in (GenParams(max_tokens=32), GenParams(max_tokens=32, stop=[". "]),
                   GenParams(max_tokens=16, n=3, temperature=1.0, seed=7)):
        pieces: dict[int, list[str]] = {}
        plain = run(backend.chat(msgs, params))
        streamed = run(backend.chat(msgs, dataclasses.replace(
            params, on_token=lambda i, text: pieces.setdefault(i, []).append(text))))
        assert [c.token_ids for c in streamed.choices] == [c.token_ids for c in plain.choices]
        assert [c.text for c in streamed.choices] == [c.text for c in plain.choices]
        assert [c.finish_reason for c in streamed.choices] == [c.finish_reason for c in plain.choices]
        assert streamed.usage == plain.usage and streamed.prompt_token_ids == plain.prompt_token_ids
        for i, choice in enumerate(streamed.choices):
            assert choice.logprobs == pytest.approx(plain.choices[i].logprobs, abs=1e-4)
            assert "".join(pieces[i]) == choice.text
            assert len(pieces[i]) >= len(choice.token_ids) - 2  # one SSE delta per token (the last has no text)


def test_structured_output_is_valid_json_of_the_schema(backend):
    outs = gather(backend, PROMPTS, GenParams(max_tokens=48, json_schema=SCHEMA))
    for out in outs:
        data = json.loads(out.text)
        assert data["route"] in ("direct", "reason", "plan") and 0 <= data["confidence"] <= 1
    picked = gather(backend, PROMPTS[:3], GenParams(max_tokens=8, choices=["yes", "no"]))
    assert all(o.text in ("yes", "no") for o in picked)


def test_tiktoken_estimate_always_covers_the_server_count(backend, server):
    est = OpenAIBackend([server.url], NAME)
    est.counting = "estimate"  # as for a server whose tokenizer we cannot reach
    try:
        for p in PROMPTS + ["x" * 300, "def f(x):\n    return {'a': [1, 2, 3]}\n" * 5, "Příliš žluťoučký kůň"]:
            msgs = [Message("system", "Be brief."), Message("user", p)]
            assert est.count_tokens(msgs) >= backend.count_tokens(msgs)
    finally:
        est.close()


def test_agent_and_cli_run_on_the_server(server, agentrt_home, capsys):
    from agentrt.app.agent import Agent
    from agentrt.app.cli import main

    spec = f"openai:{server.url}#{NAME}"
    result = Agent(policy=load_backend(spec, Settings(), cache=False)).run(PROMPTS[0], budget=300, route="direct")
    assert "Paris" in result.answer and 0 < result.usage.total_tokens <= 300
    assert main(["run", "--policy", spec, "--planner", spec, "--route", "direct", PROMPTS[0]]) == 0
    assert "Paris" in capsys.readouterr().out
    config = agentrt_home.parent / "agentrt.toml"  # the config file picks both backends
    config.write_text(f'[agentrt]\npolicy = "{spec}"\nplanner = "{spec}"\n')
    assert main(["--config", str(config), "run", "--route", "direct", PROMPTS[0]]) == 0
    assert "Paris" in capsys.readouterr().out


def _proxy(upstream: str, fail_first: int = 0) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_http_proxy.py")), str(port),
                             upstream, str(fail_first)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc, f"http://127.0.0.1:{port}/v1"


def test_retries_503_with_backoff(server):
    proc, url = _proxy(server.url.removesuffix("/v1"), fail_first=2)
    try:
        b = OpenAIBackend([url], NAME, backoff_s=0.05, retries=3)
        out = run(b.chat([Message("user", PROMPTS[3])], GenParams(max_tokens=8)))
        assert out.text and [e["event"] for e in out.events] == ["attempt_failed", "attempt_failed", "served"]
        assert "503" in out.events[0]["error"]
        b.close()
    finally:
        proc.kill()
        proc.wait()


def test_endpoint_killed_mid_run_fails_over_and_the_trajectory_says_so(server, agentrt_home):
    from agentrt.app.agent import Agent

    proc, proxy_url = _proxy(server.url.removesuffix("/v1"))
    b = OpenAIBackend([proxy_url, server.url], NAME, cooldown_s=0.5, backoff_s=0.05)
    agent = Agent(policy=b)
    try:
        async def scenario():
            task = asyncio.create_task(agent.arun(PROMPTS[2], budget=400, route="direct"))
            others = [asyncio.create_task(b.chat([Message("user", p)], GenParams(max_tokens=64))) for p in PROMPTS]
            while b.endpoints[0].outstanding == 0:  # the run's call went to the proxy (first, least loaded)
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            proc.kill()  # the endpoint dies with requests in flight
            return await asyncio.wait_for(asyncio.gather(task, *others), timeout=300)

        result, *outs = run(scenario())
        proc.wait()
        assert result.status in ("ok", "truncated") and result.answer
        assert all(o.text for o in outs)
        assert b.endpoints[0].failures >= 1 and b.endpoints[1].served >= 1 + len(PROMPTS)
        (record,) = [r for r in read_trajectories(agentrt_home / "trajectories").records if r.run_id == result.trajectory_id]
        events = [e for s in record.steps if s.get("kind") == "model_call" for e in s.get("backend_events", [])]
        assert events[0]["event"] == "attempt_failed" and events[0]["url"] == proxy_url
        assert events[-1] == {"event": "served", "url": server.url, "attempts": 2}
        # the dead endpoint is benched, not forgotten: after its cool-down it is tried again
        time.sleep(0.6)
        run(b.chat([Message("user", PROMPTS[3])], GenParams(max_tokens=4)))
        assert b.endpoints[0].failures >= 2
    finally:
        proc.kill()
        proc.wait()
        b.close()


class _Garbage(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _reply(self, body: bytes, status: int = 200):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/good/"):
            return self._reply(json.dumps({"data": [{"id": "m"}]}).encode())
        self._reply(b"<html>hello, I am not an API</html>")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._reply(json.dumps({"choices": "nope"}).encode())


def test_bad_inputs_give_one_clear_error(server):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    garbage = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        with pytest.raises(BackendError, match="did not return an OpenAI model list"):
            OpenAIBackend([f"{garbage}/v1"], "m")
        b = OpenAIBackend([f"{garbage}/good/v1"], "m")
        with pytest.raises(BackendError, match="not an OpenAI chat completion"):
            run(b.chat([Message("user", "hi")], GenParams(max_tokens=4)))
        b.close()
    finally:
        httpd.shutdown()
    with pytest.raises(BackendError, match="no endpoint .* is reachable"):
        OpenAIBackend([f"http://127.0.0.1:{free_port()}/v1"], "m")
    with pytest.raises(ConfigError, match=f"not served at .*it serves: {NAME}"):
        OpenAIBackend([server.url], "no-such-model")
    for spec in ["openai:http://127.0.0.1:1/v1", "openai:#m", "openai:ftp://x#m", "openai:http://h/v1#m?nope=1", "vllm:", "gpt4"]:
        with pytest.raises(ConfigError):
            load_backend(spec, Settings())


def test_cli_bad_specs_print_one_line(capsys, tmp_path):
    from agentrt.app.cli import main

    assert main(["run", "--planner", "gpt4", "hi"]) == 2  # checked before any model loads
    assert "bad backend spec 'gpt4'" in capsys.readouterr().err
    config = tmp_path / "bad.toml"
    config.write_text('[agentrt]\npolicy = "vllm"\n')
    assert main(["--config", str(config), "run", "hi"]) == 2
    assert capsys.readouterr().err.count("\n") == 1

    assert main(["run", "--policy", "openai:no-url#m", "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "openai spec" in err
    assert main(["run", "--policy", f"openai:http://127.0.0.1:{free_port()}/v1#m", "hi"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "reachable" in err


def test_server_killed_mid_run_fails_clearly_and_the_trajectory_is_intact(server, agentrt_home):
    """Last in the module: it kills the shared server."""
    from agentrt.app.agent import Agent

    b = OpenAIBackend([server.url], NAME, timeout_s=20, retries=2, backoff_s=0.1, cooldown_s=0.2)
    agent = Agent(policy=b)

    async def scenario():
        task = asyncio.create_task(agent.arun(PROMPTS[2], budget=400, route="direct"))
        while b.endpoints[0].outstanding == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        server.kill()
        return await asyncio.wait_for(task, timeout=120)  # a hang fails here instead of blocking CI

    with pytest.raises(BackendError, match="failed on every endpoint after 3 attempt"):
        run(scenario())
    b.close()
    report = read_trajectories(agentrt_home / "trajectories")
    assert not report.problems
    (record,) = report.records
    assert record.status == "failed" and "BackendError" in record.error and "check that the server is up" in record.error
