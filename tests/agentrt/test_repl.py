"""`agentrt chat` driven in a real terminal (a pty, via pexpect), on the embedded model.

What the terminal showed is read back from the pty's log (rich's escape codes included): the answer
must appear word by word while it is generated, and the thought in rich's "dim" style (SGR 2).
"""

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

        # thoughts stream too, dimmed: a reason turn that finishes
        child.sendline("/route reason")
        child.expect_exact(PROMPT)
        child.sendline("What colour is the sky on a clear day?")  # no number: reason thinks, no calculator
        child.expect(r"route=reason tokens=\d+/400 status=\w+ trajectory=([0-9a-f]{32})")
        reason_id = child.match.group(1)
        child.expect_exact(PROMPT)

        # Ctrl-C in the middle of a turn cancels it; the trajectory is saved as cancelled.
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
    shown = (tmp_path / "terminal.log").read_text()
    records = {r["run_id"]: r for r in _records(agentrt_home)}
    # the direct answer was drawn word by word, each partial answer a frame of the live view
    words = records[first_id]["answer"].split()
    partial = [" ".join(words[:k]) for k in range(1, len(words)) if f"\n{' '.join(words[:k])}\nbudget" in shown]
    assert len(partial) >= 3, (words, partial)
    # the reason turn's thought was drawn dimmed while it streamed, then its answer in the answer panel
    think = next(s for s in records[reason_id]["steps"] if s.get("name") == "think")
    first_line = think["completions"][0].strip().splitlines()[0][:20]
    assert "\x1b[2m" + first_line in shown, first_line
    assert records[reason_id]["answer"].splitlines()[0][:40] in shown
    statuses = {r["run_id"]: r["status"] for r in _records(agentrt_home)}
    assert statuses[first_id] in ("ok", "truncated")
    assert "cancelled" in statuses.values()
    assert (agentrt_home / "chat_history").exists()  # readline history across sessions
