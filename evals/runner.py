"""The eval runner: (suite items x samples x routers) through ``Agent.arun``, resumable, in parallel.

* Parallel: W asyncio workers share one Agent (one loaded backend), so concurrent requests meet in
  the backend's dynamic batcher.
* Resumable: each finished (router, suite, item, sample) is appended to ``OUT/results.jsonl`` and
  fsynced before the next is counted; a restarted eval skips every key already there (a torn last
  line from a kill is cut off). ``OUT/config.json`` pins the settings a resumed eval must share.
* Trajectories: every run's trajectory gets its task (ground truth, verifier) and reward, written
  by the Agent's own writer; results.jsonl records the trajectory id.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentrt.core.errors import InputError
from evals.routers import EvalRouter
from evals.suites import Item, Suite
from evals.verifiers import Scored, score_item

RESULTS = "results.jsonl"
CONFIG = "config.json"
# Settings a resumed eval must share with the run it continues (limit, workers, routers may change).
PINNED = ("budget", "seed", "policy", "temperature")


@dataclass
class EvalConfig:
    suites: list[str]
    routers: list[str]
    budget: int = 1024
    limit: int | None = None
    samples: int = 1
    workers: int = 4
    seed: int = 0
    policy: str = ""
    temperature: float = 0.0  # > 0: each sample decodes with its own seed (pass@k, GRPO groups)
    out: str = "eval-out"


@dataclass(slots=True)
class Task:
    router: EvalRouter
    suite: str
    item: Item
    sample: int

    @property
    def key(self) -> str:
        return f"{self.router.name}|{self.suite}|{self.item.id}|{self.sample}"


@dataclass
class _Capture:
    """Wraps the Agent's trajectory writer: scores each record, adds task and reward, writes it.

    Scoring (unit tests run a subprocess) and the fsync of the write happen in a worker thread, so
    the event loop keeps feeding the batcher; ``run_one`` awaits the write before counting the run.
    """

    inner: Any
    by_question: dict[str, Item] = field(default_factory=dict)
    pending: dict[str, asyncio.Future] = field(default_factory=dict)
    # Extra trajectory metadata per prompt: a multi-turn item's turn index (evals.multiturn).
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.inner.path

    def append(self, record: Any) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not called from a run: write in place
            self._finish(record)
            return
        self.pending[record.run_id] = loop.run_in_executor(None, self._finish, record)

    def _finish(self, record: Any) -> tuple[Any, Scored | None]:
        from agentrt.trajectory import RewardBreakdown, TaskInfo

        item = self.by_question.get(record.question)
        scored = None
        if item is not None and record.status in ("ok", "truncated"):
            scored = score_item(item, record.answer, record.route)
            record.task = TaskInfo(data_source="agentrt-eval", ability=item.type, ground_truth=_jsonable(item.ground_truth()),
                                   verifier=item.verifier, prompt_id=item.id)
            record.reward = scored.score
            record.rewards = {**record.rewards, "eval": RewardBreakdown(score=scored.score, correct=scored.correct,
                                                                         reason=scored.reason,
                                                                         verifier=item.verifier)}
        if record.question in self.metadata:
            record.metadata = {**record.metadata, **self.metadata[record.question]}
        self.inner.append(record)
        return record, scored


class _GroupSync:
    """fsync a file in a worker thread, coalescing: at most one in flight, one more queued."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.dirty = False
        self.task: asyncio.Task | None = None

    def kick(self) -> None:
        self.dirty = True
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self.dirty:
            self.dirty = False
            await asyncio.to_thread(os.fsync, self.fd)

    async def drain(self) -> None:
        if self.task is not None:
            await self.task
        if self.dirty:
            await self._run()


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def resolve_temperature(given: float | None, samples: int) -> float:
    """The runs' temperature: as given, else greedy for one sample and 0.7 for several (so they differ)."""
    t = given if given is not None else (0.7 if samples > 1 else 0.0)
    if not 0 <= t <= 2:
        raise InputError(f"--temperature must be between 0 and 2, got {t}")
    return t


def sample_seed(seed: int, suite: str, item_id: str, sample: int) -> int:
    """A stable per-sample seed: with ``temperature > 0`` each sample decodes differently, reproducibly."""
    return zlib.crc32(f"{seed}:{suite}:{item_id}:{sample}".encode()) & 0x7FFFFFFF


