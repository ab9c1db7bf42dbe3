"""Attacks of the second round (issue #35) on the python tool's sandbox, under both launchers: memory the
code holds without mapping it, inode floods, the supervisor as a target when the caller is not root, and
the ``unsafe`` mode with its Python-level hook defeated. Each is asserted the way a user would check it:
the host's shared memory, the error the code got, the supervisor's report, files that must not exist."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tools._sandbox_seccomp import SYSCALLS, native_arch
from tools.python import run_python

from test_sandbox_attacks import LIMITS, TAG, attack, launcher, reported  # noqa: F401 (fixtures)


def _host_shmem_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("/proc/meminfo has no Shmem line")


def test_memory_held_without_a_mapping(attack):
    """The issue's attack: 20 memfds x posix_fallocate 64 MB under RLIMIT_AS raised the host's shared
    memory by 1.32 GB. Here 40 x 12 MB (under RLIMIT_FSIZE): the host's Shmem, sampled while the code
    holds what it got, grows by less than the memory limit (only the capped /tmp and /dev/shm hold any)."""
    chunk = LIMITS.disk_mb * 3 // 4
    code = ("import os, ctypes, sys\nheld, fds = 0, []\n"
            f"for i in range(40):\n    try:\n        fd = os.memfd_create(f'm{{i}}'); os.posix_fallocate(fd, 0, {chunk} << 20)\n"
            f"        fds.append(fd); held += {chunk}\n    except OSError as e:\n        print('memfd refused', e.errno); break\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "for name, call in (('shmget', lambda: libc.shmget(0, 64 << 20, 0o1600)),\n"  # IPC_PRIVATE, IPC_CREAT
            "                   ('msgget', lambda: libc.msgget(0, 0o1600))):\n"
            "    print(name, call(), ctypes.get_errno())\n"
            "for d in ('/tmp', '/dev/shm'):\n    try:\n        fd = os.open(d + '/big', os.O_CREAT | os.O_RDWR)\n"
            "        os.posix_fallocate(fd, 0, 512 << 20); held += 512\n"
            "    except OSError as e:\n        print(d, 'capped', e.errno)\n"
            "print('held', held, 'MB', flush=True)\nimport time; time.sleep(2)")
    baseline, peak, done = _host_shmem_mb(), [0.0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _host_shmem_mb())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result, text = attack(code)
    finally:
        done.set()
        sampler.join()
    assert "memfd refused 1" in text and "shmget -1 1" in text and "msgget -1 1" in text, text
    assert "/tmp capped" in text and "/dev/shm capped" in text and "held 0 MB" in text  # ENOSPC or EFBIG
    assert peak[0] - baseline < LIMITS.memory_mb, (baseline, peak[0])
    assert result.exit_code == 0 and "no-memfd" in result.layers


def test_200k_empty_files_are_refused(attack):
    """Empty files cost kernel memory a tmpfs size does not count: /tmp and /dev/shm cap their inodes."""
    code = ("import os\nfor d in ('/tmp/work', '/dev/shm'):\n    n = 0\n    try:\n"
            "        while n < 200_000:\n            os.close(os.open(f'{d}/f{n}', os.O_CREAT | os.O_WRONLY)); n += 1\n"
            "        print(d, 'made', n)\n    except OSError as e:\n        print(d, 'stopped at', n, 'errno', e.errno)\n"
            "try: os.mkdir('/tmp/work/one-more-dir'); print('mkdir allowed')\nexcept OSError as e: print('mkdir', e.errno)")
    result, text = attack(code)
    assert "made" not in text and "mkdir allowed" not in text, text
    for d in ("/tmp/work", "/dev/shm"):
        made = int(text.split(f"{d} stopped at ")[1].split()[0])
        assert 0 < made <= LIMITS.max_files and f"{d} stopped at {made} errno 28" in text
    assert result.exit_code == 0 and "tmp-inodes" in result.layers


# Runs run_python as a caller whose uid is 1000 inside a user namespace of its own (the setup):
# the sandbox's supervisor and the code then share one kernel uid, so only the sandbox keeps them apart.
AS_UID_1000 = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x10000000) != 0:
    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
for name, text in (("setgroups", "deny"), ("uid_map", f"1000 {uid} 1"), ("gid_map", f"1000 {gid} 1")):
    with open(f"/proc/self/{name}", "w") as f:
        f.write(text)
os.execv(sys.executable, [sys.executable, "-c", sys.argv[1], *sys.argv[2:]])  # exec: no capability left
"""
RUN = """
import dataclasses, json, os, sys
from tools.python import SandboxLimits, run_python
result = run_python(sys.argv[2], SandboxLimits(**json.loads(sys.argv[3])), launchers=(sys.argv[1],))
print(json.dumps({"uid": os.getuid(), **{k: getattr(result, k) for k in ("output", "exit_code", "signal",
                  "stopped", "layers", "isolation")}}))
"""


