"""Bodies and work without bounds on the main server (issue 56, item 4), each against a real ``agentrt serve``.

Two servers on 127.0.0.1, started here and stopped by PID:

* the scripted backend (fast, predictable; a question holding "slow" makes its model call wait two minutes, and
  each call reports the decode time of a CPU: 0.1 s a token for one row, each row of an n-row batch 2n times
  slower), with an API key: every endpoint's body cap, a client that leaves cancels its run, SIGTERM with a run
  in flight, the Responses store's size, and the decode-speed figure behind ``max_latency_s``;
* the embedded model (a real tokenizer and batcher): the event loop stays free during a 1 MB ``/tokenize`` and a
  30k-message chat (``/healthz`` answers in < 0.2 s, the issue's bound), and ``/v1/completions`` without
  ``--max-budget`` refuses n=16 x 8k tokens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from _servers import free_port, running_server

KEY = "sk-test-bounds-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
REPLY = "one two three four five six seven eight"  # 8 tokens: 0.8 s of simulated decoding, 10 tokens/s
LAUNCHER = """
import asyncio, sys
import agentrt.backends.scripted as scripted

class Bounded(scripted.ScriptedBackend):
    async def chat(self, messages, params):
        if "slow" in messages[-1].content:
            await asyncio.sleep(120)
        done = await super().chat(messages, params)
        self.calls.clear()  # the scripted backend keeps every call's messages: a server must not
        longest = max((len(c.token_ids) for c in done.choices), default=0)
        # a CPU's decoding: 0.1 s a token for one row; an n-row batch decodes each row 2n times slower
        done.latency_s = longest * 0.1 * (1 if params.n == 1 else 2 * params.n)
        return done

