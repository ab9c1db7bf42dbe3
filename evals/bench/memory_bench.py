"""Memory benchmark (not a test): retrieval quality and store speed on the pooled HotpotQA corpus.

    python -m evals.bench.memory_bench [--questions 500] [--store DIR] [--skip-store]

1. recall@10 of the gold supporting paragraphs, BM25 vs vector vs hybrid (RRF), for the first N
   questions whose 10 context paragraphs are all in the index. The index is the one
   `agentrt index --hotpotqa` builds (resumable; cached under $AGENTRT_HOME/memory): if it holds only
   part of the corpus, the table says how many paragraphs it searched.
2. Store speed on all pooled paragraphs (73,700 -> 66,635 unique) with precomputed vectors (seeded random
   unit vectors: this times the store, not the model): ingest chunks/s, query p50/p95 store-only,
   end-to-end query p50/p95 (MiniLM embedding + store), disk size; peak RSS of the whole run.
   Targets: end-to-end p50 <= 30 ms, store-only p50 <= 5 ms.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

from memory.chroma import drop_collection, list_collections, open_store
from memory.corpus import default_location, open_corpus
from memory.embeddings import get_embedder
from memory.ingest import hotpotqa_chunks, load_hotpotqa, make_chunk

from evals.bench.common import parser, results_file


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def recall_section(location: str, name: str, n_questions: int, k: int) -> dict:
    corpus = open_corpus(location, name)
    questions = load_hotpotqa()
    # Questions whose whole context is indexed (the index may be partial while it is being built).
    all_ids: list[list[str]] = [[make_chunk(t, "".join(s).strip(), "").id for t, s in q["context"]] for q in questions]
    present: set[str] = set()
    flat = sorted({i for ids in all_ids[: n_questions * 3] for i in ids})
    present.update(corpus.store.existing_ids(flat))
    chosen = [(q, ids) for q, ids in zip(questions, all_ids, strict=True) if all(i in present for i in ids)][:n_questions]
    t0 = time.perf_counter()
    corpus.bm25()
    bm25_build = time.perf_counter() - t0
    modes = ("bm25", "vector", "hybrid")
    found = {m: 0 for m in modes}
    both = {m: 0 for m in modes}
    lat = {m: [] for m in modes}
    gold_total = 0
    for q, ids in chosen:
        gold_titles = {t for t, _ in q["supporting_facts"]}
        gold = {i for (t, _), i in zip(q["context"], ids, strict=True) if t in gold_titles}
        gold_total += len(gold)
        for m in modes:
            t = time.perf_counter()
            hits = corpus.search(q["question"], k=k, mode=m)
            lat[m].append((time.perf_counter() - t) * 1000)
            got = gold & {h.id for h in hits}
            found[m] += len(got)
            both[m] += got == gold
    n = max(len(chosen), 1)
    return {
        "questions": len(chosen), "corpus_chunks": corpus.count(), "k": k, "bm25_build_s": round(bm25_build, 1),
        **{f"recall@{k}_{m}": round(found[m] / max(gold_total, 1), 3) for m in modes},
        **{f"both_gold@{k}_{m}": round(both[m] / n, 3) for m in modes},
        **{f"query_ms_p50_{m}": round(statistics.median(lat[m]), 1) for m in modes if lat[m]},
    }


def store_section(location: str, n_queries: int, limit: int | None, reuse: bool) -> dict:
    import numpy as np

    chunks = hotpotqa_chunks()[:limit]
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((len(chunks), 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    name = "bench-store-speed"
    ingest: dict = {}
    if reuse and name in list_collections(location) and open_store(location, name).count() == len(chunks):
        store = open_store(location, name)  # queries only: the ingest figures of the run that built it stay
    else:
        drop_collection(location, name)
        store = open_store(location, name)
        t0 = time.perf_counter()
        step = 5000
        for s in range(0, len(chunks), step):
            part = chunks[s : s + step]
            store.upsert([c.id for c in part], [c.text for c in part], [{"title": c.title} for c in part],
                         embeddings=vecs[s : s + step])
        ingest_s = time.perf_counter() - t0
        ingest = {"ingest_chunks_per_s": round(len(chunks) / ingest_s), "ingest_s": round(ingest_s, 1)}
    qv = rng.standard_normal((n_queries, 384)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    store.search_vector(qv[0], 10)  # warm
    store_ms = []
    for v in qv:
        t = time.perf_counter()
        store.search_vector(v, 10)
        store_ms.append((time.perf_counter() - t) * 1000)
    embedder = get_embedder()
    questions = [q["question"] for q in load_hotpotqa()[:n_queries]]
    e2e_ms, embed_ms = [], []
    for text in questions:
        t = time.perf_counter()
        v = embedder.embed_array([text])[0]
        t1 = time.perf_counter()
        store.search_vector(v, 10)
        e2e_ms.append((time.perf_counter() - t) * 1000)
        embed_ms.append((t1 - t) * 1000)
    # Embedding speed on corpus paragraphs (what ingest of new text costs).
    sample = [c.embed_text() for c in chunks[:200]]
    t = time.perf_counter()
    embedder.embed_array(sample)
    embed_rate = len(sample) / (time.perf_counter() - t)
    disk = sum(f.stat().st_size for f in Path(location).rglob("*") if f.is_file()) if Path(location).is_dir() else 0
    return {
        "chunks": len(chunks), **ingest,
        "store_query_ms_p50": round(pct(store_ms, 50), 2), "store_query_ms_p95": round(pct(store_ms, 95), 2),
        "e2e_query_ms_p50": round(pct(e2e_ms, 50), 1), "e2e_query_ms_p95": round(pct(e2e_ms, 95), 1),
        "embed_query_ms_p50": round(pct(embed_ms, 50), 1), "embed_paragraphs_per_s": round(embed_rate, 1),
        "disk_mb": round(disk / 1e6, 1),
    }


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--questions", type=int, default=500)
    ap.add_argument("--collection", default="hotpotqa")
    ap.add_argument("--store", default=None, help="the index built by `agentrt index --hotpotqa` (default store)")
    ap.add_argument("--skip-store", action="store_true", help="only the recall table")
    ap.add_argument("--skip-recall", action="store_true", help="only the store-speed table")
    ap.add_argument("--queries", type=int, default=300, help="queries for the latency figures")
    ap.add_argument("--reuse-store", action="store_true", help="re-time queries on the store a last run built")
    ap.add_argument("--store-chunks", type=int, default=None, help="store speed on the first N chunks (default all)")
    args = ap.parse_args()
    location = args.store or default_location()
    # Sections not rerun keep their last figures (--skip-store / --skip-recall runs add up).
    result_file, out = results_file("memory_bench")
    out["location"] = location
    if not args.skip_recall:
        out["recall"] = recall_section(location, args.collection, args.questions, 10)
        print(json.dumps(out["recall"]), flush=True)
    if not args.skip_store:
        speed_dir = result_file.parent / "memory-store-speed"
        if not args.reuse_store:
            shutil.rmtree(speed_dir, ignore_errors=True)  # a fresh store: the ingest figure is a full ingest
        out["store"] = {**out.get("store", {}), **store_section(str(speed_dir), args.queries, args.store_chunks, args.reuse_store)}
        print(json.dumps(out["store"]), flush=True)
    ingest_file = Path(f"{location}.bm25") / f"{args.collection}.ingest.json"
    if ingest_file.is_file():
        out["index_run"] = json.loads(ingest_file.read_text())
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["loadavg_1m_at_end"] = round(os.getloadavg()[0], 1)  # the 2 cores are shared: read latencies with this
    result_file.parent.mkdir(parents=True, exist_ok=True)
    result_file.write_text(json.dumps(out, indent=1))

    from rich.console import Console
    from rich.table import Table

    table = Table(title="memory benchmark (HotpotQA dev, pooled corpus)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for section in ("recall", "store", "index_run"):
        for key, val in out.get(section, {}).items():
            table.add_row(f"{section}.{key}", str(val))
    table.add_row("peak_rss_mb", str(out["peak_rss_mb"]))
    table.add_row("loadavg_1m_at_end", str(out["loadavg_1m_at_end"]))
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
