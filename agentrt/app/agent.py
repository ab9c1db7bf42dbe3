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
from typing import Any, AsyncIterator, Iterator

from agentrt.app.session import Session
from agentrt.core.budget import Budget
from agentrt.core.config import Settings, ensure_writable_dir, load_settings
from agentrt.core.errors import BudgetExceeded, InputError, UserError
from agentrt.core.events import Event, RunFinished, RunStarted
from agentrt.core.protocols import ModelBackend
from agentrt.core.request import RunHooks, RunRequest, check_fit, signature
from agentrt.router import RouteDecision, extract, make_router
from agentrt.router.decision import cascade_unsure
from agentrt.core.types import BASE_TIER, Usage, split_action
from agentrt.routes import CONFIDENT_ROUTES, RouteOutput, get_route
from agentrt.routes.context import RunContext
from agentrt.trajectory import EscalationStep, RewardBreakdown, RunTask, TaskInfo, TrajectoryRecord, TrajectoryWriter, attach_task, new_run_id


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
    # A run without a real answer (status no_answer, or truncated with none): ``answer`` is "" and the best
    # text the route produced (raw tool output, cut JSON, ...) is kept here; ``error`` says what was wrong.
    partial: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer,
            "route": self.route,
            "tier": split_action(self.route)[1],
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
            "partial": self.partial,
            "error": self.error,
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
        self._tiers: dict[str, ModelBackend] = {}
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
            elif spec.startswith("tier:"):  # the planner on a model tier, the searchers on the policy
                self._planner = self.tier(spec[5:])
            else:
                from agentrt.backends import load_backend

                self._planner = load_backend(spec, self.settings)
        return self._planner

    def tier(self, name: str) -> ModelBackend:
        """The backend of model tier ``name`` (``Settings.tiers``; ``base``: the policy), loaded on first use."""
        if name == BASE_TIER:
            return self.policy
        if name not in self._tiers:
            spec = self.settings.tiers.get(name)
            if spec is None:
                have = ", ".join(self.settings.tiers) or "none"
                raise InputError(f"no model tier {name!r} (tiers: {have}); add one with --tier {name}=SPEC "
                                 f"(e.g. --tier {name}=hf:embedded:qwen2.5-coder-0.5b) or the setting tiers")
            from agentrt.backends import load_backend

            self._tiers[name] = load_backend(spec, self.settings)
        return self._tiers[name]

    def run(self, question: str, **options: Any) -> Result:
        """Answer ``question`` within ``budget`` tokens (prompt + completion over all calls).

        Takes ``arun``'s keyword arguments.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(question, **options))
        raise UserError("Agent.run() was called inside an event loop; use `await agent.arun(...)` there")

    async def arun(self, question: str, **options: Any) -> Result:
        """The async form of ``run``: one request, start to finish, written as one trajectory record.

        A thin door: the keyword arguments are the fields of ``RunRequest`` and its ``AnswerOptions``
        (agentrt.core.request, where each is documented with its limits) and of ``RunHooks`` (the live
        objects: ``on_event``, ``approve_plan``, ``ask_user``, ``verifier``, ``tools``, ``policy``, a
        ``router`` object, ``task``). They are validated into a request before any token is spent (an
        ``InputError`` naming the field otherwise), then ``run_request`` runs it.
        """
        hooks, rest = RunHooks.split(options)
        return await self.run_request(RunRequest.from_kwargs(question, **rest), hooks)

    arun.__signature__ = signature()  # type: ignore[attr-defined]  # help() and IDEs show every option

    def request(self, question: str, **options: Any) -> tuple[RunRequest, RunHooks]:
        """``arun``'s arguments as a validated request and its hooks (for a caller that amends it first)."""
        hooks, rest = RunHooks.split(options)
        return RunRequest.from_kwargs(question, **rest), hooks

    async def run_request(self, req: RunRequest, hooks: RunHooks | None = None) -> Result:
        """Run one validated request; ``hooks`` are its live objects (see ``arun``)."""
        hooks = hooks or RunHooks()
        ctx = self._start(req, hooks)
        question, route, task = req.question, req.route, hooks.task
        chosen, output, decision = route or "", RouteOutput(""), None
        try:
            if not route:
                decision = await self._decide(ctx, hooks.router if hooks.router is not None else req.router)
                chosen = decision.action
            output = await self._act(ctx, chosen, question)
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

    async def _act(self, ctx: RunContext, action: str, question: str) -> RouteOutput:
        """Run ``action`` (a route, or ``route@tier``: the route on that model tier's backend)."""
        route, tier = split_action(action)
        run = get_route(route)  # an unknown route is refused before a tier loads
        if tier != BASE_TIER:
            ctx.policy = await asyncio.to_thread(self.tier, tier)
        return await run(ctx, question)

    def _start(self, req: RunRequest, hooks: RunHooks) -> RunContext:
        """Check that the request fits the model and its budget (before any token is spent); open its RunContext."""
        total = self.settings.budget if req.budget is None else req.budget
        ensure_writable_dir(self.settings.trajectory_dir, "trajectory directory")
        policy = hooks.policy or self.policy
        check_fit(policy.count_tokens(req.messages()), policy.context_length, total)
        on_event = hooks.on_event
        if self.settings.tracing != "none":
            from agentrt.app.tracing import traced

            on_event = traced(self.settings, on_event)
        callbacks = {k: v for k, v in (("approve_plan", hooks.approve_plan), ("ask_user", hooks.ask_user)) if v}
        confidence = self.settings.confidence if req.answer.confidence is None else req.answer.confidence
        ctx = RunContext(new_run_id(), req.question, Budget(total), policy, self.settings, history=list(req.history),
                         system=req.system, options=req.answer.model_copy(update={"confidence": confidence}),
                         on_event=on_event, callbacks=callbacks, tools=self._tools(hooks.tools, req.question),
                         seed=req.seed, metadata=dict(req.metadata), verifier=hooks.verifier, request=req,
                         temperature=self.settings.temperature if req.temperature is None else req.temperature,
                         planner=self.planner if (self.settings.planner or self._planner is not None) else None)
        ctx.emit(RunStarted(ctx.run_id, req.route or "", total, policy.name, req.question, ctx.metadata))
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
        from agentrt.router.evidence import corpus_key
        from agentrt.routes.index import corpus_signals, routable

        router = router if router is not None else self.settings.router
        if isinstance(router, str):
            router = make_router(router, self.settings, policy=ctx.policy, scorer=ctx.score,
                                 actions=routable(self.settings))
        similar = None
        if self.settings.episodic_memory:
            def similar(q: str) -> list[dict[str, Any]]:
                found = [e.to_dict() for e in self.episodes.similar(q, k=5) if e.score >= 0.8]
                ctx.record(self.episodes.last_step)
                return found
        features = extract(ctx.question, index=corpus_signals(self.settings), similar_runs=similar,
                           history=ctx.history)
        decision = await router.decide(ctx.question, features, ctx.budget.total)
        decision.corpus = corpus_key(features, self.settings.corpus)
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
                output, chosen = await self._act(ctx, stronger, question), stronger
            except BudgetExceeded:
                break  # keep the answer we have: it is complete, just less sure
            except Exception as e:  # a stronger route that fails must not lose the answer we have
                ctx.record(EscalationStep(from_route=chosen, to=stronger, error=f"{type(e).__name__}: {e}"))
                break
        return chosen, output

    async def _finish(self, ctx: RunContext, route: str, output: RouteOutput, decision: RouteDecision | None,
                      task: RunTask | TaskInfo | None, status: str, error: str | None) -> Result:
        """Write the episode and the complete record (task and reward included), then build the Result.

        The answer contract (agentrt.core.answer) decides the status: a run without a real answer ends
        ``no_answer`` (``truncated`` when the budget cut it), its text kept apart as ``partial``."""
        output, status, error, partial = _contract(ctx, output, status, error)
        if self.settings.episodic_memory and status == "ok":
            ctx.record(self.episodes.add_run(ctx.question, route, output.answer, tokens=ctx.budget.spent,
                                             trajectory_id=ctx.run_id))
        record = await asyncio.to_thread(self._write, ctx, route, output, task, status, error)
        if self.settings.tiers:
            await asyncio.to_thread(self._record_speeds, ctx)
        reward = record.rewards.get("eval") if task is not None else None
        return Result(
            answer=output.answer, route=route, usage=Usage(record.usage["prompt_tokens"], record.usage["completion_tokens"]),
            budget=ctx.budget.total, truncated=status == "truncated", trajectory_id=ctx.run_id, status=status,
            thought=output.thought, citations=list(output.citations),
            reason=decision.reason if decision else "route given by the caller",
            trajectory_file=str(self.writer.path), timings=record.timings,
            decision=decision.model_dump() if decision else None, reward=reward, record=record,
            confidence=record.confidence, confidence_status=record.confidence_status, partial=partial, error=error,
        )

    def _record_speeds(self, ctx: RunContext) -> None:
        """Fold this run's model calls into each tier's measured seconds per token (agentrt.router.tiers)."""
        from agentrt.router.tiers import PROMPT_WEIGHT, record_speed

        specs = {self.policy.name: self.settings.policy}
        specs.update({b.name: self.settings.tiers[t] for t, b in self._tiers.items()})
        per: dict[str, list[float]] = {}
        for step in ctx.steps:
            spec = specs.get(step.get("model", "")) if step.get("kind") == "model_call" else None
            if spec is not None:
                got = per.setdefault(spec, [0.0, 0.0])
                got[0] += float(step.get("latency_s") or 0.0)
                got[1] += PROMPT_WEIGHT * step["usage"].get("prompt_tokens", 0) + step["usage"].get("completion_tokens", 0)
        for spec, (seconds, tokens) in per.items():
            record_speed(self.settings.home, spec, seconds, tokens)

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
            status=status, error=error, metadata=dict(ctx.metadata), partial=output.partial,  # type: ignore[arg-type]
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
        """Run ``question`` and yield typed events (agentrt.app.streaming) as they happen; the last is ``Answer``.

        Takes ``arun``'s arguments. Closing the iterator early cancels the run (saved as cancelled).
        """
        from agentrt.app.streaming import astream

        async for event in astream(self, *self.request(question, **options)):
            yield event

    def stream(self, question: str, **options: Any) -> Iterator[Event]:
        """The synchronous form of ``astream`` (the run goes on in a helper thread)."""
        from agentrt.app.streaming import stream

        return stream(self, *self.request(question, **options))

    def session(self, *, history_share: float = 0.5, budget: int | None = None, history: str = "trim") -> Session:
        """A multi-turn conversation: each turn sees the prior turns, within ``history_share`` of its budget.

        ``history``: "trim" (keep the newest turns that fit) or "compress" (summarize and archive older ones).
        """
        return Session(self, history_share=history_share, budget=budget, history=history)

    def feedback(self, run_id: str, *, reward: float | None = None, correct: bool | None = None,
                 note: str = "", source: str = "sdk") -> dict[str, Any]:
        """Record a verdict on a finished run (``Result.trajectory_id``) as its reward: ``correct`` (1 or 0)
        or ``reward`` in [0, 1]. Appended beside the trajectories (agentrt.trajectory.feedback), learnable by
        ``agentrt learn --traffic``; an unknown run id raises InputError."""
        from agentrt.trajectory.feedback import record_feedback

        return record_feedback(self.settings.trajectory_dir, run_id, reward=reward, correct=correct,
                               source=source, note=note)


