"""The ``python`` tool: run a snippet in a separate, isolated process.

Isolation you can state (threat model: ``tools/README.md``). Launchers, first that works wins:
bubblewrap (``bwrap``) when installed, else our own namespaces (``unshare`` + ``pivot_root``). Either
way the code sees a fresh /proc of its own pid namespace, a read-only root of /usr, the interpreter's
prefix and site-packages, a fresh size-capped /tmp (its cwd, HOME and TMPDIR) and nothing of the
host's /run, /var, /home, /tmp or /etc; it has no network namespace to reach (only a downed loopback),
no socket of any family and no memfd or SysV memory (seccomp), no new privileges, runs as uid ``nobody``
(when started as root) under RLIMIT_CPU/AS/NPROC/FSIZE/NOFILE, at most ``max_files`` inodes on /tmp and
/dev/shm, and a wall clock the parent enforces. With neither launcher working, ``run_python`` refuses
(``SandboxUnavailable``, one line saying how to enable one) unless the caller allows ``unsafe``
(``Settings.allow_python = "unsafe"``): the host's namespaces, with rlimits, seccomp (no socket, exec, new
process or signal to another, no chmod/chown/utime/xattr/inode-flag change anywhere), Landlock (no write
outside the work dir, where the kernel has it) and an audit hook; nothing keeps it from reading what the
calling user can.

The status (``SandboxResult.stopped``) comes from the parent's own clock and from the sandbox's
supervisor (pid 1 inside, which the code cannot signal, re-limit, trace or write for): the code's wait status,
its CPU time and the peak number of processes; never from the code's output.

The tool is off unless the runtime's settings enable it (``Settings.allow_python``).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from agentrt.core.errors import InputError, RunError
from tools._sandbox_launch import ENABLE_HINT, LAUNCHERS, SandboxUnavailable, argv_for, child_config, level, root_view
from tools.base import Tool, ToolError, ToolResult, tool

__all__ = ["SandboxLimits", "SandboxResult", "SandboxUnavailable", "make_python_tool", "run_python"]

CHILD = Path(__file__).with_name("_sandbox_child.py")
MEMORY_EXIT = 86  # _sandbox_child.MEMORY_EXIT: the code's process ended on a MemoryError
@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Limits of one run. Memory is the address space (RLIMIT_AS), so keep headroom for the interpreter."""

    cpu_s: int = 5
    wall_s: float = 10.0
    memory_mb: int = 512
    max_procs: int = 16
    disk_mb: int = 64
    max_output_chars: int = 4000
    max_files: int = 4096  # inodes on each of /tmp and /dev/shm (~1 KB of kernel memory each, uncounted by size)

    def __post_init__(self) -> None:
        if (self.cpu_s < 1 or self.wall_s <= 0 or self.memory_mb < 64 or self.max_procs < 1 or self.disk_mb < 1
                or self.max_files < 16):
            raise InputError("sandbox limits must be positive (cpu_s >= 1, memory_mb >= 64, max_files >= 16)")


@dataclass(slots=True)
class SandboxResult:
    """What a sandboxed run produced. ``stopped`` names the limit that ended it, if any; ``isolation`` is
    the level it ran at (``bwrap+seccomp``, ``namespaces+seccomp``, ``unsafe``), ``layers`` the details."""

    output: str
    exit_code: int | None = None
    signal: int | None = None
    stopped: str | None = None
    truncated: bool = False
    layers: list[str] = field(default_factory=list)
    isolation: str = ""
    cpu_s: float | None = None
    peak_procs: int = 0

    def observation(self, limits: SandboxLimits) -> str:
        """The text a model sees: one status line, then the output."""
        reasons = {
            "cpu": f"stopped: CPU time limit of {limits.cpu_s} s exceeded",
            "wall": f"stopped: wall-clock limit of {limits.wall_s:g} s exceeded; the process was killed",
            "memory": f"stopped: memory limit of {limits.memory_mb} MB reached",
            "procs": f"stopped: process limit of {limits.max_procs} reached (fork refused)",
            "sandbox": "stopped: the sandbox ended without reporting how the code ended",
        }
        if self.stopped:
            head = reasons.get(self.stopped, f"stopped: {self.stopped}")
        elif self.signal:
            head = f"killed by signal {signal.Signals(self.signal).name}"
        else:
            head = f"exit code {self.exit_code}"
        tail = "\n[output truncated]" if self.truncated else ""
        return f"{head}\n{self.output}{tail}".rstrip()


