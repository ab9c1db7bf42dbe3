"""What the cluster bench (evals/bench/cluster_bench.py) found, fixed and kept fixed, on real HTTP servers
on 127.0.0.1 (a stdlib OpenAI-shaped server: the control flow under test is the backend's, not a model's).

* A vLLM server SIGKILLed and restarted on its port was left benched by each actor's backend until
  a cool-down that had doubled with every failed try while it was down (up to 120 s): the endpoint
  is now health-checked (``/models``) every ``probe_s`` while benched and is back in use as soon as
  it answers; while it stays unreachable it stays benched, so no real request waits on it (the bench's
  fault runs had every actor's requests try the dead server again after each cool-down).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agentrt.backends.vllm_server import free_port
from agentrt.backends.openai import OpenAIBackend
from agentrt.core.types import GenParams, Message

MODEL = "m"


class _Fake(BaseHTTPRequestHandler):
    """Answers /v1/models and /v1/chat/completions like an OpenAI server; counts the chat requests."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _reply(self, data: dict) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._reply({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.chats += 1
        self._reply({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 1}})


def _serve(port: int = 0) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _Fake)
    httpd.chats = 0
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _ask(b: OpenAIBackend) -> str:
    return b.chat_sync([Message("user", "hello")], GenParams(max_tokens=4)).choices[0].text


def test_a_restarted_endpoint_is_used_again_long_before_its_cool_down_ends():
    dead_port = free_port()
    alive = _serve()
    back = None
    b = OpenAIBackend([f"http://127.0.0.1:{dead_port}/v1", f"http://127.0.0.1:{alive.server_port}/v1"], MODEL,
                      cooldown_s=120, probe_s=0.1, timeout_s=5)
    try:
        dead = b.endpoints[0]
        assert dead.failures == 1 and dead.down_until > time.monotonic() + 90  # benched at set-up, for 2 min
        assert [_ask(b) for _ in range(3)] == ["hi"] * 3 and alive.chats == 3
        back = _serve(dead_port)  # the server comes back on its port
        deadline = time.monotonic() + 60  # a bound for a loaded machine, well below the 120 s cool-down
        while back.chats == 0 and time.monotonic() < deadline:
            _ask(b)
            time.sleep(0.05)
        assert back.chats >= 1, "the restarted endpoint was not used again"
        assert dead.failures == 0 and any(e["event"] == "endpoint_up" for e in b.events)
    finally:
        b.close()
        alive.shutdown()
        if back is not None:
            back.shutdown()


def test_an_endpoint_that_stays_dead_stays_benched_and_takes_no_requests():
    dead_port = free_port()
    alive = _serve()
    # a short cool-down: without the health checks, requests would try the dead endpoint every 0.1 s
    b = OpenAIBackend([f"http://127.0.0.1:{dead_port}/v1", f"http://127.0.0.1:{alive.server_port}/v1"], MODEL,
                      cooldown_s=0.1, probe_s=0.05, timeout_s=5)
    try:
        for _ in range(10):
            assert _ask(b) == "hi"
            time.sleep(0.1)  # health checks run (and fail) meanwhile
        assert alive.chats == 10
        dead = b.endpoints[0]
        assert dead.failures == 1 and dead.served == 0  # only the set-up probe failed on it: no request went there
        assert not [e for e in b.events if e["event"] == "endpoint_up"]
    finally:
        b.close()
        alive.shutdown()
