"""The plan route: plan -> fan-out of searchers (LangGraph ``Send``) -> reconvene -> synthesize -> verify.

The one module that imports LangGraph (lazily, inside ``build_graph``). Graph::

    plan --Send x N--> search --> reconvene --(more levels: Send x M)--> search ...
                                           \\--(done)--> synthesize --> verify? --> END

* The planner makes a ``Plan`` (model with constrained JSON, rules as fallback); it is validated
  (caps, DAG), emitted as an ``{"type": "plan"}`` event, offered to the ``approve_plan`` hook (which may
  edit or reject it) and recorded as a ``plan`` trajectory step — all before any searcher starts.
* Steps run level by level: a level's searchers run concurrently (so a batching backend serves them in
  shared forward passes); a dependent step runs after its dependencies, their findings substituted for
  its ``{sN}`` placeholders.
* Each searcher is a bounded tool loop (``run_tool_loop``, at most ``max_steps`` calls) with a corpus
  search tool, inside its own child budget carved from the run's; closing the child returns what it
  did not spend. The plan's total is what remains minus a reserve for synthesis, so it never exceeds it.
* A searcher that raises or times out is reported as failed; synthesis uses what came back and says
  what is missing. ``BudgetExceeded`` in synthesis leaves ``ctx.best_answer`` (the best partial answer)
  for the Agent to return, marked truncated.

Events go through ``ctx.emit`` (the Agent's ``on_event``). Callbacks (``ctx.callbacks``):
``approve_plan(plan)`` returns True (run it), an edited ``Plan`` (or its dict), or None/False (reject);
``searcher(query, k)`` (default: the corpus ``settings.corpus``); ``plan_options`` (a ``PlanOptions``);
``planner`` (an object with ``async plan(question, hits) -> Plan``).
"""

from __future__ import annotations

import asyncio
import json
import operator
import re
import time
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from agentrt.core.errors import BudgetExceeded, RunError, missing_extra
from agentrt.routes.context import RouteOutput, RunContext
from agentrt.routes.toolcall import run_tool_loop
from agentrt.trajectory import PlanStep
from agentrt.core.types import GenParams, Message
from planners import HeuristicPlanner, LLMPlanner, Plan, PlanError, validate_plan
from planners.plan import PLACEHOLDER

SYNTH_SYSTEM = ("Answer the question using only the findings. Reply with JSON: a short answer and the ids "
                "of the passages that support it.")
SEARCH_PROMPT = "Find out: {q}\nSearch the knowledge base first, then give a short final answer."
_HIT_HEAD = re.compile(r"^\[([^\]]+)\]\s*(.*?)(?:\s+\(score [^)]*\))?$")


@dataclass(slots=True)
class PlanOptions:
    """Caps and knobs of the plan route (defaults sized for the embedded model on a CPU)."""

    planner: str = "llm"  # "llm" (model, rules as fallback) or "heuristic"
    max_fanout: int = 8
    max_depth: int = 2
    max_steps: int = 2  # model calls per searcher
    step_max_tokens: int = 48
    step_timeout_s: float = 300.0
    search_k: int = 3
    passage_chars: int = 300
    synth_max_tokens: int = 96
    synth_reserve: int = 900  # tokens held back from the searchers so synthesis can run
    verify: bool = False


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


def parse_passages(result: str | None) -> list[dict[str, str]]:
    """Passages (id, title, text) out of a search tool result (``[id] title (score)`` + text blocks)."""
    out = []
    for block in (result or "").split("\n\n"):
        head, _, text = block.partition("\n")
        m = _HIT_HEAD.match(head.strip())
        if m:
            out.append({"id": m[1], "title": m[2].strip(), "text": text.strip()})
    return out