_UNAVAILABLE: dict[str, str] = {}  # launcher -> why it could not start here (tried once per process)


def run_python(code: str, limits: SandboxLimits | None = None, *, launchers: Sequence[str] | None = None,
               allow_unsafe: bool = False) -> SandboxResult:
    """Run ``code`` in the sandbox and wait for it (at most ``limits.wall_s`` seconds).

    ``launchers``: which to try, in order (default: ``$AGENTRT_SANDBOX_LAUNCHERS`` as ``bwrap,namespaces``
    or ``none``, else ``("bwrap", "namespaces")``; ``()`` = none, as on a machine with neither). When none
    starts: ``SandboxUnavailable`` (one line: how to enable one), or,
    with ``allow_unsafe``, a run without isolation (``isolation == "unsafe"``).
    """
    limits = limits or SandboxLimits()
    if launchers is None and (forced := os.environ.get("AGENTRT_SANDBOX_LAUNCHERS", "").strip()):
        launchers = () if forced == "none" else [part.strip() for part in forced.split(",") if part.strip()]
    order = LAUNCHERS if launchers is None else tuple(launchers)
    if unknown := [name for name in order if name not in LAUNCHERS]:
        raise InputError(f"unknown sandbox launcher(s) {unknown}; use {list(LAUNCHERS)}")
    reasons = []
    for launcher in order:
        outcome = _UNAVAILABLE.get(launcher) or _attempt(launcher, code, limits)
        if isinstance(outcome, SandboxResult):
            return outcome
        _UNAVAILABLE[launcher] = outcome
        reasons.append(outcome)
    if allow_unsafe:
        outcome = _attempt("unsafe", code, limits)
        if isinstance(outcome, SandboxResult):
            return outcome
        raise RunError(f"the python tool could not start its process ({outcome}); check the interpreter")
    tried = "; ".join(reasons) if reasons else "no launcher allowed"
    raise SandboxUnavailable(f"the python tool needs an isolating layer and none works here ({tried}): {ENABLE_HINT}")


@cache
def _child_source() -> str:
    return CHILD.read_text(encoding="utf-8")


def _attempt(launcher: str, code: str, limits: SandboxLimits) -> SandboxResult | str:
    """One run under ``launcher``: its result, or (when the sandbox could not be built, so the code never
    ran) one line saying why."""
    root_dir = tempfile.mkdtemp(prefix="agentrt-py-")  # unsafe: the work dir; namespaces: the new root
    view = root_view()
    status_r, status_w = os.pipe()
    cfg = child_config(launcher, limits, status_w, root_dir, view)
    argv = argv_for(launcher, view, limits.disk_mb, _child_source(), json.dumps(cfg))
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"}
    proc, why = None, f"{launcher}: not installed"
    if argv is not None:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    pass_fds=(status_w,), cwd=root_dir, env=env, start_new_session=True)
        except OSError as e:
            why = f"{launcher}: {e.strerror or e}"
    os.close(status_w)
    if proc is None:
        os.close(status_r)
        shutil.rmtree(root_dir, ignore_errors=True)
        return why
    try:
        output, truncated, timed_out = _communicate(proc, code, limits)
        status = _read_status(status_r)
    finally:
        os.close(status_r)
        _kill_group(proc)
        shutil.rmtree(root_dir, ignore_errors=True)
    if not status.get("ready"):
        why = status.get("error") or next((line for line in output.splitlines() if line.strip()), "")
        return f"{launcher}: {why.strip()[:200] or f'exit status {proc.returncode}'}"
    return _classify(launcher, status, output, truncated, timed_out, limits)