NR = SYSCALLS[native_arch()]


def run_as_uid_1000(launcher: str, code: str) -> dict:
    limits = {"cpu_s": LIMITS.cpu_s, "wall_s": LIMITS.wall_s, "memory_mb": LIMITS.memory_mb,
              "max_procs": LIMITS.max_procs, "disk_mb": LIMITS.disk_mb}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", AS_UID_1000, RUN, launcher, code, json.dumps(limits)],
                          capture_output=True, text=True, timeout=120, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_supervisor_out_of_reach_of_a_non_root_callers_code(launcher):
    """The issue's attack: with the caller mapped to uid 1000, os.kill(1, SIGINT) killed the supervisor
    and prlimit(1, RLIMIT_AS) succeeded. Every way to name pid 1 is refused, and it reports as usual."""
    code = ("import ctypes, os, signal, resource\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "libc = ctypes.CDLL(None, use_errno=True)\ninfo = ctypes.create_string_buffer(128)\n"
            "def raise_errno(ret):\n    if ret != 0: raise OSError(ctypes.get_errno(), 'refused')\n"
            "attempts = [('kill1-int', lambda: os.kill(1, signal.SIGINT)), ('kill1-term', lambda: os.kill(1, signal.SIGTERM)),\n"
            "    ('kill1-kill', lambda: os.kill(1, signal.SIGKILL)), ('kill1-stop', lambda: os.kill(1, signal.SIGSTOP)),\n"
            "    ('prlimit-as', lambda: resource.prlimit(1, resource.RLIMIT_AS, (1 << 20, 1 << 20))),\n"
            "    ('prlimit-nofile', lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3))),\n"
            "    ('pidfd-open', lambda: os.pidfd_open(1)),\n"
            "    ('pidfd-proc', lambda: signal.pidfd_send_signal(os.open('/proc/1', os.O_RDONLY | os.O_DIRECTORY), signal.SIGINT)),\n"
            f"    ('tgkill', lambda: raise_errno(libc.syscall({NR['tgkill']}, 1, 1, signal.SIGINT))),\n"
            f"    ('sigqueue', lambda: raise_errno(libc.syscall({NR['rt_sigqueueinfo']}, 1, signal.SIGINT, info)))]\n"
            "for name, f in attempts:\n    try: f(); print(name, 'done')\n"
            "    except (OSError, ProcessLookupError) as e: print(name, 'refused', e.errno)\n"
            "os.kill(0, signal.SIGINT)\n"  # its own process group: the code's own processes only
            "print('oom', open('/proc/self/oom_score_adj').read().strip())\n"  # the code is the OOM killer's first pick
            "print('uid', os.getuid(), 'still here')")
    seen = run_as_uid_1000(launcher, code)
    text = seen["output"]
    assert seen["uid"] == 1000 and "userns" in seen["layers"] and seen["isolation"] == f"{launcher}+seccomp"
    for name in ("kill1-int", "kill1-term", "kill1-kill", "kill1-stop", "prlimit-as", "prlimit-nofile",
                 "pidfd-open", "pidfd-proc", "tgkill", "sigqueue"):
        assert f"{name} refused 1" in text, text
    assert " done" not in text and "KeyboardInterrupt" not in text
    assert "still here" in text and "oom 1000" in text and seen["exit_code"] == 0 and seen["stopped"] is None


