"""The ``python`` tool: run a snippet in a separate, locked-down process.

Isolation (see ``tools/_sandbox_child.py`` for the mechanics), in the order it is applied:

* **network**: a new network namespace (``unshare(CLONE_NEWNET)``: only a downed loopback), when the
  kernel allows it (root, or unprivileged user namespaces). Otherwise an audit hook in the child refuses
  socket creation and connects (Python-level only). ``SandboxResult.layers`` says which one was used.
* **filesystem**: a private mount namespace where every mount is read-only and /tmp, /var/tmp, /dev/shm,
  /run/lock are fresh size-capped tmpfs; cwd, HOME and TMPDIR are a fresh directory on that tmpfs, so
  nothing the code writes survives the run. Fallback: a fresh temp dir (removed afterwards) plus the
  audit hook refusing writes elsewhere.
* **processes**: the code runs as pid 1 of a new pid namespace (everything it forks dies with it),
  as uid ``nobody`` when started as root (the kernel ignores RLIMIT_NPROC for root), with
  RLIMIT_NPROC against fork bombs. Fallback: the audit hook refuses fork/exec/subprocess.
* **resources**: RLIMIT_CPU (CPU seconds), RLIMIT_AS (address space), RLIMIT_FSIZE, no core dumps,
  and a wall-clock limit enforced by the parent (it kills the child's process group).
* **output**: stdout and stderr together, truncated to ``max_output_chars``.

The tool is off unless the runtime's settings enable it (``Settings.allow_python``).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentrt.core.errors import InputError, RunError
from tools.base import Tool, tool

CHILD = Path(__file__).with_name("_sandbox_child.py")


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Limits of one run. Memory is the address space (RLIMIT_AS), so keep headroom for the interpreter."""

    cpu_s: int = 5
    wall_s: float = 10.0
    memory_mb: int = 512
    max_procs: int = 16
    disk_mb: int = 64
    max_output_chars: int = 4000

    def __post_init__(self) -> None:
        if self.cpu_s < 1 or self.wall_s <= 0 or self.memory_mb < 64 or self.max_procs < 1 or self.disk_mb < 1:
            raise InputError("sandbox limits must be positive (cpu_s >= 1, memory_mb >= 64)")


@dataclass(slots=True)
class SandboxResult:
    """What a sandboxed run produced. ``stopped`` names the limit that ended it, if any."""

    output: str
    exit_code: int | None = None
    signal: int | None = None
    stopped: str | None = None
    truncated: bool = False
    layers: list[str] = field(default_factory=list)

    def observation(self, limits: SandboxLimits) -> str:
        """The text a model sees: one status line, then the output."""
        reasons = {
            "cpu": f"stopped: CPU time limit of {limits.cpu_s} s exceeded",
            "wall": f"stopped: wall-clock limit of {limits.wall_s:g} s exceeded; the process was killed",
            "memory": f"stopped: memory limit of {limits.memory_mb} MB reached",
            "procs": f"stopped: process limit of {limits.max_procs} reached (fork refused)",
            "network": "stopped: network access is disabled in the python tool",
        }
        if self.stopped:
            head = reasons.get(self.stopped, f"stopped: {self.stopped}")
        elif self.signal:
            head = f"killed by signal {signal.Signals(self.signal).name}"
        else:
            head = f"exit code {self.exit_code}"
        tail = "\n[output truncated]" if self.truncated else ""
        return f"{head}\n{self.output}{tail}".rstrip()


def run_python(code: str, limits: SandboxLimits | None = None, *, namespaces: bool = True) -> SandboxResult:
    """Run ``code`` in the sandbox and wait for it (at most ``limits.wall_s`` seconds).

    ``namespaces=False`` skips the namespace layers (to exercise the audit-hook fallback).
    """
    limits = limits or SandboxLimits()
    fallback_dir = tempfile.mkdtemp(prefix="agentrt-py-")
    status_r, status_w = os.pipe()
    cfg = {"cpu_s": limits.cpu_s, "memory_mb": limits.memory_mb, "max_procs": limits.max_procs,
           "disk_mb": limits.disk_mb, "status_fd": status_w, "fallback_dir": fallback_dir,
           "namespaces": namespaces}
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", str(CHILD), json.dumps(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=(status_w,), cwd=fallback_dir, env=env, start_new_session=True,
        )
    except BaseException:
        os.close(status_r)
        os.close(status_w)
        shutil.rmtree(fallback_dir, ignore_errors=True)
        raise
    os.close(status_w)
    try:
        output, truncated, timed_out = _communicate(proc, code, limits)
        status = _read_status(status_r)
    finally:
        os.close(status_r)
        _kill_group(proc)
        shutil.rmtree(fallback_dir, ignore_errors=True)
    return _classify(proc.returncode, status, output, truncated, timed_out)


