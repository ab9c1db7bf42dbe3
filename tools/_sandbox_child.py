"""The python sandbox's supervisor. Run as ``python -I -B -c SOURCE CONFIG_JSON`` (never imported).

Stdlib only. The code to run arrives on stdin; status lines (JSON) go to the fd named in the config,
which only this supervisor holds: the user's code runs in a forked child that closes it (and every
other inherited fd) first, so nothing the code does can write or forge its own status.

Launchers (``cfg["launcher"]``, see ``_sandbox_launch.py``):

* ``bwrap``: bubblewrap built the sandbox and runs us as its pid 1 (``--as-pid-1``).
* ``namespaces``: we build it: ``unshare(NEWNS|NEWPID|NEWNET|NEWIPC|NEWUTS|NEWCGROUP [|NEWUSER])``, fork
  (the child is pid 1 of the new pid namespace), a tmpfs root with read-only binds, a fresh /proc, /dev
  nodes, size-capped /tmp and /dev/shm, ``pivot_root`` into it, the old root detached, root read-only.
* ``unsafe``: no isolation of the filesystem, processes or network namespace (the user opted in).

Then the supervisor (pid 1 of the sandbox): every signal but SIGCHLD (which only wakes its loop) at its
default disposition (pid 1 of a namespace drops those its processes send it, whatever their uid),
no_new_privs, the seccomp filter built by the parent (inherited by everything it forks; it refuses
kill/prlimit/pidfd_open aimed at pid 1), non-dumpable (no /proc/1/mem for the code), reports ``ready``,
forks the code's process and waits. That process: a session of its own (``kill(0)`` does not reach pid
1), closes fds, the highest OOM score, rlimits (CPU, address space, processes, file size, no core, 64
fds), drops to uid nobody (when root) and every capability, runs the code. Under ``bwrap`` the supervisor first caps the inodes of /tmp and /dev/shm and makes /dev
read-only (bubblewrap has no option for either), then gives up CAP_SYS_ADMIN, which it held for that only.
``unsafe`` adds, in the code's process: Landlock (writes only beneath the work dir) where the kernel has it,
a second seccomp filter (no exec, no new process, no signal or prlimit but to itself, no change to any
file's mode, owner, times, xattrs or flags) and an audit hook.

The supervisor reports the code's wait status, its CPU time (rusage) and the peak number of processes
it ran: the parent classifies from those only.
"""

import ctypes
import json
import linecache
import os
import resource
import select
import signal
import sys
import traceback

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH, SYS_PIVOT_ROOT = 0x1000, 0x4000, 1 << 18, 2, {"x86_64": 155, "aarch64": 41}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 1, 4, 24, 38, 22
SECCOMP_MODE_FILTER = 2
OWN_PID = 0x7FFFFFF0  # _sandbox_seccomp.OWN_PID: the placeholder the unsafe filter carries for the code's pid
CAP_SETGID, CAP_SETUID = 6, 7
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446  # same on both ABIs
MEMORY_EXIT = 86  # the code's process ran out of its address space (MemoryError); see tools/python.py
DEV_NODES = ("null", "zero", "full", "random", "urandom")


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def report(fd, status):
    os.write(fd, (json.dumps(status) + "\n").encode())


# -- our own namespaces ------------------------------------------------------------------------------