def read_results(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """The complete records of a results file; with ``repair``, a torn tail (killed mid-write) is cut off."""
    if not path.is_file():
        return []
    raw = path.read_bytes()
    records, good = [], 0
    for line in raw.split(b"\n")[:-1]:  # the part after the last newline is incomplete by definition
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
        good += len(line) + 1
    if repair and good < len(raw):
        with open(path, "r+b") as f:
            f.truncate(good)
            os.fsync(f.fileno())
    return records


def check_config(out: Path, config: EvalConfig) -> None:
    """Write OUT/config.json, or check a resumed eval shares its pinned settings."""
    path = out / CONFIG
    mine = asdict(config)
    if path.is_file():
        old = json.loads(path.read_text())
        for key in PINNED:
            if old.get(key) != mine[key]:
                raise InputError(f"{out} holds an eval with {key}={old.get(key)!r}, not {mine[key]!r}; "
                                 f"use the same {key} to resume, or a new --out")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(mine, indent=1))
    os.replace(tmp, path)


def plan_tasks(suites: list[Suite], routers: list[EvalRouter], samples: int, limit: int | None) -> list[Task]:
    """Deterministic order: item by item, all samples and routers of an item together (the oracle needs them)."""
    tasks = []
    for suite in suites:
        for item in suite.items[:limit]:
            for sample in range(samples):
                for router in routers:
                    tasks.append(Task(router, suite.name, item, sample))
    return tasks


def pending(tasks: list[Task], config: EvalConfig) -> tuple[Path, list[dict[str, Any]], list[Task]]:
    """The results file, the records already in it (a torn tail repaired) and the tasks still to run."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    check_config(out, config)
    results_path = out / RESULTS
    records = read_results(results_path, repair=True)
    done = {r["key"] for r in records}
    return results_path, records, [t for t in tasks if t.key not in done]


async def run_tasks(agent: Any, tasks: list[Task], config: EvalConfig, *,
                    on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run every task not already in OUT/results.jsonl; returns all records (old and new)."""
    results_path, records, todo = pending(tasks, config)

    capture = _Capture(agent.writer)
    for t in tasks:
        capture.by_question.setdefault(t.item.question, t.item)
    agent.writer = capture
    queue: asyncio.Queue[Task] = asyncio.Queue()
    for t in todo:
        queue.put_nowait(t)
    fh = open(results_path, "ab")
    syncer = _GroupSync(fh.fileno())

    def write(record: dict[str, Any]) -> None:
        # One write() per record straight to the OS: a killed process never loses a counted line.
        # fsync (for an OS crash) runs in a thread by group commit, off the event loop.
        fh.write((json.dumps(record, ensure_ascii=False) + "\n").encode())
        fh.flush()
        syncer.kick()
        records.append(record)
        if on_result:
            on_result(record)

    async def worker() -> None:
        while True:
            try:
                task = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            write(await run_one(agent, capture, task, config))

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, config.workers))))
        # Trajectories of runs that failed (their records carry the error) are written too.
        await asyncio.gather(*capture.pending.values(), return_exceptions=True)
        await syncer.drain()
    finally:
        fh.close()
        agent.writer = capture.inner
    return records


async def run_one(agent: Any, capture: _Capture, task: Task, config: EvalConfig) -> dict[str, Any]:
    """Run and score one task; a failed run is a record with ``error`` (score 0), never a crash of the eval.

    A multi-turn item (``item.turns``) is one task: its whole conversation runs here (evals.multiturn).
    """
    if task.item.turns:
        from evals.multiturn import run_conversation

        return await run_conversation(agent, capture, task, config)
    choice = task.router.choose(task.item)
    base = task_base(task, config, choice.p_success)
    started = time.perf_counter()
    try:
        result = await agent.arun(task.item.question, budget=config.budget, route=choice.route, router=choice.router,
                                  temperature=config.temperature, seed=base["seed"])
    except Exception as e:  # noqa: BLE001 - one bad item (too long, backend hiccup) must not stop the eval
        return {**base, **failed_fields(choice.route, e, started)}
    fields, _ = await run_fields(capture, task.item, result, started, base["p_success"])
    return {**base, **fields}


def task_base(task: Task, config: EvalConfig, p_success: float | None) -> dict[str, Any]:
    """The fields of a result record that name the task."""
    return {"key": task.key, "router": task.router.name, "suite": task.suite, "item_id": task.item.id,
            "sample": task.sample, "seed": sample_seed(config.seed, task.suite, task.item.id, task.sample),
            "type": task.item.type, "fixed": task.router.fixed, "p_success": p_success}


def failed_fields(route: str | None, error: Exception, started: float) -> dict[str, Any]:
    """The outcome fields of a run that raised (score 0)."""
    return {"route": route or "", "answer": "", "score": 0.0, "correct": False, "abstained": False,
            "reason": "", "status": "error", "error": f"{type(error).__name__}: {error}", "truncated": False,
            "prompt_tokens": 0, "completion_tokens": 0, "thinking_tokens": 0, "tool_calls": 0,
            "latency_s": round(time.perf_counter() - started, 4), "trajectory_id": None}


