"""agentrt.batch on its own: a plain job (no Agent, no evals), the results file, the local worker pool."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from agentrt.batch import BatchTask, LocalExecutor, ProgressBar, ResultsFile, read_results, run_batch
from agentrt.core.errors import ConfigError, InputError


class Squares:
    """A job: the payload's square, after a short sleep; payload -1 raises."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.ran: list[str] = []

    def open(self, trajectories):
        return "runtime"

    def ready(self, runtime):
        return {}

    async def run(self, runtime, task):
        assert runtime == "runtime"
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(0.01)
            if task.payload < 0:
                raise ValueError("negative\nsecond line")
            self.ran.append(task.key)
            return {"key": task.key, "value": task.payload ** 2}
        finally:
            self.running -= 1

    def failed(self, task, error):
        return {"key": task.key, "value": None, "error": error}


def _tasks(n: int) -> list[BatchTask]:
    return [BatchTask(f"t{i}", i) for i in range(n)]


def test_local_pool_resumes_and_records_a_raising_task(tmp_path):
    job, seen = Squares(), []
    tasks = _tasks(10) + [BatchTask("bad", -1)]
    records = asyncio.run(run_batch(job, tasks, ResultsFile(tmp_path, config={"n": 1}, pinned=("n",)), workers=3,
                                    on_result=seen.append))
    assert len(records) == 11 and {r["key"] for r in records} == {t.key for t in tasks} and len(seen) == 11
    assert job.peak == 3  # the pool's width
    bad = next(r for r in records if r["key"] == "bad")
    assert bad["value"] is None and bad["error"] == "ValueError: negative"
    assert sorted(r["value"] for r in records if r["value"] is not None) == [i * i for i in range(10)]

    again = Squares()  # a rerun: every key is there, nothing runs, nothing is appended
    before = (tmp_path / "results.jsonl").read_bytes()
    results = ResultsFile(tmp_path, config={"n": 1}, pinned=("n",))
    assert len(asyncio.run(LocalExecutor(workers=2).run(again, tasks, results, runtime="runtime"))) == 11
    assert again.ran == [] and (tmp_path / "results.jsonl").read_bytes() == before

    with pytest.raises(InputError, match=r"n=1.*not 2.*same n to resume"):
        ResultsFile(tmp_path, config={"n": 2}, pinned=("n",)).start(tasks)


def test_torn_tail_is_cut_and_the_task_reruns(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"key": "t0", "value": 0}\n{"key": "t1", "value": 1}\n{"key": "t2", "va')
    assert [r["key"] for r in read_results(path)] == ["t0", "t1"] and path.read_bytes().endswith(b'"va')
    job = Squares()
    records = asyncio.run(run_batch(job, _tasks(4), ResultsFile(tmp_path)))
    assert sorted(job.ran) == ["t2", "t3"] and len(records) == 4
    lines = path.read_bytes().splitlines()
    assert len(lines) == 4 and all(json.loads(line) for line in lines)


def test_keys_must_be_unique_and_written_once(tmp_path):
    with pytest.raises(InputError, match="'t1' appears twice"):
        ResultsFile(tmp_path).start([BatchTask("t1", 1), BatchTask("t1", 2)])
    results = ResultsFile(tmp_path)

    async def write_twice():
        results.start(_tasks(1))
        try:
            return results.write({"key": "t0"}), results.write({"key": "t0"})
        finally:
            await results.finish()

    assert asyncio.run(write_twice()) == (True, False)
    assert len(read_results(tmp_path / "results.jsonl")) == 1


def test_progress_bar_runs(tmp_path, capsys):
    bar = ProgressBar("squares", "mean", lambda r: float(r["value"] or 0))
    records = asyncio.run(run_batch(Squares(), _tasks(5), ResultsFile(tmp_path), progress=bar))
    assert len(records) == 5 and "squares" in capsys.readouterr().err


def test_ray_executor_needs_a_trajectory_writer(tmp_path):
    from agentrt.batch.ray import RayExecutor

    with pytest.raises(ConfigError, match="trajectories="):
        asyncio.run(RayExecutor().run(Squares(), _tasks(1), ResultsFile(tmp_path)))


def test_batch_imports_no_evals_and_no_ray():
    code = ("import sys, agentrt.batch, agentrt.batch.ray; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('evals', 'ray', 'torch', 'rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
