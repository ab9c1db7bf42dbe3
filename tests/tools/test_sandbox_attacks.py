"""Attacks on the python tool's sandbox, each asserted contained the way a user would check it: the
secret is not in the output, the host file is unchanged, the server saw nobody, the status is not
fooled. Every attack runs under both launchers (bubblewrap and our own namespaces)."""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from agentrt.backends.scripted import ScriptedBackend
from agentrt.core.budget import Budget
from agentrt.core.config import Settings
from agentrt.routes.context import RunContext
from agentrt.routes.toolcall import builtin_tools, run_tool_loop
from tools import execute
from tools._sandbox_seccomp import SYSCALLS, native_arch
from tools.python import SandboxLimits, SandboxUnavailable, run_python

from _procs import nobody_processes_left

# Small limits keep the suite fast; a generous wall clock keeps a loaded machine from turning a CPU or
# process stop into a wall-clock one.
LIMITS = SandboxLimits(cpu_s=1, wall_s=30, memory_mb=256, max_procs=8, disk_mb=16, max_output_chars=3000)
TAG = uuid.uuid4().hex


@pytest.fixture(params=["bwrap", "namespaces"], scope="module")
def launcher(request):
    try:
        run_python("pass", LIMITS, launchers=(request.param,))
    except SandboxUnavailable as e:
        pytest.skip(f"{request.param} cannot start on this machine: {e}")
    return request.param


@pytest.fixture
def attack(launcher):
    def run(code: str, limits: SandboxLimits = LIMITS):
        result = run_python(code, limits, launchers=(launcher,))
        assert result.isolation == f"{launcher}+seccomp", result.layers
        return result, result.observation(limits)
    return run


@pytest.fixture
def secret(tmp_path):
    """A host file anyone may read (0644 in a 0755 dir): only the sandbox's view can keep it out."""
    tmp_path.chmod(0o755)
    path = tmp_path / "secret.txt"
    path.write_text(f"top-secret-{TAG}")
    path.chmod(0o644)
    return path


def reported(result) -> bool:
    """The supervisor outlived the code and reported how it ended."""
    return result.stopped != "sandbox" and (result.exit_code is not None or result.signal is not None)


def test_read_a_host_secret(attack, secret):
    code = (f"import os\nfor p in ({str(secret)!r}, {str(secret.parent)!r}):\n"
            "    try: print(open(p).read() if os.path.isfile(p) else os.listdir(p))\n"
            "    except OSError as e: print('refused', e.errno)")
    result, text = attack(code)
    assert secret.read_text() not in text and "secret.txt" not in text and text.count("refused") == 2


def test_read_etc_shadow(attack):
    code = ("for p in ('/etc/shadow', '/etc/passwd', '/etc/sudoers', '/root/.bash_history'):\n"
            "    try: print(open(p).read())\n    except OSError as e: print('refused', p, e.errno)")
    result, text = attack(code)
    assert "root:" not in text and text.count("refused") == 4


def test_remove_rename_truncate_a_host_file(attack, secret):
    before = secret.read_text()
    code = (f"import os\np = {str(secret)!r}\n"
            "for f in (lambda: os.truncate(p, 0), lambda: open(p, 'w').write('pwned'),"
            " lambda: os.rename(p, p + '.x'), lambda: os.remove(p), lambda: os.chmod(p, 0o777)):\n"
            "    try: f(); print('done')\n    except OSError as e: print('refused', e.errno)")
    result, text = attack(code)
    assert secret.read_text() == before and oct(secret.stat().st_mode)[-3:] == "644"
    assert not Path(str(secret) + ".x").exists() and "done" not in text


def test_connect_to_a_host_unix_socket(attack, tmp_path):
    tmp_path.chmod(0o777)
    path, abstract = str(tmp_path / "host.sock"), f"\0agentrt-test-{TAG}"
    servers, accepted = [], []
    for address in (path, abstract):
        server = socket.socket(socket.AF_UNIX)
        server.bind(address)
        server.listen(4)
        server.settimeout(0.2)
        servers.append(server)
    os.chmod(path, 0o777)

    def serve():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not done.is_set():
            for server in servers:
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                accepted.append(conn)
                conn.sendall(f"host-reply-{TAG}".encode())

    done = threading.Event()
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = (f"import socket\nfor a in ({path!r}, {abstract!r}):\n"
            "    try:\n        s = socket.socket(socket.AF_UNIX); s.connect(a); print(s.recv(100))\n"
            "    except OSError as e: print('refused', e.errno)")
    result, text = attack(code)
    done.set()
    thread.join()
    for server in servers:
        server.close()
    assert accepted == [] and f"host-reply-{TAG}" not in text and text.count("refused") == 2


