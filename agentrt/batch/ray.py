"""The Ray executor: a batch on Ray actors, written by one writer in the driver.

    executor = RayExecutor(actors=2, max_inflight=2)      # or address="auto" / "ray://head:10001"
    records = await run_batch(job, tasks, results, executor=executor, trajectories=writer)
    executor.close()                                       # or `agentrt eval ... --executor ray`

How it works:

* Each actor (``Worker``) holds one runtime, built by the job (``job.open(buffer)``: for an eval, an
  Agent from the driver's Settings with its policy and planner backends and memory client), loaded
  once. Its trajectories go to an in-memory buffer: nothing is written on the workers.
* The driver hands each actor at most ``max_inflight`` tasks at a time (backpressure; concurrent
  tasks on one actor meet in its backend's batcher) and refills an actor as its results come back.
* A task's result and trajectories (the buffer's records tagged ``metadata["task_key"]`` with its
  key) come back together; the driver writes the trajectories (``trajectories``, e.g. the Agent's
  TrajectoryWriter) and then the result line (``OUT/results.jsonl``, fsynced), one task at a time:
  no interleaving, and a resumed run skips every key already there, as the local executor does.
* An actor that dies (killed, OOM, node lost) fails its in-flight tasks with ``RayActorError``: they
  go back to the queue (at most ``max_attempts`` tries each) and run on another actor; up to
  ``respawn`` replacement actors are started. Nothing from a dead actor was written, and a key is
  written at most once, so no task is lost or counted twice.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.batch.results import ResultsFile
from agentrt.batch.tasks import TASK_KEY, BatchTask, Job, one_line
from agentrt.core.errors import ConfigError, RunError, missing_extra


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise missing_extra("ray", "ray") from None
    return ray


class TrajectoryBuffer:
    """An actor's trajectory store: keeps each record under the key of the task whose run wrote it.

    ``path`` is the driver's trajectory file (where the records will land), so results that name it
    are right. ``append`` may be called from a worker thread (the Agent writes off the event loop).
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.by_key: dict[str | None, list[Any]] = {}

    def append(self, record: Any) -> None:
        self.by_key.setdefault(record.metadata.get(TASK_KEY), []).append(record)

    def pop(self, key: str) -> list[Any]:
        return self.by_key.pop(key, [])


class Worker:
    """The body of a Ray actor: the job's runtime, and ``run(task)`` -> result + trajectories."""

    def __init__(self, job: Job, trajectory_path: str) -> None:
        self.job = job
        self.buffer = TrajectoryBuffer(trajectory_path)
        self.runtime = job.open(self.buffer)

    async def ready(self) -> dict[str, Any]:
        """Load the runtime now (not on the first task), so a bad spec fails the start with its message."""
        try:
            info = self.job.ready(self.runtime)
        except Exception as e:  # noqa: BLE001 - reported to the driver as one line
            return {"pid": os.getpid(), "error": f"{type(e).__name__}: {e}"}
        return {**info, "pid": os.getpid(), "node": _ray().util.get_node_ip_address()}

    async def run(self, job: Job, task: BatchTask) -> dict[str, Any]:
        """Run one task of ``job`` (this batch's; the runtime was built by the first one) on this actor's
        runtime; its trajectories (a failed run's too) come back with its result."""
        try:
            result = await job.run(self.runtime, task)
        finally:  # a raising task is retried from scratch: drop what its attempt left here
            records = self.buffer.pop(task.key)
        return {"result": result, "trajectories": [r.model_dump(mode="json") for r in records]}


@dataclass
class _Slot:
    index: int
    actor: Any
    pid: int | None = None
    node: str = ""
    inflight: int = 0
    alive: bool = True


