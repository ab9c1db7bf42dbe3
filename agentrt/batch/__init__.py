"""Batch runs: tasks, a resumable results file, progress, and the local and Ray executors.

Evals, rollouts and ``learn`` hand this layer a ``Job`` (how to run one task on a runtime) and a
list of ``BatchTask(key, payload)``; it runs the tasks not yet in ``OUT/results.jsonl``, every key
exactly once, and returns all records::

    from agentrt.batch import BatchTask, ResultsFile, run_batch
    records = await run_batch(job, tasks, ResultsFile(out, config=cfg, pinned=("budget",)), runtime=agent)

Modules: ``tasks`` (BatchTask, the Job protocol), ``results`` (ResultsFile: append + group-commit
fsync, torn-tail repair, pinned config), ``local`` (asyncio worker pool), ``ray`` (Ray actors; extra
``ray``, imported only when chosen), ``progress`` (rich bar), ``executors`` (choice, CLI flags,
``run_batch``). Nothing here knows what a task means: that is the job's business.
"""

from agentrt.batch.executors import (
    EXECUTORS,
    Executor,
    add_executor_args,
    executor_from_args,
    executor_table,
    make_executor,
    run_batch,
)
from agentrt.batch.local import LocalExecutor
from agentrt.batch.progress import ProgressBar
from agentrt.batch.results import CONFIG, RESULTS, ResultsFile, pin_config, read_results
from agentrt.batch.tasks import TASK_KEY, BatchTask, Job, check_keys

__all__ = [
    "BatchTask", "Job", "TASK_KEY", "check_keys", "ResultsFile", "RESULTS", "CONFIG", "read_results", "pin_config",
    "LocalExecutor", "ProgressBar", "Executor", "EXECUTORS", "make_executor", "executor_table", "add_executor_args",
    "executor_from_args", "run_batch",
]
