"""Executors: where the runs of an eval or a rollout happen.

* ``local`` — asyncio workers in this process sharing one Agent (``evals.runner.run_tasks``).
* ``ray``   — Ray actors, each holding its own runtime (backends, memory client), pulling tasks with a
  bounded number in flight; results and trajectories stream back to this process, which alone writes
  them (``agentrt.batch.ray``; extra ``ray``).

An executor has ``name``, ``async run_tasks(agent, tasks, config, *, on_result=None) -> records`` (the
contract of ``evals.runner.run_tasks``: resumable from ``OUT/results.jsonl``, every key exactly once)
and ``close()``. Pick one on the command line (``--executor ray --ray-address ADDR``) or in the config
file's ``[executor]`` table (see examples/cluster.toml); the command line wins.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any, Protocol

from agentrt.core.errors import ConfigError

EXECUTORS = ("local", "ray")
# Keys of the [executor] table (and of make_executor's options) per kind.
RAY_OPTIONS = ("address", "actors", "max_inflight", "actor_cpus", "actor_gpus", "max_attempts", "respawn",
               "env", "num_cpus", "startup_timeout_s")


class Executor(Protocol):
    name: str

    async def run_tasks(self, agent: Any, tasks: list[Any], config: Any, *,
                        on_result: Any = None) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """In-process asyncio workers (``config.workers``) sharing the Agent's backend batcher."""

    name = "local"

    async def run_tasks(self, agent: Any, tasks: list[Any], config: Any, *, on_result: Any = None) -> list[dict[str, Any]]:
        from evals.runner import run_tasks

        return await run_tasks(agent, tasks, config, on_result=on_result)

    def close(self) -> None:
        pass


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
