"""The python tool's sandbox: each abuse is stopped with a clear observation, the parent is unharmed,
and nothing written outside the sandbox's temp dir survives."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import resource
import tempfile
import uuid
from pathlib import Path

import pytest

from tools import execute
from tools.python import SandboxLimits, make_python_tool, run_python

from _procs import nobody_processes_left

# A generous wall clock, so a loaded machine cannot turn a CPU or process limit into a wall-clock stop.
LIMITS = SandboxLimits(cpu_s=1, wall_s=120, memory_mb=256, max_procs=8, max_output_chars=2000)
FULL = {"netns", "pidns", "private-tmp", "readonly-root", "rlimits"}


def _parent_state():
    return (os.readlink("/proc/self/ns/net"), os.readlink("/proc/self/ns/mnt"), os.getuid(), os.getcwd(),
            [resource.getrlimit(r) for r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC)])


@pytest.fixture
def parent_unharmed():
    before = _parent_state()
    yield
    assert _parent_state() == before


def run(code: str, limits: SandboxLimits = LIMITS, **kw):
    result = run_python(code, limits, **kw)
    return result, result.observation(limits)


def test_runs_code_and_reports_its_isolation(parent_unharmed):
    result, text = run("import os\nprint(6 * 7, os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])")
    assert text == "exit code 0\n42 True"
    assert FULL <= set(result.layers), result.layers  # where neither launcher works, run_python refuses
    assert result.isolation in ("bwrap+seccomp", "namespaces+seccomp")
    result, text = run("raise ValueError('bad input')")
    assert result.exit_code == 1 and text.splitlines()[0] == "exit code 1"
    assert text.endswith("ValueError: bad input") and "_sandbox_child" not in text


def test_infinite_loop_hits_the_cpu_limit(parent_unharmed):
    result, text = run("while True:\n    pass")
    assert result.stopped == "cpu"
    assert text.startswith("stopped: CPU time limit of 1 s exceeded")


def test_sleeping_forever_hits_the_wall_clock(parent_unharmed):
    limits = dataclasses.replace(LIMITS, wall_s=3)
    result, text = run("import time\nprint('started', flush=True)\ntime.sleep(600)", limits)
    assert result.stopped == "wall"
    assert text == "stopped: wall-clock limit of 3 s exceeded; the process was killed\nstarted"


def test_4gb_allocation_hits_the_memory_limit(parent_unharmed):
    result, text = run("x = bytearray(4 * 1024**3)\nprint('allocated')")
    assert result.stopped == "memory" and "allocated" not in text
    assert text.startswith("stopped: memory limit of 256 MB reached")


def test_fork_bomb_hits_the_process_limit(parent_unharmed):
    result, text = run("import os\nwhile True:\n    os.fork()")
    assert result.stopped == "procs", text
    assert text.startswith("stopped: process limit of 8 reached (fork refused)")
    assert "BlockingIOError" in text
    # Every process of the bomb is gone (they ran as nobody inside a pid namespace that died).
    assert nobody_processes_left() == []


def test_socket_connect_is_refused(parent_unharmed):
    code = ("import socket\ns = socket.socket()\ns.settimeout(3)\n"
            "s.connect(('127.0.0.1', 1))\nprint('connected')")
    result, text = run(code)
    assert result.exit_code == 1 and "connected" not in text.splitlines()[-1]
    assert text.endswith("PermissionError: [Errno 1] Operation not permitted")  # seccomp: no socket at all


def test_nothing_written_outside_survives(tmp_path, monkeypatch, parent_unharmed):
    parent_tmp = tmp_path / "parent-tmp"
    parent_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent_tmp))  # where run_python makes its own dir
    tag = uuid.uuid4().hex
    targets = [tmp_path / f"escape-{tag}", Path("/tmp") / f"escape-{tag}", Path("/var/tmp") / f"escape-{tag}",
               Path("/dev/shm") / f"escape-{tag}", Path.cwd() / f"escape-{tag}"]
    code = "import os\nfor p in %r:\n    try:\n        open(p, 'w').write('x')\n        print('wrote', p)\n" \
           "    except OSError as e:\n        print('refused', p, e.errno)\n" \
           "open('inside.txt', 'w').write('ok')\nprint(sorted(os.listdir('.')))" % [str(t) for t in targets]
    result, text = run(code)
    assert result.exit_code == 0, text
    assert "['inside.txt']" in text
    assert not any(t.exists() for t in targets)
    assert list(parent_tmp.iterdir()) == []  # the sandbox's own temp dir is gone too


def test_output_is_truncated(parent_unharmed):
    result, text = run("print('x' * 100_000)")
    assert result.truncated and text.endswith("[output truncated]")
    assert len(text) < LIMITS.max_output_chars + 100


def test_unsafe_fallback_when_no_launcher_works(tmp_path, parent_unharmed):
    """Without an isolating layer and with ``unsafe`` allowed: seccomp refuses sockets, the audit hook
    refuses new processes and outside writes (Python-level only: no boundary, hence opt-in)."""
    outside = tmp_path / "fallback-escape"
    code = ("import socket, os\n"
            f"for action in (lambda: socket.socket(), lambda: os.fork(), lambda: open({str(outside)!r}, 'w')):\n"
            "    try:\n        action()\n        print('allowed')\n"
            "    except PermissionError as e:\n        print(e)\n"
            "open('ok.txt', 'w').write('fine')\nprint('ok')")
    result, text = run(code, launchers=(), allow_unsafe=True)
    assert result.isolation == "unsafe" and "audit-hook" in result.layers and "netns" not in result.layers
    assert "[Errno 1] Operation not permitted" in text
    assert "sandbox: os.fork is disabled in the python tool" in text
    assert "sandbox: writing outside the work directory is disabled" in text
    assert "allowed" not in text and text.endswith("ok")
    assert not outside.exists()


def test_python_tool_wraps_the_sandbox():
    py = make_python_tool(LIMITS)
    assert py.name == "python" and set(py.parameters["properties"]) == {"code"}
    outcome = asyncio.run(execute(py, {"code": "print(sum(range(10)))"}))
    assert outcome.output == "exit code 0\n45"
    assert outcome.data["isolation"] in ("bwrap+seccomp", "namespaces+seccomp")
