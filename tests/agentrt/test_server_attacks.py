"""The server as a door an attacker knocks on (issue 35, items 1, 2 and 5 of "what broke").

A real ``agentrt serve`` (a subprocess on the scripted backend, with an API key, its request-read timeout cut
to 2 s so a slow sender is seen closed) gets each hostile request: a router spec naming a server file, a
cross-site browser request (text/plain and form bodies, a foreign ``Origin``, a rebinding ``Host``), huge and
numerous headers before the key, a slow sender, a client that leaves mid-body. Each is a 4xx; no file is
read (a FIFO shows it: a reader blocked in ``open`` would let a writer in); the server's RSS grows by under
50 MB over the whole module; the log holds one line per disconnect and no traceback.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from _servers import running_server

KEY = "sk-test-attacks-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
LAUNCHER = """
import sys
from agentrt.app.server import guard
guard.GuardedH11.read_timeout = 2.0  # a slow sender is cut after 2 s here (30 s in production)
from agentrt.app.cli import main
sys.exit(main())
"""

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("attacks-home")
    launcher = home / "launch.py"
    launcher.write_text(LAUNCHER)
    env = {k: v for k, v in os.environ.items() if k != "AGENTRT_API_KEY"}
    env["AGENTRT_HOME"] = str(home)
    argv = [sys.executable, str(launcher), "serve", "--policy", "scripted:a fine answer", "--api-key", KEY]
    with running_server(argv, home, env, timeout_s=120) as base:
        port = int(base.rsplit(":", 1)[1])
        proc = next(p for p in psutil.Process().children() if str(port) in " ".join(p.cmdline()))
        rss_before = proc.memory_info().rss
        yield base, port, home, proc
        grown = proc.memory_info().rss - rss_before
        assert grown < 50 * 2**20, f"the server grew by {grown / 2**20:.0f} MB over the hostile requests"


def _chat(router: str | None = None, **extra) -> dict:
    body = {"messages": [{"role": "user", "content": "hello"}], "route": "direct", **extra}
    if router is not None:
        body["router"] = router
    return body


def _error(r: httpx.Response) -> dict:
    assert r.headers["content-type"].startswith("application/json"), r.text[:300]
    return r.json()["error"]


def _log(home: Path) -> str:
    return (home / "server.log").read_text()


# -- item 1: a request names a file for the server to read ----------------------------------------------------

def test_a_router_naming_a_fifo_is_400_and_the_fifo_is_never_opened(server, tmp_path):
    base, _, _, _ = server
    fifo = tmp_path / "router.json"
    os.mkfifo(fifo)
    r = httpx.post(f"{base}/v1/chat/completions", json=_chat(router=f"learned:{fifo}"), headers=AUTH, timeout=30)
    assert r.status_code == 400 and _error(r)["param"] == "router"
    assert "set by the server's operator" in _error(r)["message"]
    # a server blocked in open(fifo) would be a reader: a non-blocking writer would then get in
    with pytest.raises(OSError) as no_reader:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert no_reader.value.errno == 6  # ENXIO: nobody has it open for reading
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200  # the event loop is free


@pytest.mark.parametrize("spec", ["learned:/dev/zero", "learned:/etc", "learned:/etc/passwd",
                                  "learned:/no/such/router.json", "learned:router.json", "learned:r001/../../x",
                                  "learned:shipped:../../etc/passwd", "cascade:/etc/passwd", "/etc/passwd",
                                  "self:/etc", "self:policy"])
def test_every_file_naming_router_spec_is_the_same_400(server, spec):
    base, _, _, _ = server
    r = httpx.post(f"{base}/v1/chat/completions", json=_chat(router=spec), headers=AUTH, timeout=30)
    assert r.status_code == 400, r.text[:300]
    error = _error(r)
    # the same words whatever the path: the answer tells nothing of what exists on the server
    assert error["param"] == "router" and error["message"].startswith("a request may name one of these routers")
    assert spec not in error["message"]


def test_allowed_router_specs_still_run(server):
    base, _, _, _ = server
    for spec in ("rules", "fixed:direct", "auto"):
        body = {"messages": [{"role": "user", "content": "hello"}], "router": spec}
        r = httpx.post(f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=60)
        assert r.status_code == 200, (spec, r.text[:300])
        assert r.json()["choices"][0]["message"]["content"] == "a fine answer"


def test_an_unknown_registry_version_is_400_from_the_registry(server):
    base, _, _, _ = server
    body = {"messages": [{"role": "user", "content": "hello"}], "router": "learned:r999"}  # no route: it is asked
    r = httpx.post(f"{base}/v1/chat/completions", json=body, headers=AUTH, timeout=30)
    assert r.status_code == 400 and "no router version 'r999'" in _error(r)["message"]


# -- item 2: a browser is not a client by accident --------------------------------------------------------------

@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; "
                                          "boundary=x", None])
def test_a_non_json_body_is_415(server, content_type):
    base, _, _, _ = server
    headers = dict(AUTH, **({"Content-Type": content_type} if content_type else {}))
    r = httpx.post(f"{base}/v1/chat/completions", content=json.dumps(_chat()).encode(), headers=headers, timeout=30)
    assert r.status_code == 415 and _error(r)["param"] == "content-type"


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://127.0.0.1.evil.example:8000",
                                    "file://"])
def test_a_foreign_origin_is_403_and_gets_no_cors_header(server, origin):
    base, _, _, _ = server
    r = httpx.post(f"{base}/v1/chat/completions", json=_chat(), headers=dict(AUTH, Origin=origin), timeout=30)
    assert r.status_code == 403 and _error(r)["code"] == "origin_not_allowed"
    preflight = httpx.options(f"{base}/v1/chat/completions", timeout=30, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 403
    assert not any(h.lower().startswith("access-control-") for h in (*r.headers, *preflight.headers))


def test_a_keyless_request_with_a_text_plain_body_and_a_foreign_origin_runs_nothing(server):
    """The cross-site attack of the issue: a form-like POST from a page, without the key."""
    base, _, home, _ = server
    before = (home / "trajectories" / "trajectories.jsonl").read_text().count("\n") \
        if (home / "trajectories" / "trajectories.jsonl").exists() else 0
    r = httpx.post(f"{base}/v1/chat/completions", content=json.dumps(_chat()), timeout=30,
                   headers={"Content-Type": "text/plain", "Origin": "http://evil.example"})
    assert 400 <= r.status_code < 500
    after = (home / "trajectories" / "trajectories.jsonl").read_text().count("\n") \
        if (home / "trajectories" / "trajectories.jsonl").exists() else 0
    assert after == before


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.nip.io:{port}", "10.1.2.3"])
def test_a_rebinding_host_is_403(server, host):
    base, port, _, _ = server
    r = httpx.post(f"{base}/v1/chat/completions", json=_chat(), timeout=30,
                   headers=dict(AUTH, Host=host.format(port=port)))
    assert r.status_code == 403 and _error(r)["code"] == "host_not_allowed"


def test_a_page_on_loopback_and_the_loopback_names_are_served(server):
    base, port, _, _ = server
    for headers in ({"Host": f"localhost:{port}"}, {"Origin": f"http://localhost:{port}"},
                    {"Host": f"[::1]:{port}", "Origin": f"http://127.0.0.1:{port}"}):
        r = httpx.post(f"{base}/v1/chat/completions", json=_chat(), headers=dict(AUTH, **headers), timeout=60)
        assert r.status_code == 200, (headers, r.text[:300])


# -- item 5: headers before the key, slow senders, disconnects --------------------------------------------------

def _raw(port: int, data: bytes, *, read: bool = True) -> bytes:
    """Send ``data`` on a fresh connection; the server's reply (until it closes or 10 s pass)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
        except OSError:  # the server closed on us mid-send: what it answered first is still readable
            pass
        if not read:
            return b""
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass
        return b"".join(chunks)


