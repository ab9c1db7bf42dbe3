"""Readers skip and count corrupt trajectory lines (issue 19): a quarantine report with file:line and the
reason; ``strict=True`` / ``--strict`` fail instead. Writing and torn-line handling do not change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.core.errors import TrajectoryError
from agentrt.trajectory import TrajectoryWriter, iter_records, read_trajectories
from test_trajectory_store import make_record

CLI = [sys.executable, "-m", "agentrt.app.cli"]

BAD_LINES = [
    (b'{"schema_version": "1", "run_id": "half', "JSONDecodeError"),
    (b"[1, 2, 3]", "not a JSON object"),
    (b'{"run_id": "x", "file": "trajectories.jsonl", "offset": 0, "length": 9}', "no schema_version"),
    (b'{"schema_version": "1", "run_id": "\xff\xfe"}', "UnicodeDecodeError"),
    (b'{"schema_version": "1", "run_id": "y"}', "created_at: Field required"),
    (b"[" * 100_000 + b"]" * 100_000, "RecursionError"),
]


def _corrupt_between(tmp_path: Path) -> tuple[TrajectoryWriter, list[int]]:
    """Records a, b, c with every kind of bad line between a and b, and one between b and c."""
    w = TrajectoryWriter(tmp_path)
    w.append(make_record("a"))
    with open(w.path, "ab") as f:
        f.write(b"".join(line + b"\n" for line, _ in BAD_LINES))
    w.append(make_record("b"))
    with open(w.path, "ab") as f:
        f.write(BAD_LINES[0][0] + b"\n")
    w.append(make_record("c"))
    return w, [*range(2, 2 + len(BAD_LINES)), 3 + len(BAD_LINES)]


def test_corrupt_lines_are_skipped_and_reported_with_file_line_and_reason(tmp_path):
    w, bad_numbers = _corrupt_between(tmp_path)
    before = w.path.read_bytes()
    report = read_trajectories(tmp_path)
    assert [r.run_id for r in report.records] == ["a", "b", "c"]
    assert [q.line for q in report.quarantined] == bad_numbers
    assert {q.file for q in report.quarantined} == {str(w.path)}
    for q, (_, reason) in zip(report.quarantined, BAD_LINES):
        assert reason in q.reason, (q, reason)
        assert str(q).startswith(f"{w.path}:{q.line}: corrupt trajectory record (")
    assert report.quarantine_summary() == f"skipped {len(bad_numbers)} corrupt lines (first: {w.path}:2)"
    assert not report.torn and report.torn_tail is None  # corruption is not a torn write
    assert w.path.read_bytes() == before  # reading never repairs or rewrites
    assert [r.run_id for r in iter_records(w.path)] == ["a", "b", "c"]


def test_strict_fails_on_the_first_corrupt_line_with_its_place(tmp_path):
    w, _ = _corrupt_between(tmp_path)
    with pytest.raises(TrajectoryError, match=r"trajectories.jsonl:2: corrupt trajectory record \(JSONDecodeError\)"):
        read_trajectories(tmp_path, strict=True)
    with pytest.raises(TrajectoryError, match=r":2: corrupt"):
        list(iter_records(w.path, strict=True))


def test_a_corrupt_last_line_and_a_clean_file(tmp_path):
    w = TrajectoryWriter(tmp_path)
    w.append(make_record("a"))
    report = read_trajectories(tmp_path)
    assert report.quarantined == [] and report.quarantine_summary() is None
    with open(w.path, "ab") as f:
        f.write(b'{"not": "a record"}\n')  # complete (newline-terminated) but not a record: corruption
    report = read_trajectories(tmp_path)
    assert [r.run_id for r in report.records] == ["a"] and [q.line for q in report.quarantined] == [2]
    assert report.quarantine_summary() == f"skipped 1 corrupt line (first: {w.path}:2)"


def test_torn_lines_and_durability_are_unchanged(tmp_path):
    w = TrajectoryWriter(tmp_path)
    w.append(make_record("a"))
    full = make_record("b").model_dump_json().encode()
    with open(w.path, "ab") as f:
        f.write(full[: len(full) // 2])  # a writer killed mid-record: a torn tail, not corruption
    report = read_trajectories(tmp_path)
    assert report.torn_tail and not report.quarantined
    w.append(make_record("c"))  # the next writer terminates the torn line and marks it
    with open(w.path, "ab") as f:
        f.write(b"garbage\n")
    w.append(make_record("d"))
    report = read_trajectories(tmp_path)
    assert [r.run_id for r in report.records] == ["a", "c", "d"]
    assert len(report.torn) == 1 and "line 2 is a torn record" in report.torn[0]
    assert [q.line for q in report.quarantined] == [5]  # a, torn b, marker, c, garbage, d


def test_unknown_schema_versions_still_fail(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"schema_version": "9", "run_id": "x"}) + "\n")
    with pytest.raises(TrajectoryError, match="schema_version '9' is not supported"):
        read_trajectories(path)  # a newer agentrt's record is not corruption: upgrade, do not skip


def test_rotated_files_report_their_own_names(tmp_path):
    w = TrajectoryWriter(tmp_path, max_bytes=1)  # every append rotates
    w.append(make_record("a"))
    rotated = tmp_path / "trajectories.000001.jsonl"
    rotated.write_bytes(rotated.read_bytes() + b"oops\n")
    w.append(make_record("b"))
    report = read_trajectories(tmp_path)
    assert [r.run_id for r in report.records] == ["a", "b"]
    assert [(Path(q.file).name, q.line) for q in report.quarantined] == [("trajectories.000001.jsonl", 2)]


# -- the commands -------------------------------------------------------------------------------------------

def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTRT_HOME": str(home)}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=300)


def _damage_line_2(path: Path) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][: len(lines[1]) // 2]  # a damaged record in the middle of the file
    path.write_bytes(b"\n".join(lines))


def test_export_skips_a_corrupt_middle_line_and_says_so_and_strict_fails(agentrt_home, tmp_path):
    from agentrt import Agent
    from agentrt.backends.scripted import ScriptedBackend

    agent = Agent(policy=ScriptedBackend(["Paris."]))
    for q in ("one?", "two?", "three?"):
        agent.run(q, budget=100, route="direct")
    _damage_line_2(agent.writer.path)
    out_file = tmp_path / "sft.jsonl"
    out = _cli("export", "--format", "openai", "--out", str(out_file), home=agentrt_home)
    assert out.returncode == 0, out.stderr
    assert "wrote 2 openai rows from 2 runs" in out.stdout
    assert out.stderr.strip().splitlines() == [
        f"agentrt: warning: skipped 1 corrupt line (first: {agent.writer.path}:2); pass --strict to fail on them"]
    rows = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [r["messages"][-2]["content"] for r in rows] == ["one?", "three?"]

    out = _cli("export", "--format", "openai", "--out", str(tmp_path / "x.jsonl"), "--strict", home=agentrt_home)
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert f"{agent.writer.path}:2: corrupt trajectory record" in out.stderr


def test_train_router_skips_a_corrupt_line_and_strict_fails(agentrt_home, tmp_path):
    from test_routing import _logged_runs

    path = _logged_runs(tmp_path / "runs", n=20)
    _damage_line_2(path)
    # the store's folder works (its index file is not read as records)
    out = _cli("train-router", "--trajectories", str(path.parent), "--out", str(tmp_path / "r.json"), home=agentrt_home)
    assert out.returncode == 0, out.stderr
    assert "ECE" in out.stdout and (tmp_path / "r.json").is_file()
    assert [line for line in out.stderr.splitlines() if "corrupt" in line] == [  # (other warnings: the data's size)
        f"agentrt: warning: skipped 1 corrupt line (first: {path}:2); pass --strict to fail on them"]
    out = _cli("train-router", "--trajectories", str(path), "--out", str(tmp_path / "r2.json"), "--strict",
               home=agentrt_home)
    assert out.returncode == 1 and not (tmp_path / "r2.json").exists()
    assert len(out.stderr.strip().splitlines()) == 1 and f"{path}:2: corrupt trajectory record" in out.stderr
