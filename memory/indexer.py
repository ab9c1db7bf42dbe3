"""Fast indexing: BM25 first (searchable at once), then vectors in large length-bucketed windows.

    report = index_corpus(corpus, chunks, threads=0, int8=False, progress=lambda n: ...)

1. Chunks already stored (by content-hash id) or repeated are skipped.
2. The BM25 index over the store's items plus the new chunks is built and saved, together with a fill
   record (``<bm25 dir>/<name>.fill.json``: the new chunks' texts, how many the store held before, the
   indexing process). From here on ``Corpus.search`` finds every new chunk by BM25; hybrid search fuses
   the vectors already written and says how full they are (``Hits.vector_fill``, a log line).
3. The new chunks are embedded ``window`` at a time (the embedder sorts each window by token count so a
   batch pads little, and runs ``threads`` batches at once) and written to Chroma in one call per window
   (Chroma's max batch is 5461). A kill loses at most one window; a rerun continues where it stopped.
4. The fill record is removed: vectors are complete.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from memory.fill import write_fill
from memory.ingest import Chunk, IndexReport

WINDOW = 1024  # chunks per embed + write step: long enough to bucket well, short enough to show progress


def index_corpus(
    corpus: Any,
    chunks: Iterable[Chunk],
    *,
    threads: int = 0,
    int8: bool = False,
    window: int = WINDOW,
    progress: Callable[[int], None] | None = None,
    embedder: Any = None,
) -> IndexReport:
    """Index ``chunks`` into ``corpus`` (a memory.corpus.Corpus) as described in the module docstring.

    ``threads``: embedding batches run at once (0 = all cores). ``int8``: the quantized embedder.
    ``progress(n)`` is called with the number of chunks handled (skipped ones at once, then per window).
    """
    from agentrt.core.config import all_cores
    from memory.embeddings import get_embedder

    store = corpus.store
    report = IndexReport(store.name)
    t0 = time.perf_counter()
    unique: dict[str, Chunk] = {}
    for c in chunks:
        report.chunks_seen += 1
        if c.id in unique:
            report.duplicates += 1  # the same title+text twice: stored once, counted here
        else:
            unique[c.id] = c
    have = set(store.existing_ids(list(unique)))
    todo = [c for i, c in unique.items() if i not in have]
    report.skipped_existing = len(have)
    if progress and report.chunks_seen - len(todo):
        progress(report.chunks_seen - len(todo))
    if not todo:
        report.seconds = time.perf_counter() - t0
        return report
    t = time.perf_counter()
    before = store.count()
    rec = {"pid": os.getpid(), "host": socket.gethostname(), "before": before, "total": len(todo), "started": time.time()}
    try:
        # The record first: a search that runs while BM25 is being built knows not to save a cache
        # without the new chunks.
        write_fill(corpus, rec, {c.id: [c.title, c.text, _meta(c)] for c in todo})
        corpus.begin_fill([(c.id, c.embed_text()) for c in todo])
        report.bm25_seconds = time.perf_counter() - t
        # Loaded after BM25 is up: the first int8 run on a machine builds the model (a minute).
        embedder = embedder or get_embedder(int8=int8, threads=threads or all_cores())
        for s in range(0, len(todo), window):
            part = todo[s : s + window]
            t = time.perf_counter()
            vecs = embedder.embed_array([c.embed_text() for c in part])
            report.embed_seconds += time.perf_counter() - t
            t = time.perf_counter()
            store.upsert([c.id for c in part], [c.text for c in part], [_meta(c) for c in part], embeddings=vecs)
            report.store_seconds += time.perf_counter() - t
            report.added += len(part)
            if progress:
                progress(len(part))
    finally:
        # Done or failed, vectors stop filling: a complete BM25 cache matches the store's count and
        # stays; after a failure it does not, and the next search rebuilds it from the store.
        write_fill(corpus, None)
        corpus.invalidate()
    report.seconds = time.perf_counter() - t0
    return report


def _meta(c: Chunk) -> dict[str, Any]:
    return {"title": c.title, "source": c.source, **c.metadata}
