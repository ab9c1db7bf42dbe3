"""`agentrt run` in a real terminal (a pty, via pexpect) streams the answer and shows the route and budget
while it works; through a pipe, or with --quiet, it prints today's plain output (issue 37). Embedded model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

AGENTRT = str(Path(sys.executable).parent / "agentrt")
QUESTION = "What is the capital of France?"
ARGS = ["run", "--route", "direct", "--budget", "200", QUESTION]

pytestmark = pytest.mark.slow


def _last_record(home: Path) -> dict:
    return json.loads((home / "trajectories" / "trajectories.jsonl").read_text().splitlines()[-1])


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "AGENTRT_HOME": str(home), "TERM": "xterm-256color", "COLUMNS": "120"}


def test_run_on_a_terminal_streams_and_shows_route_and_budget(agentrt_home: Path, tmp_path: Path):
    child = pexpect.spawn(AGENTRT, ARGS, env=_env(agentrt_home), encoding="utf-8", timeout=240, dimensions=(40, 120))
    child.logfile_read = open(tmp_path / "terminal.log", "w")
    child.expect(r"\[direct · \d+/200 tokens")  # the live status line while it works
    child.expect(r"route=direct tokens=\d+/200 status=(\w+) trajectory=")
    status = child.match.group(1)
    child.expect(pexpect.EOF)
    child.logfile_read.close()
    shown = (tmp_path / "terminal.log").read_text().replace("\r\n", "\n")
    record = _last_record(agentrt_home)
    assert record["status"] == status == "ok"
    # the answer reached the terminal as the model wrote it, after the live status line
    assert shown.index("[direct · ") < shown.index(record["answer"])


def test_run_through_a_pipe_or_quiet_prints_plain_output(agentrt_home: Path):
    piped = subprocess.run([AGENTRT, *ARGS], env=_env(agentrt_home), capture_output=True, text=True, timeout=240)
    assert piped.returncode == 0, piped.stderr
    record = _last_record(agentrt_home)
    assert piped.stdout == record["answer"] + "\n"  # the answer alone: no escape codes, no status line
    assert f"status={record['status']}" in piped.stderr and "\x1b[" not in piped.stdout

    child = pexpect.spawn(AGENTRT, ["run", "--quiet", *ARGS[1:]], env=_env(agentrt_home), encoding="utf-8",
                          timeout=240, dimensions=(40, 120))
    out = child.read()
    assert "\x1b[2m" not in out and "tokens ·" not in out  # no live view
    assert _last_record(agentrt_home)["answer"] in out