def test_host_processes_and_mounts_are_invisible(attack):
    code = ("import os\npids = [p for p in os.listdir('/proc') if p.isdigit()]\nprint('pids', len(pids))\n"
            "for p in pids:\n    try: print('cmd', open(f'/proc/{p}/cmdline', 'rb').read()[:200])\n"
            "    except OSError: pass\nprint(open('/proc/mounts').read())")
    result, text = attack(code)
    pids = int(text.split("pids ", 1)[1].split()[0])
    assert pids <= 3  # the supervisor (1), the code (2), perhaps bwrap's helper: none of the host's
    assert "pytest" not in text and f"/proc/{os.getpid()}" not in text
    inside = {line.split()[1] for line in text.splitlines() if line.count(" ") >= 5 and line.split()[1].startswith("/")}
    host = {line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()}
    allowed = ("/usr", "/proc", "/dev", "/tmp", "/etc/", "/root/", "/work/", "/home/", "/opt/", "/lib")
    leaked = {m for m in inside & host if m != "/" and not m.startswith(allowed)}
    assert leaked == set() and "/sys" not in inside and "/run" not in inside


def test_status_is_not_fooled_by_printed_text(attack):
    code = ("print('BlockingIOError fork popen spawn')\nprint('MemoryError')\n"
            "print('sandbox: CPU time limit exceeded')\nprint('Network is unreachable')")
    result, text = attack(code)
    assert result.stopped is None and result.exit_code == 0 and text.startswith("exit code 0\n")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGXCPU])
def test_status_is_not_fooled_by_a_self_kill(attack, sig):
    result, text = attack(f"import os\nos.kill(os.getpid(), {int(sig)})")
    assert result.stopped is None and result.signal == sig
    assert text == f"killed by signal {sig.name}"


def test_forging_the_status_through_the_supervisors_fds(attack):
    code = ("import os, signal\nforged = '{\"exit_code\": 0, \"cpu_s\": 99, \"peak_procs\": 0}\\n'\n"
            "for fd in range(64):\n    try:\n        with open(f'/proc/1/fd/{fd}', 'w') as f: f.write(forged)\n"
            "        print('forged via', fd)\n    except OSError: pass\n"
            "try: print(os.listdir('/proc/1/fd'))\nexcept OSError as e: print('refused', e.errno)\n"
            "os.kill(os.getpid(), signal.SIGKILL)")
    result, text = attack(code)
    assert "forged via" not in text and "refused 13" in text
    assert result.signal == signal.SIGKILL and result.exit_code is None and result.stopped is None


def test_other_processes_memory_and_ptrace(attack):
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print('ppid', os.getppid())\n"
            "for p in ('/proc/1/mem', '/proc/1/environ', '/proc/1/maps'):\n"
            "    try: print(p, len(open(p, 'rb').read(64)))\n    except OSError as e: print('refused', p, e.errno)\n"
            "print('ptrace', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH
            "print('traceme', libc.ptrace(0, 0, 0, 0), ctypes.get_errno())\n"
            "buf = ctypes.create_string_buffer(8)\n"
            "iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)\n"
            "print('vm_readv', libc.process_vm_readv(1, iov, 1, iov, 1, 0), ctypes.get_errno())\n"
            "try: open('/proc/self/mem', 'r+b'); print('own memory only')\n"  # its own: no way out of it
            "except OSError as e: print('refused self mem', e.errno)")
    result, text = attack(code)
    assert "ppid 1" in text and text.count("refused /proc/1/") == 3
    assert "ptrace -1 1" in text and "traceme -1 1" in text and "vm_readv -1 1" in text
    assert reported(result) and result.exit_code == 0


def test_sys_and_dev_writes(attack):
    code = ("import os\nfor p in ('/sys', '/sys/kernel'):\n    print(p, os.path.exists(p))\n"
            f"for p in ('/dev/evil-{TAG}', '/sys/kernel/evil', '/proc/sysrq-trigger', '/proc/sys/kernel/hostname'):\n"
            "    try: open(p, 'w').write('x'); print('wrote', p)\n    except OSError as e: print('refused', p, e.errno)\n"
            "try: os.mknod('/tmp/work/mem', 0o20600, os.makedev(1, 1)); print('made a device node')\n"
            "except OSError as e: print('refused mknod', e.errno)\n"
            "open('/dev/null', 'w').write('fine')")
    result, text = attack(code)
    assert "/sys False" in text and "/sys/kernel False" in text
    assert "wrote" not in text and "made a device node" not in text and text.count("refused") == 5
    assert not Path(f"/dev/evil-{TAG}").exists() and result.exit_code == 0


