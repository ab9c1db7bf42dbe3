"""Start an `agentrt serve` subprocess on a free port for a test module, and stop it by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(argv: list[str], home: Path, env: dict[str, str], *, timeout_s: float = 300,
                   poll_s: float = 0.2, health: str = "/healthz") -> Iterator[str]:
    """Run ``argv + ["--port", P]`` until it answers ``health``; yields its base URL; SIGTERM (then SIGKILL) by PID."""
    port = free_port()
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([*argv, "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {(home / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}{health}", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become healthy")
            time.sleep(poll_s)
        yield base
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # by PID, never by name
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def openai_client(base: str):
    """An ``openai.OpenAI`` client of the server at ``base`` (no retries: a test sees the first answer)."""
    from openai import OpenAI

    return OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=600)


def record_of(home: Path, run_id: str) -> dict:
    """The trajectory record of ``run_id`` in the server home's store."""
    import json

    path = home / "trajectories" / "trajectories.jsonl"
    return next(r for r in map(json.loads, path.read_text().splitlines()) if r["run_id"] == run_id)