def _landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return max(0, libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))  # ..._VERSION


def test_unsafe_mode_holds_with_its_audit_hook_defeated(tmp_path):
    """``allow_python = "unsafe"``: the issue ran /bin/sh through _posixsubprocess.fork_exec and made a
    directory outside the work dir. Here the code first disarms the Python audit hook (its closure is
    writable), so what stops it is the kernel: the second seccomp filter and Landlock."""
    outside = tmp_path / f"outside-{TAG}"
    code = ("import gc, os\n"
            "for f in gc.get_objects():\n"
            "    if getattr(f, '__name__', '') == 'hook' and getattr(f, '__closure__', None):\n"
            "        for cell in f.__closure__:\n"
            "            if isinstance(cell.cell_contents, str): cell.cell_contents = ''\n"
            "            elif isinstance(cell.cell_contents, tuple): cell.cell_contents = ('none',)\n"
            "            elif isinstance(cell.cell_contents, int): cell.cell_contents = 0\n"
            "import subprocess, _posixsubprocess\n"
            f"out = {str(outside)!r}\n"
            "attempts = [('subprocess', lambda: subprocess.run(['/bin/sh', '-c', 'echo ran-a-shell'])),\n"
            "    ('posix_spawn', lambda: os.waitpid(os.posix_spawn('/bin/sh', ['sh', '-c', 'echo ran-a-shell'], {}), 0)),\n"
            "    ('fork', lambda: os.fork() or os._exit(0)), ('execv', lambda: os.execv('/bin/sh', ['sh'])),\n"
            "    ('kill-parent', lambda: os.kill(os.getppid(), 0)), ('kill-init', lambda: os.kill(1, 0)),\n"
            "    ('kill-group', lambda: os.kill(0, 0)),\n"
            "    ('mkdir', lambda: os.mkdir(out)), ('mkfifo', lambda: os.mkfifo(out)),\n"
            "    ('write', lambda: open(out, 'w').write('x'))]\n"
            "for name, f in attempts:\n    try: f(); print(name, 'done')\n"
            "    except OSError as e: print(name, 'refused', e.errno)\n"
            "os.mkdir('inside'); open('inside/ok.txt', 'w').write('fine'); print('inside ok', os.listdir('inside'))\n"
            "os.kill(os.getpid(), 0); print('own pid ok')")
    result = run_python(code, LIMITS, launchers=(), allow_unsafe=True)
    text = result.output
    assert result.isolation == "unsafe" and {"unsafe-seccomp", "audit-hook"} <= set(result.layers)
    for name in ("subprocess", "posix_spawn", "fork", "execv", "kill-parent", "kill-init", "kill-group"):
        assert f"{name} refused 1" in text, text  # EPERM from seccomp
    assert "ran-a-shell" not in text
    if _landlock_abi() == 0:  # a kernel without Landlock: the run says so, and nothing keeps writes in
        assert "landlock" not in result.layers
        return
    for name in ("mkdir", "mkfifo", "write"):
        assert f"{name} refused 13" in text, text  # EACCES from Landlock
    assert "landlock" in result.layers and " done" not in text and not outside.exists()
    assert "inside ok ['ok.txt']" in text and "own pid ok" in text and result.exit_code == 0


def test_unsafe_mode_code_dies_at_the_wall_clock():
    """Without a pid namespace the code's process is not ended by one: it stays in the process group the
    parent kills at its deadline, and dies with the supervisor."""
    limits = dataclasses.replace(LIMITS, wall_s=3)
    result = run_python("import os, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(600)", limits,
                        launchers=(), allow_unsafe=True)
    pid = int(result.output.split("pid ", 1)[1].split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert result.stopped == "wall" and not Path(f"/proc/{pid}").exists()