def enter_namespaces(cfg, libc, status_fd):
    """Unshare, fork; returns in the child, pid 1 of the new pid namespace. The first process waits for
    it and exits (it stays outside the new pid namespace, holding nothing the sandbox needs)."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
    _check(libc.unshare(flags | (0 if uid == 0 else CLONE_NEWUSER)), "unshare")
    if uid != 0:  # map ourselves to root of the new user namespace (capabilities there only)
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    pid = os.fork()
    if pid:
        os.close(status_fd)
        for fd in (0, 1, 2):  # the sandbox's output pipe must close when the sandbox ends
            os.close(fd)
        _, wstatus = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(wstatus) & 0xFF)
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    build_root(cfg, libc)


def _mount(libc, src, dst, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {dst}")


def _bind_ro(libc, src, dst, is_dir):
    if is_dir:
        os.makedirs(dst, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), 0o755, exist_ok=True)
        open(dst, "w").close()
    _mount(libc, src, dst, None, MS_BIND | MS_REC)
    # A bind ignores MS_RDONLY on creation; the remount makes it read-only.
    _mount(libc, None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def build_root(cfg, libc):
    """The new root: tmpfs with read-only binds of ``cfg["view"]``, fresh /proc, /dev, /tmp; pivot."""
    os.umask(0o022)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount reaches the host
    root, view, tmp_opts = cfg["root_dir"], cfg["view"], f"size={cfg['disk_mb']}m,mode=1777"
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=755")
    for path, target in view["links"]:
        os.symlink(target, root + path)
    for path in view["dirs"]:
        _bind_ro(libc, path, root + path, True)
    for path in view["files"]:
        _bind_ro(libc, path, root + path, False)
    os.mkdir(root + "/proc", 0o555)
    _mount(libc, "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this pid namespace's
    os.mkdir(root + "/dev", 0o755)
    _mount(libc, "tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
    for node in DEV_NODES:
        open(f"{root}/dev/{node}", "w").close()
        _mount(libc, f"/dev/{node}", f"{root}/dev/{node}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{root}/dev/{name}")
    for path in ("/tmp", "/dev/shm"):
        os.makedirs(root + path, 0o1777, exist_ok=True)
        _mount(libc, "tmpfs", root + path, "tmpfs", MS_NOSUID | MS_NODEV, f"{tmp_opts},nr_inodes={cfg['max_files']}")
    os.chdir(root)
    os.mkdir(".old-root", 0o700)
    arch = os.uname().machine
    _check(libc.syscall(SYS_PIVOT_ROOT[arch], b".", b".old-root"), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old-root", MNT_DETACH), "umount old root")
    os.rmdir("/.old-root")
    for path in ("/dev", "/"):
        _mount(libc, None, path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | (MS_NOEXEC if path == "/dev" else 0))


def finish_bwrap_root(cfg, libc):
    """Under bwrap: cap the inodes of /tmp and /dev/shm (each empty file costs kernel memory the tmpfs
    size does not count) and make /dev read-only, then drop CAP_SYS_ADMIN, held for this only."""
    for path in ("/tmp", "/dev/shm"):
        _mount(libc, None, path, None, MS_REMOUNT | MS_NOSUID | MS_NODEV, f"nr_inodes={cfg['max_files']}")
    _mount(libc, None, "/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    keep = (1 << CAP_SETUID | 1 << CAP_SETGID) if os.getuid() == 0 and cfg["bwrap_root"] else 0
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)(keep, keep, 0, 0, 0, 0)  # effective, permitted, inheritable (low words)
    _check(libc.capset(header, data), "capset")


# -- the supervisor ---------------------------------------------------------------------------------

def load_seccomp(libc, program_hex):
    """no_new_privs, then the parent's filter: this process and everything it forks."""
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    if not program_hex:
        return False
    load_filter(libc, bytes.fromhex(program_hex))
    return True


def _own_pid_filter(program_hex, pid):
    """The unsafe filter with the code's pid in place of the placeholder the parent built it with."""
    if not program_hex:
        raise OSError("no seccomp filter for this ABI: the unsafe mode cannot refuse exec and fork")
    program = bytearray.fromhex(program_hex)
    for at in range(0, len(program), 8):  # struct sock_filter: u16 code, u8 jt, u8 jf, u32 k
        if int.from_bytes(program[at + 4:at + 8], "little") == OWN_PID:
            program[at + 4:at + 8] = pid.to_bytes(4, "little")
    return bytes(program)


def load_filter(libc, program_bytes):
    """Load one classic-BPF filter on this thread (filters stack; none can be removed)."""
    program = ctypes.create_string_buffer(program_bytes)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(program.raw) // 8, ctypes.addressof(program))  # raw has a trailing NUL
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


# Landlock filesystem rights (linux/landlock.h): those that write, by the ABI version that added them.
_LL_WRITE = {1: 0x1FF2, 2: 1 << 13, 3: 1 << 14}  # WRITE_FILE, REMOVE_*, MAKE_* | REFER | TRUNCATE
_LL_FILE_WRITE = (1 << 1) | (1 << 14)  # WRITE_FILE | TRUNCATE: the rights that apply to a single file


def landlock_abi(libc):
    """The kernel's Landlock ABI version, 0 where it has none (or it is disabled)."""
    version = libc.syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, version)


def landlock_writes_beneath(libc, work):
    """Refuse, in the kernel, every write, creation, removal or rename outside ``work`` (/dev/null
    excepted) for this process and what it starts. Reads stay as they were."""
    abi = landlock_abi(libc)
    handled = sum(bits for version, bits in _LL_WRITE.items() if version <= abi)
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr, its first field (ABI 1 size)
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        _check(-1, "landlock_create_ruleset")
    try:
        for path, rights in ((work, handled), (os.devnull, handled & _LL_FILE_WRITE)):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            rule = (ctypes.c_uint8 * 12)()  # struct landlock_path_beneath_attr: u64 allowed, s32 fd (packed)
            rule[:8] = list(rights.to_bytes(8, "little"))
            rule[8:] = list(fd.to_bytes(4, "little", signed=True))
            ret = libc.syscall(LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule),
                               ctypes.c_uint32(0))
            os.close(fd)
            _check(0 if ret == 0 else -1, f"landlock_add_rule {path}")
        _check(libc.syscall(LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)), "landlock")
    finally:
        os.close(ruleset)


