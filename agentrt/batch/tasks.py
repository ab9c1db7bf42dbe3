"""Batch tasks and the job that runs them.

A batch is a list of ``BatchTask(key, payload)``. ``key`` names the task in the results file: unique in
the batch and stable across reruns, so a resumed batch skips every key already written. ``payload`` is
whatever the job needs (an eval's item, router and sample); it must pickle, since the Ray executor
ships it to an actor.

A ``Job`` is the work of one batch, handed to an executor (``agentrt.batch.executors``):

* ``open(trajectories)`` builds the runtime the tasks run on (an Agent) in this process. The Ray
  executor calls it once per actor with an in-memory buffer that the runtime must write its
  trajectory records to (they travel back to the driver, the one writer); ``None`` means "write to
  your own store".
* ``ready(runtime)`` loads what the runtime loads lazily (models), so a bad spec fails at start-up; it
  returns facts for the start-up report (e.g. ``{"policy": name}``).
* ``async run(runtime, task)`` runs one task and returns its result line (a JSON-able dict). A run's
  trajectory records carry ``metadata[TASK_KEY] = task.key``: that is how an actor's buffer knows
  which records belong to which task.
* ``failed(task, error)`` is the result line of a task that could not run at all (it raised, or its
  actor died ``max_attempts`` times).

The job itself must pickle too (Ray sends it to every actor): keep it to plain data (configs, settings
as dicts) and build anything heavy in ``open``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from agentrt.core.errors import InputError

# The trajectory metadata field naming the task a run belongs to (set by the job's runs).
TASK_KEY = "task_key"


@dataclass(frozen=True, slots=True)
class BatchTask:
    """One unit of a batch: a unique, stable ``key`` and the ``payload`` the job runs it from."""

    key: str
    payload: Any


class Job(Protocol):
    """The per-task work of a batch (see the module docstring); must pickle for the Ray executor."""

    def open(self, trajectories: Any | None) -> Any: ...

    def ready(self, runtime: Any) -> dict[str, Any]: ...

    async def run(self, runtime: Any, task: BatchTask) -> dict[str, Any]: ...

    def failed(self, task: BatchTask, error: str) -> dict[str, Any]: ...


def check_keys(tasks: Iterable[BatchTask]) -> None:
    """Refuse a batch whose keys repeat: the results file could not tell the runs apart on resume."""
    seen: set[str] = set()
    for task in tasks:
        if not isinstance(task.key, str) or not task.key:
            raise InputError(f"a batch task needs a non-empty string key, got {task.key!r}")
        if task.key in seen:
            raise InputError(f"task key {task.key!r} appears twice in one batch; give every task its own key "
                             "(e.g. name each suite or router once)")
        seen.add(task.key)


def one_line(error: BaseException) -> str:
    """An exception as one short line (for result records and error messages)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]