scripted.from_spec = lambda arg, settings: Bounded([arg], context_length=10_000_000)
from agentrt.app.cli import main
sys.exit(main())
"""
BODY_PATHS = ["/v1/feedback", "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings",
              "/tokenize", "/detokenize"]

pytestmark = pytest.mark.slow


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_API_KEY"}
    env["AGENTRT_HOME"] = str(home)
    return env


def _scripted_argv(home: Path) -> list[str]:
    launcher = home / "launch.py"
    launcher.write_text(LAUNCHER)
    return [sys.executable, str(launcher), "serve", "--policy", f"scripted:{REPLY}", "--api-key", KEY]


def _proc_of(port: int) -> psutil.Process:
    return next(p for p in psutil.Process().children() if str(port) in " ".join(p.cmdline()))


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    home = tmp_path_factory.mktemp("bounds-home")
    with running_server(_scripted_argv(home), home, _env(home), timeout_s=120) as base:
        port = int(base.rsplit(":", 1)[1])
        yield base, port, home, _proc_of(port)


def _metric(base: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{base}/metrics", headers=AUTH, timeout=30).text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def _records(home: Path) -> list[dict]:
    path = home / "trajectories" / "trajectories.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _post_head(port: int, path: str, body: dict, length: int | None = None) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length or len(data)}\r\n\r\n").encode() + data


def _reply(s: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := s.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks):
                break
    except OSError:
        pass
    return b"".join(chunks)


# -- every endpoint obeys the body cap ---------------------------------------------------------------------------

def test_a_300mb_declared_body_is_413_before_a_byte_is_read_on_every_endpoint(scripted):
    _, port, _, _ = scripted
    for path in BODY_PATHS:
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
                "Content-Type: application/json\r\nContent-Length: 314572800\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(head + b'{"id": "')  # the rest never comes: the answer must not wait for it
            reply = _reply(s)
        assert reply.startswith(b"HTTP/1.1 413"), (path, reply[:200])


@pytest.mark.parametrize("path", ["/v1/feedback", "/v1/chat/completions", "/tokenize"])
def test_a_streamed_body_over_the_cap_is_413_and_not_read_whole(scripted, path):
    """Chunked, so no length is declared: the server stops reading at the cap (1 MiB), not at 300 MB."""
    _, port, _, proc = scripted
    before = proc.memory_info().rss
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    chunk = b"%x\r\n" % 2**20 + b" " * 2**20 + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(head)
        try:
            while sent < 300 * 2**20:
                s.sendall(chunk)
                sent += 2**20
        except OSError:  # the server answered and closed
            pass
        reply = _reply(s)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert sent < 100 * 2**20, f"the server took {sent / 2**20:.0f} MB of a body over its 1 MiB cap"
    assert proc.memory_info().rss - before < 50 * 2**20


# -- a client that leaves cancels its run -----------------------------------------------------------------------

def test_a_client_that_leaves_a_non_streamed_chat_cancels_its_run(scripted):
    base, port, home, _ = scripted
    path = "/v1/chat/completions"
    cancelled = _metric(base, "agentrt_runs_total", status="cancelled")
    body = {"messages": [{"role": "user", "content": "a slow question"}], "route": "direct"}
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(_post_head(port, path, body))
        deadline = time.monotonic() + 30
        while _metric(base, "agentrt_http_requests_in_progress", endpoint=path) < 1:
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.1)
    # the client is gone: within seconds the request is over and its run saved as cancelled (not 2 minutes on)
    deadline = time.monotonic() + 15
    while _metric(base, "agentrt_http_requests_in_progress", endpoint=path) > 0:
        assert time.monotonic() < deadline, "the run went on after its client left"
        time.sleep(0.2)
    assert _metric(base, "agentrt_runs_total", status="cancelled") == cancelled + 1
    assert any(r["question"] == "a slow question" and r["status"] == "cancelled" for r in _records(home))
    assert httpx.post(f"{base}{path}", json={"messages": [{"role": "user", "content": "hi"}]}, headers=AUTH,
                      timeout=30).status_code == 200  # its concurrency slot was given back


# -- the decode-speed figure behind max_latency_s ---------------------------------------------------------------

def test_one_clients_n16_request_does_not_refuse_max_latency_for_everyone(scripted):
    """At 10 tokens/s, max_latency_s 1.7 leaves 17 tokens (a run needs 16): accepted before and after an n=16
    request, whose batch decoded each row 32 times slower."""
    base, _, _, _ = scripted
    url = f"{base}/v1/chat/completions"

    def ask(**extra) -> httpx.Response:
        body = {"messages": [{"role": "user", "content": "hello"}], "route": "direct", **extra}
        return httpx.post(url, json=body, headers=AUTH, timeout=60)

    assert ask().status_code == 200  # measured: 8 tokens in 0.8 s
    before = ask(max_latency_s=1.7)
    assert before.status_code == 200, before.text[:300]
    many = ask(n=16, max_tokens=8)
    assert many.status_code == 200 and len(many.json()["choices"]) == 16
    after = ask(max_latency_s=1.7)
    assert after.status_code == 200, after.text[:300]
    assert "measured 10.0 tokens/s" in " ".join(after.json()["agentrt"]["warnings"])


# -- the Responses store's size ---------------------------------------------------------------------------------

def test_the_responses_store_is_bounded_in_bytes_and_drops_the_oldest(scripted):
    """40 stored responses of 10k short messages each (~0.4 MB of JSON, ~3 MB as Python objects): the store
    keeps ~8 MiB of them, the oldest dropped, and the server's RSS stays within 64 MB of where it was."""
    base, _, _, proc = scripted
    items = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(10_001)]
    before = proc.memory_info().rss
    ids = []
    with httpx.Client(headers=AUTH, timeout=120) as client:
        for _ in range(40):
            r = client.post(f"{base}/v1/responses", json={"input": items, "route": "direct"})
            assert r.status_code == 200, r.text[:300]
            ids.append(r.json()["id"])
        grown = proc.memory_info().rss - before
        assert client.get(f"{base}/v1/responses/{ids[-1]}").status_code == 200
        assert client.get(f"{base}/v1/responses/{ids[0]}").status_code == 404  # dropped: the store was full
    assert grown < 64 * 2**20, f"the server grew by {grown / 2**20:.0f} MB holding stored responses"


# -- SIGTERM with a run in flight -------------------------------------------------------------------------------

