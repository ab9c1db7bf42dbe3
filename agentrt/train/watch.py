"""The overoptimization watch for calibration RL (``train-policy --grpo --reward rlcr``).

Every ``every`` optimizer steps a TrainerCallback scores a held-out slice the trainer never sees, greedily,
with the same answer + confidence procedure as training (``_confidence_gen.py``), and logs:

* accuracy (verifier score >= ``pass_score``), ECE (10 equal-width bins) and AUROC of the stated confidence,
  Brier, the rate of confident wrong answers (q >= 0.8 and wrong), the held-out RLCR reward (``value``);
* how often the policy stated no confidence itself (``free_missing``: the runtime had to add the tail) or a
  malformed one, the mean completion length in tokens and the share cut at the token limit;
* the KL to the reference (starting) model: mean over held-out completion tokens of
  KL(policy || reference) over the whole vocabulary.

Collapse flags (reported in the log, on stderr and in the plot; they do not stop training by themselves):

* ``constant_confidence``: the stated confidences have std < 0.02 (one number for everything);
* ``format_gaming``: over half the answers are the same text, or are empty, or carry a malformed tag, or over
  a quarter carry pieces of the tag in the answer itself (``<0.05</confidence).`` instead of an answer);
* ``length_blowup``: mean length over ``length_factor`` x the first evaluation's, or over half cut at the limit.
* ``answer_drift``: held-out accuracy more than ``drift`` (0.1) below the first evaluation's: training the
  confidence moved the answers (on the 135M model its low numbers leaked into them: "The answer is 0.0000").

Early stop (``stop_early``): training stops when the held-out value has stayed more than ``tol`` below its best
for ``patience`` evaluations in a row while the train reward (mean over the steps since the previous evaluation)
is above what it was at that best evaluation: the policy is learning the training prompts, not calibration.

Keep best (``keep_best``, on by default): each evaluation whose held-out value beats every earlier one saves the
trainable weights to ``<prefix>-best.pt``; when training ends (at its last step or stopped early) past that
evaluation, the model is put back to those weights before it is saved, and the log says so (``restored``). The
watch rows then select the checkpoint: report the result on items the watch never scored.

Curves (train reward and held-out metrics per step) go to ``<prefix>.png`` (matplotlib, Agg) and
``<prefix>.json``; a resumed run reads the JSON back and continues it.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.confidence import split_confidence
from agentrt.core.errors import InputError

CONFIDENT = 0.8


def ece(probs: list[float], outcomes: list[bool], bins: int = 10) -> float | None:
    """Expected calibration error over equal-width bins: the router's rule (``train/router.py``)."""
    from agentrt.train.router import calibration as binned

    return binned(probs, [float(o) for o in outcomes], bins)["ece"] if probs else None


def calibration(probs: list[float], outcomes: list[bool]) -> dict[str, float | None]:
    """Accuracy, ECE, AUROC, Brier and the confident-wrong rate of stated confidences against outcomes."""
    from agentrt.train.router import calibration as binned
    from agentrt.train.router_eval import auroc  # the router's AUROC (ties count half); imported when used

    n = len(probs)
    if not n:
        return {"accuracy": None, "ece": None, "auroc": None, "brier": None, "confident_wrong": None}
    labels = [float(o) for o in outcomes]
    binned_stats = binned(probs, labels)
    return {
        "accuracy": sum(outcomes) / n,
        "ece": binned_stats["ece"],
        "auroc": auroc(probs, labels),
        "brier": binned_stats["brier"],
        "confident_wrong": sum(p >= CONFIDENT and not o for p, o in zip(probs, outcomes)) / n,
    }


