"""The child side of the python sandbox. Run as ``python -I -B _sandbox_child.py CONFIG_JSON``.

Stdlib only, run as a script (never imported by the parent). The code to run arrives on stdin; a
one-line JSON status goes to the fd named in the config (the parent reads it after the run).

Layers, strongest first, each applied when the kernel allows it:

1. namespaces: ``unshare(NEWNET | NEWNS | NEWPID [| NEWUSER when not root])``. The new network
   namespace has only a downed loopback: no connection can leave. The mount namespace gets a
   read-only view of every mount (``mount_setattr(AT_RECURSIVE, RDONLY)``) and fresh size-capped
   tmpfs on /tmp, /var/tmp, /dev/shm, /run/lock, so nothing the code writes survives it. The code
   runs as pid 1 of a new pid namespace (with a parent-death signal), so killing it kills every
   process it forked.
2. when started as root: drop to uid/gid 65534 (nobody), because the kernel ignores RLIMIT_NPROC
   for root.
3. rlimits: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_CORE=0, RLIMIT_NOFILE.
4. fallback, whenever the private filesystem view could not be built (namespaces refused, not
   Linux): a ``sys.addaudithook`` that refuses sockets, process creation, ctypes and writes outside
   the work directory. Python-level only; reported in ``layers`` as "audit-hook".
"""

