"""Benchmark: RLCR (calibration RL) on the embedded model, base vs trained on held-out items (issue 21).

    .venv/bin/python -m evals.bench.rlcr_bench --out /tmp/rlcr-bench --seed 4   # full size (~26 min here*)
    .venv/bin/python -m evals.bench.rlcr_bench --out /tmp/rlcr-bench --quick    # pipeline check (minutes)

Data (built once, seeded, written to OUT/train.jsonl, OUT/dev.jsonl and OUT/heldout.jsonl as trl-prompts rows): a mix where the
135M model is sometimes right: easy factual questions (evals/data/easy-dev.jsonl, qa verifier), arithmetic
generated here with known answers (one-digit sums, two-digit sums, two-digit products: numeric verifier),
SimpleQA and GSM8K items from the shipped suites (almost always wrong at this size). Items are split
train / dev / held-out by item (OUT/dev.jsonl: the watch scores it and the kept step is chosen on it), never tuned
on the held-out part (docs/rlcr.md's run D uses --seed 4; the learning rate,
the step count and the instruction were chosen on the seed-0 to 3 splits).

Training (defaults): GRPO on the confidence number alone (``train="confidence"``: the answer's tokens masked,
reward = the calibration part of RLCR), top 4 decoder layers, lr 3e-5, 40 steps, answers sampled at temperature 0.7, the watch every 5 steps on
the dev items; the policy scored is the one of the watch's best dev evaluation (``--keep-last``: the last step's).
``--train all`` trains the whole completion on the full RLCR reward instead.

Both models answer greedily with the runtime's convention: the confidence instruction appended to the prompt;
when the policy writes no ``<confidence>`` tag itself the runtime adds the grammar-constrained tail
(``agentrt/train/_confidence_gen.py``). "Right" = the verifier's score >= 0.5 (qa gives F1 partial credit).
Metrics on the held-out items: accuracy, ECE (10 bins), AUROC and Brier of the stated confidence, the confident-
wrong rate (q >= 0.8 and wrong), how often the policy stated no confidence on its own (free-missing), and the
same per kind of item. The base model is scored twice: with the runtime's instruction and with its earlier one
(which showed the example number 0.7); "ECE halved" is checked against the better of the two.

Resumable: every stage writes its result under OUT and is skipped when present; training keeps a checkpoint
every --every steps (model + optimizer) and a stopped run resumes from the newest. Prints a markdown table
(OUT/table.md) and the watch curves (OUT/watch.png, OUT/watch.json).

* Measured: docs/rlcr.md, run D (40 steps at ~16 s, 9 watch evaluations of 32 items, three scorings of 80 items).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from evals.bench.common import ROOT, parser, read_jsonl, reuse_converted_model

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHORT = " Reply with just the answer."
# The runtime's instruction before it dropped its example number: scored as a second base, so "ECE halved" is
# checked against the better-calibrated prompting, not only the current one.
ANCHORED_INSTRUCTION = ("After your answer, on a new line, state how likely it is that your answer is correct, as a "
                        "number between 0 and 1 in this exact form: <confidence>0.7</confidence>")


def _rows(path: str) -> list[dict]:
    return read_jsonl(ROOT / "evals" / "data" / path)


def _row(question: str, answer, verifier: str, source: str) -> dict:
    return {"prompt": [{"role": "user", "content": question + SHORT}], "answer": answer, "verifier": verifier,
            "data_source": source}


def build_items(seed: int) -> dict[str, list[dict]]:
    """Every candidate item by kind (deterministic for a seed)."""
    rng = random.Random(seed)
    kinds: dict[str, list[dict]] = {}
    easy = _rows("easy-dev.jsonl")
    kinds["easy"] = [_row(r["question"], r["answers"], "qa", "easy-dev") for r in easy]
    seen = {r["question"] for r in easy}  # "What is 2 + 2?" is an easy question too: never in two splits

    def arith(kind: str, make, n: int = 60) -> None:
        out = []
        while len(out) < n:
            q, a = make()
            if q not in seen:
                seen.add(q)
                out.append(_row(q, str(a), "numeric", f"arith-{kind}"))
        kinds[f"arith-{kind}"] = out

    def one():
        a, b = rng.randint(0, 9), rng.randint(1, 9)
        return f"What is {a} + {b}?", a + b

    def two():
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"What is {a} + {b}?", a + b

    def mul():
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        return f"What is {a} times {b}?", a * b

    arith("1digit-sum", one, 88)
    arith("2digit-sum", two)
    arith("2digit-product", mul)
    kinds["simpleqa"] = [_row(r["question"], [r["answer"]], "qa", "simpleqa") for r in _rows("simpleqa.jsonl")[:80]]
    kinds["gsm8k"] = [_row(r["question"], r["answer"], "numeric", "gsm8k") for r in _rows("gsm8k.jsonl")[:80]]
    for items in kinds.values():
        rng.shuffle(items)
    return kinds


# Share of each kind in both splits. The 135M model gets about half the one-digit sums right, some easy
# questions and two-digit sums, and almost nothing else: a confidence that tells these apart can rank.
MIX = {"easy": 0.2, "arith-1digit-sum": 0.3, "arith-2digit-sum": 0.15, "arith-2digit-product": 0.1,
       "simpleqa": 0.1, "gsm8k": 0.15}


def split(seed: int, n_train: int, n_held: int, n_dev: int = 0) -> tuple[list[dict], list[dict], list[dict]]:
    """Train, held-out and dev (the watch's) items, disjoint, each kind in its MIX share. The held-out part comes
    first in each kind's shuffled list, so which items are held out does not depend on the sizes of the other
    two (their order does: the three parts are shuffled by one generator, as run D's split was made)."""
    kinds = build_items(seed)
    train, held, dev = [], [], []
    for kind, share in MIX.items():
        items = kinds[kind]
        h, d, t = (max(1, round(share * n)) if n else 0 for n in (n_held, n_dev, n_train))
        t = min(t, len(items) - h - d)
        held += items[:h]
        dev += items[h:h + d]
        train += items[h + d:h + d + t]
    rng = random.Random(seed + 1)
    for part in (train, held, dev):
        rng.shuffle(part)
    return train, held, dev


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


def by_kind(held: list[dict], base: dict, trained: dict) -> list[str]:
    """Per kind of item: how many were right and the mean stated confidence, base vs trained."""
    kinds: dict[str, list[int]] = {}
    for i, row in enumerate(held):
        kinds.setdefault(str(row.get("data_source")), []).append(i)
    lines = ["| kind | items | right base | right trained | mean q base | mean q trained |", "|---|---|---|---|---|---|"]
    for kind, idx in sorted(kinds.items()):
        def mean_q(result):
            qs = [result["records"][i]["confidence"] for i in idx if result["records"][i]["confidence"] is not None]
            return f"{sum(qs) / len(qs):.2f}" if qs else "—"
        right = [sum(bool(r["records"][i]["correct"]) for i in idx) for r in (base, trained)]
        lines.append(f"| {kind} | {len(idx)} | {right[0]} | {right[1]} | {mean_q(base)} | {mean_q(trained)} |")
    return lines


def table(base: dict, trained: dict, train_info: dict, args, load: str, held: list[dict] | None = None,
          anchored: dict | None = None) -> str:
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
    if train_info.get("restored"):
        lines.append(f"policy scored: the watch's best dev evaluation, {train_info['restored']}")
    elif "best_step" in train_info:
        lines.append(f"policy scored: the last step (the watch's best dev evaluation: step {train_info['best_step']})")
    lines += ["", f"trained: {args.train} (top {args.train_layers or 'all'} layers), learning rate "
                  f"{args.learning_rate:g}, answer temperature {args.temperature:g}, confidence temperature "
                  f"{args.confidence_temperature:g}, {args.num_generations} generations per prompt, "
                  f"{args.batch_size} completions per step"]
    if anchored:
        best = min(base["ece"], anchored["ece"])
        lines += ["", f"base prompted with the earlier instruction (example number 0.7): accuracy {anchored['accuracy']:.3f}, "
                      f"ECE {_fmt(anchored['ece'])}, AUROC {_fmt(anchored['auroc'])}, Brier {_fmt(anchored['brier'])}, "
                      f"mean q {_fmt(anchored['confidence_mean'])}; trained ECE / the better base's ECE: "
                      f"{trained['ece'] / best:.2f}x" if best else ""]
    if held is not None:
        lines += [""] + by_kind(held, base, trained)
    return "\n".join(lines)


def main() -> None:
    ap = parser(__doc__, whole=True)
    ap.add_argument("--out", default="/tmp/agentrt-rlcr-bench", help="work folder (data, checkpoints, results)")
    ap.add_argument("--quick", action="store_true", help="a pipeline check: 3 steps, 8 held-out items")
    ap.add_argument("--steps", type=int, default=40,
                    help="GRPO optimizer steps (default 40; longer runs drift to the base rate, docs/rlcr.md, and the "
                         "watch keeps the best dev evaluation's weights)")
    ap.add_argument("--train-items", type=int, default=200, help="training prompts (default 200)")
    ap.add_argument("--held-out", type=int, default=80, help="held-out items for base vs trained (default 80)")
    ap.add_argument("--watch-items", type=int, default=32,
                    help="dev items the watch scores and selects the kept step on; never held-out items (default 32)")
    ap.add_argument("--every", type=int, default=5, help="watch + checkpoint every N steps (default 5)")
    ap.add_argument("--num-generations", type=int, default=4, help="GRPO group size (default 4)")
    ap.add_argument("--batch-size", type=int, default=8, help="completions per step (default 8: 2 prompts x 4)")
    ap.add_argument("--max-answer-tokens", type=int, default=16, help="answer tokens before the confidence (default 16)")
    ap.add_argument("--learning-rate", type=float, default=3e-5, help="default 3e-5")
    ap.add_argument("--train", choices=["confidence", "all"], default="confidence",
                    help="what GRPO trains: the confidence number alone, rewarded by its calibration part "
                         "(default), or the whole completion with the full RLCR reward")
    ap.add_argument("--train-layers", type=int, default=4,
                    help="train only the top N decoder layers and the final norm (default 4 of 30; 0 = all)")
    ap.add_argument("--temperature", type=float, default=0.7,
                    help="sampling temperature of the answers in training rollouts (default 0.7: nearer the "
                         "greedy answers the held-out items are scored on)")
    ap.add_argument("--confidence-temperature", type=float, default=1.0,
                    help="sampling temperature of the confidence number in training rollouts (default 1.0; raise it "
                         "when the prompted model puts nearly all its mass on one number)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-stop-early", action="store_true", help="let the watch report but never stop training")
    ap.add_argument("--keep-last", action="store_true",
                    help="score the last step's policy, not the one of the watch's best dev evaluation")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.train_items, args.held_out, args.watch_items, args.every = 3, 12, 8, 6, 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AGENTRT_HOME", str(out / "home"))
    reuse_converted_model()
    import torch

    from agentrt.core.config import load_settings
    from agentrt.backends.embedded import EMBEDDED_NAME, embedded_model_path
    from agentrt.train.grpo import read_prompt_rows, rlcr_rows, train_grpo
    from agentrt.train.watch import HeldOut, make_watch

    settings = load_settings()
    torch.set_num_threads(settings.torch_threads)
    base_dir = embedded_model_path(settings.models_dir)
    args.model_label = EMBEDDED_NAME
    if not (out / "train.jsonl").is_file():
        train, held, dev = split(args.seed, args.train_items, args.held_out, args.watch_items)
        _write_jsonl(out / "dev.jsonl", dev)
        _write_jsonl(out / "heldout.jsonl", held)
        _write_jsonl(out / "train.jsonl", train)  # last: its presence says the split is complete
    train = read_prompt_rows(out / "train.jsonl")
    held = rlcr_rows(read_prompt_rows(out / "heldout.jsonl"))
    dev = rlcr_rows(read_prompt_rows(out / "dev.jsonl"))
    print(f"data: {len(train)} train prompts, {len(dev)} dev items (the watch's), {len(held)} held-out items ({out})",
          file=sys.stderr)

    base = _score(base_dir, held, args.max_answer_tokens, out / "base.json")
    raw = read_prompt_rows(out / "heldout.jsonl")
    anchored_rows = [{**r, "prompt": r["prompt"][:-1] + [{**r["prompt"][-1], "content": f"{r['prompt'][-1]['content']}\n\n"
                                                          f"{ANCHORED_INSTRUCTION}"}]} for r in raw]
    anchored = _score(base_dir, anchored_rows, args.max_answer_tokens, out / "base-anchored.json")
    print(f"base: accuracy {base['accuracy']:.3f}, ECE {_fmt(base['ece'])}, AUROC {_fmt(base['auroc'])}, "
          f"free-missing {base['free_missing']:.2f} ({base['wall_s']} s)", file=sys.stderr)

    policy = out / "policy"
    info_path = out / "train.json"
    if not info_path.is_file():
        ref, tok = _load_model(base_dir)
        ref.requires_grad_(False)
        watch = make_watch(HeldOut(dev, tok, reference=ref, max_answer_tokens=args.max_answer_tokens),
                           out / "watch", every=args.every, stop_early=not args.no_stop_early,
                           keep_best=not args.keep_last)
        started = time.perf_counter()
        report = train_grpo(train, policy, steps=args.steps, num_generations=args.num_generations,
                            batch_size=args.batch_size, max_completion_length=args.max_answer_tokens,
                            learning_rate=args.learning_rate, seed=args.seed, reward="rlcr", callbacks=[watch],
                            save_steps=args.every, resume=True,
                            confidence_temperature=args.confidence_temperature, train=args.train,
                            temperature=args.temperature, train_layers=args.train_layers)
        wall = time.perf_counter() - started
        # Optimizer-step time survives a resume (TRL logs it per step into the checkpointed trainer state);
        # the wall time is this process's (training + the watch's scoring).
        step_time = sum(float(e.get("step_time", 0.0)) for e in report.log)
        info = {"steps": report.steps, "wall_s": wall, "step_s": step_time / max(1, report.steps),
                "watch_evals": len(watch.log.entries),
                "n_train": len(train), "rewards": report.rewards, "components": report.components,
                "stopped": watch.log.stopped, "restored": watch.log.restored, "best_step": watch.log.best_step}
        info_path.write_text(json.dumps(info, indent=1))
    info = json.loads(info_path.read_text())
    trained = _score(policy, held, args.max_answer_tokens, out / "trained.json")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = table(base, trained, info, args, load, held, anchored)
    (out / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