def test_a_16kb_header_and_101_headers_are_refused(server):
    base, port, _, _ = server
    big = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * (17 * 1024) + b"\r\n\r\n"
    assert _raw(port, big).startswith(b"HTTP/1.1 431")  # a head read in one piece is measured by the app
    dribbled = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # one read at a time: h11 cuts it off
        try:
            for i in range(0, len(big), 1024):
                s.sendall(big[i:i + 1024])
                s.recv(0)
        except OSError:
            pass
        try:
            dribbled = s.recv(65536)
        except OSError:
            pass
    assert dribbled.startswith(b"HTTP/1.1 4")
    many = httpx.get(f"{base}/v1/models", headers={**AUTH, **{f"X-H{i}": "1" for i in range(101)}}, timeout=30)
    assert many.status_code == 431
    fine = httpx.get(f"{base}/v1/models", headers={**AUTH, **{f"X-H{i}": "1" for i in range(90)}}, timeout=30)
    assert fine.status_code == 200


def test_huge_unauthenticated_headers_are_cut_off_early(server):
    """Four 100 MB headers without the key: each connection is refused after 16 KB, so the server holds none."""
    _, port, _, proc = server
    before = proc.memory_info().rss
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
    for _ in range(4):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(head)
            sent = 0
            try:
                while sent < 100 * 2**20:
                    s.sendall(b"a" * 2**20)
                    sent += 2**20
            except OSError:
                pass
        assert sent < 100 * 2**20  # the server hung up long before the end of the header
    assert proc.memory_info().rss - before < 50 * 2**20