def _communicate(proc: subprocess.Popen, code: str, limits: SandboxLimits) -> tuple[str, bool, bool]:
    """Feed stdin, read output up to the cap (draining the rest), enforce the wall clock."""
    if proc.stdin is None or proc.stdout is None:
        raise RunError("the python sandbox was started without pipes")
    try:
        proc.stdin.write(code.encode("utf-8", errors="surrogateescape"))
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
    # The launcher leads its own session (start_new_session); its pid is the group id. Kill by that id
    # only, never by name. The sandbox's pid 1 dies with it (parent-death signal), and with it the rest.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_status(fd: int) -> dict:
    data = b""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
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


def _classify(launcher: str, status: dict, output: str, truncated: bool, timed_out: bool,
              limits: SandboxLimits) -> SandboxResult:
    """The result from what only trusted parties know: the parent's clock, the supervisor's report."""
    layers = list(status.get("layers", []))
    result = SandboxResult(output, truncated=truncated, layers=layers, isolation=level(launcher, layers),
                           exit_code=status.get("exit_code"), signal=status.get("signal"),
                           cpu_s=status.get("cpu_s"), peak_procs=int(status.get("peak_procs", 0)))
    ended = "exit_code" in status or "signal" in status
    # RLIMIT_NPROC counts the code's processes (plus ours that share its uid in a user namespace): at
    # the limit, forks were refused. Two of slack: the supervisor samples the count every few ms, and a
    # fork bomb's processes come and go faster (a CI run saw a peak of 6 under a limit of 8).
    at_proc_limit = result.peak_procs >= limits.max_procs - int(status.get("procs_shared", 0)) - 2
    # Under load the samples can miss a bomb whose processes die as soon as a fork is refused (CI saw a
    # peak of 3 of 8): code that failed after starting at least the limit's worth of processes in its
    # namespace (the kernel's count) is reported as stopped by the process limit.
    created_enough = int(status.get("created_procs", 0)) >= limits.max_procs - int(status.get("procs_shared", 0))
    if timed_out:
        result.stopped = "procs" if at_proc_limit else "wall"  # a fork bomb churns until the wall clock
    elif not ended:
        result.stopped = "sandbox"
    elif result.signal in (signal.SIGXCPU, signal.SIGKILL) and (result.cpu_s or 0) >= 0.9 * limits.cpu_s:
        result.stopped = "cpu"  # SIGXCPU at the soft RLIMIT_CPU, SIGKILL at the hard one
    elif (result.signal or result.exit_code) and (at_proc_limit or created_enough):
        result.stopped = "procs"
    elif result.exit_code == MEMORY_EXIT:
        result.stopped = "memory"
    return result


def make_python_tool(limits: SandboxLimits | None = None, *, name: str = "python", allow_unsafe: bool = False,
                     launchers: Sequence[str] | None = None) -> Tool:
    """The ``python`` tool over ``run_python`` with the given limits. Its ``ToolResult.data`` carries the
    isolation level (recorded in the trajectory's tool_call step) and how the run ended."""
    limits = limits or SandboxLimits()

    @tool(name=name, timeout_s=limits.wall_s + 5, max_output_chars=limits.max_output_chars + 200)
    def python(code: str) -> ToolResult:
        """Run Python code in an isolated sandbox (no network, no files kept) and return what it printed.

        Args:
            code: A complete Python program; use print() to show results.
        """
        try:
            result = run_python(code, limits, launchers=launchers, allow_unsafe=allow_unsafe)
        except SandboxUnavailable as e:
            raise ToolError(str(e)) from None
        data = {"isolation": result.isolation, "stopped": result.stopped, "exit_code": result.exit_code,
                "signal": result.signal}
        return ToolResult(result.observation(limits), data=data)

    return python
