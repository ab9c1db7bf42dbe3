"""GRPO on the strategy environment: the policy learns which route a question deserves (``train-policy --env strategy``).

Single-turn, through TRL's GRPOTrainer as is: the prompt is the question inside the route-label instruction
(``agentrt.router.selfpolicy.messages``, the one the ``self:PATH`` router scores), the completion a label drawn
from the policy's distribution over the six labels (``label_rollout``, TRL's ``rollout_func``: SmolLM2-135M
asked freely writes no label at all, so every completion of a group would earn the same). The
reward of a completion is read from the outcome cache (``agentrt.train.outcomes``), not run:

    reward = verifier score - lambda * tokens / budget      (lambda = settings.router_lambda, the router's)

for the (question, label) cell; a missing cell gets the cache's fallback (the route's mean reward in the
question's family over the training questions, else over all of them: ``OutcomeCache.estimate``), counted as
``imputed``; a completion that names no label gets ``INVALID_REWARD``, below what any route earns.

Held out: by family (``leave_out``: every question of those suites) and by question (``holdout``: a stable
hash share of the rest); the trainer never sees a held-out question, nor its cells in the fallback's means.
After training, ``calibrate`` maps the policy's label probabilities to success on the training questions and
writes ``self_router.json`` beside the policy, which makes the folder a ``self:PATH`` router.

Needs ``agentrt[train,hf]``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.core.errors import InputError, missing_extra
from agentrt.core.types import ROUTES
from agentrt.router.selfpolicy import CALIBRATION_FILE, ActionCalibration, SelfCalibration, messages, parse_label, softmax
from agentrt.train.grpo import TrainReport, cpu_grpo_config, load_trainable
from agentrt.train.outcomes import OutcomeCache
from agentrt.train.watch import HeldOut
from agentrt.core.config import Settings

INVALID_REWARD = -0.5  # a completion that names no route: below the worst route (score 0, a whole budget spent)
SIGNAL_SAMPLE = 150  # training signals kept per action for the self router's evidence kernel


def split(cache: OutcomeCache, *, holdout: float = 0.2, leave_out: tuple[str, ...] = (),
          seed: int = 0) -> tuple[list[str], list[str]]:
    """(training questions, held-out questions): every question of a ``leave_out`` family is held out, and a
    stable-hash ``holdout`` share of the others (a question stays on its side across runs)."""
    if not 0 <= holdout < 1:
        raise InputError(f"--holdout must be in [0, 1); got {holdout}")
    unknown = [f for f in leave_out if f not in set(cache.families.values())]
    if unknown:
        raise InputError(f"no questions of family {', '.join(unknown)} in the outcomes; families there: "
                         f"{', '.join(sorted(set(cache.families.values())))}")

    def held(q: str) -> bool:
        h = int.from_bytes(hashlib.blake2b(f"{seed}:{q}".encode(), digest_size=4).digest(), "little")
        return cache.families[q] in leave_out or (h % 10_000) / 10_000 < holdout

    train = [q for q in cache.questions if not held(q)]
    if not train:
        raise InputError("every question is held out: lower --holdout or leave out fewer families")
    return train, [q for q in cache.questions if held(q)]


def rows(questions: list[str]) -> list[dict[str, Any]]:
    """TRL prompt-only rows: the instruction prompt and the question (the reward function's key)."""
    return [{"prompt": [m.to_dict() for m in messages(q)], "question": q} for q in questions]


@dataclass
class RewardStats:
    """Where the rewards came from, over the whole run (the report's ``sources``)."""

    cache: int = 0
    family: int = 0
    route: int = 0
    missing: int = 0
    invalid: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def reward_fn(cache: OutcomeCache, lam: float, means: dict, stats: RewardStats) -> Any:
    """The GRPO reward function: each completion's label valued from the cache (see the module docstring)."""

    def strategy_reward(completions: list[Any], question: list[str], **_: Any) -> list[float]:
        out = []
        for completion, q in zip(completions, question):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            label = parse_label(text)
            if label is None:
                stats.invalid += 1
                out.append(INVALID_REWARD)
                continue
            value, source = cache.estimate(q, label, lam, means)
            setattr(stats, source, getattr(stats, source) + 1)
            out.append(value)
        return out

    return strategy_reward


def _prompt_ids(tokenizer: Any, question: str) -> list[int]:
    from agentrt.train._confidence_gen import prompt_ids

    return prompt_ids(tokenizer, [m.to_dict() for m in messages(question)])


def label_logprobs(model: Any, tokenizer: Any, prompts: list[list[int]], batch: int = 8) -> list[dict[str, list[float]]]:
    """Per prompt (token ids, chat template applied), each label's per-token log-probabilities as the start of the
    reply. One forward pass per prompt: the prompt followed by the longest label; every other one-token label is
    read at the prompt's last position (a label of several tokens that is not the longest gets its own row)."""
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids_of = {a: tokenizer(a, add_special_tokens=False).input_ids for a in ROUTES}
    longest = max(ROUTES, key=lambda a: len(ids_of[a]))
    own = [longest, *(a for a in ROUTES if a != longest and len(ids_of[a]) > 1)]
    device = next(model.parameters()).device
    out: list[dict[str, list[float]]] = []
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for i in range(0, len(prompts), batch):
            seqs, where = [], []
            for prefix in prompts[i:i + batch]:
                where.append({a: len(seqs) + k for k, a in enumerate(own)})
                seqs += [(len(prefix), list(prefix) + ids_of[a]) for a in own]
            width = max(len(s) for _, s in seqs)
            ids = torch.tensor([s + [pad] * (width - len(s)) for _, s in seqs], device=device)
            attn = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for _, s in seqs], device=device)
            logp = torch.log_softmax(model(input_ids=ids, attention_mask=attn).logits.float(), -1)
            for rows in where:
                per: dict[str, list[float]] = {}
                for a in ROUTES:
                    row = rows.get(a, rows[longest])
                    start = seqs[row][0]
                    per[a] = [float(logp[row, start - 1 + k, t]) for k, t in enumerate(ids_of[a])]
                out.append(per)
    if was_training:
        model.train()
    return out


