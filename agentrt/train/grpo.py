"""GRPO on the CPU with TRL: the proof that exported trajectories train a policy (``agentrt train-policy --grpo``).

Data: TRL prompt-only rows {prompt (messages), answer, verifier} as written by
``agentrt export --format trl-prompts`` (Parquet or JSONL). The reward is ``agentrt.trajectory.rewards`` (the same
verifiers the eval harness uses). The model is the embedded SmolLM2-135M unless ``model_dir`` says
otherwise. We use TRL's trainer as is (no subclassing): config + reward function + dataset.

Needs ``agentrt[train,hf]`` (trl, datasets, pyarrow, torch CPU).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.errors import InputError, missing_extra


@dataclass
class TrainReport:
    """What a GRPO run did: per-step mean rewards and how much of the model changed."""

    steps: int
    rewards: list[float]
    changed_tensors: int
    total_tensors: int
    max_abs_delta: float
    wall_s: float
    output_dir: str
    log: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("steps", "rewards", "changed_tensors", "total_tensors", "max_abs_delta",
                                              "wall_s", "output_dir")}


def read_prompt_rows(path: str | Path) -> list[dict[str, Any]]:
    """TRL prompt-only rows from a ``trl-prompts`` export (``.parquet`` or ``.jsonl``)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"no data file at {path}; write one with: agentrt export --format trl-prompts --out {path.name}")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise missing_extra("pyarrow", "train") from None
        rows = pq.read_table(path).to_pylist()
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        raise InputError(f"{path} holds no rows; export some with: agentrt export --format trl-prompts")
    bad = [i for i, r in enumerate(rows) if not {"prompt", "answer"} <= set(r)]
    if bad:
        raise InputError(f"{path}: rows need 'prompt' and 'answer' columns (a trl-prompts export); row {bad[0]} lacks them")
    return rows


_CAPITALS = [("France", "Paris"), ("Italy", "Rome"), ("Japan", "Tokyo"), ("Germany", "Berlin"), ("Spain", "Madrid"),
             ("England", "London"), ("Russia", "Moscow"), ("Egypt", "Cairo")]


def toy_capital_rows(n: int = 8) -> list[dict[str, Any]]:
    """A small verifiable task with a graded reward (token F1, ``qa`` verifier): the 135M model knows the
    capitals but wraps them in sentences of varying length, so rollouts differ in reward and GRPO has
    a signal (a 0/1 task it always fails gives zero advantages and no update)."""
    rows = []
    for i in range(n):
        country, city = _CAPITALS[i % len(_CAPITALS)]
        rows.append({"prompt": [{"role": "user", "content": f"What is the capital of {country}?"}],
                     "answer": city, "verifier": "qa"})
    return rows


def train_grpo(rows: list[dict[str, Any]], output_dir: str | Path, *, model_dir: str | Path | None = None,
               steps: int = 2, num_generations: int = 4, batch_size: int = 4, max_completion_length: int = 16,
               learning_rate: float = 1e-4, seed: int = 0) -> TrainReport:
    """Run ``steps`` GRPO steps on ``rows``; return rewards per step and the parameter change."""
    if steps < 1 or num_generations < 2 or batch_size % num_generations:
        raise InputError("need steps >= 1, num_generations >= 2 and batch_size a multiple of num_generations")
    try:
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as e:
        raise missing_extra(e.name or "trl", "train") from None
    from agentrt.trajectory import rewards

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from agentrt.core.config import load_settings

    settings = load_settings()
    if model_dir is None:
        from agentrt.backends._embedded import embedded_model_path

        model_dir = embedded_model_path(settings.models_dir)
    # One thread is as fast on a shared 2-core machine and far kinder to neighbours (FACTS).
    torch.set_num_threads(settings.torch_threads)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}

    def reward_fn(completions: list[Any], answer: list[Any], verifier: list[Any] | None = None, **_: Any) -> list[float]:
        out = []
        for i, completion in enumerate(completions):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            name = verifier[i] if verifier else "qa"
            out.append(rewards.score(name, text, answer[i]).score)
        return out

    names = [r.get("verifier") or rewards.verifier_for(r.get("data_source") or "") for r in rows]
    if None in names:
        raise InputError(f"row {names.index(None)} has no verifier and an unknown data_source; "
                         f"set its 'verifier' column to one of: {', '.join(rewards.VERIFIERS)}")
    columns = {"prompt": [r["prompt"] for r in rows], "answer": [r["answer"] for r in rows], "verifier": names}
    config = GRPOConfig(
        output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=batch_size,
        num_generations=num_generations, max_completion_length=max_completion_length, use_vllm=False,
        use_cpu=True, bf16=False, gradient_checkpointing=False, learning_rate=learning_rate, report_to="none",
        logging_steps=1, save_strategy="no", seed=seed, temperature=1.0, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=config,
                          train_dataset=Dataset.from_dict(columns), processing_class=tokenizer)
    started = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - started
    changed, max_delta = 0, 0.0
    for name, p in model.named_parameters():
        delta = (p.detach() - before[name]).abs().max().item()
        changed += delta > 0
        max_delta = max(max_delta, delta)
    log = [dict(e) for e in trainer.state.log_history]
    step_rewards = [float(e["reward"]) for e in log if "reward" in e]
    return TrainReport(steps=trainer.state.global_step, rewards=step_rewards, changed_tensors=int(changed),
                       total_tensors=len(before), max_abs_delta=max_delta, wall_s=round(wall, 2),
                       output_dir=str(output_dir), log=log)
