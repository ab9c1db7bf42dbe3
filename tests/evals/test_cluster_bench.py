"""The cluster bench (``python -m evals.bench.cluster_bench``) without the cluster: its --help, its checks on a
run's files, and that what it starts it stops (real processes, no model). The full bench (two vLLM servers,
Ray, Chroma) is run by hand: its table is in docs/scale.md."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from agentrt.trajectory.schema import SCHEMA_VERSION
from evals.bench import cluster_bench

ROOT = Path(__file__).resolve().parents[2]


def test_help_documents_every_option():
    out = subprocess.run([sys.executable, "-m", "evals.bench.cluster_bench", "--help"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    for action in cluster_bench.build_parser()._actions:
        assert action.help, f"{action.option_strings} has no help"
        assert action.option_strings[-1] in out.stdout
    assert cluster_bench.parse_args(["--quick"]).items == 6


def test_bad_item_counts_are_refused(capsys):
    for bad in ("2", "61"):
        try:
            cluster_bench.parse_args(["--items", bad])
        except SystemExit as e:
            assert e.code == 2
        else:
            raise AssertionError(f"--items {bad} was accepted")
    assert "--items must be between 3 and 60" in capsys.readouterr().err


def _traj(run_id: str, key: str, spent: int, events: list | None = None, status: str = "ok") -> dict:
    step = {"kind": "model_call", "name": "answer", **({"backend_events": events} if events else {})}
    return {"schema_version": SCHEMA_VERSION, "run_id": run_id, "created_at": 0.0, "question": "q", "route": "direct", "answer": "a", "status": status,
            "steps": [step], "budget": {"total": 100, "spent": spent}, "usage": {}, "timings": {},
            "metadata": {"task_key": key}}


def test_check_counts_what_the_table_reports(tmp_path):
    run = cluster_bench.Run("x", tmp_path / "out", tmp_path / "home")
    (run.home / "trajectories").mkdir(parents=True)
    run.out.mkdir()
    lines = [{"key": "a", "status": "ok", "attempt": 1, "worker": 0, "correct": True, "trajectory_id": "t2",
              "turns": [{"trajectory_id": "t1"}, {"trajectory_id": "t2"}], "plan": {"trajectory_id": "p1"}},
             {"key": "b", "status": "ok", "attempt": 2, "worker": 2, "correct": False, "trajectory_id": "t3",
              "turns": [{"trajectory_id": "t3"}], "plan": None},
             {"key": "b", "status": "ok", "attempt": 2, "worker": 2, "trajectory_id": "t3"}]
    (run.out / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    failover = [{"event": "attempt_failed", "url": "u1", "error": "ReadError"}, {"event": "served", "url": "u2", "attempts": 2}]
    trajs = [_traj("t1", "a", 50, failover), _traj("t2", "a", 120), _traj("p1", "b", 10, status="failed"),
             _traj("s1", "zz", 10)]  # t3 is missing; s1 belongs to no result
    (run.home / "trajectories" / "trajectories.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trajs))
    run.t0, run.times = 0.0, {"a": 10.0, "b": 40.0}
    r = cluster_bench.check(run, 2, 100)
    assert (r["done"], r["lines"], r["duplicates"], r["retried"]) == (2, 3, 1, 2)
    # t3 is named twice (the duplicate line too) and missing; p1 carries another key, so item a is one short
    assert (r["named"], r["missing"], r["incomplete"], r["short"]) == (5, 2, 1, 1)
    assert (r["trajectories"], r["copies"], r["unreadable"], r["stray"]) == (4, 0, 0, 1)
    assert (r["over_budget"], r["failed_runs"]) == (1, 1)  # t2 spent over its budget; p1 failed
    assert (r["failovers"], r["failed_attempts"], r["plan_checks"], r["correct"]) == (1, 1, 1, 1)
    assert r["items_per_min"] == 2.0 and r["first_s"] == 10.0


def test_fault_costs_measure_against_the_pace_before(tmp_path):
    run = cluster_bench.Run("x", tmp_path, tmp_path)
    run.times = {str(i): t for i, t in enumerate([10, 20, 30, 60, 70, 110, 120])}
    run.faults = {"server_kill": 31.0, "actor_kill": 71.0}
    (server, cost1), (actor, cost2) = cluster_bench.fault_costs(run)
    assert server == "server B killed" and "next result after 29.0 s; 2 items in 40 s; ~20 s lost" in cost1
    assert actor == "Ray actor killed" and "next result after 39.0 s; 2 items in 49 s; ~29 s lost" in cost2


def test_everything_started_is_stopped_even_what_left_the_group(tmp_path):
    owned = cluster_bench.Owned()
    # a leader that starts a child in the group and a grandchild in a session of its own (as servers do)
    script = ("import subprocess, sys, time\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
              "time.sleep(300)\n")
    proc = owned.spawn([sys.executable, "-c", script], tmp_path / "log", {})
    deadline = time.monotonic() + 60
    while len(owned.track(proc)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [proc.pid, *owned.seen]
    assert len(pids) == 3
    assert owned.stop_all() == []
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert proc.returncode == -signal.SIGTERM
