"""Trajectories, schema v1: one JSON record per run (documented in docs/trajectories.md).

A record holds the run (question, route, status, budget, usage, timings), its steps (model calls
with token ids, logprobs and loss mask; tool calls; route decisions with their propensity; plans;
memory operations), the final answer, the task it came from (data source, ground truth) and the
rewards with their breakdown. Readers accept v0 records (written by agentrt 0.1 before v1).

The store (append-only JSONL, fsync per record, rotation, index by run id) is
``agentrt/trajectory/store.py``; the package ``agentrt.trajectory`` re-exports both.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from agentrt.core.errors import TrajectoryError

SCHEMA_VERSION = "1"
SUPPORTED_VERSIONS = {"0", "1"}
TRAJECTORY_FILE = "trajectories.jsonl"

# no_answer: the run ended without a real answer (agentrt.core.answer); older records never hold it.
Status = Literal["ok", "no_answer", "truncated", "failed", "cancelled"]
# Tool results are truncated in the record (the full text is rarely worth its bytes to a trainer).
MAX_TOOL_RESULT_CHARS = 4000


class _Step(BaseModel):
    """Common to all steps: extra fields (from other writers or later versions) are kept."""

    model_config = ConfigDict(extra="allow")

    # Seconds since the run started, when the step began (None in v0 records).
    t_start_s: float | None = None


class ModelCallStep(_Step):
    """One model call, with what a trainer needs to learn from it.

    ``completion_token_ids[i]`` / ``completion_logprobs[i]`` / ``loss_mask[i]`` belong to choice i.
    ``loss_mask`` is 1 for a token the model sampled (trainable), 0 for a token it did not (forced or
    injected); ``None`` (v0) means all ones.
    """

    kind: Literal["model_call"] = "model_call"
    name: str = Field(description="what the call was for: answer, think, plan, search, ...")
    backend: str
    model: str = ""
    messages: list[dict[str, Any]]
    prompt_token_ids: list[int] | None
    completion_token_ids: list[list[int] | None]  # None: the backend could not return ids
    completion_logprobs: list[list[float] | None]
    completions: list[str]
    finish_reasons: list[str]
    loss_mask: list[list[int]] | None = None
    usage: dict[str, int]
    params: dict[str, Any] = {}
    latency_s: float

    def has_ids(self, choice: int = 0) -> bool:
        """Whether prompt and completion token ids were recorded (exports at token level need both)."""
        return (self.prompt_token_ids is not None and len(self.completion_token_ids) > choice
                and self.completion_token_ids[choice] is not None)

    def mask(self, choice: int = 0) -> list[int]:
        """The loss mask of one choice (all ones when the record predates v1)."""
        if self.loss_mask is None:
            return [1] * len(self.completion_token_ids[choice] or [])
        return self.loss_mask[choice]


class ToolCallStep(_Step):
    """One tool call: name, arguments, the (truncated) result or the error. A failure is data."""

    kind: Literal["tool_call"] = "tool_call"
    name: str
    args: dict[str, Any] = {}
    call_id: str | None = None
    result: str | None = None
    result_truncated: bool = False
    error: str | None = None
    latency_s: float = 0.0

    @field_validator("result", mode="before")
    @classmethod
    def _truncate(cls, value: Any) -> Any:
        # Truncation is noted by the writer via result_truncated; here we only bound the size.
        if isinstance(value, str) and len(value) > MAX_TOOL_RESULT_CHARS:
            return value[:MAX_TOOL_RESULT_CHARS]
        return value


class RouteStep(_Step):
    """The router's decision: features, per-action probabilities, the chosen action and its
    probability (the propensity, for off-policy learning)."""

    kind: Literal["route_decision"] = "route_decision"
    route: str
    propensity: float = Field(ge=0.0, le=1.0)
    probabilities: dict[str, float] = {}
    reason: str = ""
    features: dict[str, Any] = {}
    router: str = ""
    p_success: dict[str, float] = {}
    expected_tokens: dict[str, float] = {}
    utility: dict[str, float] = {}


class EscalationStep(_Step):
    """The cascade moved from one route to a stronger one (or tried to: ``error``) on low confidence."""

    kind: Literal["escalation"] = "escalation"
    from_route: str = Field(alias="from")
    to: str
    confidence: float | None = None  # mean answer-token logprob of the answer left behind
    stated_confidence: float | None = None  # the policy's stated confidence in it, when the run asked
    signal: str = "logprob"  # what decided (Settings.cascade_signal): logprob | stated | both
    error: str | None = None

    model_config = ConfigDict(extra="allow", populate_by_name=True, serialize_by_alias=True)


class FinalAnswerStep(_Step):
    """A tool loop's final answer that the runtime composed (the model's own text kept beside it)."""

    kind: Literal["final_answer"] = "final_answer"
    model_answer: str
    answer: str
    composed_from: str = "tool_result"


class SampleSelectionStep(_Step):
    """Which of N parallel samples the reason route kept, and what decided it (votes, verifier scores)."""

    kind: Literal["sample_selection"] = "sample_selection"
    method: Literal["majority", "verifier"]
    answers: list[str]
    chosen: int
    votes: dict[str, int] = {}
    scores: list[float] | None = None


class PlanStep(_Step):
    """A plan: sub-questions, tool hints, per-step budgets (the planner's own dict)."""

    kind: Literal["plan"] = "plan"
    planner: str = ""
    plan: dict[str, Any] = {}
    latency_s: float = 0.0


class SearcherFailedStep(_Step):
    """A plan searcher that raised, timed out or ran out of budget: the step it served and why."""

    kind: Literal["searcher_failed"] = "searcher_failed"
    step: str = Field(description="the plan step id (s1, s2, ...)")
    question: str
    error: str


class PlanResultStep(_Step):
    """How a plan run ended: the cited passage ids, what is missing, each searcher's finding in brief,
    and the verifier's verdict when the route verified its answer."""

    kind: Literal["plan_result"] = "plan_result"
    citations: list[str] = []
    missing: list[str] = []
    findings: list[dict[str, Any]] = []  # step, question, answer, stopped, tokens
    verdict: str | None = None


class MemoryOpStep(_Step):
    """A memory operation (read, write, search, delete) and what it touched."""

    kind: Literal["memory_op"] = "memory_op"
    op: str
    store: str = ""
    query: str | None = None
    ids: list[str] = []
    n_results: int | None = None
    latency_s: float = 0.0


class ScoreStep(_Step):
    """A scoring pass: log-probabilities of fixed continuations (the self router's labels)."""

    kind: Literal["score"] = "score"
    name: str
    backend: str
    messages: list[dict[str, Any]] = []
    continuations: list[str] = []
    scores: list[float] = []
    usage: dict[str, int] = {}
    latency_s: float = 0.0


STEP_TYPES: dict[str, type[_Step]] = {
    "model_call": ModelCallStep,
    "tool_call": ToolCallStep,
    "route_decision": RouteStep,
    "plan": PlanStep,
    "searcher_failed": SearcherFailedStep,
    "plan_result": PlanResultStep,
    "memory_op": MemoryOpStep,
    "score": ScoreStep,
    "escalation": EscalationStep,
    "sample_selection": SampleSelectionStep,
    "final_answer": FinalAnswerStep,
}
# One typed union of every step kind, discriminated by ``kind``.
Step = Annotated[Union[tuple(STEP_TYPES.values())], Field(discriminator="kind")]  # type: ignore[valid-type]
_STEP_ADAPTER: TypeAdapter[Any] = TypeAdapter(Step)


def parse_step(step: _Step | dict[str, Any]) -> _Step:
    """A step as its typed model (a dict is validated against its ``kind``: ``TrajectoryError`` if it does not fit)."""
    if isinstance(step, _Step):
        return step
    return _validated(_STEP_ADAPTER, step, f"step {step.get('kind')!r}")


def tool_call_step(name: str, args: dict[str, Any], result: str | None = None, *, error: str | None = None,
                   latency_s: float = 0.0, call_id: str | None = None) -> dict[str, Any]:
    """A tool_call step dict with the result truncated to ``MAX_TOOL_RESULT_CHARS`` (and marked so)."""
    truncated = isinstance(result, str) and len(result) > MAX_TOOL_RESULT_CHARS
    return ToolCallStep(name=name, args=args, result=result, result_truncated=truncated, error=error,
                        latency_s=round(latency_s, 4), call_id=call_id).model_dump()


class RewardBreakdown(BaseModel):
    """A reward as stored in a record: the score and how it was reached."""

    model_config = ConfigDict(extra="allow")

    score: float
    correct: bool | None = None  # the verifier's pass/fail verdict (score is partial credit), when it gives one
    components: dict[str, float] = {}
    penalties: dict[str, float] = {}
    reason: str = ""
    verifier: str = ""


class TaskInfo(BaseModel):
    """Where a run's question came from, so exports can write verl/TRL rows and rewards can be recomputed."""

    model_config = ConfigDict(extra="allow")

    data_source: str = "agentrt"
    ability: str = "general"
    ground_truth: Any = None
    verifier: str | None = None  # a name in agentrt.trajectory.rewards.VERIFIERS
    prompt_id: str | None = None  # groups rollouts of the same prompt (GRPO)
    split: str | None = None


@dataclass
class RunTask:
    """What a run is an instance of: its TaskInfo and, when known, how to reward its answer.

    ``reward(answer, route)`` runs before the record is written (in a worker thread: verifiers may
    run unit tests), so the record carries ``reward`` and ``rewards["eval"]`` when it lands.
    """

    info: TaskInfo
    reward: Callable[[str, str], RewardBreakdown] | None = None


def attach_task(record: TrajectoryRecord, task: RunTask | TaskInfo) -> None:
    """Put ``task`` (and its reward, for a run that produced an answer) into ``record``."""
    task = task if isinstance(task, RunTask) else RunTask(task)
    record.task = task.info
    if task.reward is not None and record.status in ("ok", "truncated", "no_answer"):  # no answer scores as wrong
        breakdown = task.reward(record.answer, record.route)
        record.reward = breakdown.score
        record.rewards = {**record.rewards, "eval": breakdown}


class TrajectoryRecord(BaseModel):
    """One run. Extra fields from later schema versions are kept, not dropped.

    ``steps`` stay plain dicts (so writers and readers can index them); ``typed_steps()`` validates
    each against its kind's model. A step of an unknown kind is kept as is.
    """

    model_config = ConfigDict(extra="allow")

    schema_version: str = SCHEMA_VERSION
    run_id: str
    created_at: float
    question: str
    route: str
    steps: list[dict[str, Any]]
    answer: str
    thought: str | None = None
    budget: dict[str, int]
    usage: dict[str, int]
    timings: dict[str, float]
    status: Status
    error: str | None = None
    # v1 additions (defaults keep v0 records readable)
    task: TaskInfo | None = None
    reward: float | None = None
    rewards: dict[str, RewardBreakdown] = {}
    tools: list[dict[str, Any]] = []
    metadata: dict[str, Any] = {}
    # Optional additions within v1 (a default keeps every earlier record readable; older readers keep them
    # as extra fields): the policy's stated confidence in ``answer`` (agentrt.core.confidence) and how
    # reading it went: ok | missing | malformed | over_budget; both None when the run did not ask.
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    confidence_status: str | None = None
    # The best text a run without a real answer produced (kept for debugging, never its ``answer``); None otherwise.
    partial: str | None = None

    @field_validator("steps", mode="before")
    @classmethod
    def _check_steps(cls, steps: Any) -> Any:
        # Only the shape is checked here (a dict with a 'kind'): a run must never be lost because one
        # step is incomplete. Full validation per kind happens in typed_steps() / model_calls().
        if not isinstance(steps, list):
            return steps
        out = []
        for i, step in enumerate(steps):
            if isinstance(step, BaseModel):
                step = step.model_dump()
            if not isinstance(step, dict) or not isinstance(step.get("kind"), str):
                raise ValueError(f"step {i} is not a dict with a 'kind'")
            out.append(step)
        return out

    def typed_steps(self) -> list[BaseModel | dict[str, Any]]:
        """The steps as their models (unknown kinds stay dicts); a step that does not match its kind's
        schema raises TrajectoryError naming the run, the step and the field."""
        return [step if step["kind"] not in STEP_TYPES
                else _validated(STEP_TYPES[step["kind"]], step, f"run {self.run_id}: step {i} ({step['kind']})")
                for i, step in enumerate(self.steps)]

    def model_calls(self) -> list[ModelCallStep]:
        """The model_call steps, in order (other kinds are validated, and may fail, only when asked for)."""
        return [_validated(ModelCallStep, step, f"run {self.run_id}: step {i} (model_call)")
                for i, step in enumerate(self.steps) if step.get("kind") == "model_call"]


def _validated(model: Any, step: dict[str, Any], where: str) -> Any:
    """``model`` validated from ``step``; a mismatch is a TrajectoryError that names ``where`` and the field."""
    try:
        return model.validate_python(step) if isinstance(model, TypeAdapter) else model.model_validate(step)
    except ValidationError as e:
        err = e.errors()[0]
        raise TrajectoryError(f"{where}: {'.'.join(str(x) for x in err['loc'])}: {err['msg']}") from None


def new_run_id() -> str:
    return uuid.uuid4().hex


def now() -> float:
    return time.time()


__all__ = [
    "SCHEMA_VERSION", "SUPPORTED_VERSIONS", "TRAJECTORY_FILE", "ModelCallStep", "ToolCallStep", "RouteStep",
    "PlanStep", "SearcherFailedStep", "PlanResultStep", "MemoryOpStep", "ScoreStep", "EscalationStep", "SampleSelectionStep", "FinalAnswerStep", "Step", "parse_step", "STEP_TYPES", "RewardBreakdown",
    "TaskInfo", "TrajectoryRecord",
    "tool_call_step", "new_run_id", "now", "RunTask", "attach_task",
]
