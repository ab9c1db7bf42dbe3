"""Benchmark: RLCR (calibration RL) on the embedded model, base vs trained on held-out items (issue 21).

    .venv/bin/python evals/bench/rlcr_bench.py --out /tmp/rlcr-bench            # full size (~90 min, 2 idle cores*)
    .venv/bin/python evals/bench/rlcr_bench.py --out /tmp/rlcr-bench --quick    # pipeline check (minutes)

Data (built once, seeded, written to OUT/train.jsonl and OUT/heldout.jsonl as trl-prompts rows): a mix where the
135M model is sometimes right: easy factual questions (evals/data/easy-dev.jsonl, qa verifier), arithmetic
generated here with known answers (one-digit sums, two-digit sums, two-digit products: numeric verifier),
SimpleQA and GSM8K items from the shipped suites (almost always wrong at this size). Items are split
train / held-out by item, never tuned on the held-out part.

Both models answer greedily with the runtime's convention: the confidence instruction appended to the prompt;
when the policy writes no ``<confidence>`` tag itself the runtime adds the grammar-constrained tail
(``agentrt/train/_confidence_gen.py``). "Right" = the verifier's score >= 0.5 (qa gives F1 partial credit).
Metrics on the held-out items: accuracy, ECE (10 bins), AUROC and Brier of the stated confidence, the confident-
wrong rate (q >= 0.8 and wrong), how often the policy stated no confidence on its own (free-missing).

Resumable: every stage writes its result under OUT and is skipped when present; training keeps a checkpoint
every --every steps (model + optimizer) and a stopped run resumes from the newest. Prints a markdown table
(OUT/table.md) and the watch curves (OUT/watch.png, OUT/watch.json).

* An estimate: 150 steps at ~30 s (TRL GRPO steps took 11-38 s on idle cores) plus 15 watch evaluations and two
scorings of 80 items. Not measured at full size yet: the run in docs/rlcr.md is a reduced one on a loaded machine
(89 s per step there).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHORT = " Reply with just the answer."


def _rows(path: str) -> list[dict]:
    return [json.loads(line) for line in (ROOT / "evals" / "data" / path).read_text().splitlines() if line.strip()]


def _row(question: str, answer, verifier: str, source: str) -> dict:
    return {"prompt": [{"role": "user", "content": question + SHORT}], "answer": answer, "verifier": verifier,
            "data_source": source}


def build_items(seed: int) -> dict[str, list[dict]]:
    """Every candidate item by kind (deterministic for a seed)."""
    rng = random.Random(seed)
    kinds: dict[str, list[dict]] = {}
    kinds["easy"] = [_row(r["question"], r["answers"], "qa", "easy-dev") for r in _rows("easy-dev.jsonl")]
    seen: set[str] = set()

    def arith(kind: str, make) -> None:
        out = []
        while len(out) < 60:
            q, a = make()
            if q not in seen:
                seen.add(q)
                out.append(_row(q, str(a), "numeric", f"arith-{kind}"))
        kinds[f"arith-{kind}"] = out

    def one():
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        return f"What is {a} + {b}?", a + b

    def two():
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"What is {a} + {b}?", a + b

    def mul():
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        return f"What is {a} times {b}?", a * b

    arith("1digit-sum", one)
    arith("2digit-sum", two)
    arith("2digit-product", mul)
    kinds["simpleqa"] = [_row(r["question"], [r["answer"]], "qa", "simpleqa") for r in _rows("simpleqa.jsonl")[:80]]
    kinds["gsm8k"] = [_row(r["question"], r["answer"], "numeric", "gsm8k") for r in _rows("gsm8k.jsonl")[:80]]
    for items in kinds.values():
        rng.shuffle(items)
    return kinds


# Share of each kind in both splits: about half the items are ones the 135M model can get right.
MIX = {"easy": 0.25, "arith-1digit-sum": 0.2, "arith-2digit-sum": 0.15, "arith-2digit-product": 0.1,
       "simpleqa": 0.15, "gsm8k": 0.15}


def split(seed: int, n_train: int, n_held: int) -> tuple[list[dict], list[dict]]:
    kinds = build_items(seed)
    train, held = [], []
    for kind, share in MIX.items():
        items = kinds[kind]
        h = max(1, round(share * n_held))
        t = max(1, round(share * n_train))
        if h + t > len(items):
            t = len(items) - h
        held += items[:h]
        train += items[h:h + t]
    rng = random.Random(seed + 1)
    rng.shuffle(train)
    rng.shuffle(held)
    return train, held


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _load_model(path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path))


def _score(model_dir, held_rows, max_answer_tokens, out: Path) -> dict:
    if out.is_file():
        return json.loads(out.read_text())
    from agentrt.train.watch import HeldOut

    model, tok = _load_model(model_dir)
    started = time.perf_counter()
    result = HeldOut(held_rows, tok, max_answer_tokens=max_answer_tokens).score(model, records=True)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(result, indent=1))
    return result


def _paired_acc_ci(a: list[bool], b: list[bool], rounds: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    n = len(a)
    diffs = []
    for _ in range(rounds):
        idx = [rng.randrange(n) for _ in range(n)]
        diffs.append(sum(b[i] - a[i] for i in idx) / n)
    diffs.sort()
    return diffs[int(0.025 * rounds)], diffs[int(0.975 * rounds) - 1]


def _fmt(v) -> str:
    return "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def table(base: dict, trained: dict, train_info: dict, args, load: str) -> str:
    lines = [f"RLCR on {args.model_label}: {train_info['steps']} GRPO steps ({train_info['wall_s']:.0f} s wall for training + watch, "
             f"{train_info['step_s']:.1f} s per optimizer step, {train_info.get('watch_evals', 0)} watch evaluations), {train_info['n_train']} train prompts, "
             f"{base['n']} held-out items; load average {load}", "",
             "| held-out metric | base (prompted) | trained (RLCR) | trained / base |", "|---|---|---|---|"]
    for key, label in (("accuracy", "accuracy"), ("ece", "ECE (10 bins)"), ("auroc", "AUROC"), ("brier", "Brier"),
                       ("confident_wrong", "confident wrong (q>=0.8, wrong)"),
                       ("free_missing", "no confidence stated by the policy (tail added)"),
                       ("malformed", "malformed confidence"),
                       ("tag_in_answer", "answers holding pieces of the tag"), ("confidence_mean", "mean stated confidence"),
                       ("confidence_std", "std of stated confidence"), ("value", "RLCR reward"),
                       ("mean_length", "mean completion tokens"), ("wall_s", "scoring wall time (s)")):
        b, t = base.get(key), trained.get(key)
        ratio = f"{t / b:.2f}x" if isinstance(b, (int, float)) and isinstance(t, (int, float)) and b > 0 else "—"
        lines.append(f"| {label} | {_fmt(b)} | {_fmt(t)} | {ratio} |")
    lo, hi = _paired_acc_ci([r["correct"] for r in base["records"]], [r["correct"] for r in trained["records"]])
    lines += ["", f"accuracy change (trained - base): {trained['accuracy'] - base['accuracy']:+.3f}, "
                  f"paired bootstrap 95% CI [{lo:+.3f}, {hi:+.3f}]"]
    if train_info.get("stopped"):
        lines.append(f"watch stopped training early: {train_info['stopped']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/agentrt-rlcr-bench", help="work folder (data, checkpoints, results)")
    ap.add_argument("--quick", action="store_true", help="a pipeline check: 3 steps, 8 held-out items")
    ap.add_argument("--steps", type=int, default=150, help="GRPO optimizer steps (default 150: ~90 min here)")
    ap.add_argument("--train-items", type=int, default=200, help="training prompts (default 200)")
    ap.add_argument("--held-out", type=int, default=80, help="held-out items for base vs trained (default 80)")
    ap.add_argument("--watch-items", type=int, default=32, help="held-out items the watch scores (default 32)")
    ap.add_argument("--every", type=int, default=10, help="watch + checkpoint every N steps (default 10)")
    ap.add_argument("--num-generations", type=int, default=4, help="GRPO group size (default 4)")
    ap.add_argument("--batch-size", type=int, default=8, help="completions per step (default 8: 2 prompts x 4)")
    ap.add_argument("--max-answer-tokens", type=int, default=16, help="answer tokens before the confidence (default 16)")
    ap.add_argument("--learning-rate", type=float, default=1e-4, help="default 1e-4")
    ap.add_argument("--confidence-temperature", type=float, default=2.0,
                    help="sampling temperature of the confidence number in training rollouts (default 2.0: the "
                         "base model puts nearly all its mass on the instruction's example, 0.7)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-stop-early", action="store_true", help="let the watch report but never stop training")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.train_items, args.held_out, args.watch_items, args.every = 3, 12, 8, 6, 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AGENTRT_HOME", str(out / "home"))
    os.environ.setdefault("AGENTRT_MODELS_DIR", str(Path.home() / ".cache" / "agentrt" / "models"))
    import torch

    from agentrt.core.config import load_settings
    from agentrt.backends._embedded import EMBEDDED_NAME, embedded_model_path
    from agentrt.train.grpo import read_prompt_rows, rlcr_rows, train_grpo
    from agentrt.train.watch import HeldOut, make_watch

    settings = load_settings()
    torch.set_num_threads(settings.torch_threads)
    base_dir = embedded_model_path(settings.models_dir)
    args.model_label = EMBEDDED_NAME
    if not (out / "train.jsonl").is_file():
        train, held = split(args.seed, args.train_items, args.held_out)
        _write_jsonl(out / "train.jsonl", train)
        _write_jsonl(out / "heldout.jsonl", held)
    train = read_prompt_rows(out / "train.jsonl")
    held = rlcr_rows(read_prompt_rows(out / "heldout.jsonl"))
    print(f"data: {len(train)} train prompts, {len(held)} held-out items ({out})", file=sys.stderr)

    base = _score(base_dir, held, args.max_answer_tokens, out / "base.json")
    print(f"base: accuracy {base['accuracy']:.3f}, ECE {_fmt(base['ece'])}, AUROC {_fmt(base['auroc'])}, "
          f"free-missing {base['free_missing']:.2f} ({base['wall_s']} s)", file=sys.stderr)

    policy = out / "policy"
    info_path = out / "train.json"
    if not info_path.is_file():
        ref, tok = _load_model(base_dir)
        ref.requires_grad_(False)
        watch = make_watch(HeldOut(held[:args.watch_items], tok, reference=ref, max_answer_tokens=args.max_answer_tokens),
                           out / "watch", every=args.every, stop_early=not args.no_stop_early)
        started = time.perf_counter()
        report = train_grpo(train, policy, steps=args.steps, num_generations=args.num_generations,
                            batch_size=args.batch_size, max_completion_length=args.max_answer_tokens,
                            learning_rate=args.learning_rate, seed=args.seed, reward="rlcr", callbacks=[watch],
                            save_steps=args.every, resume=True,
                            confidence_temperature=args.confidence_temperature)
        wall = time.perf_counter() - started
        # Optimizer-step time survives a resume (TRL logs it per step into the checkpointed trainer state);
        # the wall time is this process's (training + the watch's scoring).
        step_time = sum(float(e.get("step_time", 0.0)) for e in report.log)
        info = {"steps": report.steps, "wall_s": wall, "step_s": step_time / max(1, report.steps),
                "watch_evals": len(watch.log.entries),
                "n_train": len(train), "rewards": report.rewards, "components": report.components,
                "stopped": watch.log.stopped}
        info_path.write_text(json.dumps(info, indent=1))
    info = json.loads(info_path.read_text())
    trained = _score(policy, held, args.max_answer_tokens, out / "trained.json")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = table(base, trained, info, args, load)
    (out / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
