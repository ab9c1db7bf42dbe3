"""The Agent: the SDK entry point and the run loop.

``Agent.run(question, budget=...)`` -> validate input -> choose a route -> run it inside the budget ->
append the trajectory -> ``Result``. ``BudgetExceeded`` raised anywhere below is caught here, once,
and turned into a truncated result carrying the best answer so far.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Iterator

from agentrt.budget import Budget
from agentrt.config import Settings, ensure_writable_dir, load_settings
from agentrt.errors import BudgetExceeded, InputError, UserError
from agentrt.protocols import ModelBackend
from agentrt.routing import RouteDecision, extract, make_router
from agentrt.routes import ROUTE_FUNCTIONS, RouteOutput
from agentrt.run import RunContext
from agentrt.trajectory import TrajectoryRecord, TrajectoryWriter, new_run_id
from agentrt.types import Message, Usage

if TYPE_CHECKING:
    from agentrt.events import Event
    from agentrt.session import Session


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

    def run(self, question: str, *, budget: int | None = None, route: str | None = None,
            thinking_cap: int | None = None, **options: Any) -> Result:
        """Answer ``question`` within ``budget`` tokens (prompt + completion over all calls).

        ``options`` are ``arun``'s per-run overrides (policy, router, on_event, approve_plan, ask_user).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(question, budget=budget, route=route, thinking_cap=thinking_cap, **options))
        raise UserError("Agent.run() was called inside an event loop; use `await agent.arun(...)` there")

    async def arun(self, question: str, *, budget: int | None = None, route: str | None = None,
                   thinking_cap: int | None = None, policy: ModelBackend | None = None,
                   router: str | Any | None = None,
                   on_event: Callable[[dict[str, Any]], None] | None = None,
                   approve_plan: Callable[[Any], Any] | None = None,
                   ask_user: Callable[[str], str] | None = None, tools: list[Any] | None = None,
                   temperature: float | None = None, seed: int | None = None) -> Result:
        """The async form of ``run``.

        Per-run overrides: ``policy`` (a backend instead of the agent's), ``router`` (a spec such as
        ``"learned:router.json"``, a router object, or a callable question -> decision), ``on_event`` (raw run events, see agentrt.events),
        ``approve_plan`` / ``ask_user`` (callbacks the plan route and the ask_user tool consult),
        ``tools`` (tools.base.Tool list: the reason route then acts through those its allowlist permits),
        ``temperature`` / ``seed`` (sample the run's calls instead of greedy decoding: rollouts, pass@k).
        """
        total = self.settings.budget if budget is None else budget
        self._validate(question, total, route, thinking_cap, temperature)
        ensure_writable_dir(self.settings.trajectory_dir, "trajectory directory")
        policy = policy or self.policy
        prompt_tokens = policy.count_tokens([Message("user", question)])
        if prompt_tokens >= policy.context_length:
            raise InputError(
                f"the question is {prompt_tokens} tokens, longer than the model's context "
                f"({policy.context_length}); shorten it"
            )
        if total <= prompt_tokens:
            raise InputError(f"budget {total} is smaller than the prompt ({prompt_tokens} tokens); use a budget of at least {prompt_tokens + 16}")

        memory_steps: list[dict[str, Any]] = []
        decision = await self._decide(question, total, policy, router, memory_steps) if route is None else None
        chosen = route or decision.action  # type: ignore[union-attr]
        if self.settings.tracing != "none":
            from agentrt.tracing import traced

            on_event = traced(self.settings, on_event)
        callbacks = {k: v for k, v in (("approve_plan", approve_plan), ("ask_user", ask_user)) if v}
        ctx = RunContext(new_run_id(), question, Budget(total), policy, self.settings, on_event=on_event,
                         callbacks=callbacks, tools=list(tools or []),
                         temperature=self.settings.temperature if temperature is None else temperature, seed=seed,
                         planner=self.planner if (self.settings.planner or self._planner is not None) else None)
        ctx.emit({"type": "run_started", "run_id": ctx.run_id, "question": question, "route": chosen,
                  "budget": total, "model": policy.name, "metadata": ctx.metadata})
        for step in memory_steps:
            ctx.record(step)
        if decision is not None:
            ctx.record(decision.to_step())
            if decision.cost_tokens:  # the self router scored labels with the model: that is spending too
                held = ctx.budget.reserve(decision.cost_tokens, 0, min_tokens=0)
                ctx.budget.charge(held, decision.cost_tokens, 0)
        created = time.time()
        status, error, output = "ok", None, RouteOutput("")
        try:
            fn = ROUTE_FUNCTIONS[chosen]
            output = await (fn(ctx, question, thinking_cap) if chosen == "reason" else fn(ctx, question))
            if decision is not None and decision.escalation:
                chosen, output = await self._escalate(ctx, question, decision, chosen, output)
        except BudgetExceeded as e:
            status, error, output = "truncated", str(e), RouteOutput(ctx.best_answer)
        except asyncio.CancelledError:
            status, error = "cancelled", "cancelled"
            self._write(ctx, chosen, output, status, error, created)
            raise
        except Exception as e:
            status, error = "failed", f"{type(e).__name__}: {e}"
            self._write(ctx, chosen, output, status, error, created)
            raise
        if status == "ok" and any("length" in s.get("finish_reasons", []) for s in ctx.steps if s.get("name") == "answer"):
            status = "truncated"  # the answer itself was cut by its token cap
        if self.settings.episodic_memory:
            ctx.record(self.episodes.add_run(question, chosen, output.answer, tokens=ctx.budget.spent,
                                             trajectory_id=ctx.run_id))
        record = self._write(ctx, chosen, output, status, error, created)
        return Result(
            answer=output.answer, route=chosen, usage=Usage(**{k: record.usage[k] for k in ("prompt_tokens", "completion_tokens")}),
            budget=total, truncated=status == "truncated", trajectory_id=ctx.run_id, status=status,
            thought=output.thought, citations=list(output.citations),
            reason=decision.reason if decision else "route given by the caller",
            trajectory_file=str(self.writer.path), timings=record.timings,
            decision=decision.model_dump() if decision else None,
        )

    @property
    def episodes(self) -> Any:
        """Episodic memory (memory.EpisodicMemory over the store's "episodes" collection), opened on first use."""
        if self._episodes is None:
            from memory.chroma import open_store
            from memory.corpus import resolve_location
            from memory.episodic import EpisodicMemory

            self._episodes = EpisodicMemory(open_store(resolve_location(self.settings), "episodes"))
        return self._episodes

    async def _decide(self, question: str, budget: int, policy: ModelBackend, router: Any,
                      memory_steps: list[dict[str, Any]] | None = None) -> RouteDecision:
        """Ask the router (a spec, a router object, or a legacy callable) for a RouteDecision."""
        router = router if router is not None else self.settings.router
        if isinstance(router, str):
            router = make_router(router, self.settings, policy=policy)
        if hasattr(router, "decide"):
            similar = None
            if self.settings.episodic_memory:
                def similar(q: str) -> list[dict[str, Any]]:
                    found = [e.to_dict() for e in self.episodes.similar(q, k=5) if e.score >= 0.8]
                    if memory_steps is not None:
                        memory_steps.append(self.episodes.last_step)
                    return found
            return await router.decide(question, extract(question, similar_runs=similar), budget)
        d = router(question)
        if isinstance(d, RouteDecision):
            return d
        return RouteDecision(router="custom", action=d.route, propensity=d.propensity, probabilities=d.probabilities,
                             p_success={}, expected_tokens={}, utility={}, features=d.features, reason=d.reason)

    async def _escalate(self, ctx: RunContext, question: str, decision: RouteDecision, chosen: str,
                        output: RouteOutput) -> tuple[str, RouteOutput]:
        """Cascade: while the answer looks unsure and budget remains, try the next, stronger route."""
        for stronger in decision.escalation:
            confidence = _answer_confidence(ctx)
            if confidence is None or confidence >= self.settings.cascade_threshold:
                break
            ctx.record({"kind": "escalation", "from": chosen, "to": stronger, "confidence": round(confidence, 4)})
            try:
                fn = ROUTE_FUNCTIONS[stronger]
                output, chosen = await fn(ctx, question), stronger
            except BudgetExceeded:
                break  # keep the answer we have: it is complete, just less sure
            except Exception as e:  # a stronger route that fails must not lose the answer we have
                ctx.record({"kind": "escalation", "from": chosen, "to": stronger, "error": f"{type(e).__name__}: {e}"})
                break
        return chosen, output

    def _validate(self, question: Any, budget: Any, route: str | None, thinking_cap: int | None,
                  temperature: float | None = None) -> None:
        if not isinstance(question, str) or not question.strip():
            raise InputError("the question is empty; pass a non-empty question")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            raise InputError(f"budget must be a positive number of tokens, got {budget!r}")
        if route is not None and route not in ROUTE_FUNCTIONS:
            raise InputError(f"unknown route {route!r}; choose one of: {', '.join(ROUTE_FUNCTIONS)}")
        if thinking_cap is not None and thinking_cap < 0:
            raise InputError("thinking_cap must be >= 0")
        if temperature is not None and not 0 <= temperature <= 2:
            raise InputError(f"temperature must be between 0 and 2, got {temperature}")

    def _write(self, ctx: RunContext, route: str, output: RouteOutput, status: str, error: str | None,
               created: float) -> TrajectoryRecord:
        usage = Usage()
        for step in ctx.steps:
            if step.get("kind") == "model_call":
                usage = usage + Usage(step["usage"]["prompt_tokens"], step["usage"]["completion_tokens"])
        record = TrajectoryRecord(
            run_id=ctx.run_id, created_at=created, question=ctx.question, route=route, steps=ctx.steps,
            answer=output.answer, thought=output.thought,
            budget={"total": ctx.budget.total, "spent": ctx.budget.spent},
            usage=usage.to_dict(), timings={"wall_s": round(time.perf_counter() - ctx.started, 4)},
            status=status, error=error, metadata=dict(ctx.metadata),  # type: ignore[arg-type]
        )
        self.writer.append(record)
        ctx.emit({"type": "run_finished", "run_id": ctx.run_id, "status": status, "error": error,
                  "usage": record.usage, "route": route, "answer": output.answer})
        return record

    async def astream(self, question: str, **options: Any) -> AsyncIterator[Event]:
        """Run ``question`` and yield typed events (agentrt.events) as they happen; the last is ``Answer``.

        Takes ``arun``'s arguments. Closing the iterator early cancels the run (saved as cancelled).
        """
        from agentrt.events import astream

        async for event in astream(self, question, **options):
            yield event

    def stream(self, question: str, **options: Any) -> Iterator[Event]:
        """The synchronous form of ``astream`` (the run goes on in a helper thread)."""
        from agentrt.events import stream

        return stream(self, question, **options)

    def session(self, *, history_share: float = 0.5, budget: int | None = None) -> Session:
        """A multi-turn conversation: each turn sees the prior turns, within ``history_share`` of its budget."""
        from agentrt.session import Session

        return Session(self, history_share=history_share, budget=budget)


def _answer_confidence(ctx: RunContext) -> float | None:
    """Mean token log-probability of the last answer the run produced (None if unknown)."""
    for step in reversed(ctx.steps):
        if step.get("kind") == "model_call" and step.get("name") == "answer":
            logprobs = (step.get("completion_logprobs") or [None])[0]
            return sum(logprobs) / len(logprobs) if logprobs else None
    return None