def label_distributions(model: Any, tokenizer: Any, questions: list[str], batch: int = 8) -> list[dict[str, float]]:
    """pi(a | q) per question: the softmax over the labels' summed log-probabilities, as ``SelfPolicyRouter``
    computes it through the hf backend."""
    per = label_logprobs(model, tokenizer, [_prompt_ids(tokenizer, q) for q in questions], batch)
    return [softmax({a: sum(lp) for a, lp in p.items()}) for p in per]


EXPLORE_SHARE = 1.0  # the default share of each GRPO group whose labels are dealt uniformly (see label_rollout)


def label_rollout(temperature: float = 1.0, seed: int = 0, explore_share: float = EXPLORE_SHARE) -> Any:
    """A TRL ``rollout_func``: each prompt's completion is one route label (the small model, asked freely, writes
    "The capital of France" instead of a label: no group would differ in reward). The loss then moves the label
    tokens' log-probabilities, the signal ``self:PATH`` routes by.

    ``explore_share``: that share of each group (``trainer.num_generations`` consecutive completions of one
    prompt, ``round(share * N)`` of them) gets labels drawn uniformly over the six routes, the rest from the
    policy's distribution. The uniform draws are stratified (dealt from a reshuffled deck of the six labels), so
    a group of N >= 6 / share holds every label, and any group holds no label twice before it holds each once.
    Why: a policy that puts ~1% on a label (``abstain``: three tokens, each paying its own probability) never
    samples it, so GRPO never learns what it is worth. The returned logprobs stay the policy's own and GRPO's
    loss recomputes them on the policy, so the update still raises the labels whose reward beats the group
    mean, whichever way they were drawn; exploration only decides which labels get compared.
    Default 1.0, full information: the outcome cache prices every label of every question, so a group of six
    holds each label once and GRPO's baseline is the mean over the six; the update moves every question toward
    its better labels with no luck in which labels got compared. Measured (issue 36, docs/environments.md):
    with half the group on-policy (0.5, groups of 4) the policy collapsed onto whichever label won early, and
    which one depended on the step count (12 steps: a mix; 24: abstain; 104: direct everywhere); full
    information gave the same decision at 24 and 72 steps on every split."""
    if not 0.0 <= explore_share <= 1.0:
        raise InputError(f"--explore-share must be in [0, 1]; got {explore_share}")
    rng = random.Random(seed)
    deck: list[str] = []

    def uniform() -> str:
        if not deck:
            deck.extend(rng.sample(ROUTES, len(ROUTES)))
        return deck.pop()

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from agentrt.train._confidence_gen import prompt_ids

        tokenizer = trainer.processing_class
        ids = [prompt_ids(tokenizer, p) for p in prompts]
        per = label_logprobs(trainer.model, tokenizer, ids)
        labels = []
        for p in per:
            dist = softmax({a: sum(lp) / temperature for a, lp in p.items()})
            labels.append(rng.choices(list(dist), weights=list(dist.values()))[0])
        # TRL repeats each prompt num_generations times in a row: those are the groups
        n = max(1, int(getattr(trainer, "num_generations", None) or len(labels)))
        for g in range(0, len(labels), n):
            size = min(n, len(labels) - g)
            for i in rng.sample(range(g, g + size), round(explore_share * size)):
                labels[i] = uniform()
        return {"prompt_ids": ids, "completion_ids": [tokenizer(a, add_special_tokens=False).input_ids for a in labels],
                "logprobs": [p[a] for p, a in zip(per, labels)]}

    return rollout


