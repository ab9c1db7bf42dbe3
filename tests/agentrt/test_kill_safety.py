"""A writer killed with SIGKILL loses no complete record; a torn tail is reported, never parsed."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agentrt.core.errors import TrajectoryError
from agentrt.trajectory import read_trajectories

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agentrt.trajectory import TrajectoryRecord, TrajectoryWriter, new_run_id
    w = TrajectoryWriter(Path(sys.argv[1]))
    i = 0
    while True:
        w.append(TrajectoryRecord(run_id=new_run_id(), created_at=time.time(), question=f"q{i}", route="direct",
                 steps=[{"kind": "model_call", "blob": "x" * 5000}], answer=str(i), budget={"total": 1, "spent": 1},
                 usage={}, timings={}, status="ok"))
        i += 1
        print(i, flush=True)
    """
)


def test_kill_minus_9_keeps_every_complete_record(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 30 and time.monotonic() < deadline:
        seen = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    report = read_trajectories(tmp_path / "trajectories.jsonl")
    # every record the writer confirmed (printed after fsync) reads back, in order
    assert len(report.records) >= seen
    assert [r.answer for r in report.records] == [str(i) for i in range(len(report.records))]


def test_torn_tail_is_reported_and_corruption_raises(tmp_path):
    from agentrt.backends.scripted import ScriptedBackend
    from agentrt import Agent

    agent = Agent(policy=ScriptedBackend(["fine"]))
    agent.run("one question", budget=100, route="direct")
    agent.run("two question", budget=100, route="direct")
    path = agent.writer.path
    with open(path, "ab") as f:
        f.write(b'{"schema_version": "0", "run_id": "torn", "ques')  # a killed writer's half line
    report = read_trajectories(path)
    assert len(report.records) == 2
    assert report.torn_tail and "line 3 is incomplete" in report.torn_tail

    lines = path.read_bytes().split(b"\n")
    lines[0] = lines[0][: len(lines[0]) // 2]  # a damaged record in the middle of the file
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TrajectoryError, match=":1: corrupt"):
        read_trajectories(path, strict=True)
    report = read_trajectories(path)  # by default the damaged line is skipped and reported, not fatal
    assert [q.line for q in report.quarantined] == [1]
