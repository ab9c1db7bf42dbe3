"""The plan route: plan -> fan-out of searchers (LangGraph ``Send``) -> reconvene -> synthesize -> verify.

The one module that imports LangGraph (lazily, inside ``build_graph``). Graph::

    plan --Send x N--> search --> reconvene --(more levels: Send x M)--> search ...
                                           \\--(done)--> synthesize --> verify? --> END

* The run first searches the corpus for the question itself (top ``search_k``, recorded as a
  ``memory_op`` step), so the planner plans from what the index holds.
* The planner makes a ``Plan`` (model with constrained JSON, rules as fallback); it is validated once
  (caps, DAG), emitted as a ``Plan`` event, offered to the ``approve_plan`` hook (which may
  edit or reject it) and recorded as a ``plan`` trajectory step — all before any searcher starts. The
  validated ``Plan`` stays on the run; the graph state keeps its dict for the record.
* Steps run level by level: a level's searchers run concurrently (so a batching backend serves them in
  shared forward passes); a dependent step runs after its dependencies, their findings substituted for
  its ``{sN}`` placeholders.
* Each searcher is a bounded tool loop (``run_tool_loop``, at most ``max_steps`` calls) with a corpus
  search tool, inside its own child budget carved from the run's; closing the child returns what it
  did not spend. The plan's total is what remains minus a reserve for synthesis, so it never exceeds it.
* The search tool hands back its hits as structured data (``ToolResult.data``); the findings carry
  them to synthesis, which cites their ids.
* A searcher that raises or times out is reported as failed (a ``searcher_failed`` step); synthesis
  uses what came back and says what is missing. ``BudgetExceeded`` in synthesis leaves
  ``ctx.best_answer`` (the best partial answer) for the Agent to return, marked truncated.

Settings: ``ctx.settings.plan`` (``PlanSettings``, ``[agentrt.plan]`` in the config file); the corpus
searched is ``settings.corpus``. Events go through ``ctx.emit`` (the Agent's ``on_event``). The one
caller hook, ``ctx.callbacks["approve_plan"](plan)``, returns True (run it), an edited ``Plan`` (or its
dict), or None/False (reject). ``run_plan`` takes a searcher, a planner and settings of its own (tests,
benchmarks).
"""

from __future__ import annotations

import asyncio
import json
import operator
import re
import time
from typing import Annotated, Any, TypedDict

from agentrt.core.config import PlanSettings
from agentrt.core.errors import BudgetExceeded, ConfigError, RunError, missing_extra
from agentrt.core.events import Event, FanOut, PlanApproved, SearcherDone, SearcherFailed
from agentrt.core.types import GenParams, Message
from agentrt.routes.answer_guard import guard_answer, obeys_instruction
from agentrt.routes.context import RouteOutput, RunContext
from agentrt.routes.toolcall import run_tool_loop
from agentrt.routes.index import open_corpus_for
from agentrt.trajectory import MemoryOpStep, PlanResultStep, PlanStep, SearcherFailedStep
from planners import HeuristicPlanner, LLMPlanner, Plan, validate_plan
from planners.llm import max_fanout_for, plan_tokens
from planners.plan import PLACEHOLDER
from planners.prompts import search_messages, synth_messages, verify_messages
from tools.search import hits_result, make_search_tool


class PlanState(TypedDict, total=False):
    """Graph state. Keys that parallel searchers write have reducers (list concatenation)."""

    question: str
    plan: dict[str, Any]
    level: int
    step_budgets: dict[str, int]
    findings: Annotated[list[dict[str, Any]], operator.add]
    failed: Annotated[list[dict[str, Any]], operator.add]
    answer: str
    citations: list[str]
    missing: list[str]
    verdict: str


STATE_KEYS = frozenset(PlanState.__annotations__)


def checked(fn: Any) -> Any:
    """Wrap a node so a key it returns that the state does not declare is an error, not a silent drop."""

    async def node(state: dict[str, Any]) -> dict[str, Any]:
        out = await fn(state)
        unknown = set(out or {}) - STATE_KEYS
        if unknown:
            raise RunError(f"node {fn.__name__} returned undeclared state keys {sorted(unknown)}; declare them in PlanState")
        return out

    node.__name__ = fn.__name__
    return node


