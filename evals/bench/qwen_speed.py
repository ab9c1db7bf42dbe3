"""Benchmark: the lean runner on the large embedded model (Qwen2.5-Coder-0.5B) in its chosen weight format,
beside lean fp32 and the transformers fallback, side by side in one run; then their greedy answers compared.

    .venv/bin/python -m evals.bench.qwen_speed [--model hf:embedded:qwen2.5-coder-0.5b] [--threads 1]
        [--prompt-tokens 600] [--new 32] [--repeat 2] [--answers 10] [--weights auto|int8|fp32]

Speed: a `read`-style prompt (the read route's system line, squad passages quoted, a question) of about
``--prompt-tokens`` tokens, ``--new`` tokens decoded (end of sequence ignored, so every run decodes as many),
batch 1, no prefix cache. The three runners alternate ``--repeat`` times; the table shows medians, prefill
and decode tokens/s from the batcher's own counters and end-to-end seconds, with the ratio to the
transformers fallback and the load average before and after. CPU s is the process's CPU time for the
request: on a shared machine, about what end-to-end takes on a quiet one (at one thread). Target (issue 58):
the chosen format's end-to-end <= 12 s on a quiet machine and >= 2x the transformers fallback.

Answers: ``--answers`` read prompts (answerable squad-heldout questions with their passages), greedy,
``--new`` tokens: the chosen format's tokens against lean fp32's (identical, or where they part), and lean
fp32's against transformers' on the first few (they must be identical: the same fp32 arithmetic).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from agentrt.core.types import GenParams, Message

from evals.bench.common import ROOT, parser, reuse_converted_model, show, table

DATA = ROOT / "evals" / "data"
QWEN = "hf:embedded:qwen2.5-coder-0.5b"


def read_prompts(backend: Any, target: int, count: int) -> list[list[Message]]:
    """``count`` read-route prompts of about ``target`` tokens: each answerable squad-heldout question with
    its own passages (those of its title) quoted, cut to the target."""
    from agentrt.routes.read import SYSTEM

    passages: dict[str, list[str]] = {}
    for line in (DATA / "squad-heldout-corpus.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        passages.setdefault(row["title"], []).append(row["text"])
    corpus = [t for texts in passages.values() for t in texts]
    questions = [json.loads(x) for x in (DATA / "squad-heldout-dev.jsonl").read_text(encoding="utf-8").splitlines()]
    out = []
    for q in (q for q in questions if q["type"] == "qa"):
        title = next((t for t, texts in passages.items() if any(a in x for a in q["answers"] for x in texts)), None)
        texts = passages.get(title, []) + corpus  # the question's own passages first, then any, for length
        blocks, chars = "", 4000
        while True:  # grow the quoted text until the prompt reaches the target
            blocks = "\n".join(f"<document>{t}</document>" for t in texts)[:chars]
            messages = [Message("system", SYSTEM), Message("user", f"{blocks}\n\nQuestion: {q['question']}")]
            if backend.count_tokens(messages) >= target or chars > 40000:
                break
            chars += 400
        while backend.count_tokens(messages) > target + 10:  # then trim to it
            blocks = blocks[:-40]
            messages = [Message("system", SYSTEM), Message("user", f"{blocks}\n\nQuestion: {q['question']}")]
        out.append(messages)
        if len(out) == count:
            break
    return out


def load(path: Path, impl: str, threads: int) -> Any:
    """An HFBackend on ``path``: ``transformers`` (forced fallback), or the lean runner in format ``impl``."""
    from agentrt.backends.hf import HFBackend
    from agentrt.backends.hf.llama import ENV_IMPL

    old = os.environ.get(ENV_IMPL)
    os.environ[ENV_IMPL] = "transformers" if impl == "transformers" else "auto"
    try:
        return HFBackend(path, threads=threads, wide_threads=threads, prefix_cache_mb=0,
                         weights="auto" if impl == "transformers" else impl)
    finally:
        os.environ.pop(ENV_IMPL) if old is None else os.environ.__setitem__(ENV_IMPL, old)


def timed(backend: Any, messages: list[Message], new: int) -> dict[str, float]:
    """One request decoding exactly ``new`` tokens (end of sequence ignored): its prefill and decode speed
    from the batcher's counters and its wall time."""
    stats, eos = backend.stats, backend.runner.eos_ids
    before = (stats.prompt_tokens, stats.prefill_s, stats.decode_s)
    backend.runner.eos_ids = set()
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        done = backend.chat_sync(messages, GenParams(max_tokens=new))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        backend.runner.eos_ids = eos
    tokens = len(done.choices[0].token_ids)
    prompt, prefill, decode = (stats.prompt_tokens - before[0], stats.prefill_s - before[1],
                               stats.decode_s - before[2])
    return {"prompt": prompt, "prefill": prompt / prefill, "decode": (tokens - 1) / decode, "wall": wall,
            "cpu": cpu, "new": tokens}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--model", default=QWEN, help="a backend spec's ARG after hf: (default: the embedded Qwen)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--weights", default="auto", help="the lean format to compare with fp32 (auto: the default's)")
    ap.add_argument("--prompt-tokens", type=int, default=600)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--answers", type=int, default=10, help="read prompts whose greedy answers are compared")
    ap.add_argument("--check-transformers", type=int, default=3,
                    help="of those, how many transformers answers too (slow)")
    args = ap.parse_args()
    reuse_converted_model()
    from agentrt.backends.embedded import resolve
    from agentrt.backends.hf.lean_weights import resolve_format
    from agentrt.backends.hf.llama import WEIGHTS
    from agentrt.core.config import Settings

    spec = args.model.removeprefix("hf:")
    path, _ = resolve(spec, Settings().models_dir)
    chosen = resolve_format(args.weights, path / WEIGHTS)
    impls = list(dict.fromkeys([chosen, "fp32", "transformers"]))
    loads, backends = {}, {}
    for impl in impls:
        t0 = time.perf_counter()
        backends[impl] = load(path, impl, args.threads)
        loads[impl] = time.perf_counter() - t0
    names = {impl: f"lean {impl}" if impl != "transformers" else "transformers fallback" for impl in impls}
    names[chosen] += " (chosen)"
    prompt = read_prompts(backends[chosen], args.prompt_tokens, 1)[0]
    load_before = os.getloadavg()[0]
    for b in backends.values():  # warm-up: first-call costs (thread pools, kernels) are not the steady speed
        timed(b, [Message("user", "Hi")], 2)
    runs: dict[str, list[dict[str, float]]] = {impl: [] for impl in impls}
    for _ in range(args.repeat):
        for impl in impls:
            runs[impl].append(timed(backends[impl], prompt, args.new))
    load_after = os.getloadavg()[0]
    med = {impl: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for impl, rs in runs.items()}
    base = med["transformers"]["wall"]
    rows = [(names[i], f"{loads[i]:.1f}", int(med[i]["prompt"]), int(med[i]["new"]), f"{med[i]['prefill']:.1f}",
             f"{med[i]['decode']:.1f}", f"{med[i]['wall']:.2f}", f"{med[i]['cpu']:.2f}",
             f"{base / med[i]['wall']:.2f}x") for i in impls]
    show(table(f"{path.name}: batch 1, {args.threads} thread(s), median of {args.repeat}, load avg "
               f"{load_before:.1f} -> {load_after:.1f}",
               ["runner", "load s", "prompt tok", "new tok", "prefill tok/s", "decode tok/s", "end-to-end s",
                "CPU s", "vs transformers"], rows, right=True), width=200)

    if args.answers:
        prompts = read_prompts(backends[chosen], args.prompt_tokens, args.answers)
        params = GenParams(max_tokens=args.new)
        answers = {impl: [] for impl in impls}
        for i, messages in enumerate(prompts):
            for impl in impls:
                if impl != "transformers" or i < args.check_transformers:
                    answers[impl].append(backends[impl].chat_sync(messages, params).choices[0])
        rows = []
        for i, fp32 in enumerate(answers["fp32"]):
            mine = answers[chosen][i]
            same = mine.token_ids == fp32.token_ids
            parted = next((k for k, (a, b) in enumerate(zip(mine.token_ids, fp32.token_ids)) if a != b),
                          min(len(mine.token_ids), len(fp32.token_ids)))
            hf = answers["transformers"][i].token_ids == fp32.token_ids if i < len(answers["transformers"]) else None
            rows.append((i + 1, "yes" if same else f"no (from token {parted})", {None: "-", True: "yes"}.get(hf, "NO"),
                         fp32.text.strip()[:60], "" if same else mine.text.strip()[:60]))
        same_count = sum(r[1] == "yes" for r in rows)
        show(table(f"greedy answers, {len(rows)} read prompts: {chosen} identical to fp32 on {same_count}",
                   ["#", f"{chosen} = fp32", "fp32 = transformers", "fp32 answer", f"{chosen} answer (where not)"],
                   rows), width=200)
    for b in backends.values():
        b.close()


if __name__ == "__main__":
    main()
