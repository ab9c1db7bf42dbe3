"""The Ray executor: evals and rollouts on Ray actors, written by one writer in the driver.

    executor = RayExecutor(actors=2, max_inflight=2)      # or address="auto" / "ray://head:10001"
    evaluate(config, agent=agent, executor=executor)       # or `agentrt eval ... --executor ray`
    executor.close()

How it works:

* Each actor (``Worker``) holds one runtime: an Agent built from the driver's Settings (policy and
  planner backends, memory client), loaded once. Its trajectory "writer" is an in-memory buffer:
  nothing is written on the workers.
* The driver hands each actor at most ``max_inflight`` tasks at a time (backpressure; concurrent
  tasks on one actor meet in its backend's batcher) and refills an actor as its results come back.
* Results and trajectories come back together; the driver writes the trajectories (the Agent's
  writer) and then the result line (``OUT/results.jsonl``, fsynced), one task at a time: no
  interleaving, and a resumed run skips every key already there, as the local runner does.
* An actor that dies (killed, OOM, node lost) fails its in-flight tasks with ``RayActorError``: they
  go back to the queue (at most ``max_attempts`` tries each) and run on another actor; up to
  ``respawn`` replacement actors are started. Nothing from a dead actor was written, and a key is
  written at most once, so no task is lost or counted twice.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrt.core.errors import ConfigError, RunError, missing_extra

# The task key of the run on this asyncio task (actor side): tags the trajectory the run writes.
_TASK_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentrt_task_key", default=None)


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise missing_extra("ray", "ray") from None
    return ray


class _Buffer:
    """An actor's trajectory store: keeps each record under the key of the task whose run wrote it."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.by_key: dict[str | None, list[Any]] = {}

    def append(self, record: Any) -> None:  # may be called from the runner's scoring thread
        self.by_key.setdefault(record.metadata.get("task_key"), []).append(record)

    def pop(self, key: str) -> list[Any]:
        return self.by_key.pop(key, [])


