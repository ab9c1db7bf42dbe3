"""What the three episode kinds share: scoring an answer, counting tokens, writing the episode's record.

Private to ``agentrt.envs``: the episode classes (``search``, ``suite``, ``strategy``) are the public API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrt.core.answer import check_answer
from agentrt.core.errors import InputError
from agentrt.trajectory import RewardBreakdown, TaskInfo, TrajectoryRecord, new_run_id

# A verifier given as a function: (answer, route) -> the reward (what ``RunTask.reward`` is). The suites'
# "abstain" / "ask" verdicts live in evals (evals.outcomes.reward_of), which the runtime never imports: a
# caller holding an eval item passes ``lambda a, r: reward_of(item, a, r)``.
Scorer = Callable[[str, str], RewardBreakdown]
DATA_SOURCE = "agentrt-env"


class Recorder(Protocol):
    """Where an ended episode's record goes: ``agentrt.trajectory.TrajectoryWriter`` is one."""

    def append(self, record: TrajectoryRecord) -> None: ...


def check_verifier(verifier: Any) -> None:
    """An InputError (naming the verifiers there are) unless ``verifier`` is a known name or a callable."""
    if callable(verifier):
        return
    from agentrt.trajectory.rewards import VERIFIERS

    name = verifier.partition(":")[2] if isinstance(verifier, str) and verifier.startswith("rlcr:") else verifier
    if not isinstance(name, str) or name not in VERIFIERS:
        raise InputError(f"unknown verifier {verifier!r}; give one of {', '.join(VERIFIERS)} (or rlcr:NAME), "
                         "or a function (answer, route) -> RewardBreakdown")


def score_answer(verifier: str | Scorer, ground_truth: Any, answer: str, route: str, question: str = "") -> RewardBreakdown:
    """The verifier's reward for ``answer``; never raises (a verifier crash is a 0 with its reason), and
    an answer that is no real answer (``agentrt.core.answer.check_answer``: empty, tool JSON, frame tags)
    scores 0 without asking the verifier, so a policy gains nothing from junk."""
    verdict = check_answer(answer, question)
    name = verifier_name(verifier)
    if not verdict.ok:
        return RewardBreakdown(score=0.0, correct=False, reason=f"no answer ({verdict.reason})", verifier=name)
    try:
        if callable(verifier):
            return verifier(answer, route)
        from agentrt.trajectory.rewards import score

        reward = score(verifier, answer, ground_truth)
    except Exception as e:  # noqa: BLE001 - the episode ends with a reward either way
        return RewardBreakdown(score=0.0, correct=False, reason=f"verifier error: {type(e).__name__}: {e}",
                               verifier=name)
    if reward.correct is None:
        reward.correct = reward.score >= 1.0 - 1e-9
    return reward


def token_counter(count_tokens: Callable[[str], int] | None) -> Callable[[str], int]:
    """``count_tokens``, else the project's offline tiktoken count (o200k: ``agentrt.core.tokens``; the
    ``openai`` extra). A trainer that knows its policy's tokenizer passes its own count."""
    if count_tokens is not None:
        return count_tokens
    from agentrt.core.tokens import get_encoding

    enc = get_encoding()
    return lambda text: len(enc.encode(text, disallowed_special=()))


@dataclass
class EpisodeLog:
    """One episode as it goes: its task, steps and token counts (the record is written from it at the end)."""

    env: str
    question: str
    ground_truth: Any
    verifier: str | Scorer
    item_id: str = ""
    run_id: str = field(default_factory=new_run_id)
    created_at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.perf_counter)
    steps: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0  # observations (what the policy reads)
    completion_tokens: int = 0  # actions (what the policy writes)

    def t(self) -> float:
        return round(time.perf_counter() - self.started, 4)

    def task_info(self) -> TaskInfo:
        """Where the episode's question came from (data source ``agentrt-env:<env>``, ground truth, verifier)."""
        gt = self.ground_truth if _jsonable(self.ground_truth) else str(self.ground_truth)
        return TaskInfo(data_source=f"{DATA_SOURCE}:{self.env}", ability=self.env, ground_truth=gt,
                        verifier=self.verifier if isinstance(self.verifier, str) else None,
                        prompt_id=self.item_id or None)

    def record(self, *, route: str, answer: str, status: str, error: str | None, budget: int,
               spent: int, reward: RewardBreakdown | None, metadata: dict[str, Any]) -> TrajectoryRecord:
        """The episode's trajectory record (schema v1), its task and reward filled in."""
        rec = TrajectoryRecord(
            run_id=self.run_id, created_at=self.created_at, question=self.question, route=route,
            steps=self.steps, answer=answer, budget={"total": budget, "spent": spent},
            usage={"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                   "total_tokens": self.prompt_tokens + self.completion_tokens},
            timings={"wall_s": self.t()}, status=status, error=error,  # type: ignore[arg-type]
            task=self.task_info(),
            metadata={"env": {"name": self.env, "item_id": self.item_id, **metadata}})
        if reward is not None:
            rec.reward = reward.score
            rec.rewards = {"eval": reward}
        return rec


def answered(reward: float) -> str:
    """The observation an ``answer(text)`` action returns (it ends the episode)."""
    return f"Answer recorded. Reward {reward:.2f}."


def verifier_name(verifier: str | Scorer) -> str:
    """A verifier's name for a reward record (a function's ``__name__``)."""
    return verifier if isinstance(verifier, str) else getattr(verifier, "__name__", "custom")


def held_out(question: str, holdout: float = 0.2, seed: int = 0) -> bool:
    """Whether ``question`` is on the held-out side: a stable hash share ``holdout`` of the questions (the same
    rule as the strategy trainer's split, ``agentrt.train.strategy.split``: a question keeps its side)."""
    import hashlib

    h = int.from_bytes(hashlib.blake2b(f"{seed}:{question}".encode(), digest_size=4).digest(), "little")
    return (h % 10_000) / 10_000 < holdout


def _jsonable(value: Any) -> bool:
    import json

    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def write(recorder: Recorder | None, record: TrajectoryRecord) -> None:
    """Append ``record`` when the episode has a recorder."""
    if recorder is not None:
        recorder.append(record)


__all__ = ["DATA_SOURCE", "EpisodeLog", "Recorder", "Scorer", "answered", "check_verifier", "held_out", "score_answer",
           "token_counter", "verifier_name", "write"]
