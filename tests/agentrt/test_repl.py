"""`agentrt chat` driven in a real terminal (a pty, via pexpect), on the embedded model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pexpect
import pytest

AGENTRT = str(Path(sys.executable).parent / "agentrt")
PROMPT = "you> "

pytestmark = pytest.mark.slow


def _records(home: Path) -> list[dict]:
    path = home / "trajectories" / "trajectories.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_chat_in_a_real_terminal(agentrt_home: Path, tmp_path: Path):
    env = {**os.environ, "AGENTRT_HOME": str(agentrt_home), "TERM": "xterm-256color", "COLUMNS": "120"}
    child = pexpect.spawn(AGENTRT, ["chat", "--budget", "400"], env=env, encoding="utf-8", timeout=120,
                          dimensions=(40, 120))
    child.logfile_read = open(tmp_path / "terminal.log", "w")
    try:
        child.expect_exact(PROMPT)
        child.sendline("/help")
        child.expect_exact("/budget [N]")
        child.expect_exact(PROMPT)
        child.sendline("/route nope")
        child.expect_exact("unknown route")
        child.expect_exact(PROMPT)
        child.sendline("/route direct")
        child.expect_exact(PROMPT)

        child.sendline("What is the capital of France?")
        child.expect_exact("route direct")  # the decision line of the live view
        child.expect_exact("budget")  # the live budget bar
        child.expect(r"route=direct tokens=\d+/400 status=\w+ trajectory=([0-9a-f]{32})")
        first_id = child.match.group(1)
        child.expect_exact(PROMPT)

        child.sendline("/memory")
        child.expect_exact("capital of France")
        child.expect_exact(PROMPT)
        child.sendline("/trace")
        child.expect_exact(f"trajectory {first_id}")
        child.expect_exact(PROMPT)
        saved = tmp_path / "chat.jsonl"
        child.sendline(f"/save {saved}")
        child.expect_exact("saved 1 turns")
        child.expect_exact(PROMPT)
        assert json.loads(saved.read_text().splitlines()[0])["trajectory_id"] == first_id

        # Ctrl-C in the middle of a turn cancels it; the trajectory is saved as cancelled.
        child.sendline("/route reason")
        child.expect_exact(PROMPT)
        child.sendline("/budget 1500")
        child.expect_exact(PROMPT)
        child.sendline("Explain step by step why the sky is blue, in detail.")
        child.expect_exact("think")  # the thinking call has started
        child.sendintr()
        child.expect_exact("cancelled")
        child.expect_exact(PROMPT)
        child.sendline("/reset")
        child.expect_exact("conversation reset")
        child.expect_exact(PROMPT)
        child.sendline("/exit")
        child.expect(pexpect.EOF)
        child.wait()  # the exit status, before close() would hang up on a process still exiting
    finally:
        if child.isalive():
            child.terminate(force=True)
    assert child.exitstatus == 0, (child.exitstatus, child.signalstatus)
    statuses = {r["run_id"]: r["status"] for r in _records(agentrt_home)}
    assert statuses[first_id] in ("ok", "truncated")
    assert "cancelled" in statuses.values()
    assert (agentrt_home / "chat_history").exists()  # readline history across sessions