def _contract(ctx: RunContext, output: RouteOutput, status: str,
              error: str | None) -> tuple[RouteOutput, str, str | None, str | None]:
    """Apply the answer contract to a finished run: no real answer -> no_answer / truncated, text kept apart."""
    from dataclasses import replace

    from agentrt.core.answer import check_answer

    own = {getattr(t, "name", "") for t in ctx.tools or []} | {"search", "calculator", "python"}
    verdict = check_answer(output.answer, ctx.question, own_tools=own)
    if status == "truncated" and not error:  # the answer call stopped at its token limit, not the budget
        error = "the answer was cut at its token limit (answer_max_tokens)"
    if verdict.ok or status not in ("ok", "truncated"):
        return output, status, error, None
    # a route that found no answer itself (a vote without a majority) keeps its best text in partial
    partial = output.answer.strip() or output.partial or None
    voted = any(st.get("kind") == "sample_selection" and st.get("won") is None for st in ctx.steps)
    why = ("the samples' vote found no majority answer" if voted else "the route found none") \
        + " (its best text is in partial)" if output.partial and not output.answer.strip() else verdict.reason
    output = replace(output, answer="", partial=partial)
    return output, status if status == "truncated" else "no_answer", error or f"no answer: {why}", partial


def _answer_confidence(ctx: RunContext) -> float | None:
    """Mean token log-probability of the last answer the run produced (None if unknown)."""
    for step in reversed(ctx.steps):
        if step.get("kind") == "model_call" and step.get("name") == "answer":
            logprobs = (step.get("completion_logprobs") or [None])[0]
            return sum(logprobs) / len(logprobs) if logprobs else None
    return None