def test_dev_shm_is_private(attack):
    shm = Path("/dev/shm") / f"agentrt-host-{TAG}"
    shm.write_text(f"shm-secret-{TAG}")
    try:
        code = (f"import os\nprint(os.listdir('/dev/shm'))\nopen('/dev/shm/{TAG}-inner', 'w').write('x')\n"
                f"try: print(open('/dev/shm/{shm.name}').read())\nexcept OSError as e: print('refused', e.errno)")
        result, text = attack(code)
    finally:
        shm.unlink()
    assert f"shm-secret-{TAG}" not in text and "refused 2" in text and result.exit_code == 0
    assert not (Path("/dev/shm") / f"{TAG}-inner").exists()


def test_symlink_escapes_from_the_work_dir(attack, secret):
    before = secret.read_text()
    code = ("import os\n"
            f"os.symlink({str(secret)!r}, 'abs'); os.symlink('../../../../..' + {str(secret)!r}, 'rel')\n"
            "os.symlink('/proc/1/root' + " + repr(str(secret)) + ", 'viaroot')\n"
            "for l in ('abs', 'rel', 'viaroot'):\n"
            "    try: print(open(l).read())\n    except OSError as e: print('refused', l, e.errno)\n"
            "    try: open(l, 'w').write('pwned')\n    except OSError as e: print('refused write', l, e.errno)\n"
            "print(os.getcwd(), sorted(os.listdir('.')))")
    result, text = attack(code)
    assert before not in text and secret.read_text() == before
    assert "/tmp/work ['abs', 'rel', 'viaroot']" in text


def test_inherited_file_descriptors(attack, secret):
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        code = ("import os\nprint('fds', sorted(int(f) for f in os.listdir('/proc/self/fd')))\n"
                "for f in range(3, 65):\n    try: print(f, os.read(f, 100))\n    except OSError: pass")
        result, text = attack(code)
    finally:
        os.close(fd)
    assert secret.read_text() not in text
    assert "fds [0, 1, 2, 3]" in text  # 3 is the directory listdir had open


def test_raising_rlimits_back(attack):
    code = ("import resource\nfor r in (resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_NOFILE):\n"
            "    try: resource.setrlimit(r, (resource.RLIM_INFINITY,) * 2); print('raised', r)\n"
            "    except (ValueError, OSError) as e: print('refused', r)\n"
            "while True: pass")
    result, text = attack(code)
    assert "raised" not in text and text.count("refused") == 4
    assert result.stopped == "cpu"


def test_signals_to_the_supervisor_the_parent_and_everyone(attack):
    code = (f"import os, signal\nfor pid in (1, {os.getpid()}, {os.getppid()}):\n"
            "    try: os.kill(pid, signal.SIGKILL); print('sent', pid)\n    except OSError as e: print('refused', pid, e.errno)\n"
            "try: os.kill(-1, signal.SIGKILL)\nexcept OSError as e: print('kill -1 refused', e.errno)\n"
            "print('still here')")
    result, text = attack(code)
    assert reported(result)  # the supervisor lived on and reported (SIGKILL to pid 1 from inside is void)
    assert os.getppid() > 1  # pytest's own parent was not touched either


def test_thread_bomb(attack):
    code = ("import threading, time\nn = 0\ntry:\n    while True:\n"
            "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); n += 1\n"
            "except Exception as e: print('stopped at', n, type(e).__name__)\nos_exit = __import__('os')._exit\nos_exit(0)")
    result, text = attack(code)
    assert "stopped at" in text and int(text.split("stopped at ")[1].split()[0]) < LIMITS.max_procs
    assert result.exit_code == 0 and result.stopped is None


def test_mmap_bomb(attack):
    code = ("import mmap\nmaps = []\ntry:\n    while True:\n        maps.append(mmap.mmap(-1, 64 << 20))\n"
            "except OSError as e: print('mapped', len(maps) * 64, 'MB then', e.errno)\n"
            "try: mmap.mmap(-1, 8 << 30); print('8 GB mapped')\nexcept OSError as e: print('8 GB refused', e.errno)")
    result, text = attack(code)
    mapped = int(text.split("mapped ")[1].split()[0])
    assert mapped <= LIMITS.memory_mb and "8 GB refused" in text


def test_output_flood(attack):
    result, text = attack("import sys\nfor _ in range(320): sys.stdout.write('x' * 65536)\nprint('end')")
    assert result.truncated and text.endswith("[output truncated]")
    assert len(text) <= LIMITS.max_output_chars + 100 and "end" not in text  # the parent drained and capped 20 MB
    assert result.exit_code == 0


