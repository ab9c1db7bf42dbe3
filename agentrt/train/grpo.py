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
from collections.abc import Callable
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
    components: list[dict[str, float]] = field(default_factory=list)  # per step: mean reward parts (rlcr: correct, brier, ...)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("steps", "rewards", "changed_tensors", "total_tensors", "max_abs_delta",
                                              "wall_s", "output_dir", "components")}


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


_JSON_TRUTHS = ("qa", "unit_tests", "ifeval")


def decode_truth(answer: Any, verifier: str) -> Any:
    """A row's ground truth as its verifier wants it: exports write list/dict truths (qa aliases, unit tests,
    IFEval kwargs) as JSON text, as verl expects (``examples/verl_reward.py`` decodes them the same way)."""
    if verifier in _JSON_TRUTHS and isinstance(answer, str) and answer[:1] in "[{":
        try:
            return json.loads(answer)
        except ValueError:
            return answer
    return answer


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


REWARDS = ("verifier", "rlcr")


def rlcr_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows for ``--reward rlcr``: the confidence instruction appended to each prompt's last user message."""
    from agentrt.train._confidence_gen import with_instruction

    return [{**r, "prompt": with_instruction(r["prompt"])} for r in rows]


def _reward_fn(reward: str, components: list[dict[str, float]], calibration_only: bool = False) -> Any:
    from agentrt.trajectory import rewards

    def reward_fn(completions: list[Any], answer: list[Any], verifier: list[Any] | None = None, **_: Any) -> list[float]:
        out, parts = [], []
        for i, completion in enumerate(completions):
            text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
            name = verifier[i] if verifier else "qa"
            r = rewards.score(f"rlcr:{name}" if reward == "rlcr" else name, text, json.loads(answer[i]))
            part = {"score": r.score, **{k: v for k, v in r.components.items() if not k.startswith("base_")},
                    "missing": float("missing_confidence" in r.penalties),
                    "malformed": float("malformed_confidence" in r.penalties)}
            if reward == "rlcr":
                # Training the confidence alone: the correctness term only adds noise to its tokens' gradient (the
                # answer is fixed by then), so that scalar is the calibration part: -(Brier + confidence penalties).
                part["calibration"] = round(r.score - float(r.components["correct"]), 6)
            out.append(part["calibration"] if calibration_only else r.score)
            parts.append(part)
        # One mean per generation batch (one optimizer step at gradient_accumulation_steps=1).
        keys = sorted({k for p in parts for k in p})
        components.append({k: round(sum(p[k] for p in parts if k in p) / max(1, sum(k in p for p in parts)), 6)
                           for k in keys})
        return out

    return reward_fn


@dataclass
class EnvironmentRun:
    """What a multi-turn environment brings to a GRPO run, passed to TRL as is (the train layer never imports
    ``agentrt.envs``: ``agentrt.envs.trl`` builds one). ``factory``: TRL's ``environment_factory`` (one instance
    per rollout: ``reset(**row)`` and tool methods); ``reward``: the reward function (it gets ``environments``);
    ``prepare_tokenizer``: gives the tokenizer a tool-rendering chat template and a response template (saved with
    the policy); ``max_tool_calls``: TRL's ``max_tool_calling_iterations``."""

    factory: Callable[[], Any]
    reward: Callable[..., list[float]]
    prepare_tokenizer: Callable[[Any], None]
    max_tool_calls: int = 6


def _freeze_below(model: Any, top: int) -> None:
    """Freeze every parameter but the top ``top`` decoder layers and the final norm."""
    decoder = model.get_decoder()
    layers = getattr(decoder, "layers", None)
    if layers is None or top > len(layers):
        raise InputError(f"train_layers={top}: the model has {len(layers) if layers is not None else 'no'} "
                         "decoder layers; pick a number up to that, or 0 to train them all")
    model.requires_grad_(False)
    for layer in list(layers)[-top:]:
        layer.requires_grad_(True)
    norm = getattr(decoder, "norm", None)
    if norm is not None:
        norm.requires_grad_(True)


def cpu_grpo_config(output_dir: str | Path, *, steps: int, batch_size: int, num_generations: int,
                    max_completion_length: int, learning_rate: float, save_steps: int, seed: int,
                    temperature: float, gpu: bool, **extra: Any) -> Any:
    """The GRPOConfig every train-policy mode uses: transformers generation (no vLLM), fp32, one log line a
    step, a checkpoint every ``save_steps`` (0: none) keeping the last; ``extra`` goes to GRPOConfig as is."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=batch_size,
        num_generations=num_generations, max_completion_length=max_completion_length, use_vllm=False,
        use_cpu=not gpu, bf16=False, gradient_checkpointing=False, learning_rate=learning_rate, report_to="none",
        logging_steps=1, save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
        save_total_limit=1, save_only_model=False, seed=seed, temperature=temperature, dataloader_num_workers=0,
        **extra)


def model_folder(model_dir: str | Path | None, models_dir: Path) -> Path:
    """The Hugging Face folder to train: ``model_dir`` as given, or the folder a spec names (``embedded``, the
    default; ``embedded:NAME``, ``hf:embedded:NAME``, a ``.gguf`` file, converted once)."""
    from agentrt.backends.embedded import resolve

    arg = "embedded" if model_dir is None else str(model_dir)
    return resolve(arg[3:] if arg.startswith("hf:") else arg, models_dir, kind="hf")[0]


def load_trainable(model_dir: str | Path | None, seed: int, train_layers: int) -> tuple[Any, Any, Any, dict]:
    """The policy to train (default: the embedded SmolLM2-135M), offline, seeded, its layers below the top
    ``train_layers`` frozen; returns (settings, model, tokenizer, a copy of its weights before training)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentrt.core.config import load_settings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = load_settings()
    model_dir = model_folder(model_dir, settings.models_dir)
    # One thread is as fast on a shared 2-core machine and far kinder to neighbours (FACTS).
    torch.set_num_threads(settings.torch_threads)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if train_layers > 0:
        _freeze_below(model, train_layers)
    return settings, model, tokenizer, {n: p.detach().clone() for n, p in model.named_parameters()}


