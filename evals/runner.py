"""The eval runner: (suite items x samples x routers) through ``Agent.arun``, resumable, in parallel.

The machinery is ``agentrt.batch``; this module says what one eval task is and how it runs:

* Tasks: ``plan_tasks`` -> ``Task(router, suite, item, sample)``, keyed ``router|suite|item|sample``.
* One task (``run_one``): the router's choice, then ``agent.arun(question, task=run_task(item),
  metadata={"task_key": key})``. The Agent scores the answer with the item's verifier before it
  writes the trajectory, so each record carries its task (ground truth, verifier, ``prompt_id``) and
  reward; the result line comes from the returned ``Result`` (``.reward``, ``.record``). A multi-turn
  item runs its whole conversation as one task (``evals.multiturn``).
* Parallel: the local executor's asyncio workers share one Agent (one loaded backend), so concurrent
  requests meet in the backend's dynamic batcher; ``--executor ray`` runs the same ``EvalJob`` on
  Ray actors.
* Resumable: each finished task is one line of ``OUT/results.jsonl``; a rerun skips every key already
  there. ``OUT/config.json`` pins the settings a resumed eval must share (``PINNED``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentrt.batch import CONFIG, RESULTS, TASK_KEY, BatchTask, ProgressBar, ResultsFile, read_results, run_batch
from agentrt.core.errors import ConfigError, InputError
from evals.multiturn import prepare_corpus, run_conversation, suite_corpus
from evals.outcomes import eval_tools, failed_fields, run_fields, run_task, sample_seed, task_base
from evals.routers import AgentRouter, EvalRouter, FixedRouter
from evals.suites import Item, Suite

__all__ = ["EvalConfig", "Task", "EvalJob", "plan_tasks", "validate", "evaluate", "run_tasks", "run_one",
           "resolve_temperature", "sample_seed", "prepare_corpus", "read_results", "runtime_specs", "suite_corpus", "RESULTS", "CONFIG",
           "PINNED"]

# Settings a resumed eval must share with the run it continues (limit, workers, routers may change).
PINNED = ("budget", "seed", "policy", "temperature", "tools")


@dataclass
class EvalConfig:
    """An eval's settings (``agentrt eval``'s flags); written to ``OUT/config.json``."""

    suites: list[str]
    routers: list[str]
    budget: int = 1024
    limit: int | None = None
    samples: int = 1
    workers: int = 4
    seed: int = 0
    policy: str = ""
    temperature: float = 0.0  # > 0: each sample decodes with its own seed (pass@k, GRPO groups)
    # safe: the tools a user's run gets by default (calculator, search of the index: settings.tools);
    # builtin: `--tools` (calculator, ask_user, python when allowed); off: `--no-tools`. Folders written
    # before this was a name hold True (builtin) or False / nothing (off).
    tools: str = "safe"
    out: str = "eval-out"


@dataclass(slots=True)
class Task:
    """One run of the eval: an item of a suite, under a router, as sample number ``sample``."""

    router: EvalRouter
    suite: str
    item: Item
    sample: int

    @property
    def key(self) -> str:
        return f"{self.router.name}|{self.suite}|{self.item.id}|{self.sample}"


def resolve_temperature(given: float | None, samples: int) -> float:
    """The runs' temperature: as given, else greedy for one sample and 0.7 for several (so they differ)."""
    t = given if given is not None else (0.7 if samples > 1 else 0.0)
    if not 0 <= t <= 2:
        raise InputError(f"--temperature must be between 0 and 2, got {t}")
    return t


def plan_tasks(suites: list[Suite], routers: list[EvalRouter], samples: int, limit: int | None) -> list[Task]:
    """Deterministic order: item by item, all samples and routers of an item together (the oracle needs them)."""
    tasks = []
    for suite in suites:
        for item in suite.items[:limit]:
            for sample in range(samples):
                for router in routers:
                    tasks.append(Task(router, suite.name, item, sample))
    return tasks


async def run_one(agent: Any, task: Task, config: EvalConfig) -> dict[str, Any]:
    """Run and score one task; a failed run is a record with ``error`` (score 0), never a crash of the eval.

    A multi-turn item (``item.turns``) is one task: its whole conversation runs here (evals.multiturn).
    """
    if task.item.turns:
        return await run_conversation(agent, task, config)
    choice = task.router.choose(task.item)
    base = task_base(task, config, choice.p_success)
    started = time.perf_counter()
    try:
        # a router decides when the choice names one (a fixed one too: its decision step records the features)
        result = await agent.arun(task.item.question, budget=config.budget,
                                  route=None if choice.router else choice.route, router=choice.router,
                                  temperature=config.temperature, seed=base["seed"], task=run_task(task.item),
                                  metadata={TASK_KEY: task.key}, tools=eval_tools(agent, config))
    except Exception as e:  # noqa: BLE001 - one bad item (too long, backend hiccup) must not stop the eval
        return {**base, **failed_fields(choice.route, e, started)}
    fields, _ = run_fields(task.item, result, started, base["p_success"])
    return {**base, **fields}