def calibrate(cache: OutcomeCache, questions: list[str], label_ps: list[dict[str, float]], lam: float,
              provenance: dict[str, Any] | None = None, seed: int = 0) -> SelfCalibration:
    """Per action, p_success = sigmoid(w . z + b), z the standardized log pi(. | x) of the six labels, fit
    (weighted logistic, L2 on the weights) on the training questions' cells of that action; mean tokens, base
    rate and a sample of z for the evidence kernel."""
    import numpy as np

    from agentrt.router.selfpolicy import signals
    from agentrt.train.router import _logistic

    by_q = {q: signals(p) for q, p in zip(questions, label_ps)}
    S = np.asarray(list(by_q.values()))
    mean, std = S.mean(0), S.std(0)
    std[std < 1e-6] = 1.0
    actions: dict[str, ActionCalibration] = {}
    rng = random.Random(seed)
    for a in ROUTES:
        cells = [(q, c) for (q, r), c in cache.cells.items() if r == a and q in by_q]
        if not cells:
            continue
        Z = (np.asarray([by_q[q] for q, _ in cells]) - mean) / std
        y = np.asarray([c.success for _, c in cells])
        n = np.asarray([float(c.n) for _, c in cells])
        # held toward the base rate (few runs of an action separate by chance); the intercept free
        coef = _logistic(np.hstack([Z, np.ones((len(cells), 1))]), y, n, np.asarray([0.05] * Z.shape[1] + [0.0]))
        sample = [[round(float(v), 3) for v in row] for row in Z]
        rng.shuffle(sample)
        actions[a] = ActionCalibration(w=[round(float(v), 5) for v in coef[:-1]], b=float(coef[-1]), runs=int(n.sum()),
                                       base_rate=round(float((y * n).sum() / n.sum()), 4),
                                       tokens=round(float(sum(c.tokens * c.n for _, c in cells) / n.sum()), 1),
                                       sample=sample[:SIGNAL_SAMPLE])
    if not actions:
        raise InputError("no training question has a logged route: the outcomes hold nothing to calibrate on")
    # the Gaussian kernel's width as the learned router's evidence sets it (agentrt.router.evidence): the median
    # distance of a training question's signals to its NEIGHBOURS-th nearest other, so a typical training question
    # has about that many near it (a fixed rule of thumb left every question without evidence in six dimensions)
    from agentrt.router.evidence import MIN_BANDWIDTH, NEIGHBOURS

    Zall = (S - mean) / std
    dist = np.sqrt(((Zall[:, None, :] - Zall[None, :, :]) ** 2).sum(-1))
    k = min(NEIGHBOURS, len(Zall) - 1)
    bandwidth = max(0.5 * MIN_BANDWIDTH, float(np.median(np.sort(dist, 1)[:, k]))) if k > 0 else MIN_BANDWIDTH
    return SelfCalibration(actions, [float(v) for v in mean], [float(v) for v in std], round(bandwidth, 4), lam,
                           dict(provenance or {}))


