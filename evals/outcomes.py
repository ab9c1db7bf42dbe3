"""What one eval run is and what its result line says: shared by the runner and multi-turn items.

* ``run_task(item)`` — the ``RunTask`` an eval run is given: its ``TaskInfo`` (ground truth, verifier,
  ``prompt_id`` = the item id) and its reward (the item's verifier, plus whether the run abstained).
  The Agent scores the answer with it before it writes the record, so the trajectory is complete
  (``task``, ``reward``, ``rewards["eval"]``) when it lands, and ``Result.reward`` carries the same.
* ``task_base`` / ``run_fields`` / ``failed_fields`` — the fields of a ``results.jsonl`` line: which
  task, and the outcome of a finished or a failed run.
"""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

from agentrt.trajectory import RewardBreakdown, RunTask, TaskInfo
from evals.suites import Item
from evals.verifiers import score_item

# Every eval trajectory's data source (exports group on it); another issue changes it later.
DATA_SOURCE = "agentrt-eval"


def sample_seed(seed: int, suite: str, item_id: str, sample: int) -> int:
    """A stable per-sample seed: with ``temperature > 0`` each sample decodes differently, reproducibly."""
    return zlib.crc32(f"{seed}:{suite}:{item_id}:{sample}".encode()) & 0x7FFFFFFF


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def reward_of(item: Item, answer: str, route: str) -> RewardBreakdown:
    """The eval's reward for ``answer`` to ``item`` (never raises: a verifier crash is a 0 with its reason)."""
    scored = score_item(item, answer, route)
    return RewardBreakdown(score=scored.score, correct=scored.correct, reason=scored.reason, verifier=item.verifier,
                           abstained=scored.abstained)


def run_task(item: Item) -> RunTask:
    """The task an eval run of ``item`` is given (``Agent.arun(..., task=run_task(item))``)."""
    info = TaskInfo(data_source=DATA_SOURCE, ability=item.type, ground_truth=_jsonable(item.ground_truth()),
                    verifier=item.verifier, prompt_id=item.id)
    return RunTask(info, lambda answer, route: reward_of(item, answer, route))


def eval_tools(agent: Any, config: Any) -> list[Any] | None:
    """The tools an eval's runs may use (each route keeps its allowlist's): a user's defaults (None: the
    agent's ``settings.tools``), the built-in ones with ``--tools``, none with ``--no-tools``."""
    from agentrt.routes.toolcall import tools_for_mode

    return tools_for_mode(config.tools, agent.settings)


def task_base(task: Any, config: Any, p_success: float | None) -> dict[str, Any]:
    """The fields of a result line that name the task (an ``evals.runner.Task``)."""
    return {"key": task.key, "router": task.router.name, "suite": task.suite, "item_id": task.item.id,
            "sample": task.sample, "seed": sample_seed(config.seed, task.suite, task.item.id, task.sample),
            "type": task.item.type, "fixed": task.router.fixed, "p_success": p_success}


def failed_fields(route: str | None, error: Exception | str, started: float | None = None) -> dict[str, Any]:
    """The outcome fields of a run that raised, or of a task that could not run (score 0)."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    latency = 0.0 if started is None else round(time.perf_counter() - started, 4)
    return {"route": route or "", "answer": "", "score": 0.0, "correct": False, "abstained": False,
            "reason": "", "status": "error", "error": text, "truncated": False,
            "prompt_tokens": 0, "completion_tokens": 0, "thinking_tokens": 0, "tool_calls": 0,
            "latency_s": latency, "trajectory_id": None}


def run_fields(item: Item, result: Any, started: float,
               p_success: float | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The outcome fields of a finished run (an ``agentrt`` Result), and its trajectory steps.

    The score is the reward the Agent attached (``result.reward``); the steps come from the record as
    written (``result.record``): thinking tokens, tool calls, and a router's predicted p_success.
    """
    latency = time.perf_counter() - started
    reward = result.reward if result.reward is not None else reward_of(item, result.answer, result.route)
    steps = result.record.steps if result.record is not None else []
    thinking = sum(s.get("usage", {}).get("completion_tokens", 0) for s in steps
                   if s.get("kind") == "model_call" and s.get("name") == "think")
    p = p_success
    for s in steps:  # a router that predicts success records it in its route step
        if s.get("kind") == "route_decision" and isinstance(s.get("p_success"), dict):
            p = s["p_success"].get(result.route, p)
    return {"p_success": p, "route": result.route, "answer": result.answer, "score": reward.score,
            "correct": bool(reward.correct), "abstained": bool(getattr(reward, "abstained", False)),
            "reason": reward.reason, "status": result.status, "error": None, "truncated": result.truncated,
            "prompt_tokens": result.usage.prompt_tokens, "completion_tokens": result.usage.completion_tokens,
            "thinking_tokens": thinking, "tool_calls": sum(1 for s in steps if s.get("kind") == "tool_call"),
            "latency_s": round(latency, 4), "trajectory_id": result.trajectory_id,
            # the policy's stated confidence (eval --confidence), None when not asked
            "confidence": getattr(result, "confidence", None)}, steps