@dataclass
class EvalJob:
    """An eval as an ``agentrt.batch`` job: ``run`` is ``run_one``; ``open`` builds an Agent (on a Ray actor).

    ``settings``: the driver's Settings as a dict (it travels to the actors); ``config``: the eval's.
    """

    config: EvalConfig
    settings: dict[str, Any]

    def open(self, trajectories: Any | None) -> Any:
        """An Agent from ``settings`` whose records go to ``trajectories`` (an actor's buffer) when given."""
        from agentrt.app.agent import Agent
        from agentrt.core.config import Settings, ensure_writable_dir

        conf = Settings.model_validate(self.settings)
        if trajectories is not None:
            try:  # the driver's home may not exist on this node; runs only need a scratch home here
                ensure_writable_dir(conf.trajectory_dir, "trajectory directory")
            except ConfigError:
                import tempfile

                scratch = Path(tempfile.gettempdir()) / f"agentrt-actor-{os.getuid()}"
                conf = conf.model_copy(update={"home": scratch})
        agent = Agent(conf)
        if trajectories is not None:
            agent.writer = trajectories  # a fresh runtime's store: the driver alone writes to disk
        return agent

    def ready(self, agent: Any) -> dict[str, Any]:
        """Load the backends now (the policy, and the planner when it is another model)."""
        policy = agent.policy
        if agent.settings.planner:
            agent.planner  # noqa: B018 - loads it
        return {"policy": policy.name}

    async def run(self, agent: Any, task: BatchTask) -> dict[str, Any]:
        return await run_one(agent, task.payload, self.config)

    def failed(self, task: BatchTask, error: str) -> dict[str, Any]:
        """The result line of a task that could not run (same fields as a failed run's, score 0)."""
        t: Task = task.payload
        choice = t.router.choose(t.item)
        return {**task_base(t, self.config, choice.p_success), **failed_fields(choice.route, error)}


async def run_tasks(agent: Any, tasks: list[Task], config: EvalConfig, *, executor: Any = None,
                    on_result: Callable[[dict[str, Any]], None] | None = None, progress: bool = False,
                    label: str = "eval") -> list[dict[str, Any]]:
    """Run every task not already in OUT/results.jsonl; returns all records (old and new).

    ``executor``: where the runs happen (``agentrt.batch.executors``; default: ``config.workers``
    asyncio workers on ``agent``). Trajectories go to ``agent.writer`` (on Ray: the driver writes them).
    The items' corpus file (if any) is indexed once and searched by the plan route (``prepare_corpus``).
    """
    await asyncio.to_thread(prepare_corpus, agent.settings, [t.item for t in tasks])
    results = ResultsFile(config.out, config=asdict(config), pinned=PINNED)
    job = EvalJob(config, agent.settings.model_dump(mode="json"))
    bar = ProgressBar(label, "acc", lambda r: float(r["correct"])) if progress else None
    return await run_batch(job, [BatchTask(t.key, t) for t in tasks], results, executor=executor, runtime=agent,
                           trajectories=agent.writer, workers=config.workers, on_result=on_result, progress=bar)


def runtime_specs(routers: list[EvalRouter]) -> list[str]:
    """The runtime router specs the CLI's preflight checks before a model loads: each Agent router's, and
    ``fixed:ROUTE`` for the fixed ones (``fixed:plan`` makes the corpus required); the harness's own
    routers were checked by ``make_router``."""
    return [r.spec if isinstance(r, AgentRouter) else f"fixed:{r.route}" for r in routers
            if isinstance(r, (AgentRouter, FixedRouter))]


def validate(config: EvalConfig) -> tuple[list[EvalRouter], list[Suite]]:
    """Check the numbers, build the routers and load the suites (before any model loads)."""
    from evals.routers import make_router
    from evals.suites import load_suite

    for name in ("samples", "workers", "budget", "limit"):
        value = getattr(config, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"--{name} must be a positive integer, got {value!r}")
    # A suite or router named twice would give two tasks one key: each runs once.
    routers = [make_router(r) for r in dict.fromkeys(config.routers)]
    return routers, [load_suite(s) for s in dict.fromkeys(config.suites)]


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
    records = asyncio.run(run_tasks(agent, tasks, config, executor=executor, progress=progress))
    keys = {t.key for t in tasks}
    records = [r for r in records if r["key"] in keys]  # a resumed dir may hold more (a larger --limit before)
    metrics = compute(records)
    notes = []
    if any(item.turns for suite in suites for item in suite.items[:config.limit]):
        notes.append("multi-turn items: turns asked in order in one session (budget per turn), scored each; the item "
                     "scores its last turn; the plan check runs the whole question alone with route plan.")
    if config.samples > 1:
        notes.append("samples use the policy's decoding settings; with greedy decoding all samples agree.")
    meta = {**asdict(config), "wall_s": time.perf_counter() - started, "notes": notes,
            "trajectory_file": str(agent.writer.path)}
    write_reports(Path(config.out), metrics, meta)
    return {"meta": meta, **metrics}