@dataclass
class StrategyHeldOut(HeldOut):
    """The watch's held-out score for the strategy policy (``watch.make_watch`` calls ``score``): the value of
    the policy's most probable label on held-out questions (cache or fallback), the verdict of that label where
    logged (``accuracy``), the share of its top label (``same_answer``: a collapse to one route trips the
    watch's format_gaming flag) and the KL from the reference policy's label distribution."""

    cache: OutcomeCache | None = None
    lam: float = 0.3
    means: dict | None = None

    def score(self, model: Any, *, records: bool = False) -> dict[str, Any]:
        questions = [r["question"] for r in self.rows]
        ps = label_distributions(model, self.tokenizer, questions, self.batch)
        picks = [max(p, key=p.get) for p in ps]
        values = [self.cache.estimate(q, a, self.lam, self.means or {})[0] for q, a in zip(questions, picks)]
        verdicts = [self.cache.cells[(q, a)].success for q, a in zip(questions, picks) if (q, a) in self.cache.cells]
        n = max(1, len(questions))
        out: dict[str, Any] = {"value": sum(values) / n, "n": len(questions),
                               "accuracy": sum(verdicts) / len(verdicts) if verdicts else None,
                               "same_answer": max(picks.count(a) for a in set(picks)) / n if picks else 0.0,
                               "labels": {a: picks.count(a) for a in sorted(set(picks))}, "kl": None}
        if self.reference is not None:
            ref = label_distributions(self.reference, self.tokenizer, questions, self.batch)
            out["kl"] = sum(sum(p[a] * math.log(max(p[a], 1e-12) / max(r[a], 1e-12)) for a in p)
                            for p, r in zip(ps, ref)) / n
        if records:
            out["records"] = [{"question": q, "label": a, "p": p} for q, a, p in zip(questions, picks, ps)]
        return out