class _Run:
    """The nodes of one run's graph; they close over the run context (not serializable state)."""

    def __init__(self, ctx: RunContext, opts: PlanOptions, searcher: Any, planner: Any) -> None:
        self.ctx, self.opts, self.planner = ctx, opts, planner
        self.hooks = getattr(ctx, "callbacks", None) or {}
        from tools.search import make_search_tool

        self.tool = make_search_tool(searcher, max_k=opts.search_k, passage_chars=opts.passage_chars)
        self.rejected = False

    def emit(self, event: dict[str, Any]) -> None:
        emit = getattr(self.ctx, "emit", None)  # RunContext.emit: observers' errors never break the run
        if emit is not None:
            emit(event)

    # -- nodes -------------------------------------------------------------------------------
    async def plan(self, state: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        plan: Plan = await self.planner.plan(state["question"], None)
        plan = validate_plan(plan, max_fanout=self.opts.max_fanout, max_depth=self.opts.max_depth)
        pool = max(0, self.ctx.budget.remaining - self.opts.synth_reserve)
        # Recording the plan emits it (a "step" event) before any searcher starts.
        self._record_plan(plan, pool, "proposed", t0)
        approve = self.hooks.get("approve_plan")
        if approve is not None:
            verdict = approve(plan)
            if verdict is None or verdict is False:
                self.rejected = True
            elif verdict is not True:  # an edited plan (a Plan or its dict): validated like any other
                edited = verdict if isinstance(verdict, Plan) else Plan.model_validate(verdict)
                edited = validate_plan(Plan.model_validate(edited.model_dump()),
                                       max_fanout=self.opts.max_fanout, max_depth=self.opts.max_depth)
                if edited != plan:
                    plan = edited
                    self._record_plan(plan, pool, "edited", t0)
            self.emit({"type": "plan_approved", "approved": not self.rejected, "plan": plan.model_dump()})
        return {"plan": plan.model_dump(), "level": 0, "step_budgets": plan.budget_split(pool)}

    def _record_plan(self, plan: Plan, pool: int, approval: str, t0: float) -> None:
        self.ctx.record(PlanStep(planner=plan.planner or getattr(self.planner, "name", ""), plan=plan.model_dump(),
                                 latency_s=round(time.perf_counter() - t0, 4), approval=approval,
                                 step_budgets=plan.budget_split(pool),
                                 t_start_s=round(t0 - self.ctx.started, 4)).model_dump())

    def fan_out(self, state: dict[str, Any]) -> Any:
        """Send one searcher per step of the current level (or go to synthesis)."""
        from langgraph.types import Send

        if self.rejected:
            return "synthesize"
        plan = Plan.model_validate(state["plan"])
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
        self.emit({"type": "fan_out", "level": level, "steps": [s.arg["step"]["id"] for s in sends]})
        return sends

    async def search(self, payload: dict[str, Any]) -> dict[str, Any]:
        step, q = payload["step"], payload["sub_question"]
        budget = self.ctx.budget.child(payload["tokens"], name=f"search:{step['id']}")
        t0 = time.perf_counter()
        task = asyncio.ensure_future(run_tool_loop(
            self.ctx, [Message("user", SEARCH_PROMPT.format(q=q))], [self.tool],
            allowed=set(step.get("tools") or ["search"]) & {self.tool.name} or {self.tool.name},
            max_steps=self.opts.max_steps, budget=budget, max_tokens=self.opts.step_max_tokens,
            name=f"search:{step['id']}"))
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
        passages = [p for c in result.calls if c.get("name") == self.tool.name for p in parse_passages(c.get("result"))]
        finding = {"step": step["id"], "question": q, "answer": result.answer, "stopped": result.stopped,
                   "passages": passages, "tokens": budget.spent, "wall_s": round(time.perf_counter() - t0, 3)}
        self.emit({"type": "searcher_done", "step_id": step["id"], "stopped": result.stopped})
        if result.stopped == "budget" and not result.answer and not passages:
            return self._failed(step, q, "its budget ran out before it found anything")
        return {"findings": [finding]}

    def _failed(self, step: dict[str, Any], q: str, why: str) -> dict[str, Any]:
        self.ctx.record({"kind": "searcher_failed", "step": step["id"], "question": q, "error": why})
        self.emit({"type": "searcher_failed", "step_id": step["id"], "error": why})
        return {"failed": [{"step": step["id"], "question": q, "error": why}]}

    async def reconvene(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"level": state.get("level", 0) + 1}

    async def synthesize(self, state: dict[str, Any]) -> dict[str, Any]:
        if self.rejected:
            return {"answer": "", "citations": [], "missing": ["the plan was rejected by approve_plan"]}
        plan = Plan.model_validate(state["plan"])
        findings = sorted(state.get("findings", []), key=lambda f: f["step"])
        failed = sorted(state.get("failed", []), key=lambda f: f["step"])
        missing = [f"{f['step']} ({f['question']}): {f['error']}" for f in failed]
        passages: dict[str, dict[str, str]] = {}
        lines = []
        for f in findings:
            lines.append(f"[{f['step']}] {f['question']} -> {f['answer'] or '(no answer)'}")
            for p in f["passages"]:
                if p["id"] not in passages:
                    passages[p["id"]] = p
                    lines.append(f"  passage [{p['id']}] {p['title']}: {p['text'][:240]}")
        for m in missing:
            lines.append(f"[missing] {m}")
        # the best partial answer so far, should synthesis itself run out of budget
        self.ctx.best_answer = "; ".join(f["answer"] for f in findings if f["answer"]) or self.ctx.best_answer
        answer_schema: dict[str, Any] = ({"type": "string", "enum": plan.answer_choices} if plan.answer_choices
                                         else {"type": "string", "minLength": 1, "maxLength": 80})
        ids = list(passages)
        schema = {"type": "object", "properties": {
            "answer": answer_schema,
            "citations": ({"type": "array", "items": {"type": "string", "enum": ids}, "minItems": 1,
                           "maxItems": min(2, len(ids))} if ids else {"type": "array", "maxItems": 0}),
        }, "required": ["answer", "citations"], "additionalProperties": False}
        messages = [Message("system", SYNTH_SYSTEM),
                    Message("user", f"Question: {plan.goal}\nFindings:\n" + "\n".join(lines))]
        completion = await self.ctx.call_model(
            "synthesize", messages, GenParams(max_tokens=self.opts.synth_max_tokens, json_schema=schema))
        try:
            data = json.loads(completion.text)
            answer, cites = str(data["answer"]).strip(), [c for c in data["citations"] if c in passages]
        except (ValueError, KeyError, TypeError):  # cut off by max_tokens: keep what is readable
            m = re.search(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)"', completion.text)
            answer = m[1] if m else self.ctx.best_answer
            cites = [i for i in ids if i in completion.text]
        if missing:
            answer = f"{answer} (incomplete: no findings for {', '.join(f['step'] for f in failed)})".strip()
        self.ctx.best_answer = answer or self.ctx.best_answer
        return {"answer": answer, "citations": list(dict.fromkeys(cites)), "missing": missing}

    async def verify(self, state: dict[str, Any]) -> dict[str, Any]:
        """Ask whether the cited passages support the answer (recorded; the answer is kept either way)."""
        if not state.get("answer"):
            return {"verdict": "skipped"}
        texts = [p for f in state.get("findings", []) for p in f["passages"] if p["id"] in state.get("citations", [])]
        body = "\n".join(f"[{p['id']}] {p['text'][:240]}" for p in texts) or "(no passages)"
        messages = [Message("user", f"Passages:\n{body}\n\nQuestion: {state['question']}\nAnswer: {state['answer']}\n"
                                    "Do the passages support the answer? Reply yes or no.")]
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
    g.add_node("plan", checked(run.plan))
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


def make_planner(ctx: RunContext, opts: PlanOptions) -> Any:
    """The planner ``opts.planner`` names, calling the model through the run's budgeted ``call_model``."""
    if opts.planner == "heuristic":
        return HeuristicPlanner(max_fanout=opts.max_fanout, max_depth=opts.max_depth)
    if opts.planner != "llm":
        raise PlanError(f"unknown planner {opts.planner!r}; use 'llm' or 'heuristic'")

    async def complete(messages: list[Message], params: GenParams) -> Any:
        return await ctx.call_model("plan", messages, params, backend=ctx.planner)

    return LLMPlanner(complete, max_fanout=min(opts.max_fanout, 2), max_depth=opts.max_depth)


_CORPORA: dict[tuple[str, str], Any] = {}


def default_searcher(ctx: RunContext) -> Any:
    """Search the corpus named by ``settings.corpus`` (default "default") in the run's memory store.
    Opened corpora are kept per (location, name): reopening (Chroma + the BM25 cache) costs seconds."""
    from memory.corpus import open_corpus, resolve_location

    key = (resolve_location(ctx.settings), getattr(ctx.settings, "corpus", "default"))
    if key not in _CORPORA:
        _CORPORA[key] = open_corpus(key[0], key[1])
    return _CORPORA[key].search


async def run_plan(ctx: RunContext, question: str, *, searcher: Any = None, planner: Any = None,
                   options: PlanOptions | None = None) -> dict[str, Any]:
    """Run the workflow; returns the final state (answer, citations, findings, failed, missing, plan)."""
    hooks = getattr(ctx, "callbacks", None) or {}
    opts = options or hooks.get("plan_options") or PlanOptions()
    searcher = searcher or hooks.get("searcher") or default_searcher(ctx)
    run = _Run(ctx, opts, searcher, planner or hooks.get("planner") or make_planner(ctx, opts))
    graph = build_graph(run)
    # plan + (search + reconvene) per level + synthesize + verify, with slack: set explicitly (default 10k)
    limit = 2 * opts.max_depth + 6
    return await graph.ainvoke({"question": question, "findings": [], "failed": []}, {"recursion_limit": limit})


async def run(ctx: RunContext, question: str) -> RouteOutput:
    """The ``plan`` route: the answer, with the cited passage ids."""
    state = await run_plan(ctx, question)
    cites = state.get("citations", [])
    out = RouteOutput(state.get("answer", ""), citations=cites)
    ctx.record({"kind": "plan_result", "citations": cites, "missing": state.get("missing", []),
                "findings": [{k: f[k] for k in ("step", "question", "answer", "stopped", "tokens")}
                             for f in state.get("findings", [])],
                **({"verdict": state["verdict"]} if "verdict" in state else {})})
    return out


__all__ = ["PlanOptions", "PlanState", "build_graph", "checked", "parse_passages", "run", "run_plan"]