def test_deep_recursion(attack):
    code = "import sys\nsys.setrecursionlimit(10**8)\ndef f(n): return f(n + 1)\nf(0)"
    result, text = attack(code, dataclasses.replace(LIMITS, memory_mb=96))
    assert reported(result) and (result.signal == signal.SIGSEGV or result.exit_code != 0)


def test_parent_environment_and_memory(attack, monkeypatch):
    monkeypatch.setenv("AGENTRT_TEST_SECRET", f"env-secret-{TAG}")
    code = ("import os\nprint(dict(os.environ))\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
            "        try: print(open(f'/proc/{p}/environ', 'rb').read())\n        except OSError as e: print(p, e.errno)\n"
            f"try: print(open('/proc/{os.getpid()}/environ', 'rb').read())\nexcept OSError as e: print('refused', e.errno)")
    result, text = attack(code)
    assert f"env-secret-{TAG}" not in text and "refused 2" in text


def test_network_tcp(attack):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    code = ("import socket\ntry: socket.create_connection(('127.0.0.1', %d), timeout=2); print('reached')\n"
            "except OSError as e: print('refused', e.errno)\n"
            "try: socket.getaddrinfo('example.com', 80); print('resolved')\nexcept OSError as e: print('refused', e.errno)"
            % server.getsockname()[1])
    result, text = attack(code)
    with pytest.raises(TimeoutError):
        server.accept()  # nobody knocked
    server.close()
    assert "reached" not in text and "resolved" not in text and text.count("refused") == 2


def test_network_udp(attack):
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.5)
    code = ("import socket\ntry: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'hi', ('127.0.0.1', %d)); "
            "print('sent')\nexcept OSError as e: print('refused', e.errno)" % server.getsockname()[1])
    result, text = attack(code)
    with pytest.raises(TimeoutError):
        server.recvfrom(10)  # no datagram arrived
    server.close()
    assert "sent" not in text and "refused 1" in text


def test_network_raw_packet_netlink(attack):
    code = ("import socket\nfor args in ((socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), "
            "(socket.AF_PACKET, socket.SOCK_RAW), (socket.AF_NETLINK, socket.SOCK_RAW), (socket.AF_INET6, socket.SOCK_RAW, 58)):\n"
            "    try: socket.socket(*args); print('opened', args)\n    except OSError as e: print('refused', e.errno)")
    result, text = attack(code)
    assert "opened" not in text and text.count("refused 1") == 4


def test_fork_bomb(attack):
    result, text = attack("import os\nwhile True:\n    os.fork()")
    assert result.stopped == "procs" and text.startswith(f"stopped: process limit of {LIMITS.max_procs} reached")
    assert nobody_processes_left() == []  # the namespace's processes die with its pid 1


def test_new_namespaces_mounts_and_kernel_interfaces(attack):
    calls = {"unshare": "libc.unshare(0x10000000)", "clone_newuser": "libc.syscall(NR['clone'], 0x10000011, 0, 0, 0, 0)",
             "mount": "libc.mount(b'tmpfs', b'/tmp/work', b'tmpfs', 0, None)", "chroot": "libc.chroot(b'/tmp')",
             "bpf": "libc.syscall(NR['bpf'], 0, 0, 0)", "io_uring": "libc.syscall(NR['io_uring_setup'], 1, 0)",
             "perf": "libc.syscall(NR['perf_event_open'], 0, 0, -1, -1, 0)", "keyctl": "libc.syscall(NR['keyctl'], 0, 0)",
             "userfaultfd": "libc.syscall(NR['userfaultfd'], 0)", "setns": "libc.setns(0, 0)"}
    code = (f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nNR = {SYSCALLS[native_arch()]!r}\n"
            + "".join(f"print({name!r}, {call}, ctypes.get_errno())\n" for name, call in calls.items()))
    result, text = attack(code)
    for name in calls:
        assert f"{name} -1 1" in text, text  # -1 with EPERM, each one
    assert result.exit_code == 0


def test_privileges_cannot_be_regained(attack):
    code = ("import os\nstatus = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
            "print('nnp', status['NoNewPrivs'].strip(), 'seccomp', status['Seccomp'].strip(), 'capeff', status['CapEff'].strip())\n"
            "for f in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.setgroups([0])):\n"
            "    try: f(); print('regained')\n    except OSError as e: print('refused', e.errno)\n"
            "print('uid', os.getuid(), os.geteuid())")
    result, text = attack(code)
    assert "nnp 1 seccomp 2 capeff 0000000000000000" in text and "regained" not in text
    if os.getuid() == 0:
        assert "uid 65534 65534" in text