class _Run:
    """The nodes of one run's graph; they close over the run context (not serializable state)."""

    def __init__(self, ctx: RunContext, opts: PlanSettings, searcher: Any, planner: Any, store: str) -> None:
        self.ctx, self.opts, self.searcher, self.planner, self.store = ctx, opts, searcher, planner, store
        self.hooks = getattr(ctx, "callbacks", None) or {}
        self.tool = make_search_tool(searcher, max_k=opts.search_k, passage_chars=opts.passage_chars)
        self.rejected = False
        self.plan: Plan | None = None  # set once by the plan node, validated; later nodes read it here

    def emit(self, event: Event) -> None:
        emit = getattr(self.ctx, "emit", None)  # RunContext.emit: observers' errors never break the run
        if emit is not None:
            emit(event)

    async def recall(self, question: str) -> list[dict[str, Any]]:
        """The run's first search: the top ``search_k`` hits for the question itself, as
        ``{id, title, text, score}`` dicts, recorded as a ``memory_op`` step. A failing search is
        recorded and yields no hits: the planner then plans from the question alone."""
        t0 = time.perf_counter()
        k, error = self.opts.search_k, None
        try:
            # a sync searcher (Chroma, BM25) runs in a thread so concurrent runs keep going
            raw = await asyncio.wait_for(asyncio.to_thread(self.searcher, question, k), self.opts.step_timeout_s)
            hits = hits_result(list(raw)[:k], self.opts.passage_chars).data
        except Exception as e:  # noqa: BLE001 - hits only inform the plan; the searchers report their own failures
            hits, error = [], f"{type(e).__name__}: {e}"
        self.ctx.record(MemoryOpStep(op="search", store=self.store, query=question, ids=[h["id"] for h in hits],
                                     n_results=len(hits), latency_s=round(time.perf_counter() - t0, 4),
                                     t_start_s=round(t0 - self.ctx.started, 4),
                                     **({"error": error} if error else {})).model_dump())
        return hits

    # -- nodes -------------------------------------------------------------------------------
    async def make_plan(self, state: dict[str, Any]) -> dict[str, Any]:
        hits = await self.recall(state["question"])
        t0 = time.perf_counter()
        plan = self._checked(await self.planner.plan(state["question"], hits))
        pool = max(0, self.ctx.budget.remaining - self.opts.synth_reserve)
        # Recording the plan emits it (a "step" event) before any searcher starts.
        self._record_plan(plan, pool, "proposed", t0)
        approve = self.hooks.get("approve_plan")
        if approve is not None:
            verdict = approve(plan)
            if verdict is None or verdict is False:
                self.rejected = True
            elif verdict is not True:  # an edited plan (a Plan or its dict): checked like any other
                # pydantic does not re-validate a Plan instance (the hook may have changed its fields): dump it
                edited = self._checked(Plan.model_validate(
                    verdict.model_dump() if isinstance(verdict, Plan) else verdict))
                if edited != plan:
                    plan = edited
                    self._record_plan(plan, pool, "edited", t0)
            self.emit(PlanApproved(not self.rejected, plan.model_dump()))
        self.plan = plan
        return {"plan": plan.model_dump(), "level": 0, "step_budgets": plan.budget_split(pool)}

    def _checked(self, plan: Plan) -> Plan:
        """The route's caps hold whoever made the plan (a custom planner need not check them)."""
        return validate_plan(plan, max_fanout=self.opts.max_fanout, max_depth=self.opts.max_depth)

    def _record_plan(self, plan: Plan, pool: int, approval: str, t0: float) -> None:
        self.ctx.record(PlanStep(planner=plan.planner or getattr(self.planner, "name", ""), plan=plan.model_dump(),
                                 latency_s=round(time.perf_counter() - t0, 4), approval=approval,
                                 step_budgets=plan.budget_split(pool),
                                 t_start_s=round(t0 - self.ctx.started, 4)).model_dump())

    def fan_out(self, state: dict[str, Any]) -> Any:
        """Send one searcher per step of the current level (or go to synthesis)."""
        from langgraph.types import Send

        plan = self.plan
        if self.rejected or plan is None:
            return "synthesize"
        levels = plan.levels()
        level = state.get("level", 0)
        if level >= len(levels):
            return "synthesize"
        answers = {f["step"]: f["answer"] for f in state.get("findings", [])}
        sends = []
        for step in levels[level]:
            q = PLACEHOLDER.sub(lambda m: answers.get(m[1]) or plan.step(m[1]).question, step.question)
            sends.append(Send("search", {"step": step.model_dump(), "sub_question": q,
                                         "tokens": state["step_budgets"].get(step.id, 0)}))
        self.emit(FanOut(level, [s.arg["step"]["id"] for s in sends]))
        return sends

    async def search(self, payload: dict[str, Any]) -> dict[str, Any]:
        step, q = payload["step"], payload["sub_question"]
        budget = self.ctx.budget.child(payload["tokens"], name=f"search:{step['id']}")
        t0 = time.perf_counter()
        task = asyncio.ensure_future(run_tool_loop(
            self.ctx, search_messages(q), [self.tool],
            allowed=set(step.get("tools") or ["search"]) & {self.tool.name} or {self.tool.name},
            max_steps=self.opts.max_steps, budget=budget, max_tokens=self.opts.step_max_tokens,
            name=f"search:{step['id']}", retry_on_error=False, guard=False))  # synthesis guards (below)
        # A late searcher is abandoned, not cancelled: cancelling a request mid-batch would disturb the
        # other requests decoded with it. Its next call fails on the closed budget and it ends there.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        try:
            result = await asyncio.wait_for(asyncio.shield(task), self.opts.step_timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            return self._failed(step, q, f"timed out after {self.opts.step_timeout_s:g} s")
        except Exception as e:  # a searcher's failure is reported, never the run's crash
            return self._failed(step, q, f"{type(e).__name__}: {e}")
        finally:
            budget.close()  # unspent tokens flow back to the run
        # the search tool's hits as it returned them (ToolResult.data), never parsed back from its text
        passages = [h for call, out in zip(result.calls, result.outcomes, strict=True)
                    if call.get("name") == self.tool.name and out.ok for h in out.data or []]
        finding = {"step": step["id"], "question": q, "answer": result.answer, "stopped": result.stopped,
                   "passages": passages, "tokens": budget.spent, "wall_s": round(time.perf_counter() - t0, 3)}
        self.emit(SearcherDone(step["id"], result.stopped))
        if result.stopped == "budget" and not result.answer and not passages:
            return self._failed(step, q, "its budget ran out before it found anything")
        return {"findings": [finding]}

    def _failed(self, step: dict[str, Any], q: str, why: str) -> dict[str, Any]:
        self.ctx.record(SearcherFailedStep(step=step["id"], question=q, error=why,
                                           t_start_s=round(time.perf_counter() - self.ctx.started, 4)).model_dump())
        self.emit(SearcherFailed(step["id"], why))
        return {"failed": [{"step": step["id"], "question": q, "error": why}]}

    async def reconvene(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"level": state.get("level", 0) + 1}

    async def synthesize(self, state: dict[str, Any]) -> dict[str, Any]:
        plan = self.plan
        if self.rejected or plan is None:
            return {"answer": "", "citations": [], "missing": ["the plan was rejected by approve_plan"]}
        findings = sorted(state.get("findings", []), key=lambda f: f["step"])
        failed = sorted(state.get("failed", []), key=lambda f: f["step"])
        missing = [f"{f['step']} ({f['question']}): {f['error']}" for f in failed]
        # passages and findings reach the prompt quoted as untrusted data (planners.prompts)
        messages, passages = synth_messages(plan.goal, findings, missing)
        # the best partial answer so far, should synthesis itself run out of budget (none that obeys a passage)
        shown = [(i, p["text"]) for i, p in passages.items()]
        clean = [f["answer"] for f in findings if f["answer"] and not obeys_instruction(f["answer"], shown)]
        prior = "" if obeys_instruction(self.ctx.best_answer, shown) else self.ctx.best_answer  # a searcher's
        self.ctx.best_answer = "; ".join(clean) or prior
        answer_schema: dict[str, Any] = ({"type": "string", "enum": plan.answer_choices} if plan.answer_choices
                                         else {"type": "string", "minLength": 1, "maxLength": 80})
        ids = list(passages)
        schema = {"type": "object", "properties": {
            "answer": answer_schema,
            "citations": ({"type": "array", "items": {"type": "string", "enum": ids}, "minItems": 1,
                           "maxItems": min(2, len(ids))} if ids else {"type": "array", "maxItems": 0}),
        }, "required": ["answer", "citations"], "additionalProperties": False}
        completion = await self.ctx.call_model(
            "synthesize", messages, GenParams(max_tokens=self.opts.synth_max_tokens, json_schema=schema))
        try:
            data = json.loads(completion.text)
            answer, cites = str(data["answer"]).strip(), [c for c in data["citations"] if c in passages]
        except (ValueError, KeyError, TypeError):  # cut off by max_tokens: keep what is readable
            m = re.search(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)"', completion.text)
            answer = m[1] if m else self.ctx.best_answer
            cites = [i for i in ids if i in completion.text]
        # the synthesis rule: not a claim found only in a passage's injected instruction (routes/answer_guard.py)
        guarded = guard_answer(self.ctx, answer, shown, [f["answer"] for f in findings])
        if guarded != answer:
            answer, cites = guarded, [p["id"] for f in findings if f["answer"] == guarded for p in f["passages"]]
        if missing:
            answer = f"{answer} (incomplete: no findings for {', '.join(f['step'] for f in failed)})".strip()
        self.ctx.best_answer = answer or self.ctx.best_answer
        return {"answer": answer, "citations": list(dict.fromkeys(cites)), "missing": missing}

    async def verify(self, state: dict[str, Any]) -> dict[str, Any]:
        """Ask whether the cited passages support the answer (recorded; the answer is kept either way)."""
        if not state.get("answer"):
            return {"verdict": "skipped"}
        texts = [p for f in state.get("findings", []) for p in f["passages"] if p["id"] in state.get("citations", [])]
        messages = verify_messages(state["question"], state["answer"], texts)
        try:
            c = await self.ctx.call_model("verify", messages, GenParams(max_tokens=4, choices=["yes", "no"]))
        except BudgetExceeded:
            return {"verdict": "skipped (budget)"}
        return {"verdict": c.text.strip()}


def build_graph(run: _Run) -> Any:
    """The compiled LangGraph for one run."""
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        raise missing_extra("langgraph", "workflow") from None
    g = StateGraph(PlanState)
    g.add_node("plan", checked(run.make_plan))
    g.add_node("search", checked(run.search))
    g.add_node("reconvene", checked(run.reconvene))
    g.add_node("synthesize", checked(run.synthesize))
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", run.fan_out, ["search", "synthesize"])
    g.add_edge("search", "reconvene")
    g.add_conditional_edges("reconvene", run.fan_out, ["search", "synthesize"])
    if run.opts.verify:
        g.add_node("verify", checked(run.verify))
        g.add_edge("synthesize", "verify")
        g.add_edge("verify", END)
    else:
        g.add_edge("synthesize", END)
    return g.compile()


def make_planner(ctx: RunContext, opts: PlanSettings) -> Any:
    """The planner ``opts.planner`` names, calling the model through the run's budgeted ``call_model``.

    Raises ``ConfigError`` when the planner model cannot write a plan of ``opts.max_fanout`` steps
    (its context is too short for the JSON), rather than planning fewer steps than asked.
    """
    if opts.planner == "heuristic":
        return HeuristicPlanner(max_fanout=opts.max_fanout, max_depth=opts.max_depth)
    if opts.planner != "llm":
        raise ConfigError(f"unknown planner {opts.planner!r}; set [agentrt.plan] planner to 'llm' or 'heuristic'")
    backend = ctx.planner or ctx.policy
    fits = max_fanout_for(backend.context_length)
    if opts.max_fanout > fits:
        raise ConfigError(
            f"plan.max_fanout={opts.max_fanout} cannot be honoured: a plan of {opts.max_fanout} steps needs up to "
            f"{plan_tokens(opts.max_fanout)} tokens from the planner model {backend.name}, whose context is "
            f"{backend.context_length} tokens; set max_fanout to at most {max(1, fits)} under [agentrt.plan], "
            f"use a planner model with a longer context, or planner = \"heuristic\"")

    async def complete(messages: list[Message], params: GenParams) -> Any:
        return await ctx.call_model("plan", messages, params, backend=ctx.planner)

    return LLMPlanner(complete, max_fanout=opts.max_fanout, max_depth=opts.max_depth)


def default_searcher(ctx: RunContext) -> Any:
    """Search the corpus named by ``settings.corpus`` (default "default") in the run's memory store."""
    return open_corpus_for(ctx.settings).search


async def run_plan(ctx: RunContext, question: str, *, searcher: Any = None, planner: Any = None,
                   options: PlanSettings | None = None) -> dict[str, Any]:
    """Run the workflow; returns the final state (answer, citations, findings, failed, missing, plan).

    ``options`` default to ``ctx.settings.plan``; ``searcher(query, k)`` to the corpus
    ``settings.corpus``; ``planner`` (``async plan(question, hits) -> Plan``) to the one ``options``
    names. Raises ``ConfigError`` when the options cannot be honoured.
    """
    # a context built around a bare backend has no settings: the defaults then
    opts = options or getattr(ctx.settings, "plan", None) or PlanSettings()
    store = "searcher" if searcher is not None else f"corpus:{getattr(ctx.settings, 'corpus', 'default')}"
    searcher = searcher or default_searcher(ctx)
    run = _Run(ctx, opts, searcher, planner or make_planner(ctx, opts), store)
    graph = build_graph(run)
    # plan + (search + reconvene) per level + synthesize + verify, with slack: set explicitly (default 10k)
    limit = 2 * opts.max_depth + 6
    return await graph.ainvoke({"question": question, "findings": [], "failed": []}, {"recursion_limit": limit})


async def run(ctx: RunContext, question: str) -> RouteOutput:
    """The ``plan`` route (settings: ``ctx.settings.plan``): the answer, with the cited passage ids."""
    state = await run_plan(ctx, question)
    cites = state.get("citations", [])
    ctx.record(PlanResultStep(
        citations=cites, missing=state.get("missing", []), verdict=state.get("verdict"),
        findings=[{k: f[k] for k in ("step", "question", "answer", "stopped", "tokens")}
                  for f in state.get("findings", [])],
        t_start_s=round(time.perf_counter() - ctx.started, 4)).model_dump())
    return RouteOutput(state.get("answer", ""), citations=cites)


__all__ = ["PlanSettings", "PlanState", "build_graph", "checked", "make_planner", "run", "run_plan"]
