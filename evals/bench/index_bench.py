"""Indexing benchmark (not a test): embedder speed and quality, fp32 vs int8, 1 vs N threads, and the
end-to-end `agentrt index` rate, all on real HotpotQA paragraphs on this machine.

    python -m evals.bench.index_bench [--questions 300] [--timed 600] [--index-limit 300] [--skip-index]

1. Embedder: the pooled paragraphs of the first ``--questions`` questions (title + text, as indexed).
   chunks/s for fp32 and int8 at 1 and 2 threads, timed on the same ``--timed`` random paragraphs
   (wall clock, and per CPU-second of the process: the cores are shared, read the wall figure with
   the load average beside it). recall@10 of the gold supporting paragraphs by exact cosine search
   over that pool, queries = the questions; vectors do not depend on the thread count. Rows "int8 docs,
   fp32 query" are what `agentrt index` with embed_quantize stores and what searches then ask.
2. End to end: the real `agentrt index --hotpotqa --limit N` into a fresh store (tokenize, BM25 first,
   embed, write Chroma), fp32 and int8, its own chunks/s line and the split of its time.

Results are also written to $AGENTRT_HOME/bench/index_bench.json.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from memory.embeddings import MiniLM, models_dir
from memory.ingest import hotpotqa_chunks, load_hotpotqa, make_chunk

from evals.bench.common import ROOT, parser, results_file


def load() -> float:
    return round(os.getloadavg()[0], 1)


def timed(embedder: MiniLM, texts: list[str]) -> tuple[object, float, float]:
    """(vectors, chunks/s wall, chunks per CPU-second)."""
    embedder.embed_array(texts[:8])  # warm: first run allocates
    t, c = time.perf_counter(), time.process_time()
    vecs = embedder.embed_array(texts)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return vecs, len(texts) / wall, len(texts) / max(cpu, 1e-9)


def recall_at(doc_vecs, query_vecs, gold: list[set[int]], k: int = 10) -> float:
    import numpy as np

    top = np.argsort(-(query_vecs @ doc_vecs.T), axis=1)[:, :k]
    found = sum(len(g & set(row.tolist())) for g, row in zip(gold, top, strict=True))
    return found / max(sum(len(g) for g in gold), 1)


def embedder_section(n_questions: int, n_timed: int, threads: list[int]) -> list[dict]:
    questions = load_hotpotqa()[:n_questions]
    chunks = hotpotqa_chunks(questions)
    texts = [c.embed_text() for c in chunks]
    pos = {c.id: i for i, c in enumerate(chunks)}
    gold = []
    for q in questions:
        titles = {t for t, _ in q["supporting_facts"]}
        gold.append({pos[make_chunk(t, "".join(s).strip(), "").id] for t, s in q["context"] if t in titles})
    subset = random.Random(0).sample(texts, min(n_timed, len(texts)))
    print(f"pool: {len(texts)} paragraphs (mean {sum(map(len, texts)) / len(texts):.0f} chars) for "
          f"{len(questions)} questions; timing on {len(subset)}", flush=True)
    rows: list[dict] = []
    query_fp32 = MiniLM().embed_array([q["question"] for q in questions])
    for int8 in (False, True):
        name = "int8" if int8 else "fp32"
        for n in threads:
            emb = MiniLM(threads=n, int8=int8)
            l0 = load()
            _, wall, per_cpu = timed(emb, subset)
            rows.append({"model": name, "threads": n, "timed": len(subset), "chunks_per_s": round(wall, 1),
                         "chunks_per_cpu_s": round(per_cpu, 1), "load_1m": f"{l0}-{load()}"})
            print(json.dumps(rows[-1]), flush=True)
        emb = MiniLM(threads=max(threads), int8=int8)
        docs = emb.embed_array(texts)  # the same vectors at any thread count: one recall per model
        recall = {"recall@10 (fp32 query)": round(100 * recall_at(docs, query_fp32, gold), 2)}
        if int8:
            own = emb.embed_array([q["question"] for q in questions])
            recall["recall@10 (int8 query)"] = round(100 * recall_at(docs, own, gold), 2)
        for row in rows[-len(threads):]:
            row.update(recall)
        print(json.dumps(recall), flush=True)
    return rows


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def index_section(limit: int, threads: int, models: list[str]) -> list[dict]:
    rows = []
    for quantize in ["false" if m == "fp32" else "true" for m in models]:
        with tempfile.TemporaryDirectory(prefix="index-bench-") as home:
            env = {**os.environ, "AGENTRT_HOME": home, "AGENTRT_MODELS_DIR": str(models_dir()), "AGENTRT_EMBED_QUANTIZE": quantize,
                   "AGENTRT_EMBED_THREADS": str(threads)}
            env.pop("AGENTRT_MEMORY", None)
            cmd = [str(Path(sys.executable).with_name("agentrt")), "index", "--hotpotqa", "--limit", str(limit)]
            l0 = load()
            cpu0 = _children_cpu()
            t = time.perf_counter()
            proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - t
            cpu = _children_cpu() - cpu0
            if proc.returncode != 0:
                raise SystemExit(f"agentrt index failed: {proc.stderr.strip()[-500:]}")
            report = json.loads(next(Path(home).glob("memory.bm25/*.ingest.json")).read_text())
            m = re.search(r"([\d.]+) chunks/s", proc.stdout)
            rows.append({
                "model": "int8" if quantize == "true" else "fp32", "threads": threads,
                "chunks": report["chunks_seen"], "index_chunks_per_s": float(m[1]) if m else None,
                "process_wall_s": round(wall, 1), "chunks_per_cpu_s": round(report["chunks_seen"] / max(cpu, 1e-9), 1),
                "embed_s": round(report["embed_seconds"], 1),
                "store_s": round(report["store_seconds"], 1), "bm25_s": round(report.get("bm25_seconds", 0.0), 1),
                "load_1m": f"{l0}-{load()}",
            })
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--questions", type=int, default=300, help="HotpotQA questions whose paragraphs form the pool")
    ap.add_argument("--timed", type=int, default=600, help="paragraphs timed per row")
    ap.add_argument("--threads", default="1,2", help="thread counts to time (comma separated)")
    ap.add_argument("--index-limit", type=int, default=300, help="`agentrt index --hotpotqa --limit N` (questions)")
    ap.add_argument("--index-models", default="fp32,int8", help="embedders for the end-to-end runs")
    ap.add_argument("--skip-embed", action="store_true")
    ap.add_argument("--skip-index", action="store_true")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    # Sections not rerun keep their last figures (--skip-embed / --skip-index runs add up).
    result, out = results_file("index_bench")
    out["cpu_count"] = os.cpu_count()
    if not args.skip_embed:
        out["embedder"] = embedder_section(args.questions, args.timed, threads)
    if not args.skip_index:
        out["index"] = index_section(args.index_limit, max(threads), args.index_models.split(","))
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps(out, indent=1))

    from rich.console import Console
    from rich.table import Table

    for key, title in (("embedder", "MiniLM embedder on HotpotQA paragraphs"), ("index", "agentrt index end to end")):
        rows = out.get(key)
        if not rows:
            continue
        table = Table(title=title)
        cols = list(dict.fromkeys(k for r in rows for k in r))
        for c in cols:
            table.add_column(c, justify="right", no_wrap=True)
        for r in rows:
            table.add_row(*(str(r.get(c, "")) for c in cols))
        Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
