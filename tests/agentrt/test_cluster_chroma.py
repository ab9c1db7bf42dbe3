"""A Chroma server that dies and comes back (as in evals/bench/cluster_bench.py's cluster): the memory client
of a long-lived runtime (a Ray actor's) fails clearly while it is down and works again, with no new client,
once it is back on its port. A real ``chroma run`` on 127.0.0.1, stopped by its process group id."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentrt.backends.vllm_server import free_port
from agentrt.core.errors import BackendError

CHROMA = Path(sys.executable).parent / "chroma"


def _start(path: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([str(CHROMA), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "chroma run exited"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    _stop(proc)
    raise AssertionError("chroma run did not answer its heartbeat")


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    try:
        os.killpg(proc.pid, sig)  # the group this test created
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.fixture
def chroma(tmp_path):
    port = free_port()
    procs = [_start(tmp_path / "db", port)]
    yield port, procs, tmp_path / "db"
    for p in procs:
        if p.poll() is None:
            _stop(p)


def test_the_store_client_works_again_after_the_server_restarts(chroma):
    from memory.chroma import open_store

    port, procs, path = chroma
    url = f"http://127.0.0.1:{port}"
    store = open_store(url, "cluster-restart", create=True)
    store.upsert(["a", "b"], ["alpha", "beta"], embeddings=[[1.0] + [0.0] * 383, [0.0, 1.0] + [0.0] * 382])
    _stop(procs[0], signal.SIGKILL)  # the server dies
    with pytest.raises(BackendError) as e:
        store.count()
    assert url in str(e.value) and "Chroma server is up" in str(e.value) and "re-index" not in str(e.value)
    procs.append(_start(path, port))  # back on its port, same data
    assert store.count() == 2
    assert [h.id for h in store.search_vector([1.0] + [0.0] * 383, k=1)] == ["a"]