async def run_fields(capture: _Capture, item: Item, result: Any, started: float,
                     p_success: float | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The outcome fields of a finished run (scored against ``item``), and its trajectory steps."""
    record, scored = None, None
    if result.trajectory_id in capture.pending:  # the trajectory is on disk before the run counts
        record, scored = await capture.pending.pop(result.trajectory_id)
    latency = time.perf_counter() - started
    scored = scored or score_item(item, result.answer, result.route)
    steps = record.steps if record is not None else []
    thinking = sum(s.get("usage", {}).get("completion_tokens", 0) for s in steps
                   if s.get("kind") == "model_call" and s.get("name") == "think")
    p = p_success
    for s in steps:  # a router that predicts success records it in its route step
        if s.get("kind") == "route_decision" and isinstance(s.get("p_success"), dict):
            p = s["p_success"].get(result.route, p)
    return {"p_success": p, "route": result.route, "answer": result.answer, "score": scored.score,
            "correct": scored.correct, "abstained": scored.abstained, "reason": scored.reason, "status": result.status,
            "error": None, "truncated": result.truncated, "prompt_tokens": result.usage.prompt_tokens,
            "completion_tokens": result.usage.completion_tokens, "thinking_tokens": thinking,
            "tool_calls": sum(1 for s in steps if s.get("kind") == "tool_call"),
            "latency_s": round(latency, 4), "trajectory_id": result.trajectory_id}, steps


def validate(config: EvalConfig) -> tuple[list[EvalRouter], list[Suite]]:
    """Check the numbers, build the routers and load the suites (before any model loads)."""
    from evals.routers import make_router
    from evals.suites import load_suite

    for name in ("samples", "workers", "budget", "limit"):
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"--{name} must be a positive integer, got {value!r}")
    return [make_router(r) for r in dict.fromkeys(config.routers)], [load_suite(s) for s in config.suites]


def evaluate(config: EvalConfig, *, agent: Any = None, progress: bool = False, executor: Any = None) -> dict[str, Any]:
    """Run (or resume) an eval and write its reports; returns the metrics (as in report.json).

    ``executor``: where the runs happen (``agentrt.batch.executors``; default: asyncio workers in this process).
    """
    from evals.metrics import compute
    from evals.report import write_reports

    routers, suites = validate(config)
    if agent is None:
        from agentrt import Agent, load_settings

        agent = Agent(load_settings(policy=config.policy or None))
    config.policy = config.policy or agent.settings.policy
    tasks = plan_tasks(suites, routers, config.samples, config.limit)
    started = time.perf_counter()
    records = asyncio.run(_with_progress(agent, tasks, config, progress, executor))
    keys = {t.key for t in tasks}
    records = [r for r in records if r["key"] in keys]  # a resumed dir may hold more (a larger --limit before)
    metrics = compute(records)
    notes = []
    if "hotpotqa" in config.suites:
        notes.append("hotpotqa ran closed-book: the plan/search route does not exist yet.")
    if any(item.turns for suite in suites for item in suite.items[:config.limit]):
        notes.append("multi-turn items: turns asked in order in one session (budget per turn), scored each; the item "
                     "scores its last turn; the plan check runs the whole question alone with route plan.")
    if config.samples > 1:
        notes.append("samples use the policy's decoding settings; with greedy decoding all samples agree.")
    meta = {**asdict(config), "wall_s": time.perf_counter() - started, "notes": notes,
            "trajectory_file": str(agent.writer.path)}
    write_reports(Path(config.out), metrics, meta)
    return {"meta": meta, **metrics}


async def _with_progress(agent: Any, tasks: list[Task], config: EvalConfig, progress: bool,
                         executor: Any = None) -> list[dict[str, Any]]:
    run = executor.run_tasks if executor is not None else run_tasks
    if not progress:
        return await run(agent, tasks, config)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    done = {r["key"] for r in read_results(Path(config.out) / RESULTS)}
    finished = [t for t in tasks if t.key in done]
    score = {"sum": 0.0, "n": 0}
    columns = [TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TextColumn("acc {task.fields[acc]}"),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task_id = bar.add_task("eval", total=len(tasks), completed=len(finished), acc="-")

        def on_result(record: dict[str, Any]) -> None:
            score["sum"] += float(record["correct"])
            score["n"] += 1
            bar.update(task_id, advance=1, acc=f"{score['sum'] / score['n']:.3f}")

        return await run(agent, tasks, config, on_result=on_result)