class RayExecutor:
    """Runs the tasks of a batch on Ray actors (see the module docstring).

    The actors and their runtimes are started by the first batch (``job.open``) and reused by later
    batches on the same executor, which bring their own job; ``close()`` to start over with other settings.

    ``address``: a cluster to join (``auto``, ``HOST:PORT``, ``ray://HOST:10001``); None starts a local
    one (``num_cpus`` CPUs, no dashboard) unless this process already called ``ray.init``.
    ``actors`` x ``actor_cpus``/``actor_gpus``: the runtimes; ``max_inflight``: tasks per actor at once;
    ``max_attempts``: tries per task before it is recorded as an error; ``respawn``: replacement actors
    started in all when actors die; ``env``: environment variables for the actors (runtime_env).
    """

    name = "ray"

    def __init__(self, address: str | None = None, actors: int = 2, max_inflight: int = 2, actor_cpus: float = 1.0,
                 actor_gpus: float = 0.0, max_attempts: int = 3, respawn: int = 1, env: dict[str, str] | None = None,
                 num_cpus: int | None = None, startup_timeout_s: float = 600.0) -> None:
        for what, value, low in (("actors", actors, 1), ("max_inflight", max_inflight, 1),
                                 ("max_attempts", max_attempts, 1), ("respawn", respawn, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"executor option {what} must be an integer >= {low}, got {value!r}")
        if actor_cpus < 0 or actor_gpus < 0:
            raise ConfigError("executor options actor_cpus and actor_gpus must be >= 0")
        self.address, self.actors, self.max_inflight = address, actors, max_inflight
        self.actor_cpus, self.actor_gpus = float(actor_cpus), float(actor_gpus)
        self.max_attempts, self.respawn, self.env = max_attempts, respawn, dict(env or {})
        self.num_cpus, self.startup_timeout_s = num_cpus, startup_timeout_s
        self.slots: list[_Slot] = []
        self.stats = {"actor_deaths": 0, "retried": 0, "respawned": 0, "duplicates_dropped": 0, "gave_up": 0}
        self._owns_ray = False
        self._closing = False  # set by close(): the driver loop stops, dead actors are not replaced
        self._respawn_left = respawn
        self._remote: Any = None
        self._init_args: tuple[Job, str] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self, job: Job, trajectory_path: str = "") -> None:
        """Join or start the cluster and start the actors (each ``Worker(job)``); waits until each has loaded
        its runtime. ``trajectory_path``: the driver's trajectory file, which the actors' results name."""
        if self.slots:
            return
        self._closing = False
        ray = _ray()
        if not ray.is_initialized():
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # offline: no usage report
            if self.address:
                ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
            else:
                ray.init(num_cpus=self.num_cpus or max(1, int(self.actors * max(self.actor_cpus, 1))),
                         include_dashboard=False, log_to_driver=False, logging_level="WARNING",
                         _node_ip_address="127.0.0.1")  # a private cluster: nothing listens beyond this host
            self._owns_ray = True
        options: dict[str, Any] = {"num_cpus": self.actor_cpus, "num_gpus": self.actor_gpus,
                                   "max_concurrency": self.max_inflight, "max_restarts": 0}
        if self.env:
            options["runtime_env"] = {"env_vars": {k: str(v) for k, v in self.env.items()}}
        self._remote = ray.remote(Worker).options(**options)
        self._init_args = (job, str(trajectory_path))
        for _ in range(self.actors):
            self._new_slot()
        refs = {slot.actor.ready.remote(): slot for slot in self.slots}
        ready, missing = ray.wait(list(refs), num_returns=len(refs), timeout=self.startup_timeout_s)
        if missing:
            self.close()
            raise RunError(f"{len(missing)} of {self.actors} Ray actors did not start within {self.startup_timeout_s:.0f} s "
                           f"(each asks for {self.actor_cpus} CPU, {self.actor_gpus} GPU); use fewer --actors "
                           "or a larger cluster")
        for ref in ready:
            slot = refs[ref]
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError as e:
                self.close()
                raise RunError(f"Ray actor {slot.index} failed to start: {one_line(e)}") from None
            if "error" in info:
                self.close()
                raise ConfigError(f"Ray actor {slot.index} could not load its runtime: {info['error']}")
            slot.pid, slot.node = info["pid"], info["node"]

    def _new_slot(self) -> _Slot:
        job, path = self._init_args  # type: ignore[misc]
        slot = _Slot(len(self.slots), self._remote.remote(job, path))
        self.slots.append(slot)
        return slot

    @property
    def pids(self) -> list[int | None]:
        """Process ids of the live actors (on this machine for a local cluster)."""
        return [s.pid for s in self.slots if s.alive]

    def close(self) -> None:
        """Stop the actors, and the cluster if this executor started it."""
        self._closing = True
        if not self.slots and not self._owns_ray:
            return
        ray = _ray()
        for slot in self.slots:
            if slot.alive:
                try:
                    ray.kill(slot.actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass
                slot.alive = False
        self.slots = []
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    # -- running ------------------------------------------------------------------------------------

    async def run(self, job: Job, tasks: Sequence[BatchTask], results: ResultsFile, *, runtime: Any = None,
                  trajectories: Any = None, workers: int | None = None,
                  on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """Run every task not yet in ``results`` on the actors; returns all records (old and new).

        ``trajectories`` (required: e.g. the Agent's TrajectoryWriter) gets the records the actors send
        back, each task's before its result line. ``runtime`` and ``workers`` are the local executor's:
        here the actors are the runtimes and ``actors x max_inflight`` the concurrency.
        """
        if trajectories is None:
            raise ConfigError("the Ray executor writes the actors' trajectories in this process: pass "
                              "trajectories= (a TrajectoryWriter, e.g. agent.writer)")
        todo = results.start(tasks)
        try:
            if not todo:
                return results.records
            self.start(job, str(trajectories.path))

            def write(task: BatchTask, out: dict[str, Any], slot: _Slot, attempt: int) -> None:
                if results.has(task.key):  # cannot happen with the bookkeeping below; never count twice anyway
                    self.stats["duplicates_dropped"] += 1
                    return
                from agentrt.trajectory import TrajectoryRecord

                for t in out["trajectories"]:  # the trajectory first: a result line implies its trajectory
                    trajectories.append(TrajectoryRecord.model_validate(t))
                record = {**out["result"], "key": task.key, "worker": slot.index, "attempt": attempt}
                if results.write(record) and on_result is not None:
                    on_result(record)

            # Ray calls block: drive them from a thread so the event loop (progress bar) stays free.
            try:
                await asyncio.to_thread(self._drive, job, todo, write)
            except asyncio.CancelledError:  # Ctrl-C: let the driver thread stop at its next round
                self._closing = True
                raise
        finally:
            await results.finish()
        return results.records

    def _drive(self, job: Job, todo: list[BatchTask], write: Callable[..., None]) -> None:
        ray = _ray()
        job_ref = ray.put(job)  # shipped once per batch, not with every task
        pending: deque[BatchTask] = deque(todo)
        attempts: dict[str, int] = {}
        inflight: dict[Any, tuple[BatchTask, _Slot]] = {}
        while pending or inflight:
            if self._closing:  # closed under us (Ctrl-C): what is written stays; a rerun resumes the rest
                raise RunError(f"the Ray executor was closed with {len(pending) + len(inflight)} tasks unfinished; "
                               "run the same command again to resume")
            self._fill(pending, inflight, attempts, job_ref)
            if not inflight:
                raise RunError(f"every Ray actor died and no respawns are left; {len(pending)} tasks did not run "
                               "(run the same command again to resume them)")
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=5.0)
            for ref in ready:
                task, slot = inflight.pop(ref)
                slot.inflight -= 1
                try:
                    out = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    self._lost(slot)
                    self._retry(job, task, pending, attempts, write, slot, f"actor {slot.index} died: {one_line(e)}")
                except ray.exceptions.RayError as e:  # the task itself raised (a bug, a bad pickle)
                    self._retry(job, task, pending, attempts, write, slot, one_line(e))
                else:
                    write(task, out, slot, attempts[task.key])

    def _fill(self, pending: deque[BatchTask], inflight: dict[Any, tuple[BatchTask, _Slot]],
              attempts: dict[str, int], job_ref: Any) -> None:
        """Top every live actor up to max_inflight tasks, one task per actor per round (spreads the work)."""
        while pending:
            free = [s for s in self.slots if s.alive and s.inflight < self.max_inflight]
            if not free:
                return
            for slot in free:
                if not pending:
                    return
                task = pending.popleft()
                attempts[task.key] = attempts.get(task.key, 0) + 1
                inflight[slot.actor.run.remote(job_ref, task)] = (task, slot)
                slot.inflight += 1

    def _lost(self, slot: _Slot) -> None:
        """An actor died: stop using it, start a replacement while respawns last."""
        if not slot.alive:
            return
        slot.alive = False
        self.stats["actor_deaths"] += 1
        try:
            _ray().kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - it is dead already
            pass
        if self._respawn_left > 0 and not self._closing:
            self._respawn_left -= 1
            self.stats["respawned"] += 1
            self._new_slot()  # tasks queue on it until its runtime is loaded

    def _retry(self, job: Job, task: BatchTask, pending: deque[BatchTask], attempts: dict[str, int],
               write: Callable[..., None], slot: _Slot, why: str) -> None:
        if attempts[task.key] < self.max_attempts:
            self.stats["retried"] += 1
            pending.appendleft(task)
            return
        self.stats["gave_up"] += 1
        write(task, {"result": job.failed(task, f"gave up after {attempts[task.key]} attempts: {why}"),
                     "trajectories": []}, slot, attempts[task.key])


__all__ = ["RayExecutor", "TrajectoryBuffer", "Worker"]