def train_strategy(cache: OutcomeCache, output_dir: str | Path, *, train_questions: list[str], lam: float,
                   model_dir: str | Path | None = None, steps: int = 20, num_generations: int = 6, batch_size: int = 12,
                   max_completion_length: int = 4, learning_rate: float = 3e-5, temperature: float = 1.0,
                   seed: int = 0, callbacks: list[Any] | None = None, save_steps: int = 0, resume: bool = False,
                   train_layers: int = 0, calibrate_on: int = 400, provenance: dict[str, Any] | None = None,
                   explore_share: float = EXPLORE_SHARE) -> tuple[TrainReport, dict[str, Any]]:
    """GRPO on the training questions; the policy saved at ``output_dir`` with its ``self_router.json``.

    Returns (the trainer's report, extras: the reward ``sources`` counts and the calibration's summary).
    ``calibrate_on``: at most that many training questions (a stable sample) calibrate the self router.
    ``explore_share``: the share of each group's labels drawn uniformly (``label_rollout``)."""
    if steps < 1 or num_generations < 2 or batch_size % num_generations:
        raise InputError("need steps >= 1, num_generations >= 2 and batch_size a multiple of num_generations")
    rollout = label_rollout(temperature, seed, explore_share)  # checks the share before the model loads
    try:
        import torch
        from datasets import Dataset
        import transformers  # noqa: F401 - checked here so a missing extra is one line
        from trl import GRPOTrainer
    except ImportError as e:
        raise missing_extra(e.name or "trl", "train") from None

    _, model, tokenizer, before = load_trainable(model_dir, seed, train_layers)
    means = cache.means(train_questions, lam)
    stats = RewardStats()
    data = rows(train_questions)
    random.Random(seed).shuffle(data)
    gpu = torch.cuda.is_available()
    config = cpu_grpo_config(output_dir, steps=steps, batch_size=batch_size, num_generations=num_generations,
                             max_completion_length=max_completion_length, learning_rate=learning_rate, save_steps=save_steps,
                             seed=seed, temperature=temperature, gpu=gpu)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is TRL's experimental hook
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn(cache, lam, means, stats), args=config,
                          train_dataset=Dataset.from_list(data), processing_class=tokenizer,
                          callbacks=list(callbacks or []), rollout_func=rollout)
    started = time.perf_counter()
    checkpoint = resume and any(Path(output_dir).glob("checkpoint-*"))
    trainer.train(resume_from_checkpoint=True if checkpoint else None)
    wall = time.perf_counter() - started
    model = trainer.model
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    changed, max_delta = 0, 0.0
    for name, p in model.named_parameters():
        delta = (p.detach().cpu() - before[name]).abs().max().item()
        changed += delta > 0
        max_delta = max(max_delta, delta)
    sample = sorted(train_questions, key=lambda q: hashlib.blake2b(q.encode(), digest_size=4).digest())[:calibrate_on]
    calibration = calibrate(cache, sample, label_distributions(model, tokenizer, sample), lam,
                            provenance={**(provenance or {}), "steps": trainer.state.global_step,
                                        "training_questions": len(train_questions), "calibrated_on": len(sample)})
    calibration.save(Path(output_dir) / CALIBRATION_FILE)
    log = [dict(e) for e in trainer.state.log_history]
    report = TrainReport(steps=trainer.state.global_step, rewards=[float(e["reward"]) for e in log if "reward" in e],
                         changed_tensors=int(changed), total_tensors=len(before), max_abs_delta=max_delta,
                         wall_s=round(wall, 2), output_dir=str(output_dir), log=log)
    extras = {"sources": stats.to_dict(), "explore_share": explore_share,
              "calibration": {a: {"runs": c.runs, "base_rate": c.base_rate, "tokens": c.tokens}
                              for a, c in calibration.actions.items()}}
    (Path(output_dir) / "strategy.json").write_text(json.dumps({**report.to_dict(), **extras}, indent=1))
    return report, extras


def self_estimator(calibration: SelfCalibration, label_ps: dict[str, dict[str, float]],
                   settings: Settings) -> Any:
    """The ``self:PATH`` router as the runtime runs it (``SelfPolicyRouter.decide_from``), for the off-policy
    evaluation (``router_eval.evaluate``): per logged run, the action the policy picks (``label_choice``: its most
    probable allowed label) and its question's (p_success, expected tokens), shrunk toward the base rates where
    that action lacks evidence. ``label_ps``: question -> pi(a | q). Returns (estimator, calibrated, pick):
    pass ``pick`` to ``evaluate`` (the decision is the policy's, not the utility rule over the estimates)."""
    from agentrt.router.evidence import MIN_EVIDENCE, shrunk
    from agentrt.router.selfpolicy import label_choice
    from agentrt.train.router_eval import config

    minimum = float(getattr(settings, "router_min_evidence", MIN_EVIDENCE))
    base = {a: c.base_rate for a, c in calibration.actions.items()}
    cfg = config(calibration.lam, tuple(calibration.actions))
    cache: dict[tuple[str, int], tuple[tuple[dict[str, float], dict[str, float]], bool, str]] = {}

    def decide(e: Any) -> tuple[tuple[dict[str, float], dict[str, float]], bool, str]:
        key = (e.question, e.budget)
        if key not in cache:
            label_p = label_ps[e.question]
            p, tokens, sizes = calibration.predict(label_p)
            pick = label_choice("self", label_p, p, tokens, e.budget, cfg).action
            ok = sizes.get(pick, 0.0) >= minimum
            cache[key] = ((p if ok else shrunk(p, sizes, base, minimum), tokens), ok, pick)
        return cache[key]

    return (lambda e: decide(e)[0]), (lambda e: decide(e)[1]), (lambda e: decide(e)[2])