def test_the_key_is_checked_before_the_body_is_read(server):
    """A request that declares 100 MB and sends only its head is answered 401 at once."""
    _, port, _, _ = server
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 104857600\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 401")


def test_a_slow_sender_and_an_idle_connection_are_closed(server):
    base, port, home, _ = server
    for data in (b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz"):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(data)
            assert s.recv(65536) == b""  # closed by the server (the socket timeout would raise instead)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\"").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)  # the body never comes
        reply = s.recv(65536)
    assert reply == b"" or reply.startswith(b"HTTP/1.1 4")
    assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
    assert "closed a connection that sent no complete request" in _log(home)


def test_a_client_leaving_mid_body_is_one_log_line(server):
    base, port, home, _ = server
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\": [").encode()
    line = "client disconnected before sending the whole request (POST /v1/chat/completions)"
    before = _log(home).count(line)
    _raw(port, head, read=False)
    for _ in range(100):  # the server notices the close on its next read
        if _log(home).count(line) > before:
            break
        httpx.get(f"{base}/healthz", timeout=10)
    log = _log(home)
    assert log.count(line) == before + 1
    assert "Traceback" not in log


def test_cors_is_on_only_for_the_allowed_origins(agentrt_home):
    """``--allowed-origins`` (here through ``create_app``): those pages get CORS answers, others still a 403."""
    from fastapi.testclient import TestClient

    from agentrt import Agent
    from agentrt.app.server import create_app
    from agentrt.backends.scripted import ScriptedBackend

    app = create_app(Agent(policy=ScriptedBackend(["a fine answer"])), host="127.0.0.1",
                     allowed_origins=["https://app.example"])
    client = TestClient(app, base_url="http://127.0.0.1:8000")
    preflight = client.options("/v1/chat/completions", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    r = client.post("/v1/chat/completions", json=_chat(), headers={"Origin": "https://app.example"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    other = client.post("/v1/chat/completions", json=_chat(), headers={"Origin": "https://other.example"})
    assert other.status_code == 403 and "access-control-allow-origin" not in other.headers
    rebound = client.post("/v1/chat/completions", json=_chat(), headers={"Host": "evil.example"})
    assert rebound.status_code == 403


def test_a_registry_version_is_never_read_from_the_working_directory(tmp_path, monkeypatch):
    """``learned:r001`` names the registry's r001 even where the server's working directory holds a file so
    named: the file is never opened (it is a FIFO: an open would block)."""
    from agentrt.core.config import Settings
    from agentrt.core.errors import InputError
    from agentrt.router import make_router

    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "r001")
    with pytest.raises(InputError, match="no router version 'r001'"):
        make_router("learned:r001", Settings(home=str(tmp_path / "home")))
