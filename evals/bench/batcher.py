"""Benchmark: the dynamic batcher vs one-at-a-time decoding, and embedded model load times.

    .venv/bin/python -m evals.bench.batcher [--requests 8] [--tokens 128] [--repeat 3] [--skip-conversion] [--threads 1] [--wide-threads N]

Prints one table. Ratios are measured side by side in one run (the machine is shared and noisy): the
sequential and the concurrent pass alternate ``--repeat`` times and the table shows medians, with the
load average before and after (other work on the cores skews single runs either way).
Target (issue 23): aggregate throughput of 8 concurrent requests >= 4x the same 8 run sequentially
(the forward passes alone allow about 4.4x for this model), outputs token-identical.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agentrt.core.types import GenParams, Message

from evals.bench.common import embedded_path, parser, show, table

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works.",
    "Describe the water cycle.",
    "Write a poem about autumn leaves.",
    "What are the benefits of exercise?",
    "Tell me about the history of Rome.",
    "How do airplanes fly?",
    "Describe a day at the beach.",
    "Explain photosynthesis to a child.",
    "Write a letter to a friend about a trip.",
    "What makes a good teacher?",
    "Describe the planets of the solar system.",
    "How is bread made?",
    "Explain what a computer does.",
    "Write a recipe for pancakes.",
    "Why do we need sleep?",
]


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3, help="sequential / concurrent pairs; medians reported")
    ap.add_argument("--skip-conversion", action="store_true", help="do not time the first GGUF conversion")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--wide-threads", type=int, default=None,
                    help="threads for prompt passes and multi-row steps (default: Settings().torch_wide_threads, "
                         "i.e. AGENTRT_TORCH_WIDE_THREADS; 0 = --threads)")
    args = ap.parse_args()

    from agentrt.backends.hf import HFBackend
    from agentrt.core.config import Settings

    rows = []
    scratch = Path(tempfile.mkdtemp(prefix="agentrt-bench-"))
    try:
        if not args.skip_conversion:
            t = time.perf_counter()
            embedded_path(scratch)
            rows.append(("load: first conversion (GGUF -> fp32 folder)", f"{time.perf_counter() - t:.1f} s"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    settings = Settings()
    wide = settings.torch_wide_threads if args.wide_threads is None else args.wide_threads
    path = embedded_path(settings.models_dir)
    t = time.perf_counter()
    backend = HFBackend(path, threads=args.threads, wide_threads=wide)
    rows.append(("load: cached fp32 folder", f"{time.perf_counter() - t:.2f} s"))

    # max_tokens is forced: stop=[] and a long prompt so every request produces `tokens` tokens
    params = GenParams(max_tokens=args.tokens, logprobs=True)
    prompts = [[Message("user", p)] for p in (PROMPTS * 4)[: args.requests]]
    backend.chat_sync(prompts[0], GenParams(max_tokens=4))  # warm-up

    async def concurrent():
        return await asyncio.gather(*(backend.chat(p, params) for p in prompts))

    load_before = os.getloadavg()[0]
    seq_tps, conc_tps, ratios, same = [], [], [], []
    for _ in range(args.repeat):  # alternate: a burst of load elsewhere slows one pair, not one mode
        t = time.perf_counter()
        seq = [backend.chat_sync(p, params) for p in prompts]
        seq_tps.append(sum(c.usage.completion_tokens for c in seq) / (time.perf_counter() - t))
        t = time.perf_counter()
        conc = asyncio.run(concurrent())
        conc_tps.append(sum(c.usage.completion_tokens for c in conc) / (time.perf_counter() - t))
        ratios.append(conc_tps[-1] / seq_tps[-1])
        same.append(sum(a.choices[0].token_ids == b.choices[0].token_ids for a, b in zip(seq, conc)))
    med = statistics.median
    rows += [
        (f"sequential: {args.requests} x {args.tokens} tokens", f"{med(seq_tps):.1f} tok/s (median of {args.repeat})"),
        (f"batched: {args.requests} concurrent", f"{med(conc_tps):.1f} tok/s"),
        ("throughput ratio (target >= 4x)", f"{med(ratios):.2f}x median ({', '.join(f'{r:.2f}' for r in ratios)})"),
        ("identical greedy outputs", " ".join(f"{s}/{len(prompts)}" for s in same)),
        ("batcher: batches / forward passes / max rows",
         f"{backend.stats.batches} / {backend.stats.forward_passes} / {backend.stats.max_batch_rows}"),
        ("torch threads (one-row / wide)", f"{backend.threads} / {backend.wide_threads}"),
        ("load average (1 min) before / after", f"{load_before:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"),
    ]
    show(table("agentrt dynamic batcher (SmolLM2-135M fp32, CPU)", ("measure", "value"), rows))
    backend.close()


if __name__ == "__main__":
    main()
