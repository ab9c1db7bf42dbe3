"""The trajectory store: crash safety (kill -9), concurrent writers, rotation, index, v0 records."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from agentrt.core.errors import TrajectoryError
from agentrt.trajectory import (
    TrajectoryRecord,
    TrajectoryWriter,
    find_record,
    read_trajectories,
    rebuild_index,
    trajectory_files,
)


def make_record(run_id: str, pad: int = 0) -> TrajectoryRecord:
    step = {
        "kind": "model_call", "name": "answer", "backend": "scripted", "model": "m",
        "messages": [{"role": "user", "content": "q" + "x" * pad}], "prompt_token_ids": [1, 2, 3],
        "completion_token_ids": [[4, 5]], "completion_logprobs": [[-0.1, -0.2]], "completions": ["42"],
        "finish_reasons": ["stop"], "loss_mask": [[1, 1]], "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "latency_s": 0.01,
    }
    return TrajectoryRecord(
        run_id=run_id, created_at=time.time(), question="q", route="direct", steps=[step], answer="42",
        budget={"total": 100, "spent": 5}, usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        timings={"wall_s": 0.01}, status="ok",
    )


def _fork_writer(directory: Path, prefix: str, count: int | None, pad: int, max_bytes: int) -> tuple[int, int]:
    """Fork a child that appends records and reports each id on a pipe once append() returned."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            writer = TrajectoryWriter(directory, max_bytes=max_bytes)
            i = 0
            while count is None or i < count:
                run_id = f"{prefix}-{i}"
                writer.append(make_record(run_id, pad=random.randrange(pad + 1)))
                os.write(w, (run_id + "\n").encode())
                i += 1
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _drain(fd: int, first: bytes = b"") -> list[str]:
    chunks = [first]
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode().split()


def test_kill_9_fifty_writers_in_a_row_loses_no_complete_record(tmp_path: Path):
    reported: list[str] = []
    rng = random.Random(7)
    for n in range(50):
        # big records (up to 300 kB) make a kill in the middle of a write likely
        pid, fd = _fork_writer(tmp_path, f"w{n}", None, pad=300_000, max_bytes=4_000_000)
        first = os.read(fd, 65536)  # blocks until the child confirmed a record: no timing assumptions
        time.sleep(rng.uniform(0.0, 0.01))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        reported += _drain(fd, first)
    report = read_trajectories(tmp_path)  # must not raise: torn records are reported, not corruption
    ids = [r.run_id for r in report.records]
    assert len(set(reported)) >= 50, "the writers wrote too little for the test to mean anything"
    missing = set(reported) - set(ids)
    assert not missing, f"lost {len(missing)} records that append() had confirmed"
    assert len(ids) == len(set(ids))
    # every record read is whole (each writer's ids are consecutive from 0; a torn one is never parsed)
    assert all(r.steps[0]["completions"] == ["42"] for r in report.records)
    print(f"{len(ids)} records, {len(report.torn)} torn lines repaired, torn tail: {bool(report.torn_tail)}, "
          f"{len(report.files)} files")


def test_torn_tail_is_reported_then_repaired_by_the_next_writer(tmp_path: Path):
    w = TrajectoryWriter(tmp_path)
    w.append(make_record("a"))
    full = make_record("b").model_dump_json().encode()
    with open(w.path, "ab") as f:
        f.write(full[: len(full) // 2])  # a writer killed mid-record
    report = read_trajectories(tmp_path)
    assert [r.run_id for r in report.records] == ["a"]
    assert report.torn_tail and "line 2 is incomplete" in report.torn_tail
    w.append(make_record("c"))
    report = read_trajectories(w.path)
    assert [r.run_id for r in report.records] == ["a", "c"]
    assert report.torn_tail is None
    assert len(report.torn) == 1 and "line 2 is a torn record" in report.torn[0]
    assert find_record(tmp_path, "c").run_id == "c"
    assert find_record(w.path, "a").run_id == "a" and find_record(w.path, "b") is None  # by scan; torn b is not read


def test_corruption_in_the_middle_is_quarantined_or_raises_when_strict(tmp_path: Path):
    w = TrajectoryWriter(tmp_path)
    w.append(make_record("a"))
    with open(w.path, "ab") as f:
        f.write(b'{"schema_version": "1", "garbage\n')
    w.append(make_record("b"))
    report = read_trajectories(tmp_path)  # by default: skipped, with its place (test_trajectory_quarantine.py)
    assert [r.run_id for r in report.records] == ["a", "b"]
    assert [q.place for q in report.quarantined] == [f"{w.path}:2"] and not report.torn
    with pytest.raises(TrajectoryError, match=r"trajectories.jsonl:2: corrupt trajectory record"):
        read_trajectories(tmp_path, strict=True)


def test_unknown_schema_version_is_refused(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"schema_version": "9", "run_id": "x"}) + "\n")
    with pytest.raises(TrajectoryError, match="schema_version '9' is not supported"):
        read_trajectories(path)


