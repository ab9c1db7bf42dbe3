"""The local executor: an asyncio worker pool in this process, all workers on one runtime.

The workers share one runtime (one Agent, one loaded model), so their concurrent requests meet in
the backend's dynamic batcher: W workers are W requests in flight, not W models.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from agentrt.batch.results import ResultsFile
from agentrt.batch.tasks import BatchTask, Job, one_line

DEFAULT_WORKERS = 4


class LocalExecutor:
    """Runs a batch with ``workers`` asyncio workers on one runtime in this process.

    ``workers`` here wins over the ``workers`` a caller passes to ``run`` (e.g. ``--workers``).
    """

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers

    async def run(self, job: Job, tasks: Sequence[BatchTask], results: ResultsFile, *, runtime: Any = None,
                  trajectories: Any = None, workers: int | None = None,
                  on_result: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """Run every task not yet in ``results``; returns all records (old and new).

        ``runtime``: what the tasks run on (default: ``job.open(trajectories)``). A task whose
        ``job.run`` raises is recorded as ``job.failed(task, error)``: one bad task never stops a batch.
        """
        todo = deque(results.start(tasks))
        try:
            if not todo:
                return results.records
            if runtime is None:
                runtime = job.open(trajectories)

            async def worker() -> None:
                while todo:
                    task = todo.popleft()
                    try:
                        record = await job.run(runtime, task)
                    except Exception as e:  # noqa: BLE001 - recorded as the task's outcome, as the Ray executor does
                        record = job.failed(task, one_line(e))
                    record = {**record, "key": task.key}
                    if results.write(record) and on_result is not None:
                        on_result(record)

            count = max(1, min(self.workers or workers or DEFAULT_WORKERS, len(todo)))
            await asyncio.gather(*(worker() for _ in range(count)))
        finally:
            await results.finish()
        return results.records

    def close(self) -> None:
        """Nothing to release: the runtime belongs to the caller."""