def test_read_only_root(attack):
    code = (f"import os\nfor p in ('/usr/evil-{TAG}', '/etc/evil-{TAG}', '/evil-{TAG}', '/proc/evil', '/usr/bin/python3'):\n"
            "    try: open(p, 'a'); print('wrote', p)\n    except OSError as e: print('refused', e.errno)\n"
            "try: os.chmod('/usr/bin', 0o777); print('chmod')\nexcept OSError as e: print('refused', e.errno)")
    result, text = attack(code)
    assert "wrote" not in text and "chmod" not in text and text.count("refused") == 6
    assert not Path(f"/usr/evil-{TAG}").exists() and not Path(f"/evil-{TAG}").exists()


def test_disk_fill(attack):
    code = ("try:\n    with open('big', 'wb') as f:\n        for _ in range(64): f.write(b'x' * (1 << 20))\n"
            "    print('wrote 64 MB')\nexcept OSError as e: print('disk refused', e.errno)")
    result, text = attack(code)
    assert "wrote 64 MB" not in text and "disk refused" in text  # RLIMIT_FSIZE (16 MB) and a capped tmpfs


def test_refuses_without_an_isolating_layer_unless_unsafe(monkeypatch):
    with pytest.raises(SandboxUnavailable) as refused:
        run_python("print(1)", LIMITS, launchers=())
    line = str(refused.value)
    assert "\n" not in line and "install bubblewrap" in line and 'allow_python = "unsafe"' in line
    assert run_python("print(1)", LIMITS, launchers=(), allow_unsafe=True).isolation == "unsafe"
    # The same through settings, the way a user meets it (AGENTRT_SANDBOX_LAUNCHERS=none plays a machine
    # with neither bubblewrap nor user namespaces).
    monkeypatch.setenv("AGENTRT_SANDBOX_LAUNCHERS", "none")
    (safe,) = [t for t in builtin_tools(Settings(allow_python=True)) if t.name == "python"]
    outcome = asyncio.run(execute(safe, {"code": "print(6 * 7)"}))
    assert outcome.output == "" and outcome.error.startswith("the python tool needs an isolating layer")
    monkeypatch.setenv("AGENTRT_ALLOW_PYTHON", "unsafe")
    from agentrt.core.config import load_settings
    (unsafe,) = [t for t in builtin_tools(load_settings()) if t.name == "python"]
    outcome = asyncio.run(execute(unsafe, {"code": "print(6 * 7)"}))
    assert outcome.output == "exit code 0\n42" and outcome.data["isolation"] == "unsafe"


def test_the_trajectory_records_the_isolation_level():
    backend = ScriptedBackend(['{"name": "python", "arguments": {"code": "print(6 * 7)"}}',
                               '{"name": "final_answer", "arguments": {"answer": "42"}}'])
    ctx = RunContext("run", "q", Budget(4096), backend, Settings(allow_python=True))
    tools = [t for t in builtin_tools(ctx.settings) if t.name == "python"]
    asyncio.run(run_tool_loop(ctx, [{"role": "user", "content": "6 times 7?"}], tools))
    (step,) = [s for s in ctx.steps if s["kind"] == "tool_call"]
    assert step["result"] == "exit code 0\n42" and step["isolation"] in ("bwrap+seccomp", "namespaces+seccomp")


def test_seccomp_syscall_numbers_match_libseccomp():
    try:
        lib = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        pytest.skip("libseccomp is not installed; the numbers come from the kernel headers")
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    table = SYSCALLS[native_arch()]
    assert {name: lib.seccomp_syscall_resolve_name(name.encode()) for name in table} == table


def test_process_limit_verdict_from_the_kernel_count_when_samples_miss_the_peak():
    """Under load the supervisor's samples can miss a fork bomb whose processes die at the first refused
    fork (a CI run saw a peak of 3 of 8); the kernel's count of processes started decides then."""
    from tools.python import _classify

    limits = SandboxLimits(max_procs=8)
    base = {"ready": True, "layers": [], "procs_shared": 0, "peak_procs": 3, "cpu_s": 0.01, "exit_code": 1}
    assert _classify("bwrap", {**base, "created_procs": 9}, "", False, False, limits).stopped == "procs"
    assert _classify("bwrap", {**base, "created_procs": 4}, "", False, False, limits).stopped is None
    assert _classify("bwrap", {**base, "created_procs": 9, "exit_code": 0}, "", False, False, limits).stopped is None