class _Tagger:
    """The Agent's writer on an actor: tags each record with its task key (read from the run's context,
    where the Agent calls ``append``), then hands it to the runner's capture (scoring) -> ``_Buffer``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.keys: dict[str, str] = {}

    @property
    def path(self) -> Path:
        return self.inner.path

    def append(self, record: Any) -> None:
        key = _TASK_KEY.get()
        if key is not None:  # lets readers match a trajectory to its task (and check uniqueness)
            record.metadata = {**record.metadata, "task_key": key}
            self.keys[record.run_id] = key
        self.inner.append(record)


class Worker:
    """The body of a Ray actor: one runtime, and ``run(task, config)`` -> result + trajectories."""

    def __init__(self, settings: dict[str, Any], trajectory_path: str) -> None:
        from agentrt.app.agent import Agent
        from agentrt.core.config import Settings, ensure_writable_dir
        from evals.runner import _Capture

        conf = Settings.model_validate(settings)
        try:  # the driver's home may not exist on this node; runs only need a scratch home here
            ensure_writable_dir(conf.trajectory_dir, "trajectory directory")
        except ConfigError:
            import tempfile

            conf = conf.model_copy(update={"home": Path(tempfile.gettempdir()) / f"agentrt-actor-{os.getuid()}"})
        self.agent = Agent(conf)
        self.buffer = _Buffer(trajectory_path)
        self.capture = _Capture(self.buffer)  # the runner's scoring writer, as in the local executor
        self.tagger = _Tagger(self.capture)
        self.agent.writer = self.tagger

    async def ready(self) -> dict[str, Any]:
        """Load the backends now (not on the first task), so a bad spec fails the start with its message."""
        try:
            policy = self.agent.policy
            if self.agent.settings.planner:
                self.agent.planner
        except Exception as e:  # noqa: BLE001 - reported to the driver as one line
            return {"pid": os.getpid(), "error": f"{type(e).__name__}: {e}"}
        return {"pid": os.getpid(), "node": _ray().util.get_node_ip_address(), "policy": policy.name}

    async def run(self, task: Any, config: Any) -> dict[str, Any]:
        from evals.runner import run_one

        self.capture.by_question.setdefault(task.item.question, task.item)
        token = _TASK_KEY.set(task.key)
        try:
            result = await run_one(self.agent, self.capture, task, config)
        finally:
            _TASK_KEY.reset(token)
        # run_one awaits its own trajectory; a failed run's trajectory may still be on its way.
        pending = getattr(self.capture, "pending", {})
        mine = [run_id for run_id, key in self.tagger.keys.items() if key == task.key]
        for run_id in mine:
            self.tagger.keys.pop(run_id, None)
            future = pending.pop(run_id, None)
            if future is not None:
                await asyncio.gather(future, return_exceptions=True)
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
    """Runs eval/rollout tasks on Ray actors (see the module docstring).

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
        self._init_args: tuple[dict[str, Any], str] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self, settings: Any, trajectory_path: str = "") -> None:
        """Join or start the cluster and start the actors; waits until each has loaded its runtime."""
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
        self._init_args = (settings.model_dump(mode="json"), str(trajectory_path))
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
                raise RunError(f"Ray actor {slot.index} failed to start: {_one_line(e)}") from None
            if "error" in info:
                self.close()
                raise ConfigError(f"Ray actor {slot.index} could not load its runtime: {info['error']}")
            slot.pid, slot.node = info["pid"], info["node"]

    def _new_slot(self) -> _Slot:
        settings, path = self._init_args  # type: ignore[misc]
        slot = _Slot(len(self.slots), self._remote.remote(settings, path))
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

    async def run_tasks(self, agent: Any, tasks: list[Any], config: Any, *,
                        on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """``evals.runner.run_tasks`` on Ray: runs every task not yet in OUT/results.jsonl; returns all records."""
        from evals.runner import pending

        results_path, records, todo = pending(tasks, config)
        if not todo:
            return records
        done = {r["key"] for r in records}
        self.start(agent.settings, str(agent.writer.path))
        with open(results_path, "ab") as fh:
            def write(task: Any, out_: dict[str, Any], slot: _Slot, attempt: int) -> None:
                if task.key in done:  # cannot happen with the bookkeeping below; never count twice anyway
                    self.stats["duplicates_dropped"] += 1
                    return
                from agentrt.trajectory import TrajectoryRecord

                for t in out_["trajectories"]:  # the trajectory first: a result line implies its trajectory
                    agent.writer.append(TrajectoryRecord.model_validate(t))
                record = {**out_["result"], "worker": slot.index, "attempt": attempt}
                fh.write((json.dumps(record, ensure_ascii=False) + "\n").encode())
                fh.flush()
                os.fsync(fh.fileno())
                done.add(task.key)
                records.append(record)
                if on_result:
                    on_result(record)

            # Ray calls block: drive them from a thread so the event loop (progress bar) stays free.
            try:
                await asyncio.to_thread(self._drive, todo, config, write)
            except asyncio.CancelledError:  # Ctrl-C: let the driver thread stop at its next round
                self._closing = True
                raise
        return records

    def _drive(self, todo: list[Any], config: Any, write: Callable[..., None]) -> None:
        ray = _ray()
        config_ref = ray.put(config)
        pending: deque[Any] = deque(todo)
        attempts: dict[str, int] = {}
        inflight: dict[Any, tuple[Any, _Slot]] = {}
        while pending or inflight:
            if self._closing:  # closed under us (Ctrl-C): what is written stays; a rerun resumes the rest
                raise RunError(f"the Ray executor was closed with {len(pending) + len(inflight)} tasks unfinished; "
                               "run the same command again to resume")
            self._fill(pending, inflight, attempts, config_ref)
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
                    self._retry(task, pending, attempts, config, write, slot, f"actor {slot.index} died: {_one_line(e)}")
                except ray.exceptions.RayError as e:  # the task itself raised (a bug, a bad pickle)
                    self._retry(task, pending, attempts, config, write, slot, _one_line(e))
                else:
                    write(task, out, slot, attempts[task.key])

    def _fill(self, pending: deque[Any], inflight: dict[Any, tuple[Any, _Slot]], attempts: dict[str, int],
              config_ref: Any) -> None:
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
                inflight[slot.actor.run.remote(task, config_ref)] = (task, slot)
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

    def _retry(self, task: Any, pending: deque[Any], attempts: dict[str, int], config: Any,
               write: Callable[..., None], slot: _Slot, why: str) -> None:
        if attempts[task.key] < self.max_attempts:
            self.stats["retried"] += 1
            pending.appendleft(task)
            return
        self.stats["gave_up"] += 1
        write(task, {"result": error_record(task, config, f"gave up after {attempts[task.key]} attempts: {why}"),
                     "trajectories": []}, slot, attempts[task.key])


def error_record(task: Any, config: Any, error: str) -> dict[str, Any]:
    """A results.jsonl record for a task that could not run (same fields as the runner's error records)."""
    from evals.runner import sample_seed

    choice = task.router.choose(task.item)
    return {"key": task.key, "router": task.router.name, "suite": task.suite, "item_id": task.item.id,
            "sample": task.sample, "seed": sample_seed(config.seed, task.suite, task.item.id, task.sample),
            "type": task.item.type, "fixed": task.router.fixed, "p_success": choice.p_success,
            "route": choice.route or "", "answer": "", "score": 0.0, "correct": False, "abstained": False,
            "reason": "", "status": "error", "error": error, "truncated": False, "prompt_tokens": 0,
            "completion_tokens": 0, "thinking_tokens": 0, "tool_calls": 0, "latency_s": 0.0, "trajectory_id": None}


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


__all__ = ["RayExecutor", "Worker", "error_record"]