def _count_processes():
    try:
        return sum(1 for name in os.listdir("/proc") if name.isdigit() and name != "1")
    except OSError:
        return 0


def _created_processes():
    """Processes started in this pid namespace after the supervisor (the kernel's last pid handed out
    minus ours): trusted, and unlike a sampled count it cannot miss a process that lived a few microseconds."""
    try:
        with open("/proc/sys/kernel/ns_last_pid") as f:
            return max(0, int(f.read()) - os.getpid())
    except (OSError, ValueError):
        return 0


def supervise(cfg, libc, code, status_fd, layers):
    """Fork the code's process, wait for it, report; never returns."""
    # Python handles SIGINT (KeyboardInterrupt): pid 1 of a namespace receives from inside it only the
    # signals it handles, so with every disposition at its default nothing the code sends ends us.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if load_seccomp(libc, cfg["seccomp"]):
        layers.append("seccomp")
    layers.append("no-new-privs")
    _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(DUMPABLE)")
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wake the loop below as soon as a child ends
    # Processes of the code's uid that RLIMIT_NPROC counts besides the code's own: in a user namespace
    # we share its uid (the supervisor, and with our namespaces the first process too).
    shared = (2 if cfg["launcher"] == "namespaces" else 1) if "userns" in layers else 0
    report(status_fd, {"ready": True, "layers": layers, "procs_shared": shared})
    pid = os.fork()
    if pid == 0:
        run_user_code(cfg, libc, code, status_fd, layers)
    in_pidns = cfg["launcher"] != "unsafe"
    peak, final = 0, None
    while final is None:
        while True:  # reap: the code's process, and (as pid 1) any orphan the code left behind
            try:
                done, wstatus, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                done = 0
            if done == 0:
                break
            if done == pid:
                final = {"cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}
                if os.WIFSIGNALED(wstatus):
                    final["signal"] = os.WTERMSIG(wstatus)
                else:
                    final["exit_code"] = os.WEXITSTATUS(wstatus)
        count = _count_processes() if in_pidns else 0
        if count > peak:
            peak = count
            report(status_fd, {"peak_procs": peak})
        if final is None:
            select.select([wake_r], [], [], 0.02)
            try:
                os.read(wake_r, 512)
            except BlockingIOError:
                pass
    # Processes the code left behind (a fork bomb's) are still churning: a few more samples catch the
    # peak that the code's own exit may have raced.
    for _ in range(5 if in_pidns and _count_processes() > 0 else 0):
        peak = max(peak, _count_processes())
        select.select([], [], [], 0.01)
    final["peak_procs"] = peak
    final["created_procs"] = _created_processes() if in_pidns else 0
    report(status_fd, final)
    os._exit(0)  # as pid 1, our exit ends every process the code left running


def _drop_privileges(cfg, libc, layers):
    if "uid-nobody" in layers:  # root, in a sandbox: nobody can still import from the read-only root
        for cap in range(64):  # the bounding set, so nothing exec'd later can regain a capability
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        os.setgroups([])
        os.setgid(cfg["nobody"])
        os.setuid(cfg["nobody"])  # clears every capability (all uids non-zero now)
    else:  # a user namespace (or unsafe as a normal user): keep the uid, drop capabilities
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
        data = (ctypes.c_uint32 * 6)()
        _check(libc.capset(header, data), "capset")


def run_user_code(cfg, libc, code, status_fd, layers):
    """In the code's process: close what it must not have, limit, drop privileges, run. Never returns."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if cfg["launcher"] == "unsafe":  # no pid namespace: stay in the group the parent kills at its deadline
            _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        else:
            os.setsid()  # its own process group: kill(0, ...) reaches the code's processes only
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.closerange(3, 1 << 16)  # the status fd, the wake-up pipe, anything a launcher passed on
        with open("/proc/self/oom_score_adj", "w") as f:  # under host memory pressure, the code goes first
            f.write("1000")
        set_limits(cfg)
        _drop_privileges(cfg, libc, layers)
        work = cfg["root_dir"] if cfg["launcher"] == "unsafe" else "/tmp/work"
        os.makedirs(work, 0o700, exist_ok=True)
        os.chdir(work)
        for key in ("HOME", "TMPDIR", "TMP", "TEMP"):
            os.environ[key] = work
        sys.path.extend(p for p in cfg["view"]["site"] if p not in sys.path)
        if cfg["launcher"] == "unsafe":
            if "landlock" in layers:
                landlock_writes_beneath(libc, os.path.realpath(work))
            load_filter(libc, _own_pid_filter(cfg["unsafe_seccomp"], os.getpid()))
            audit_guard(os.path.realpath(work))
    except BaseException as e:  # never run the code half-isolated
        os.write(2, f"sandbox: could not isolate the code ({e})\n".encode())
        os._exit(71)
    os._exit(run_code(code))


def set_limits(cfg):
    cpu = int(cfg["cpu_s"])
    limits = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (cfg["memory_mb"] << 20,) * 2),
        (resource.RLIMIT_NPROC, (cfg["max_procs"],) * 2),
        (resource.RLIMIT_FSIZE, (cfg["disk_mb"] << 20,) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NOFILE, (64, 64)),
    ]
    for which, value in limits:
        resource.setrlimit(which, value)
    # Past RLIMIT_FSIZE, a write should fail with an error the code sees, not kill the process.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def audit_guard(work):
    """``unsafe`` only: refuse new processes, writes outside ``work`` and metadata changes anywhere at the
    Python level too, with a message that names the rule. Not a boundary (ctypes or a C extension gets
    around it): the kernel's layers are the seccomp filters (no socket, exec, new process, signal to
    another, metadata change) and Landlock."""
    blocked_prefixes = ("subprocess.", "os.fork", "os.exec", "os.spawn", "os.posix_spawn", "os.system", "pty.",
                        "ctypes.")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    metadata_events = ("os.chmod", "os.chown", "os.utime", "os.setxattr", "os.removexattr")

    def hook(event, args):
        if event.startswith(blocked_prefixes):
            raise PermissionError(f"sandbox: {event} is disabled in the python tool")
        if event in metadata_events:  # anywhere: the kernel (unsafe seccomp) refuses them in the work dir too
            raise PermissionError(f"sandbox: {event} (file metadata) is disabled in the python tool's unsafe mode")
        if event in ("os.remove", "os.rename", "os.rmdir", "os.truncate", "os.symlink", "os.link", "os.mkdir"):
            paths = [a for a in args if isinstance(a, (str, bytes))]
            if any(not os.path.realpath(os.fsdecode(p)).startswith(work + os.sep) for p in paths):
                raise PermissionError(f"sandbox: {event} outside the work directory is disabled")
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & write_flags)
            if writing and isinstance(path, (str, bytes)):
                full = os.path.realpath(os.fsdecode(path))
                if not (full == os.devnull or full.startswith(work + os.sep)):
                    raise PermissionError(f"sandbox: writing outside the work directory is disabled ({full})")

    sys.addaudithook(hook)


def run_code(code):
    """Run the user's code as ``__main__``; a traceback is printed, the exit status returned."""
    name = "<python-tool>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # source lines in tracebacks
    try:
        exec(compile(code, name, "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except MemoryError:
        sys.stdout.flush()
        print("MemoryError: the python tool's memory limit was reached", file=sys.stderr)
        return MEMORY_EXIT
    except BaseException as e:
        sys.stdout.flush()
        # Hide this file's frame: the model should see its own code only.
        traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


def main():
    cfg = json.loads(sys.argv[1])
    status_fd = cfg["status_fd"]
    code = sys.stdin.read()
    libc = _libc()
    launcher = cfg["launcher"]
    layers = []
    try:
        if launcher == "namespaces":
            userns = os.getuid() != 0
            enter_namespaces(cfg, libc, status_fd)
            layers += ["userns"] * userns + ["pidns", "netns", "ipcns", "mountns", "fresh-proc",
                                             "readonly-root", "private-tmp"]
        elif launcher == "bwrap":
            if os.getpid() != 1:
                raise OSError("bwrap did not run the supervisor as pid 1")
            finish_bwrap_root(cfg, libc)
            layers += ["userns"] * (not cfg["bwrap_root"]) + ["pidns", "netns", "ipcns", "mountns", "fresh-proc",
                                                              "readonly-root", "private-tmp"]
        if launcher != "unsafe":
            layers.append("tmp-inodes")  # /tmp and /dev/shm: at most max_files inodes each
        layers.append("no-memfd")  # no cgroup layer: memory held without a mapping is refused instead
        layers.append("uid-nobody" if os.getuid() == 0 and "userns" not in layers and launcher != "unsafe"
                      else "no-capabilities")
        layers.append("rlimits")
        if launcher == "unsafe":
            if landlock_abi(libc) > 0:
                layers.append("landlock")
            layers += ["unsafe-seccomp", "audit-hook"]
        supervise(cfg, libc, code, status_fd, layers)
    except OSError as e:
        report(status_fd, {"error": f"{launcher}: {e}"})
        os._exit(70)


if __name__ == "__main__":
    main()
