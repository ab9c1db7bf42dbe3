"""Serving backends benchmark: 16 concurrent chat requests x 128 tokens on each backend.

    .venv-vllm/bin/python -m evals.bench.backends_bench            (or any python: it re-runs itself there)

Backends, one at a time (one model in memory at a time): the transformers dynamic batcher
(``hf:embedded``), in-process vLLM (``vllm:embedded``), and the openai backend against a local vLLM
OpenAI-compatible server on the same model folder. All fp32, greedy, same prompts, so every backend
generates the same tokens. Prints one table: tok/s (completion tokens / wall time of the round),
p50/p95 request latency, and the two targets: vLLM >= 1.3x the batcher, HTTP overhead <= 10%.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from evals.bench.common import ROOT, embedded_path, parser

TOPICS = ["the sea", "a lighthouse", "a robot learning to paint", "a city at night", "an old library",
          "a mountain village", "a space station", "a desert caravan", "a rainy afternoon", "a chess match",
          "a lost kitten", "the first snow", "a jazz club", "a volcano", "a train journey", "a market day"]


def prompts(n: int) -> list[str]:
    return [f"Write a long, detailed story about {TOPICS[i % len(TOPICS)]}." for i in range(n)]


async def one_round(backend, n: int, max_tokens: int) -> dict:
    from agentrt.core.types import GenParams, Message

    params = GenParams(max_tokens=max_tokens, temperature=0.0)

    async def call(p: str):
        t = time.perf_counter()
        out = await backend.chat([Message("user", p)], params)
        return time.perf_counter() - t, out.usage.completion_tokens

    t0 = time.perf_counter()
    results = await asyncio.gather(*[call(p) for p in prompts(n)])
    wall = time.perf_counter() - t0
    return {"wall": wall, "latencies": [r[0] for r in results], "tokens": sum(r[1] for r in results)}


def measure(name: str, backend, n: int, max_tokens: int, rounds: int) -> dict:
    from agentrt.core.types import GenParams, Message

    asyncio.run(backend.chat([Message("user", "Hi")], GenParams(max_tokens=4)))  # warm-up
    runs = [asyncio.run(one_round(backend, n, max_tokens)) for _ in range(rounds)]
    lat = sorted(x for r in runs for x in r["latencies"])
    tokens, wall = sum(r["tokens"] for r in runs), sum(r["wall"] for r in runs)
    row = {"backend": name, "requests": n * rounds, "tokens": tokens, "wall_s": round(wall, 2),
           "tok_s": round(tokens / wall, 1), "p50_s": round(statistics.median(lat), 2),
           "p95_s": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 2)}
    print(f"  {name}: {row}", file=sys.stderr, flush=True)
    return row


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", choices=["hf", "vllm", "openai"], action="append")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="agentrt-bench-"))
    os.environ.update(VLLM_CACHE_ROOT=str(tmp), TORCHINDUCTOR_CACHE_DIR=str(tmp), VLLM_NO_USAGE_STATS="1",
                      HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    from agentrt.backends import load_backend
    from agentrt.backends.vllm_server import start_vllm_server
    from agentrt.backends.openai import OpenAIBackend
    from agentrt.core.config import Settings

    settings = Settings()
    want = args.only or ["hf", "vllm", "openai"]
    rows = []
    bench = (args.requests, args.max_tokens, args.rounds)
    if "hf" in want:
        b = load_backend("hf:embedded", settings, cache=False)
        rows.append(measure("hf (transformers batcher)", b, *bench))
        b.close()
    if "vllm" in want:
        b = load_backend("vllm:embedded", settings, cache=False)
        rows.append(measure("vllm (in-process)", b, *bench))
        b.close()
    if "openai" in want:
        server = start_vllm_server(embedded_path(settings.models_dir), name="smol", tmp=tmp)
        try:
            b = OpenAIBackend([server.url], "smol")
            rows.append(measure("openai -> vllm server", b, *bench))
            b.close()
        finally:
            server.stop()

    cols = ["backend", "requests", "tokens", "wall_s", "tok_s", "p50_s", "p95_s"]
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print(f"\n{args.requests} concurrent chat requests x {args.max_tokens} tokens, {args.rounds} rounds, "
          f"fp32 greedy, SmolLM2-135M, {os.cpu_count()} CPU cores")
    print(" | ".join(c.ljust(w) for c, w in zip(cols, widths)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)))
    by = {r["backend"].split()[0]: r for r in rows}
    if "hf" in by and "vllm" in by:
        x = by["vllm"]["tok_s"] / by["hf"]["tok_s"]
        print(f"vLLM in-process / transformers batcher: {x:.2f}x (target >= 1.3x: {'PASS' if x >= 1.3 else 'MISS'})")
    if "vllm" in by and "openai" in by:
        o = 1 - by["openai"]["tok_s"] / by["vllm"]["tok_s"]
        print(f"HTTP overhead vs in-process vLLM: {o:+.1%} of tok/s (target <= 10%: {'PASS' if o <= 0.10 else 'MISS'})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":  # vLLM starts its engine with spawn: the guard is required
    try:
        import vllm  # noqa: F401
    except ImportError:
        vpy = ROOT / ".venv-vllm" / "bin" / "python"
        if not vpy.is_file():
            sys.exit("backends_bench needs vLLM: run `make vllm-venv` first")
        os.chdir(ROOT)  # `-m evals.bench...` finds the package from the checkout
        os.execv(str(vpy), [str(vpy), "-m", "evals.bench.backends_bench", *sys.argv[1:]])
    sys.exit(main())