def train_grpo(rows: list[dict[str, Any]], output_dir: str | Path, *, model_dir: str | Path | None = None,
               steps: int = 2, num_generations: int = 4, batch_size: int = 4, max_completion_length: int = 16,
               learning_rate: float = 1e-4, seed: int = 0, reward: str = "verifier", confidence: str = "tail",
               callbacks: list[Any] | None = None, save: bool = True, save_steps: int = 0,
               resume: bool = False, confidence_temperature: float | None = None, train: str = "all",
               temperature: float = 1.0, train_layers: int = 0,
               environment: EnvironmentRun | None = None) -> TrainReport:
    """Run ``steps`` GRPO steps on ``rows``; return rewards per step and the parameter change.

    ``reward="rlcr"``: the confidence instruction is appended to every prompt and completions are scored with
    ``rlcr:<verifier>``; ``confidence="tail"`` lets the runtime add the grammar-constrained confidence tail
    when the policy states none (``_confidence_gen.py``; ``max_completion_length`` bounds the answer), ``"free"``
    leaves it to the policy. ``save``: write the trained policy as a Hugging Face folder at ``output_dir`` (load it
    with ``--policy hf:OUTPUT_DIR``). ``save_steps`` > 0 keeps a checkpoint every that many steps, and
    ``resume`` continues from the newest one in ``output_dir``. ``callbacks``: TRL/transformers TrainerCallbacks
    (the overoptimization watch is one: ``agentrt.train.watch``). ``confidence_temperature``: sampling temperature
    of the confidence number in the tail (default: ``temperature``; higher explores more numbers). ``temperature``:
    sampling temperature of the answers. ``train="confidence"`` (rlcr with the tail only): the answer tokens are
    masked out of the loss and each completion is rewarded by its calibration part alone, -(Brier + penalties):
    the policy learns to state how sure it is without its answers moving (a small model trained on the whole
    completion games the format; docs/rlcr.md). ``train_layers`` > 0: only the top that many decoder layers and
    the final norm are trained, the rest (embeddings and the tied head included) stay frozen, which keeps the
    answers of a small model from drifting while its confidence is trained. ``environment``: multi-turn rollouts
    through TRL's ``environment_factory`` (``agentrt train-policy --env search:CORPUS``): ``rows`` are then the
    trainer's rows as they are (``prompt`` plus what ``reset`` reads), the environment's reward replaces the
    verifier's, and ``max_completion_length`` bounds a whole episode (tool results included). Runs on a GPU when
    one is visible."""
    if steps < 1 or num_generations < 2 or batch_size % num_generations:
        raise InputError("need steps >= 1, num_generations >= 2 and batch_size a multiple of num_generations")
    if reward not in REWARDS or confidence not in ("tail", "free"):
        raise InputError(f"reward must be one of {', '.join(REWARDS)} and confidence one of tail, free; "
                         f"got {reward!r}, {confidence!r}")
    if train not in ("all", "confidence") or (train == "confidence" and (reward, confidence) != ("rlcr", "tail")):
        raise InputError(f"train must be 'all' or 'confidence', and 'confidence' needs reward rlcr with the tail "
                         f"(--reward rlcr --confidence tail); got {train!r} with reward {reward!r}, confidence {confidence!r}")
    if temperature <= 0 or (confidence_temperature is not None and confidence_temperature <= 0):
        raise InputError("sampling temperatures must be > 0")
    if train_layers < 0:
        raise InputError("train_layers must be >= 0 (0 trains every layer)")
    if environment is not None and reward != "verifier":
        raise InputError("an environment brings its own reward: use --reward verifier (the default) with --env")
    try:
        import torch
        from datasets import Dataset
        import transformers  # noqa: F401 - checked here so a missing extra is one line
        from trl import GRPOTrainer
    except ImportError as e:
        raise missing_extra(e.name or "trl", "train") from None
    from agentrt.trajectory import rewards

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is TRL's experimental hook
    _, model, tokenizer, before = load_trainable(model_dir, seed, train_layers)
    if environment is not None:
        return _train_env(model, tokenizer, rows, output_dir, environment, before, steps=steps,
                          num_generations=num_generations, batch_size=batch_size,
                          max_completion_length=max_completion_length, learning_rate=learning_rate, seed=seed,
                          callbacks=callbacks, save=save, save_steps=save_steps, resume=resume,
                          temperature=temperature, gpu=torch.cuda.is_available())

    names = [r.get("verifier") or rewards.verifier_for(r.get("data_source") or "") for r in rows]
    if None in names:
        raise InputError(f"row {names.index(None)} has no verifier and an unknown data_source; "
                         f"set its 'verifier' column to one of: {', '.join(v for v in rewards.VERIFIERS if v != 'rlcr')}")
    if reward == "rlcr":
        rows = rlcr_rows(rows)
    components: list[dict[str, float]] = []
    # Ground truths differ in type across suites (a string, a list of aliases, a dict): one JSON text column.
    columns = {"prompt": [r["prompt"] for r in rows],
               "answer": [json.dumps(decode_truth(r["answer"], n)) for r, n in zip(rows, names)],
               "verifier": names}
    extra: dict[str, Any] = {}
    completion_budget = max_completion_length
    if reward == "rlcr" and confidence == "tail":
        from agentrt.train._confidence_gen import ConfidenceTail, rollout_func

        tail = ConfidenceTail(tokenizer)
        completion_budget += len(tail.open_ids) + tail.max_len + 1
        extra["rollout_func"] = rollout_func(max_answer_tokens=max_completion_length, temperature=temperature,
                                             tail_temperature=confidence_temperature,
                                             train_answer=train == "all")
    gpu = torch.cuda.is_available()
    config = cpu_grpo_config(output_dir, steps=steps, batch_size=batch_size, num_generations=num_generations,
                             max_completion_length=completion_budget, learning_rate=learning_rate, save_steps=save_steps,
                             seed=seed, temperature=temperature, gpu=gpu)
    trainer = GRPOTrainer(model=model, reward_funcs=_reward_fn(reward, components, train == "confidence"), args=config,
                          train_dataset=Dataset.from_dict(columns), processing_class=tokenizer,
                          callbacks=list(callbacks or []), **extra)
    return _run(trainer, tokenizer, output_dir, before, save=save, resume=resume, components=components)


