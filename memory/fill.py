"""The fill record of an indexing run: while `memory.indexer.index_corpus` embeds, a small JSON file
beside the BM25 cache (``<name>.fill.json``: pid, host, items before, new items) says vectors are still
coming, and ``<name>.pending.json`` holds the new chunks' texts so BM25 hits can be shown before Chroma
has them. A record whose process is gone (same host) is ignored: the next search rebuilds BM25 from
what the store holds. Stdlib only; ``corpus`` is anything with ``name`` and ``bm25_path``.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any


def fill_file(corpus: Any) -> Path | None:
    """Where the fill record of ``corpus`` lives (None for an ephemeral store: kept on the object).
    The new chunks' texts sit beside it in ``<name>.pending.json`` (read only for hits that need them)."""
    d = corpus.bm25_path
    return None if d is None else d.parent / f"{corpus.name}.fill.json"


def read_fill(corpus: Any) -> dict[str, Any] | None:
    """The fill record of an indexing run still in progress, or None (none, or its process is gone)."""
    path = fill_file(corpus)
    if path is None:
        return getattr(corpus, "_fill", None)
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if rec.get("host") == socket.gethostname() and not _alive(int(rec.get("pid", 0))):
        return None  # the indexer died: the BM25 cache is rebuilt from what the store holds
    return rec


def read_pending(corpus: Any) -> dict[str, Any]:
    """``{id: [title, text, metadata]}`` of the chunks the running indexer announced."""
    path = fill_file(corpus)
    if path is None:
        return (getattr(corpus, "_fill", None) or {}).get("pending", {})
    try:
        return json.loads(path.with_name(f"{corpus.name}.pending.json").read_text())
    except (OSError, ValueError):
        return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid > 0


def write_fill(corpus: Any, rec: dict[str, Any] | None, pending: dict[str, Any] | None = None) -> None:
    path = fill_file(corpus)
    if path is None:
        corpus._fill = None if rec is None else {**rec, "pending": pending or {}}
        return
    side = path.with_name(f"{corpus.name}.pending.json")
    if rec is None:
        path.unlink(missing_ok=True)  # the record first: without it nobody reads the texts
        side.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, data in ((side, pending or {}), (path, rec)):  # texts first: the record announces them
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, target)
