"""Fixtures for the memory tests: the three real stores (embedded Chroma, a Chroma server started
here and stopped by PID, in-process ephemeral) and a small real corpus (a few hundred HotpotQA
paragraphs plus planted passages)."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

_names = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory):
    """A real `chroma run` on a free port; yields its URL; stopped by PID at the end."""
    import httpx

    path = tmp_path_factory.mktemp("chroma-server")
    port = _free_port()
    exe = Path(sys.executable).with_name("chroma")
    log = open(path / "server.log", "wb")
    proc = subprocess.Popen(
        [str(exe), "run", "--path", str(path / "data"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"chroma server exited with {proc.returncode}: {(path / 'server.log').read_text()[-500:]}")
        try:
            if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            raise RuntimeError("chroma server did not answer within 60 s")
        time.sleep(0.2)
    yield url
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="session")
def embedded_store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chroma-embedded")


@pytest.fixture(params=["embedded", "server", "ephemeral"])
def store(request: pytest.FixtureRequest, embedded_store_dir: Path):
    """A fresh collection on each kind of store (the conformance suite runs on all three)."""
    from memory.chroma import EPHEMERAL, open_store

    if request.param == "embedded":
        location = str(embedded_store_dir)
    elif request.param == "server":
        location = request.getfixturevalue("chroma_server")
    else:
        location = EPHEMERAL
    return open_store(location, f"conf-{request.param}-{next(_names)}")


@pytest.fixture
def mem_store():
    """A fresh in-process store for unit tests of the memory layers."""
    from memory.chroma import EPHEMERAL, open_store

    return open_store(EPHEMERAL, f"unit-{next(_names)}")


RARE = (
    "The committee met on Tuesday to discuss the budget for the new library wing, the parking rules and "
    "the summer reading schedule; the minutes were filed as 7QX9ZK."
)
DECOYS = [
    "Ticket 9XZ4QP was closed.", "Order AB12CD shipped; tracking KQ7Z3X.", "Serial number ZX81-QQ7.",
    "Part 7QA-X9K1 is out of stock.", "Voucher code QZ9X7K expires soon.",
]
PARAPHRASE = "The feline dozed on the rug for the whole afternoon."


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory):
    """~120 real HotpotQA paragraphs, two planted passages and a few short code-like decoys, in an embedded store (built once)."""
    from memory.corpus import open_corpus
    from memory.ingest import hotpotqa_chunks, ingest, make_chunk

    path = tmp_path_factory.mktemp("corpus") / "memory"
    corpus = open_corpus(path, "small", create=True)
    chunks = hotpotqa_chunks(limit=12)
    chunks += [make_chunk("Committee minutes", RARE, "planted"), make_chunk("Pets", PARAPHRASE, "planted")]
    # Decoys: short texts full of codes sit closer to a bare code query in vector space than RARE
    # does, while BM25 matches only the exact token.
    chunks += [make_chunk("Codes", t, "decoy") for t in DECOYS]
    ingest(corpus.store, chunks)
    corpus.invalidate()
    return corpus
