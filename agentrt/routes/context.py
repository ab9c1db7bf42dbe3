"""RunContext: what one run carries (the conversation, budget, backends, recorded steps) and its one door.

``call_model`` and ``score`` are the only ways the runtime talks to a model: count the prompt,
reserve, call, charge the real usage, record the step. That is what makes the budget a hard bound.
When someone observes the run, ``call_model`` also streams the call's text as ``TokenDelta`` events,
token by token, marked as thought or answer.
A run's conversation is messages (``history`` + the question, under an optional ``system``), built
once by ``conversation``: routes never fold the history into the question string.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from agentrt.core.budget import Budget, chat_within
from agentrt.core.config import Settings
from agentrt.core.confidence import OPEN_TAG
from agentrt.core.events import BudgetUpdate, Event, StepStarted, TokenDelta, step_events
from agentrt.core.errors import BackendError, BudgetExceeded
from agentrt.core.protocols import ModelBackend, Scorer
from agentrt.core.request import ANSWER_STEPS, AnswerOptions, RunRequest
from pydantic import BaseModel

from agentrt.trajectory import ModelCallStep, ScoreStep, parse_step
from agentrt.core.types import Completion, GenParams, Message
from agentrt.routes._deltas import CallDeltas


@dataclass(slots=True)
class RouteOutput:
    """What a route returns: the answer, the thought behind it, the passage ids it cites (plan)."""

    answer: str
    thought: str | None = None
    citations: list[str] = field(default_factory=list)
    # The policy's stated confidence in ``answer`` (agentrt.core.confidence), when the run asked for it:
    # status ok | missing | malformed | over_budget (the confidence call did not fit); None: not asked.
    confidence: float | None = None
    confidence_status: str | None = None
    partial: str | None = None  # set by the answer contract (agentrt.core.answer) when ``answer`` was not one


@dataclass
class RunContext:
    """The state of one run, passed to every route."""

    run_id: str
    question: str
    budget: Budget
    policy: ModelBackend
    settings: Settings
    # The conversation before the question (user/assistant turns) and the caller's system prompt.
    history: list[Message] = field(default_factory=list)
    system: str | None = None
    # The route knobs and the caller's answer options (agentrt.core.request); the confidence mode resolved.
    options: AnswerOptions = field(default_factory=lambda: AnswerOptions(confidence="off"))
    steps: list[dict[str, Any]] = field(default_factory=list)
    best_answer: str = ""
    started: float = field(default_factory=time.perf_counter)
    created_at: float = field(default_factory=time.time)
    # Front ends (stream, REPL, server, tracing) observe a run through this: called with a typed
    # event (agentrt.core.events) for every recorded step and around every model call.
    on_event: Callable[[Event], None] | None = None
    # Copied into TrajectoryRecord.metadata (e.g. the OpenTelemetry trace id).
    metadata: dict[str, Any] = field(default_factory=dict)
    # Caller hooks a route may use: "approve_plan" (plan -> True / edited plan / False, see
    # agentrt.routes.plan), "ask_user" (question -> reply). The route emits plan_approved itself.
    callbacks: dict[str, Callable[..., Any]] = field(default_factory=dict)
    # Tools this run may use (tools.base.Tool); each route keeps only those its allowlist names.
    tools: list[Any] = field(default_factory=list)
    # Run-wide sampling (rollouts for RL, pass@k): calls that ask for greedy decoding sample at this
    # temperature instead, each with its own seed derived from ``seed``. 0 keeps every call as asked.
    temperature: float = 0.0
    seed: int | None = None
    # The planner model (Settings.planner); None: the policy plans too.
    planner: ModelBackend | None = None
    # answer -> bool or score: chooses among reason's parallel samples (RunHooks.verifier).
    verifier: Callable[[str], Any] | None = None
    # The request this run answers (None for a context built by hand, e.g. a bench of one route).
    request: RunRequest | None = None
    # The route running now (set by agentrt.routes.get_route); token deltas carry it.
    route: str = ""
    _calls: int = 0
    answer_deltas: int = 0  # answer (not thought) TokenDelta events emitted so far

    def conversation(self, route_system: str | None) -> list[Message]:
        """The run's messages: a system message (the caller's, then the route's), the history, the question."""
        system = "\n\n".join(s for s in (self.system, route_system) if s)
        head = [Message("system", system)] if system else []
        return head + list(self.history) + [Message("user", self.question)]

    def record(self, step: BaseModel | dict[str, Any]) -> None:
        """Append a step to the trajectory: a typed step model, or a dict validated against its kind."""
        data = step.model_dump() if isinstance(step, BaseModel) else parse_step(step).model_dump()
        self.steps.append(data)
        if self.on_event is not None:  # no observer: no events to build (this is on every step's path)
            for event in step_events(data):
                self.emit(event)

    def emit(self, event: Event) -> None:
        """Send ``event`` to ``on_event``; an observer's error never breaks the run."""
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:  # noqa: BLE001 - observers are best effort
                pass

    def say(self, step: str, text: str, *, thought: bool = False) -> None:
        """Emit ``text`` as a ``TokenDelta`` of the current route (text that no model call streams)."""
        if self.on_event is not None and text:
            if not thought:
                self.answer_deltas += 1
            self.emit(TokenDelta(step, text, self.route, thought))

    async def call_model(
        self,
        name: str,
        messages: list[Message],
        params: GenParams,
        *,
        backend: ModelBackend | None = None,
        budget: Budget | None = None,
        min_tokens: int = 1,
        thought: bool = True,
        stream: bool = True,
    ) -> Completion:
        """Call a model inside the budget. ``max_tokens`` is clipped to what remains.

        ``thought=False`` says the call writes the answer the user sees; by default a call is reasoning
        (thinking, planning, searching). It marks the call's ``TokenDelta`` events, streamed while the
        model generates (its first choice; text inside ``<think>...</think>`` is a thought either way);
        a backend that cannot stream gives one delta with the whole text. Raises ``BudgetExceeded``
        when not even ``min_tokens`` new tokens fit. ``stream=False``: no token deltas for this call.
        In tail confidence mode an answer call's deltas stop where its ``<confidence>`` tail begins.
        """
        backend = backend or self.policy
        hide = OPEN_TAG if not thought and self.options.confidence == "tail" else None
        deltas = CallDeltas(self.say, name, thought, hide) if self.on_event is not None and stream else None
        if deltas is not None:  # no observer: the backend is not asked to stream (nothing is decoded early)
            params = dataclasses.replace(params, on_token=deltas.on_token)
        params = self.options.shape(name, params)
        t_start = time.perf_counter() - self.started

        def prepare(clipped: GenParams, prompt_tokens: int) -> GenParams:
            if self.temperature > 0 and clipped.temperature <= 0:
                self._calls += 1
                seed = None if self.seed is None else self.seed * 1000 + self._calls
                clipped = dataclasses.replace(clipped, temperature=self.temperature, seed=seed)
            self.emit(StepStarted(name, backend.name, prompt_tokens, clipped.max_tokens))
            return clipped

        completion, params = await chat_within(budget or self.budget, backend, messages, params,
                                               min_tokens=min_tokens, prepare=prepare)
        if deltas is not None:
            deltas.close(completion)
        self.emit(BudgetUpdate(self.budget.spent, self.budget.total))
        self.record(
            ModelCallStep(
                name=name,
                backend=backend.name,
                model=completion.model,
                messages=[m.to_dict() for m in messages],
                prompt_token_ids=completion.prompt_token_ids,
                completion_token_ids=[c.token_ids for c in completion.choices],
                completion_logprobs=[c.logprobs for c in completion.choices],
                completions=[c.text for c in completion.choices],
                finish_reasons=[c.finish_reason for c in completion.choices],
                # every completion token was sampled by the model: all trainable
                loss_mask=[[1] * len(c.token_ids or []) for c in completion.choices],
                usage=completion.usage.to_dict(),
                params={"max_tokens": params.max_tokens, "temperature": params.temperature,
                        "top_p": params.top_p, "top_k": params.top_k, "min_p": params.min_p,
                        "repetition_penalty": params.repetition_penalty, "n": params.n, "stop": params.stop,
                        "seed": params.seed},
                latency_s=round(completion.latency_s, 4),
                t_start_s=round(t_start, 4),
                **({"backend_events": completion.events} if completion.events else {}),
            )
        )
        return completion


    async def score(self, name: str, messages: list[Message], continuations: list[str], *,
                    backend: ModelBackend | None = None, tight: bool = False) -> list[float]:
        """Log-probability of each continuation after ``messages``, paid from the run's budget and recorded.

        Raises ``BudgetExceeded`` when the scoring pass (the prefix once plus every continuation) does
        not fit, and ``BackendError`` when the backend cannot score. The reservation counts each
        continuation as a whole chat message (template included: safe, and several times its cost for a
        short one); ``tight=True`` counts its text alone, plus two tokens of slack for where it joins.
        """
        backend = backend or self.policy
        if not isinstance(backend, Scorer):
            raise BackendError(f"{backend.name} cannot score text; use a backend that can (hf:...)")
        empty = backend.count_tokens([Message("assistant", "")]) if tight else 0
        estimate = backend.count_tokens(messages) + sum(backend.count_tokens([Message("assistant", c)]) - empty
                                                        + (2 if tight else 0) for c in continuations)
        reservation = self.budget.reserve(estimate, 0, min_tokens=0)
        t_start = time.perf_counter() - self.started
        try:
            scores, cost = await backend.score(messages, continuations)
        except BaseException:
            self.budget.release(reservation)
            raise
        self.budget.charge(reservation, cost, 0)
        self.emit(BudgetUpdate(self.budget.spent, self.budget.total))
        self.record(ScoreStep(name=name, backend=backend.name, messages=[m.to_dict() for m in messages],
                              continuations=list(continuations), scores=[round(x, 4) for x in scores],
                              usage={"prompt_tokens": cost, "completion_tokens": 0},
                              latency_s=round(time.perf_counter() - self.started - t_start, 4),
                              t_start_s=round(t_start, 4)))
        return scores


__all__ = ["ANSWER_STEPS", "AnswerOptions", "RouteOutput", "RunContext", "BudgetExceeded"]
