"""A full disk and a bad config are one clear line each (issue 35, item 8 of "what broke").

The disk is a real one: ``AGENTRT_HOME`` on a 256 KB tmpfs, mounted in a private mount namespace
(``unshare -rm``: nothing outside the test sees it), filled with a filler file. ``agentrt run`` and
``agentrt feedback`` on it fail with one line and leave the files exactly as they were; a torn last line
whose repair cannot be written is the same one line, not a raw ``OSError``; once space is freed the next
run writes and every earlier record reads back. The exact short-write path is also driven by injecting
the kernel's answer, and the router and config readers refuse what is not a small regular file.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.core.errors import ConfigError, TrajectoryError

ROOT = Path(__file__).resolve().parents[2]
AGENTRT = str(Path(sys.executable).parent / "agentrt")

# runs inside `unshare -rm` with the tmpfs at sys.argv[1]; prints one JSON summary
DRIVER = r"""
import json, os, subprocess, sys
home, agentrt = sys.argv[1], sys.argv[2]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", home], check=True)
env = dict(os.environ, AGENTRT_HOME=home)
T = os.path.join(home, "trajectories", "trajectories.jsonl")
F = os.path.join(home, "trajectories", "feedback.jsonl")
out = {}

def run(name, *args):
    p = subprocess.run([agentrt, *args], env=env, capture_output=True, text=True)
    out[name] = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
    return p

