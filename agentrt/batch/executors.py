"""Executors: where the tasks of a batch (an eval, a rollout) run, and how a command picks one.

* ``local`` — asyncio workers in this process sharing one runtime (``agentrt.batch.local``).
* ``ray``   — Ray actors, each holding its own runtime (backends, memory client), pulling tasks with a
  bounded number in flight; results and trajectories stream back to this process, which alone writes
  them (``agentrt.batch.ray``; extra ``ray``).

An executor has ``name``, ``close()`` and::

    async run(job, tasks, results, *, runtime=None, trajectories=None, workers=None, on_result=None) -> records

It runs every task whose key is not yet in ``results`` (a ``ResultsFile``: resumable, every key
exactly once) through ``job`` (``agentrt.batch.tasks.Job``) and returns all records. ``runtime`` is
this process's runtime (the local executor runs on it), ``trajectories`` the writer the Ray executor
writes the actors' trajectories with, ``workers`` the local concurrency. ``run_batch`` adds the
default executor and a progress bar. Pick an executor on the command line (``--executor ray
--ray-address ADDR``) or in the config file's ``[executor]`` table (see examples/cluster.toml); the
command line wins.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from agentrt.batch.local import LocalExecutor
from agentrt.batch.progress import ProgressBar
from agentrt.batch.results import ResultsFile, read_results
from agentrt.batch.tasks import BatchTask, Job
from agentrt.core.errors import ConfigError

EXECUTORS = ("local", "ray")
# Keys of the [executor] table (and of make_executor's options) per kind.
RAY_OPTIONS = ("address", "actors", "max_inflight", "actor_cpus", "actor_gpus", "max_attempts", "respawn",
               "env", "num_cpus", "startup_timeout_s")


class Executor(Protocol):
    """Where a batch runs (see the module docstring)."""

    name: str

    async def run(self, job: Job, tasks: Sequence[BatchTask], results: ResultsFile, *, runtime: Any = None,
                  trajectories: Any = None, workers: int | None = None,
                  on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


async def run_batch(job: Job, tasks: Sequence[BatchTask], results: ResultsFile, *, executor: Executor | None = None,
                    runtime: Any = None, trajectories: Any = None, workers: int | None = None,
                    on_result: Callable[[dict[str, Any]], None] | None = None,
                    progress: ProgressBar | None = None) -> list[dict[str, Any]]:
    """Run a batch on ``executor`` (default: local), with ``progress`` drawn on stderr when given.

    Returns every record of ``results`` (those of earlier, resumed runs too). The caller closes the executor.
    """
    executor = executor if executor is not None else LocalExecutor()
    options = {"runtime": runtime, "trajectories": trajectories, "workers": workers}
    if progress is None:
        return await executor.run(job, tasks, results, on_result=on_result, **options)
    keys = {t.key for t in tasks}
    completed = sum(1 for r in read_results(results.path) if r.get("key") in keys)
    with progress.track(len(keys), completed) as advance:
        def both(record: dict[str, Any]) -> None:
            advance(record)
            if on_result is not None:
                on_result(record)

        return await executor.run(job, tasks, results, on_result=both, **options)


def make_executor(kind: str = "local", **options: Any) -> Executor:
    """``local`` or ``ray`` (options: see ``RayExecutor``); bad names or options raise ConfigError."""
    if kind == "local":
        unknown = [k for k, v in options.items() if v is not None]
        if unknown:
            raise ConfigError(f"executor 'local' takes no options (got {', '.join(unknown)}); use --executor ray")
        return LocalExecutor()
    if kind == "ray":
        unknown = sorted(set(options) - set(RAY_OPTIONS))
        if unknown:
            raise ConfigError(f"unknown [executor] option(s) {', '.join(unknown)}; known: {', '.join(RAY_OPTIONS)}")
        from agentrt.batch.ray import RayExecutor

        return RayExecutor(**{k: v for k, v in options.items() if v is not None})
    raise ConfigError(f"unknown executor {kind!r}; choose one of: {', '.join(EXECUTORS)}")


def executor_table(config_file: str | Path | None) -> dict[str, Any]:
    """The ``[executor]`` table of the config file (``--config``, else ``$AGENTRT_HOME/config.toml``)."""
    from agentrt.core.config import default_home

    path = Path(config_file) if config_file else default_home() / "config.toml"
    if not path.is_file():
        return {}
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("executor", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: [executor] must be a table")
    return dict(table)


def add_executor_args(parser: argparse.ArgumentParser) -> None:
    """``--executor``, ``--ray-address``, ``--actors``, ``--max-inflight`` for a command."""
    parser.add_argument("--executor", choices=EXECUTORS, help="where runs happen: local (default) or ray "
                        "(also settable in the config's [executor] table)")
    parser.add_argument("--ray-address", help="Ray cluster to join (auto, HOST:PORT or ray://HOST:10001); "
                        "default: start a local one")
    parser.add_argument("--actors", type=int, help="Ray actors, each holding one runtime (default 2)")
    parser.add_argument("--max-inflight", type=int, help="runs in flight per Ray actor (default 2)")


def executor_from_args(args: argparse.Namespace) -> Executor:
    """The executor the command line and the config's ``[executor]`` table ask for."""
    table = executor_table(getattr(args, "config", None))
    kind = args.executor or table.pop("kind", "local")
    table.pop("kind", None)
    cli = {"address": args.ray_address, "actors": args.actors, "max_inflight": args.max_inflight}
    if kind == "local":
        given = [f"--{k.replace('_', '-')}" if k != "address" else "--ray-address" for k, v in cli.items() if v is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} only apply to --executor ray")
        return LocalExecutor()
    return make_executor(kind, **{**table, **{k: v for k, v in cli.items() if v is not None}})