def _run(trainer: Any, tokenizer: Any, output_dir: str | Path, before: dict[str, Any], *, save: bool, resume: bool,
         components: list[dict[str, float]]) -> TrainReport:
    """Train (resuming from the newest checkpoint in ``output_dir`` when asked), save, and report what changed."""
    started = time.perf_counter()
    checkpoint = resume and any(Path(output_dir).glob("checkpoint-*"))
    trainer.train(resume_from_checkpoint=True if checkpoint else None)
    wall = time.perf_counter() - started
    if save:
        trainer.save_model(str(output_dir))
        tokenizer.save_pretrained(str(output_dir))
    model = trainer.model
    changed, max_delta = 0, 0.0
    for name, p in model.named_parameters():
        delta = (p.detach().cpu() - before[name]).abs().max().item()
        changed += delta > 0
        max_delta = max(max_delta, delta)
    log = [dict(e) for e in trainer.state.log_history]
    step_rewards = [float(e["reward"]) for e in log if "reward" in e]
    return TrainReport(steps=trainer.state.global_step, rewards=step_rewards, changed_tensors=int(changed),
                       total_tensors=len(before), max_abs_delta=max_delta, wall_s=round(wall, 2),
                       output_dir=str(output_dir), log=log, components=components)


def _train_env(model: Any, tokenizer: Any, rows: list[dict[str, Any]], output_dir: str | Path, env: EnvironmentRun,
               before: dict[str, Any], *, steps: int, num_generations: int, batch_size: int,
               max_completion_length: int, learning_rate: float, seed: int, callbacks: list[Any] | None, save: bool,
               save_steps: int, resume: bool, temperature: float, gpu: bool) -> TrainReport:
    """GRPO over multi-turn environment rollouts: TRL's ``environment_factory`` with the environment's reward."""
    from datasets import Dataset
    from trl import GRPOTrainer

    if not rows or any("prompt" not in r for r in rows):
        raise InputError("environment rows need a 'prompt' column (messages); the environment builds them")
    env.prepare_tokenizer(tokenizer)
    keys = sorted({k for r in rows for k in r})
    columns = {k: [r.get(k) for r in rows] for k in keys}
    config = cpu_grpo_config(output_dir, steps=steps, batch_size=batch_size, num_generations=num_generations,
                             max_completion_length=max_completion_length, learning_rate=learning_rate, save_steps=save_steps,
                             seed=seed, temperature=temperature, gpu=gpu, max_tool_calling_iterations=env.max_tool_calls)
    trainer = GRPOTrainer(model=model, reward_funcs=[env.reward], args=config, train_dataset=Dataset.from_dict(columns),
                          processing_class=tokenizer, callbacks=list(callbacks or []), environment_factory=env.factory)
    return _run(trainer, tokenizer, output_dir, before, save=save, resume=resume, components=[])