def fill():
    fd = os.open(os.path.join(home, "filler"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while os.write(fd, b"\0" * 512):
            pass
    except OSError:  # ENOSPC: the disk is full
        pass
    finally:
        os.close(fd)

first = run("first", "run", "--json", "--policy", "scripted:first answer", "--route", "direct", "q1")
run_id = json.loads(first.stdout)["trajectory_id"]
run("feedback_ok", "feedback", run_id, "--right")
with open(F, "ab") as f:  # a whole line that readers skip, ending the file on a page: the next line needs a new one
    f.write(b'{"pad": "' + b"z" * (4096 - os.path.getsize(F) - 12) + b'"}\n')
out["size_before"], out["feedback_before"] = os.path.getsize(T), os.path.getsize(F)
fill()
run("full", "run", "--policy", "scripted:" + "x" * 6000, "--route", "direct", "q2")
fill()  # again: the failed write gave back the pages it had taken
run("feedback_full", "feedback", run_id, "--wrong")
out["size_full"], out["feedback_full_size"] = os.path.getsize(T), os.path.getsize(F)
os.remove(os.path.join(home, "filler"))
size = os.path.getsize(T)
with open(T, "ab") as f:  # a writer killed mid-line, its torn line ending exactly on a page: the repair needs a new one
    f.write(b'{"torn": "' + b"y" * (8192 - size - 10))
out["size_torn"] = os.path.getsize(T)
fill()
run("torn_full", "run", "--policy", "scripted:third answer", "--route", "direct", "q3")
out["size_torn_full"] = os.path.getsize(T)
os.remove(os.path.join(home, "filler"))
run("freed", "run", "--policy", "scripted:fourth answer", "--route", "direct", "q4")
sys.path.insert(0, os.getcwd())
from agentrt.trajectory.store import read_trajectories
report = read_trajectories(os.path.join(home, "trajectories"))
out["answers"] = [r.answer for r in report.records]
out["torn"], out["quarantined"] = len(report.torn), len(report.quarantined)
print(json.dumps(out))
"""


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


def _in_namespaces(tmp_path: Path, driver: str, home: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``driver`` (it mounts its own small tmpfs) in a user + mount namespace with a fresh ``home``."""
    home.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(driver)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENTRT_HOME", None)
    return subprocess.run(["unshare", "-rm", sys.executable, str(script), str(home), AGENTRT, *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_nothing_half_written(tmp_path):
    home = tmp_path / "home"
    p = _in_namespaces(tmp_path, DRIVER, home)
    assert p.returncode == 0, ("this test needs `unshare -rm` (user and mount namespaces) to mount its tmpfs: "
                               + p.stderr[-3000:])
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["first"]["rc"] == 0 and out["feedback_ok"]["rc"] == 0

    line = _one_line(out["full"]["stderr"])
    assert out["full"]["rc"] == 1 and line.startswith("agentrt: failed: cannot write to ")
    assert "trajectories.jsonl: the disk is full; nothing was written" in line
    assert out["size_full"] == out["size_before"]  # not a byte of the half record stays

    line = _one_line(out["feedback_full"]["stderr"])
    assert "feedback.jsonl: the disk is full" in line
    assert out["feedback_full_size"] == out["feedback_before"]

    line = _one_line(out["torn_full"]["stderr"])  # the torn-tail repair on a full disk: no raw OSError
    assert out["torn_full"]["rc"] == 1 and "the disk is full" in line and "Errno" not in line
    assert out["size_torn_full"] == out["size_torn"] == 8192

    assert out["freed"]["rc"] == 0, out["freed"]["stderr"][-2000:]
    assert out["answers"] == ["first answer", "fourth answer"]
    assert out["torn"] == 1 and out["quarantined"] == 0  # the killed writer's line is reported torn, not corrupt


def test_a_short_write_is_cut_back_and_said_in_one_line(tmp_path, monkeypatch):
    """The kernel takes part of a line and then refuses the rest: the part is cut off again."""
    import agentrt.trajectory.store as store
    from agentrt.trajectory.schema import TrajectoryRecord

    def record(answer: str) -> TrajectoryRecord:
        return TrajectoryRecord(run_id=f"run-{answer}", created_at=1.0, question="q", route="direct", steps=[],
                                answer=answer, budget={"total": 10}, usage={"total_tokens": 1}, timings={},
                                status="ok")

    writer = store.TrajectoryWriter(tmp_path)
    writer.append(record("a"))
    size = writer.path.stat().st_size
    real_write = os.write

    def short(fd, data):
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(store.os, "write", short)
    with pytest.raises(TrajectoryError, match="the disk is full; nothing was written"):
        writer.append(record("b"))
    assert writer.path.stat().st_size == size

    with open(writer.path, "ab") as f:  # a torn tail, then a repair the disk refuses
        f.write(b'{"half')

    def enospc(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "write", enospc)
    with pytest.raises(TrajectoryError, match="the disk is full"):
        writer.append(record("c"))
    monkeypatch.setattr(store.os, "write", real_write)
    writer.append(record("d"))
    report = store.read_trajectories(tmp_path)
    assert [r.answer for r in report.records] == ["a", "d"] and len(report.torn) == 1


@pytest.mark.parametrize("text, words", [
    ("agentrt = 5\n", "'agentrt' must be a table of settings"),
    ('agentrt = "fast"\n', "'agentrt' must be a table of settings"),
    ("[agentrt]\nplan = 5\n", "bad setting 'plan'"),
    ("[agentrt]\nbudget = [1]\n", "bad setting 'budget'"),
])
def test_a_config_of_the_wrong_type_is_one_config_error_line(agentrt_home, text, words):
    agentrt_home.mkdir(parents=True, exist_ok=True)
    (agentrt_home / "config.toml").write_text(text)
    p = subprocess.run([AGENTRT, "run", "--policy", "scripted:x", "--route", "direct", "q"], capture_output=True,
                       text=True, env={**os.environ, "AGENTRT_HOME": str(agentrt_home)}, timeout=300)
    assert p.returncode == 2 and words in _one_line(p.stderr) and p.stderr.startswith("agentrt: error: ")


def test_the_router_and_config_readers_take_only_small_regular_files(tmp_path):
    from agentrt.core.config import load_settings
    from agentrt.router.learned import MAX_BYTES, RouterModel

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_BYTES + 1))
    for path, words in ((Path("/dev/zero"), "not a regular file"), (tmp_path, "not a regular file"),
                        (fifo, "not a regular file"), (big, "over the")):
        with pytest.raises(ConfigError, match=words):  # at once: no read of /dev/zero, no wait on the FIFO
            RouterModel.load(path)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_settings(fifo)


INDEX_DRIVER = r"""
import os, subprocess, sys
home, agentrt, docs = sys.argv[1], sys.argv[2], sys.argv[3]
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", home], check=True)
p = subprocess.run([agentrt, "index", docs, "--collection", "docs"], env=dict(os.environ, AGENTRT_HOME=home),
                   capture_output=True, text=True)
print(p.returncode)
sys.stdout.write(p.stderr)
"""


@pytest.mark.slow
def test_indexing_onto_a_full_disk_says_full_not_damaged(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(40):  # ~270 chunks: more than a 600 KB disk holds
        (docs / f"d{i}.txt").write_text(" ".join([f"word{i} lorem ipsum dolor sit amet"] * 200))
    home = tmp_path / "home"
    p = _in_namespaces(tmp_path, INDEX_DRIVER, home, str(docs))
    assert p.returncode == 0, p.stderr[-3000:]
    rc, *stderr = p.stdout.splitlines()
    failure = [line for line in stderr if line.startswith("agentrt:")]
    assert rc == "1" and len(failure) == 1 and "Traceback" not in p.stdout, p.stdout[-3000:]
    assert "is full" in failure[0] and "the store is not damaged" in failure[0]
    assert "damaged or unreadable" not in failure[0] and "if the folder is damaged" not in failure[0]