def test_concurrent_writers_from_4_processes_with_rotation(tmp_path: Path):
    children = [_fork_writer(tmp_path, f"p{i}", 60, pad=3000, max_bytes=40_000) for i in range(4)]
    reported = []
    for pid, fd in children:
        reported += _drain(fd)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    report = read_trajectories(tmp_path)
    ids = [r.run_id for r in report.records]
    assert sorted(ids) == sorted(reported) and len(ids) == 240
    assert not report.problems
    assert len(trajectory_files(tmp_path)) > 5, "rotation did not happen"
    # per writer, records appear in the order it wrote them, across rotated files
    for i in range(4):
        mine = [int(x.split("-")[1]) for x in ids if x.startswith(f"p{i}-")]
        assert mine == sorted(mine)
    # the index finds records in rotated files by seeking
    for run_id in ("p0-0", "p1-30", "p3-59"):
        assert find_record(tmp_path, run_id).run_id == run_id
    assert rebuild_index(tmp_path) == 240


def test_concurrent_writers_from_threads(tmp_path: Path):
    w = TrajectoryWriter(tmp_path, max_bytes=30_000)
    errors = []

    def work(t: int) -> None:
        try:
            for i in range(25):
                w.append(make_record(f"t{t}-{i}", pad=1000))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    report = read_trajectories(tmp_path)
    assert len({r.run_id for r in report.records}) == 200 and not report.problems


V0_LINE = {
    "schema_version": "0", "run_id": "old", "created_at": 1.0, "question": "What is 2+2?", "route": "reason",
    "steps": [
        {"kind": "route_decision", "route": "reason", "propensity": 1.0, "probabilities": {"reason": 1.0},
         "reason": "arithmetic or multi-step cue", "features": {"chars": 12}},
        {"kind": "model_call", "name": "answer", "backend": "hf:embedded", "messages": [{"role": "user", "content": "q"}],
         "prompt_token_ids": [1, 2], "completion_token_ids": [[3, 4, 5]], "completion_logprobs": [[-1.0, -0.5, -0.1]],
         "completions": ["4"], "finish_reasons": ["stop"], "usage": {"prompt_tokens": 2, "completion_tokens": 3},
         "params": {}, "latency_s": 0.2},
    ],
    "answer": "4", "thought": None, "budget": {"total": 100, "spent": 5},
    "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}, "timings": {"wall_s": 0.3},
    "status": "ok", "error": None,
}


def test_v0_records_are_still_readable(tmp_path: Path):
    path = tmp_path / "trajectories.jsonl"
    path.write_text(json.dumps(V0_LINE) + "\n")
    TrajectoryWriter(tmp_path).append(make_record("new"))
    report = read_trajectories(tmp_path)
    old, new = report.records
    assert (old.schema_version, new.schema_version) == ("0", "1")
    call = old.model_calls()[0]
    assert call.mask() == [1, 1, 1] and call.model == "" and call.t_start_s is None
    assert old.rewards == {} and old.task is None and old.answer == "4"


def test_a_bad_step_is_named_when_steps_are_validated():
    bad = TrajectoryRecord.model_validate(dict(V0_LINE, steps=[{"kind": "route_decision", "route": "reason", "propensity": 2.0}]))
    with pytest.raises(TrajectoryError, match="run old: step 0 .route_decision.: propensity"):
        bad.typed_steps()
    with pytest.raises(ValueError, match="step 0 is not a dict with a 'kind'"):
        TrajectoryRecord.model_validate(dict(V0_LINE, steps=[{"no": "kind"}]))
    # a step of a kind this version does not know is kept as is
    rec = TrajectoryRecord.model_validate(dict(V0_LINE, steps=[{"kind": "future_thing", "x": 1}]))
    assert rec.steps == [{"kind": "future_thing", "x": 1}]