def _std(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


@dataclass
class HeldOut:
    """Scores a policy on held-out rows (``prompt`` messages with the instruction, ``answer``, ``verifier``)."""

    rows: list[dict[str, Any]]
    tokenizer: Any
    reference: Any = None            # the frozen starting model, for the KL; None: no KL
    max_answer_tokens: int = 16
    pass_score: float = 0.5          # a verifier score at least this counts as right (qa gives F1 partial credit)
    batch: int = 16

    def score(self, model: Any, *, records: bool = False) -> dict[str, Any]:
        from agentrt.train._confidence_gen import ConfidenceTail, generate_with_confidence, prompt_ids
        from agentrt.train.grpo import decode_truth
        from agentrt.trajectory import rewards

        tail = ConfidenceTail(self.tokenizer)
        prompts = [prompt_ids(self.tokenizer, r["prompt"]) for r in self.rows]
        rolls = []
        for i in range(0, len(prompts), self.batch):
            rolls += generate_with_confidence(model, self.tokenizer, prompts[i:i + self.batch],
                                              max_answer_tokens=self.max_answer_tokens, sample=False, tail=tail)
        items, probs, outcomes, values = [], [], [], []
        for row, roll in zip(self.rows, rolls):
            name = row.get("verifier") or rewards.verifier_for(row.get("data_source") or "") or "qa"
            r = rewards.score(f"rlcr:{name}", roll.text, decode_truth(row["answer"], name))
            stated = split_confidence(roll.text)
            right = float(r.components["correct"]) >= self.pass_score
            values.append(r.score)
            if stated.confidence is not None:
                probs.append(stated.confidence)
                outcomes.append(right)
            items.append({"text": roll.text, "answer": stated.answer, "confidence": stated.confidence,
                          "status": stated.status, "correct": right, "score": r.components["correct"],
                          "tail_added": roll.tail_added, "tokens": len(roll.completion_ids),
                          "truncated": roll.hit_limit})
        n = len(items)
        out: dict[str, Any] = calibration(probs, outcomes)
        # Accuracy over every item (an item without a usable confidence still counts for accuracy).
        out["accuracy"] = sum(it["correct"] for it in items) / n
        answers = [it["answer"].strip().lower() for it in items]
        top = max(answers.count(a) for a in set(answers)) if answers else 0
        out.update({
            "value": sum(values) / n, "n": n, "stated": len(probs),
            "free_missing": sum(it["tail_added"] for it in items) / n,
            "malformed": sum(it["status"] == "malformed" for it in items) / n,
            "missing": sum(it["status"] == "missing" for it in items) / n,
            "confidence_mean": sum(probs) / len(probs) if probs else None, "confidence_std": _std(probs),
            "mean_length": sum(len(r.completion_ids) for r in rolls) / n,
            "truncated": sum(it["truncated"] for it in items) / n,
            "same_answer": top / n if n else 0.0, "empty": sum(not a for a in answers) / n if n else 0.0,
            # Pieces of the tag inside the answer ("<0.05</confidence)."): the policy writing the format, not an answer.
            "tag_in_answer": sum("confidence" in a or "</" in a for a in answers) / n if n else 0.0,
            "kl": self._kl(model, rolls) if self.reference is not None else None,
        })
        if records:
            out["records"] = items
        return out

    def _kl(self, model: Any, rolls: list[Any]) -> float:
        """Mean per-token KL(policy || reference) on the completions, over the full vocabulary."""
        import torch
        import torch.nn.functional as F

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        total, count = 0.0, 0
        was_training = model.training
        model.eval()
        with torch.no_grad():
            for i in range(0, len(rolls), self.batch):
                chunk = rolls[i:i + self.batch]
                seqs = [r.prompt_ids + r.completion_ids for r in chunk]
                width = max(len(s) for s in seqs)
                ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
                attn = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
                device = next(model.parameters()).device
                lp = F.log_softmax(model(input_ids=ids.to(device), attention_mask=attn.to(device)).logits.float(), -1)
                ref_device = next(self.reference.parameters()).device
                lq = F.log_softmax(self.reference(input_ids=ids.to(ref_device),
                                                  attention_mask=attn.to(ref_device)).logits.float(), -1).to(device)
                kl = (lp.exp() * (lp - lq)).sum(-1)  # [batch, positions]
                for b, r in enumerate(chunk):
                    start, end = len(r.prompt_ids) - 1, len(r.prompt_ids) + len(r.completion_ids) - 1
                    total += kl[b, start:end].sum().item()
                    count += end - start
        if was_training:
            model.train()
        return total / max(1, count)


def flags(entry: dict[str, Any], first: dict[str, Any] | None, *, collapse_std: float = 0.02,
          length_factor: float = 2.0, drift: float = 0.1) -> list[str]:
    """Collapse flags for one evaluation (see the module docstring)."""
    out = []
    if entry.get("stated", 0) >= 5 and entry.get("confidence_std", 1.0) < collapse_std:
        out.append("constant_confidence")
    if (entry.get("same_answer", 0) > 0.5 or entry.get("empty", 0) > 0.5 or entry.get("malformed", 0) > 0.5
            or entry.get("tag_in_answer", 0) > 0.25):
        out.append("format_gaming")
    if (first and first.get("mean_length") and entry["mean_length"] > length_factor * first["mean_length"]) \
            or entry.get("truncated", 0) > 0.5:
        out.append("length_blowup")
    if first and first.get("accuracy") is not None and entry.get("accuracy") is not None \
            and entry["accuracy"] < first["accuracy"] - drift:
        out.append("answer_drift")
    return out


def should_stop(entries: list[dict[str, Any]], *, patience: int = 2, tol: float = 0.02) -> str | None:
    """The early-stop rule: held-out value below its best (by more than ``tol``) for ``patience`` evaluations
    in a row while the train reward stands above its level at the best evaluation. Returns why, or None."""
    scored = [e for e in entries if e.get("value") is not None]
    if len(scored) < patience + 1:
        return None
    best = max(scored, key=lambda e: e["value"])
    tail = scored[-patience:]
    if best in tail:
        return None
    falling = all(e["value"] < best["value"] - tol for e in tail)
    base_train = best.get("train_reward")
    rising = base_train is not None and all(e.get("train_reward") is not None and e["train_reward"] > base_train + tol
                                            for e in tail)
    if falling and rising:
        return (f"held-out value fell from {best['value']:.3f} (step {best['step']}) to {tail[-1]['value']:.3f} "
                f"while the train reward rose from {base_train:.3f} to {tail[-1]['train_reward']:.3f}")
    return None


def plot(entries: list[dict[str, Any]], train: list[tuple[int, float]], path: str | Path) -> None:
    """Train reward per step against the held-out metrics per evaluation (PNG, matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
    steps = [e["step"] for e in entries]
    ax = axes[0]
    if train:
        ax.plot([s for s, _ in train], [r for _, r in train], color="0.6", lw=1,
                label="train reward (per step; GRPO's scalar)")
    ax.plot(steps, [e.get("value") for e in entries], "o-", label="held-out RLCR reward")
    ax.set_ylabel("reward")
    ax.legend(fontsize=8)
    ax = axes[1]
    for key in ("accuracy", "ece", "auroc", "confident_wrong", "free_missing"):
        ax.plot(steps, [e.get(key) if e.get(key) is not None else float("nan") for e in entries], "o-", label=key)
    ax.set_ylabel("held-out")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=8, ncol=3)
    ax = axes[2]
    ax.plot(steps, [e.get("kl") if e.get("kl") is not None else float("nan") for e in entries], "o-", label="KL to ref")
    ax.set_ylabel("KL (nats/token)")
    ax2 = ax.twinx()
    ax2.plot(steps, [e.get("mean_length") for e in entries], "s--", color="C3", label="mean length")
    ax2.set_ylabel("tokens")
    ax.set_xlabel("optimizer step")
    for e in entries:
        if e.get("flags"):
            axes[0].annotate(",".join(e["flags"]), (e["step"], e.get("value") or 0), fontsize=6, rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)


@dataclass
class WatchLog:
    entries: list[dict[str, Any]] = field(default_factory=list)
    stopped: str | None = None
    best_step: int | None = None
    restored: str | None = None


def _trainable(model: Any) -> dict[str, Any]:
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters() if p.requires_grad}


def make_watch(held_out: HeldOut, prefix: str | Path, *, every: int = 10, patience: int = 2, tol: float = 0.02,
               stop_early: bool = True, score_start: bool = True, keep_best: bool = True) -> Any:
    """A transformers ``TrainerCallback`` running the watch (import-time light: TRL/transformers load here)."""
    import torch
    from transformers import TrainerCallback

    prefix = Path(prefix)
    log_path, png_path = prefix.with_suffix(".json"), prefix.with_suffix(".png")
    best_path = prefix.with_name(prefix.name + "-best.pt")

    class OveroptimizationWatch(TrainerCallback):
        def __init__(self) -> None:
            self.log = WatchLog()
            if log_path.is_file():  # a resumed run continues its curves
                data = json.loads(log_path.read_text())
                self.log = WatchLog(data.get("entries", []), data.get("stopped"), data.get("best_step"))

        def _train(self, state: Any) -> list[tuple[int, float]]:
            return [(int(e["step"]), float(e["reward"])) for e in state.log_history if "reward" in e and "step" in e]

        def _evaluate(self, state: Any, model: Any) -> None:
            step = int(state.global_step)
            if any(e["step"] == step for e in self.log.entries):
                return
            train = self._train(state)
            prev = self.log.entries[-1]["step"] if self.log.entries else 0
            window = [r for s, r in train if prev < s <= step]
            entry = {"step": step, "train_reward": sum(window) / len(window) if window else None,
                     **held_out.score(model)}
            entry["flags"] = flags(entry, self.log.entries[0] if self.log.entries else None)
            earlier = [e["value"] for e in self.log.entries if e.get("value") is not None]
            self.log.entries.append(entry)
            if entry.get("value") is not None and all(entry["value"] > v for v in earlier):
                self.log.best_step = step
                if keep_best:
                    prefix.parent.mkdir(parents=True, exist_ok=True)
                    torch.save(_trainable(model), best_path)
            if entry["flags"]:
                print(f"agentrt: watch: step {step}: {', '.join(entry['flags'])}", file=sys.stderr)
            self._write(state)

        def _write(self, state: Any) -> None:
            prefix.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(json.dumps({"entries": self.log.entries, "stopped": self.log.stopped,
                                            "best_step": self.log.best_step, "restored": self.log.restored,
                                            "train": self._train(state)}, indent=1))
            plot(self.log.entries, self._train(state), png_path)

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
            if score_start and model is not None and not self.log.entries:
                self._evaluate(state, model)

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
            if model is None or state.global_step % every:
                return
            self._evaluate(state, model)
            why = should_stop(self.log.entries, patience=patience, tol=tol)
            if why and stop_early:
                self.log.stopped = f"step {state.global_step}: {why}"
                print(f"agentrt: watch: stopping early: {why}", file=sys.stderr)
                control.should_training_stop = True
                self._write(state)

        def on_train_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
            if model is None:
                return
            self._evaluate(state, model)
            best, step = self.log.best_step, int(state.global_step)
            if keep_best and best is not None and best != step and best_path.is_file():
                # By name and shape, all or nothing: a snapshot of another model, or of other trainable layers
                # (a resumed run with another --train-layers), fails with the fix instead of a half-restored policy.
                weights = torch.load(best_path, map_location="cpu")
                params = dict(model.named_parameters())
                trainable = {name for name, p in params.items() if p.requires_grad}
                if set(weights) != trainable or any(params[n].shape != w.shape for n, w in weights.items()):
                    raise InputError(f"{best_path} holds other weights than this run trains (another run's?): "
                                     f"delete it and train again, or pass --keep-last")
                with torch.no_grad():
                    for name, value in weights.items():
                        params[name].copy_(value)
                value = next(e["value"] for e in self.log.entries if e["step"] == best)
                self.log.restored = f"step {best} (held-out value {value:.3f}) instead of step {step}"
                print(f"agentrt: watch: keeping the best evaluation: {self.log.restored}", file=sys.stderr)
                self._write(state)

    return OveroptimizationWatch()