import ctypes
import json
import linecache
import os
import resource
import signal
import sys
import traceback

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 0x1000, 0x4000, 1 << 18
AT_RECURSIVE, MOUNT_ATTR_RDONLY, SYS_MOUNT_SETATTR = 0x8000, 1, 442
PR_SET_PDEATHSIG = 1
NOBODY = 65534
WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def isolate(cfg, libc, layers):
    """Enter new namespaces and build the filesystem view, appending to ``layers``; returns
    (layers, work_dir), work_dir None when the kernel refused."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWPID | (0 if uid == 0 else CLONE_NEWUSER)
    if libc.unshare(flags) != 0:
        return layers, None
    if uid != 0:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
        layers.append("userns")
    layers += ["netns", "pidns"]
    libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    opts = f"size={cfg['disk_mb']}m,mode=1777".encode()
    mounted = [d for d in WRITABLE_DIRS if os.path.isdir(d)
               and libc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) == 0]
    if "/tmp" not in mounted:
        return layers, None
    layers.append("private-tmp")
    if uid == 0:
        expose_sys_path(libc)
    # Everything read-only, recursively; then the fresh tmpfs mounts writable again.
    if _setattr(libc, b"/", AT_RECURSIVE, MOUNT_ATTR_RDONLY, 0) == 0:
        layers.append("readonly-root")
        for d in mounted:
            _setattr(libc, d.encode(), 0, 0, MOUNT_ATTR_RDONLY)
    work = "/tmp/work"
    os.mkdir(work, 0o700)
    return layers, work


def _setattr(libc, path, flags, attr_set, attr_clr):
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    return libc.syscall(SYS_MOUNT_SETATTR, -100, path, flags, ctypes.byref(attr), ctypes.sizeof(attr))


def expose_sys_path(libc):
    """The interpreter may live where ``nobody`` cannot read (e.g. under /root): bind every sys.path
    directory under /tmp/.sys (made read-only with the rest) so imports keep working after the drop."""
    os.mkdir("/tmp/.sys", 0o755)
    moved = {}
    for i, path in enumerate(sys.path):
        if path and os.path.isdir(path):
            target = f"/tmp/.sys/{i}"
            os.mkdir(target, 0o755)
            if libc.mount(path.encode(), target.encode(), None, MS_BIND | MS_REC, None) == 0:
                moved[path.rstrip("/") + "/"] = target + "/"
                sys.path[i] = target
    sys.path_importer_cache.clear()
    # Packages imported at startup (encodings, ...) find their submodules through __path__: move it too.
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            for j, entry in enumerate(search):
                for old, new in moved.items():
                    if (entry + "/").startswith(old):
                        search[j] = new + entry[len(old):]
                        break


def drop_root(work, layers):
    """The kernel exempts root from RLIMIT_NPROC: run the code as nobody."""
    if os.getuid() != 0 or "userns" in layers or "private-tmp" not in layers:
        return  # without our mount namespace, nobody could not import the stdlib: stay (audit hook)
    os.chown(work, NOBODY, NOBODY)
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    layers.append("uid-nobody")


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
    """Fallback when namespaces are refused: refuse sockets, new processes, writes outside ``work``."""
    blocked_prefixes = ("socket.", "subprocess.", "os.fork", "os.exec", "os.spawn", "os.posix_spawn",
                        "os.system", "pty.", "ctypes.")
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def hook(event, args):
        if event.startswith(blocked_prefixes) and event != "socket.gethostname":
            what = "network access" if event.startswith("socket.") else f"{event}"
            raise PermissionError(f"sandbox: {what} is disabled in the python tool")
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
    """Run the user's code as ``__main__``; a traceback is printed, the exit code returned."""
    name = "<python-tool>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # source lines in tracebacks
    try:
        exec(compile(code, name, "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except MemoryError:
        sys.stdout.flush()
        print("MemoryError: the python tool's memory limit was reached", file=sys.stderr)
        return 1
    except BaseException as e:
        sys.stdout.flush()
        # Hide this file's frame: the model should see its own code only.
        traceback.print_exception(type(e), e, e.__traceback__.tb_next if e.__traceback__ else None)
        return 1
    return 0


def _finish(code):
    status = run_code(code)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _on_xcpu(signum, frame):
    # pid 1 of a namespace ignores signals it has no handler for, SIGXCPU included: say it, then exit.
    os.write(2, b"\nsandbox: CPU time limit exceeded\n")
    os._exit(128 + signum)


def main():
    cfg = json.loads(sys.argv[1])
    status_fd = cfg["status_fd"]
    code = sys.stdin.read()
    libc = ctypes.CDLL(None, use_errno=True)
    layers, work = [], None
    if cfg.get("namespaces", True) and sys.platform.startswith("linux"):
        try:
            layers, work = isolate(cfg, libc, layers)
        except (AttributeError, OSError) as e:  # a libc without unshare, or a half-built view
            if layers:  # namespaces entered but the view is incomplete: do not run the code
                sys.exit(f"sandbox: could not set up isolation ({e})")
    if work is None:  # no private filesystem view: the parent made a temp dir for us
        work = os.path.realpath(cfg["fallback_dir"])
    # Without the read-only view and private tmp, the audit hook guards sockets, processes, writes.
    guarded = "private-tmp" not in layers
    os.chdir(work)
    drop_root(work, layers)
    for key in ("HOME", "TMPDIR", "TMP", "TEMP"):
        os.environ[key] = work
    set_limits(cfg)
    layers.append("rlimits")
    if guarded:
        layers.append("audit-hook")
    status = {"layers": layers}
    os.write(status_fd, (json.dumps(status) + "\n").encode())
    sys.stdout.flush()
    # In a new pid namespace our first child is its pid 1: everything it forks dies with it.
    pid = os.fork() if "pidns" in layers else 0
    if pid == 0:
        if "pidns" in layers:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        os.close(status_fd)
        signal.signal(signal.SIGXCPU, _on_xcpu)
        if guarded:
            audit_guard(work)
        _finish(code)
    _, wstatus = os.waitpid(pid, 0)
    if os.WIFSIGNALED(wstatus):
        status["signal"] = os.WTERMSIG(wstatus)
    else:
        status["exit_code"] = os.WEXITSTATUS(wstatus)
    os.write(status_fd, (json.dumps(status) + "\n").encode())
    os._exit(0)


if __name__ == "__main__":
    main()