def test_sigterm_stops_the_server_within_5s_with_a_run_in_flight(tmp_path):
    home = tmp_path
    port = free_port()
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([*_scripted_argv(home), "--port", str(port)], env=_env(home), stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (home / "server.log").read_text()[-2000:]
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        body = {"messages": [{"role": "user", "content": "a slow question"}], "route": "direct"}
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(_post_head(port, "/v1/chat/completions", body))
            deadline = time.monotonic() + 30
            while _metric(base, "agentrt_http_requests_in_progress", endpoint="/v1/chat/completions") < 1:
                assert time.monotonic() < deadline, "the run never started"
                time.sleep(0.1)
            started = time.monotonic()
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            took = time.monotonic() - started
        assert proc.returncode is not None and took <= 5, f"SIGTERM took {took:.1f} s to stop the server"
        assert any(r["question"] == "a slow question" and r["status"] == "cancelled" for r in _records(home))
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


# -- the embedded model: heavy work leaves the event loop; completions are bounded --------------------------------

@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    home = tmp_path_factory.mktemp("bounds-embedded-home")
    agentrt = str(Path(sys.executable).parent / "agentrt")
    argv = [agentrt, "serve", "--api-key", KEY, "--max-body", str(4 * 2**20)]
    with running_server(argv, home, _env(home), poll_s=0.5) as base:
        yield base, home


def _healthz_during(base: str, path: str, body: dict) -> tuple[list[float], httpx.Response]:
    """The seconds each ``/healthz`` started while ``body`` was being served at ``path`` took, and its answer."""
    answer: list[httpx.Response] = []
    heavy = threading.Thread(target=lambda: answer.append(
        httpx.post(f"{base}{path}", json=body, headers=AUTH, timeout=300)))
    with httpx.Client(timeout=60) as client:
        client.get(f"{base}/healthz")  # a warm connection: the figure is the server's, not the handshake's
        heavy.start()
        time.sleep(0.3)  # the body is on its way (1 MB over loopback) and being worked on
        took = []
        while heavy.is_alive():
            started = time.perf_counter()
            assert client.get(f"{base}/healthz").status_code == 200
            took.append(time.perf_counter() - started)
            time.sleep(0.05)
    heavy.join()
    return took, answer[0]


def test_healthz_answers_during_a_1mb_tokenize(embedded):
    embedded, _ = embedded
    text = ("The quick brown fox jumps over the lazy dog. " * 24000)[:1_000_000]
    took, answer = _healthz_during(embedded, "/tokenize", {"prompt": text})
    assert answer.status_code == 200 and answer.json()["count"] > 100_000
    assert len(took) >= 3 and statistics.median(took) < 0.2, f"/healthz took {took} during a 1 MB /tokenize"


def test_healthz_answers_during_a_30k_message_chat(embedded):
    embedded, _ = embedded
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"} for i in range(30_001)]
    took, answer = _healthz_during(embedded, "/v1/chat/completions", {"messages": messages})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "context_length_exceeded"
    assert len(took) >= 3 and statistics.median(took) < 0.2, f"/healthz took {took} during a 30k-message chat"


def test_a_client_that_leaves_a_non_streamed_completion_cancels_it(embedded):
    base, home = embedded
    path = "/v1/completions"
    body = {"prompt": "Once upon a time", "max_tokens": 4000, "temperature": 1.0, "seed": 7}
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=20) as s:
        s.sendall(_post_head(0, path, body))
        deadline = time.monotonic() + 60
        while _metric(base, "agentrt_http_requests_in_progress", endpoint=path) < 1:
            assert time.monotonic() < deadline, "the completion never started"
            time.sleep(0.1)
        time.sleep(1)  # decoding
    deadline = time.monotonic() + 15
    while _metric(base, "agentrt_http_requests_in_progress", endpoint=path) > 0:
        assert time.monotonic() < deadline, "the completion went on after its client left"
        time.sleep(0.2)
    record = next(r for r in reversed(_records(home)) if r.get("metadata", {}).get("endpoint") == "completions")
    assert record["status"] == "cancelled" and record["error"] == "the client disconnected"


def test_completions_without_max_budget_refuse_n16_of_8k_tokens(embedded):
    """Run last in this module: on a server without the default cap the request would decode 128k tokens."""
    embedded, _ = embedded
    body = {"prompt": "Once upon a time", "n": 16, "max_tokens": 8000}
    r = httpx.post(f"{embedded}/v1/completions", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["param"] == "max_tokens" and "the default cap of 16384 tokens per request" in error["message"]
    small = httpx.post(f"{embedded}/v1/completions", json={"prompt": "Once upon a time", "n": 2, "max_tokens": 4},
                       headers=AUTH, timeout=300)
    assert small.status_code == 200 and len(small.json()["choices"]) == 2
