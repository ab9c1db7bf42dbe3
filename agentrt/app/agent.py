"""The Agent: the SDK entry point and the run loop.

``Agent.run(question, budget=...)`` -> validate input -> choose a route -> run it inside the budget ->
append the trajectory -> ``Result``. ``BudgetExceeded`` raised anywhere below (the router's own
scoring included) is caught here, once, and turned into a truncated result carrying the best answer
so far; every outcome (ok, truncated, failed, cancelled) writes the run's record.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator

from agentrt.core.budget import Budget
from agentrt.core.config import Settings, ensure_writable_dir, load_settings
from agentrt.core.errors import BudgetExceeded, InputError, UserError
from agentrt.core.events import Event, RunFinished, RunStarted
from agentrt.core.protocols import ModelBackend
from agentrt.routing import ACTIONS, RouteDecision, extract, make_router
from agentrt.routing.decision import cascade_unsure
from agentrt.app.inputs import check_answer_options, check_request
from agentrt.core.types import Message, Usage
from agentrt.routes import RouteOutput, get_route
from agentrt.routes._confidence import CONFIDENT_ROUTES, check_mode
from agentrt.routes.context import RouteOptions, RunContext
from agentrt.trajectory import EscalationStep, RewardBreakdown, RunTask, TaskInfo, TrajectoryRecord, TrajectoryWriter, attach_task, new_run_id

if TYPE_CHECKING:
    from agentrt.app.session import Session


@dataclass
class Result:
    """What a run returns."""

    answer: str
    route: str
    usage: Usage
    budget: int
    truncated: bool
    trajectory_id: str
    status: str = "ok"
    thought: str | None = None
    reason: str = ""
    trajectory_file: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    citations: list[str] = field(default_factory=list)  # passage ids the answer cites (plan route)
    decision: dict[str, Any] | None = None  # the router's decision table (None when the route was given)
    reward: RewardBreakdown | None = None  # the task's reward, when the run was given a task with one
    # The policy's stated confidence in the answer, in [0, 1], and how reading it went (ok, missing,
    # malformed, over_budget); both None unless the run asked (``confidence``; agentrt.routes._confidence).
    confidence: float | None = None
    confidence_status: str | None = None
    record: TrajectoryRecord | None = field(default=None, repr=False)  # the record as written

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "route": self.route,
            "reason": self.reason,
            "usage": {**self.usage.to_dict(), "budget": self.budget},
            "truncated": self.truncated,
            "status": self.status,
            "thought": self.thought,
            "trajectory_id": self.trajectory_id,
            "trajectory_file": self.trajectory_file,
            "timings": self.timings,
            "citations": self.citations,
            "decision": self.decision,
            "confidence": self.confidence,
            "confidence_status": self.confidence_status,
        }


class Agent:
    """A hybrid-reasoning agent over one policy model.

    >>> agent = Agent()                       # SmolLM2-135M on the CPU, ~/.cache/agentrt
    >>> agent.run("What is the capital of France?", budget=512).answer
    """

    def __init__(self, settings: Settings | None = None, *, policy: ModelBackend | None = None,
                 planner: ModelBackend | None = None, **overrides: Any):
        self.settings = settings or load_settings(**overrides)
        self._policy = policy
        self._planner = planner
        self._episodes: Any = None
        self.writer = TrajectoryWriter(self.settings.trajectory_dir)

    @property
    def policy(self) -> ModelBackend:
        """The policy backend, loaded on first use."""
        if self._policy is None:
            from agentrt.backends import load_backend

            self._policy = load_backend(self.settings.policy, self.settings)
        return self._policy

    @property
    def planner(self) -> ModelBackend:
        """The planner backend: ``settings.planner``, else the policy (one model when both name one spec)."""
        if self._planner is None:
            spec = self.settings.planner
            if spec is None or spec.strip() == self.settings.policy.strip():
                self._planner = self.policy
            else:
                from agentrt.backends import load_backend

                self._planner = load_backend(spec, self.settings)
        return self._planner

    def run(self, question: str, **options: Any) -> Result:
        """Answer ``question`` within ``budget`` tokens (prompt + completion over all calls).

        Takes ``arun``'s keyword arguments.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(question, **options))
        raise UserError("Agent.run() was called inside an event loop; use `await agent.arun(...)` there")

    async def arun(self, question: str, *, history: list[Message] | list[dict[str, str]] | None = None,
                   system: str | None = None, budget: int | None = None, route: str | None = None,
                   router: str | Any | None = None, thinking_cap: int | None = None, samples: int = 1,
                   verifier: Callable[[str], Any] | None = None, policy: ModelBackend | None = None,
                   tools: list[Any] | None = None, temperature: float | None = None, seed: int | None = None,
                   max_tokens: int | None = None, stop: list[str] | None = None, top_p: float | None = None,
                   n: int = 1, json_schema: dict[str, Any] | None = None,
                   on_event: Callable[[Event], None] | None = None,
                   approve_plan: Callable[[Any], Any] | None = None, ask_user: Callable[[str], str] | None = None,
                   task: RunTask | TaskInfo | None = None, metadata: dict[str, Any] | None = None,
                   confidence: str | None = None) -> Result:
        """The async form of ``run``: one request, start to finish, written as one trajectory record.

        ``history`` (earlier user/assistant turns) and ``system`` make the conversation the routes answer;
        the router decides on the bare question. ``route`` skips the router; ``router`` overrides it (a spec
        such as ``"learned:router.json"`` or a router object). ``thinking_cap``, ``samples`` (parallel
        samples for reason, chosen by ``verifier`` or a majority vote): the reason route's knobs.
        ``policy`` replaces the agent's backend for this run; ``tools`` (tools.base.Tool) are offered to
        the routes whose allowlist names them (None: ``settings.tools``' safe defaults, the calculator and
        a search of the index; ``[]``: none); ``temperature`` / ``seed`` sample instead of greedy decoding.
        ``max_tokens`` (the answer's completion-token limit), ``stop``, ``top_p``, ``n`` (choices of the
        answer call, in the record's answer step) and ``json_schema`` (constrained decoding) shape only the
        calls that make the answer (direct, reason); thoughts, plans and searches keep theirs.
        ``on_event`` observes the run's typed events (agentrt.core.events); ``approve_plan`` / ``ask_user``
        are hooks of the plan route and the ask_user tool. ``task`` (a RunTask, or the TaskInfo alone) and ``metadata``
        go into the record, with the task's reward when it has one, before the record is written.
        ``confidence`` (off, tail, grammar, scored; default ``settings.confidence``) asks the policy how sure it is:
        ``Result.confidence`` and the record carry it, stripped from the answer (agentrt.routes._confidence).
        """
        answer = check_answer_options(max_tokens, stop, top_p, n, json_schema)
        answer["confidence"] = check_mode(self.settings.confidence if confidence is None else confidence)
        ctx = self._start(question, history, system, budget, route, thinking_cap, samples, verifier, policy,
                          tools, temperature, seed, on_event, approve_plan, ask_user, metadata, answer)
        chosen, output, decision = route or "", RouteOutput(""), None
        try:
            if not route:
                decision = await self._decide(ctx, router)
                chosen = decision.action
            output = await get_route(chosen)(ctx, question)
            if decision is not None and decision.escalation:
                chosen, output = await self._escalate(ctx, question, decision, chosen, output)
        except BudgetExceeded as e:
            return await self._finish(ctx, chosen, RouteOutput(ctx.best_answer), decision, task, "truncated", str(e))
        except asyncio.CancelledError:
            self._write(ctx, chosen, output, task, "cancelled", "cancelled")
            raise
        except Exception as e:
            self._write(ctx, chosen, output, task, "failed", f"{type(e).__name__}: {e}")
            raise
        truncated = any("length" in s.get("finish_reasons", []) for s in ctx.steps if s.get("name") == "answer")
        return await self._finish(ctx, chosen, output, decision, task, "truncated" if truncated else "ok", None)

    def _start(self, question: Any, history: Any, system: Any, budget: Any, route: Any, thinking_cap: Any,
               samples: Any, verifier: Any, policy: ModelBackend | None, tools: Any, temperature: Any, seed: Any,
               on_event: Any, approve_plan: Any, ask_user: Any, metadata: Any,
               answer: dict[str, Any] | None = None) -> RunContext:
        """Validate a request (before any token is spent) and open its RunContext."""
        total = self.settings.budget if budget is None else budget
        messages = check_request(question, history, system, total, route, thinking_cap, samples, temperature,
                                 metadata)
        ensure_writable_dir(self.settings.trajectory_dir, "trajectory directory")
        policy = policy or self.policy
        prompt_tokens = policy.count_tokens(([Message("system", system)] if system else []) + messages)
        if prompt_tokens >= policy.context_length:
            raise InputError(f"the conversation is {prompt_tokens} tokens, longer than the model's context "
                             f"({policy.context_length}); shorten it")
        if total <= prompt_tokens:
            raise InputError(f"budget {total} is smaller than the prompt ({prompt_tokens} tokens); "
                             f"use a budget of at least {prompt_tokens + 16}")
        if self.settings.tracing != "none":
            from agentrt.app.tracing import traced

            on_event = traced(self.settings, on_event)
        hooks = {k: v for k, v in (("approve_plan", approve_plan), ("ask_user", ask_user)) if v}
        ctx = RunContext(new_run_id(), question, Budget(total), policy, self.settings, history=messages[:-1],
                         system=system, options=RouteOptions(thinking_cap, samples, verifier, **(answer or {})),
                         on_event=on_event,
                         callbacks=hooks, tools=self._tools(tools, question), seed=seed, metadata=dict(metadata or {}),
                         temperature=self.settings.temperature if temperature is None else temperature,
                         planner=self.planner if (self.settings.planner or self._planner is not None) else None)
        ctx.emit(RunStarted(ctx.run_id, route or "", total, policy.name, question, ctx.metadata))
        return ctx

    def _tools(self, given: list[Any] | None, question: str) -> list[Any]:
        """The run's tools: the caller's list (``[]``: none), else the safe defaults (``settings.tools``)."""
        if given is not None:
            return list(given)
        from agentrt.routes.toolcall import safe_tools

        return safe_tools(self.settings, question)

    @property
    def episodes(self) -> Any:
        """Episodic memory (memory.EpisodicMemory over the store's "episodes" collection), opened on first use."""
        if self._episodes is None:
            from memory.chroma import open_store
            from memory.corpus import resolve_location
            from memory.episodic import EpisodicMemory

            self._episodes = EpisodicMemory(open_store(resolve_location(self.settings), "episodes"))
        return self._episodes

    async def _decide(self, ctx: RunContext, router: Any) -> RouteDecision:
        """Ask the router (a spec or an object with ``decide``) for a RouteDecision, and record it.

        The router sees the bare question and features of the conversation; a router that scores with
        the model (``self``) pays through ``ctx.score``, so its tokens are budgeted and recorded too.
        """
        from agentrt.routes.index import can_search, corpus_signals

        router = router if router is not None else self.settings.router
        if isinstance(router, str):
            # plan searches the private index: with none to search it would only fail
            actions = None if can_search(self.settings) else tuple(a for a in ACTIONS if a != "plan")
            router = make_router(router, self.settings, policy=ctx.policy, scorer=ctx.score, actions=actions)
        similar = None
        if self.settings.episodic_memory:
            def similar(q: str) -> list[dict[str, Any]]:
                found = [e.to_dict() for e in self.episodes.similar(q, k=5) if e.score >= 0.8]
                ctx.record(self.episodes.last_step)
                return found
        features = extract(ctx.question, index=corpus_signals(self.settings), similar_runs=similar,
                           history=ctx.history)
        decision = await router.decide(ctx.question, features, ctx.budget.total)
        ctx.record(decision.to_step())
        return decision

    async def _escalate(self, ctx: RunContext, question: str, decision: RouteDecision, chosen: str,
                        output: RouteOutput) -> tuple[str, RouteOutput]:
        """Cascade: while the answer looks unsure and budget remains, try the next, stronger route."""
        s = self.settings
        for stronger in decision.escalation:
            confidence = _answer_confidence(ctx)
            if not cascade_unsure(s.cascade_signal, confidence, output.confidence, logprob_threshold=s.cascade_threshold,
                                  stated_threshold=s.cascade_stated_threshold):
                break
            ctx.record(EscalationStep(from_route=chosen, to=stronger, signal=s.cascade_signal,
                                      confidence=None if confidence is None else round(confidence, 4),
                                      stated_confidence=output.confidence))
            try:
                output, chosen = await get_route(stronger)(ctx, question), stronger
            except BudgetExceeded:
                break  # keep the answer we have: it is complete, just less sure
            except Exception as e:  # a stronger route that fails must not lose the answer we have
                ctx.record(EscalationStep(from_route=chosen, to=stronger, error=f"{type(e).__name__}: {e}"))
                break
        return chosen, output

    async def _finish(self, ctx: RunContext, route: str, output: RouteOutput, decision: RouteDecision | None,
                      task: RunTask | TaskInfo | None, status: str, error: str | None) -> Result:
        """Write the episode and the complete record (task and reward included), then build the Result."""
        if self.settings.episodic_memory and status == "ok":
            ctx.record(self.episodes.add_run(ctx.question, route, output.answer, tokens=ctx.budget.spent,
                                             trajectory_id=ctx.run_id))
        record = await asyncio.to_thread(self._write, ctx, route, output, task, status, error)
        reward = record.rewards.get("eval") if task is not None else None
        return Result(
            answer=output.answer, route=route, usage=Usage(record.usage["prompt_tokens"], record.usage["completion_tokens"]),
            budget=ctx.budget.total, truncated=status == "truncated", trajectory_id=ctx.run_id, status=status,
            thought=output.thought, citations=list(output.citations),
            reason=decision.reason if decision else "route given by the caller",
            trajectory_file=str(self.writer.path), timings=record.timings,
            decision=decision.model_dump() if decision else None, reward=reward, record=record,
            confidence=record.confidence, confidence_status=record.confidence_status,
        )

    def _write(self, ctx: RunContext, route: str, output: RouteOutput, task: RunTask | TaskInfo | None,
               status: str, error: str | None) -> TrajectoryRecord:
        """Append the run's record (scored by its task's reward first): the record is complete when written."""
        usage = Usage()
        for step in ctx.steps:
            if step.get("kind") in ("model_call", "score"):
                usage = usage + Usage(step["usage"]["prompt_tokens"], step["usage"]["completion_tokens"])
        record = TrajectoryRecord(
            run_id=ctx.run_id, created_at=ctx.created_at, question=ctx.question, route=route, steps=ctx.steps,
            answer=output.answer, thought=output.thought,
            budget={"total": ctx.budget.total, "spent": ctx.budget.spent},
            usage=usage.to_dict(), timings={"wall_s": round(time.perf_counter() - ctx.started, 4)},
            status=status, error=error, metadata=dict(ctx.metadata),  # type: ignore[arg-type]
            confidence=output.confidence, confidence_status=output.confidence_status or (
                # asked, but the route never got to state it: the budget ran out first, or the run failed
                None if ctx.options.confidence == "off" or route not in CONFIDENT_ROUTES
                else "over_budget" if status == "truncated" else "missing"),
        )
        if ctx.history or ctx.system:
            record.metadata = {**record.metadata, "history": [m.to_dict() for m in ctx.history],
                               **({"system": ctx.system} if ctx.system else {})}
        if task is not None:
            attach_task(record, task)
        self.writer.append(record)
        ctx.emit(RunFinished(ctx.run_id, status, route, output.answer, record.usage, error))
        return record

    async def astream(self, question: str, **options: Any) -> AsyncIterator[Event]:
        """Run ``question`` and yield typed events (agentrt.app.events) as they happen; the last is ``Answer``.

        Takes ``arun``'s arguments. Closing the iterator early cancels the run (saved as cancelled).
        """
        from agentrt.app.events import astream

        async for event in astream(self, question, **options):
            yield event

    def stream(self, question: str, **options: Any) -> Iterator[Event]:
        """The synchronous form of ``astream`` (the run goes on in a helper thread)."""
        from agentrt.app.events import stream

        return stream(self, question, **options)

    def session(self, *, history_share: float = 0.5, budget: int | None = None, history: str = "trim") -> Session:
        """A multi-turn conversation: each turn sees the prior turns, within ``history_share`` of its budget.

        ``history``: "trim" (keep the newest turns that fit) or "compress" (summarize and archive older ones).
        """
        from agentrt.app.session import Session

        return Session(self, history_share=history_share, budget=budget, history=history)


def _answer_confidence(ctx: RunContext) -> float | None:
    """Mean token log-probability of the last answer the run produced (None if unknown)."""
    for step in reversed(ctx.steps):
        if step.get("kind") == "model_call" and step.get("name") == "answer":
            logprobs = (step.get("completion_logprobs") or [None])[0]
            return sum(logprobs) / len(logprobs) if logprobs else None
    return None
