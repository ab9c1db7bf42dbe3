"""The `agentrt` command: real subprocesses, as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.trajectory import find_record

AGENTRT = [sys.executable, "-m", "agentrt.app.cli"]


def cli(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "AGENTRT_HOME": str(home), **env}
    return subprocess.run([*AGENTRT, *args], capture_output=True, text=True, env=full_env, timeout=300)


@pytest.mark.slow
def test_run_json_answers_paris_with_a_findable_trajectory(agentrt_home):
    out = cli("run", "--json", "What is the capital of France?", home=agentrt_home)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert "Paris" in data["answer"]
    assert data["route"] in ("direct", "reason")
    assert 0 < data["usage"]["total_tokens"] <= data["usage"]["budget"]
    rec = find_record(data["trajectory_file"], data["trajectory_id"])
    assert rec is not None and rec.answer == data["answer"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", ""], "question is empty"),
        (["run", "--budget", "0", "hi"], "budget must be a positive"),
        (["run", "--budget", "-3", "hi"], "budget must be a positive"),
        (["run", "--route", "teleport", "hi"], "unknown route 'teleport'"),
        (["run", "--budget", "ten", "hi"], "invalid int value"),
        (["run", "--policy", "nonsense", "hi"], "bad backend spec"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(agentrt_home, args, message):
    out = cli(*args, home=agentrt_home)
    assert out.returncode == 2
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert not (agentrt_home / "trajectories" / "trajectories.jsonl").exists()


@pytest.mark.slow
def test_budget_smaller_than_prompt_and_unwritable_home(agentrt_home, tmp_path):
    out = cli("run", "--budget", "10", "What is the capital of France?", home=agentrt_home)
    assert out.returncode == 2 and "smaller than the prompt" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    out = cli("run", "hi", home=blocked)
    assert out.returncode == 2 and "not writable" in out.stderr and "AGENTRT_HOME" in out.stderr
    assert "Traceback" not in out.stderr


def test_version():
    out = subprocess.run([*AGENTRT, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("agentrt 0.")