def _communicate(proc: subprocess.Popen, code: str, limits: SandboxLimits) -> tuple[str, bool, bool]:
    """Feed stdin, read output up to the cap (draining the rest), enforce the wall clock."""
    if proc.stdin is None or proc.stdout is None:
        raise RunError("the python sandbox was started without pipes")
    try:
        proc.stdin.write(code.encode("utf-8"))
        proc.stdin.close()
    except BrokenPipeError:
        pass
    cap = limits.max_output_chars * 4  # bytes; decoded and cut to characters below
    chunks: list[bytes] = []
    size, truncated, timed_out = 0, False, False
    deadline = time.monotonic() + limits.wall_s
    fd = proc.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if not ready:
            continue
        data = os.read(fd, 65536)
        if not data:  # every writer closed: the code and all its processes are gone
            break
        if size < cap:
            chunks.append(data[: cap - size])
        truncated = truncated or size + len(data) > cap
        size += len(data)
    _kill_group(proc)
    proc.wait()
    proc.stdout.close()
    text = b"".join(chunks).decode("utf-8", errors="replace")
    if len(text) > limits.max_output_chars:
        text, truncated = text[: limits.max_output_chars], True
    return text, truncated, timed_out


def _kill_group(proc: subprocess.Popen) -> None:
    # The child leads its own session (start_new_session); its pid is the group id. Kill by that id
    # only — never by name.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_status(fd: int) -> dict:
    data = b""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    status: dict = {}
    for line in data.decode(errors="replace").splitlines():  # later lines complete earlier ones
        try:
            status.update(json.loads(line))
        except ValueError:
            break
    return status


def _classify(returncode: int | None, status: dict, output: str, truncated: bool, timed_out: bool) -> SandboxResult:
    result = SandboxResult(output, truncated=truncated, layers=list(status.get("layers", [])))
    sig = status.get("signal")
    if sig is None and returncode is not None and returncode < 0 and not timed_out:
        sig = -returncode
    result.signal = sig
    result.exit_code = status.get("exit_code", returncode if returncode is not None and returncode >= 0 else None)
    lowered = output.lower()
    forked = any(w in lowered for w in ("fork", "popen", "spawn"))
    if forked and ("blockingioerror" in lowered or "sandbox: os." in lowered or "sandbox: subprocess" in lowered):
        result.stopped = "procs"  # a fork bomb churns until the wall clock; name the real cause
    elif timed_out:
        result.stopped = "wall"
    elif sig == signal.SIGXCPU or "sandbox: cpu time limit exceeded" in lowered or (
            sig == signal.SIGKILL and "pidns" in result.layers):  # SIGKILL here = the hard RLIMIT_CPU
        result.stopped = "cpu"
    elif "memoryerror" in lowered:
        result.stopped = "memory"
    elif any(s in lowered for s in ("network is unreachable", "sandbox: network access", "name resolution")):
        result.stopped = "network"
    return result


def make_python_tool(limits: SandboxLimits | None = None, *, name: str = "python") -> Tool:
    """The ``python`` tool over ``run_python`` with the given limits."""
    limits = limits or SandboxLimits()

    @tool(name=name, timeout_s=limits.wall_s + 5, max_output_chars=limits.max_output_chars + 200)
    def python(code: str) -> str:
        """Run Python code in an isolated sandbox (no network, no files kept) and return what it printed.

        Args:
            code: A complete Python program; use print() to show results.
        """
        return run_python(code, limits).observation(limits)

    return python
