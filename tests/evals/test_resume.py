"""A killed eval resumes where it stopped: nothing finished is redone, the counts are exact.

The eval runs as the real CLI in a subprocess, on a scripted backend that takes 50 ms a call (so it
can be killed mid-run); it is SIGKILLed once some results are on disk, then run again to completion.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# The CLI with one extra backend kind, "slow": a scripted backend that answers after 50 ms.
LAUNCHER = """
import sys
from agentrt.backends import BACKEND_KINDS
from agentrt.backends.scripted import ScriptedBackend

def slow(arg, settings):
    return ScriptedBackend([arg], delay_s=0.05)

BACKEND_KINDS["slow"] = "__main__:slow"
from agentrt.app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cmd(suite: Path, out: Path) -> list[str]:
    return [sys.executable, "-c", LAUNCHER, "eval", "--suite", str(suite), "--router", "fixed:direct",
            "--router", "fixed:reason", "--policy", "slow:#### 7", "--workers", "3", "--budget", "300",
            "--out", str(out), "--no-progress"]


def test_resume_after_kill(tmp_path, agentrt_home):
    suite = tmp_path / "suite.jsonl"
    suite.write_text("".join(json.dumps({"id": i, "question": f"What is {i} + 7 - {i}?", "answer": "7", "type": "math",
                                         "verifier": "numeric"}) + "\n" for i in range(40)))
    out = tmp_path / "out"
    results = out / "results.jsonl"
    env = {**os.environ, "AGENTRT_HOME": str(agentrt_home)}
    proc = subprocess.Popen(_cmd(suite, out), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if results.is_file() and results.read_bytes().count(b"\n") >= 10:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = results.read_bytes()
    done_before = [json.loads(line) for line in first.split(b"\n")[:-1]]
    assert 10 <= len(done_before) < 80

    second = subprocess.run(_cmd(suite, out), env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    final = results.read_bytes()
    records = [json.loads(line) for line in final.splitlines()]
    keys = [r["key"] for r in records]
    assert len(records) == 80 and len(set(keys)) == 80  # 40 items x 2 routers, each exactly once
    assert final.startswith(first[: first.rfind(b"\n") + 1])  # what was finished is kept as it was
    assert all(r["correct"] and r["status"] == "ok" for r in records)
    report = json.loads((out / "report.json").read_text())
    assert report["policies"]["fixed:direct"]["suite"]["items"] == 40
    assert report["policies"]["oracle"]["suite"]["accuracy"] == 1.0

    # Run a third time: nothing left to do, nothing appended.
    third = subprocess.run(_cmd(suite, out), env=env, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr
    assert results.read_bytes() == final


def test_resume_refuses_other_settings(tmp_path, agentrt_home):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": 1, "question": "2+5?", "answer": "7", "type": "math"}) + "\n")
    env = {**os.environ, "AGENTRT_HOME": str(agentrt_home)}
    out = tmp_path / "out"
    assert subprocess.run(_cmd(suite, out), env=env, capture_output=True, timeout=120).returncode == 0
    other = [a if a != "300" else "400" for a in _cmd(suite, out)]
    proc = subprocess.run(other, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "budget=300" in proc.stderr and proc.stderr.count("\n") == 1
