"""How the python sandbox is started: which launcher, with which view of the filesystem.

Launchers, in the order ``auto`` tries them:

* ``bwrap`` — bubblewrap (Debian package ``bubblewrap``), a small, widely used launcher: new pid, net,
  ipc, uts and cgroup namespaces (plus a user namespace when not started as root), a fresh /proc, a
  minimal /dev, a tmpfs root holding read-only binds of what the interpreter needs, remounted read-only.
* ``namespaces`` — our own: ``_sandbox_child.py`` unshares the same namespaces and builds the same root
  itself (tmpfs, read-only binds, fresh /proc, /dev nodes, ``pivot_root``, old root detached).

Both run ``_sandbox_child.py`` as pid 1 of the sandbox (the supervisor), which loads the seccomp filter
and forks the user's code as uid nobody. Under bwrap the supervisor also holds CAP_SYS_ADMIN for its
first steps (capping /tmp's inodes, /dev read-only: bubblewrap 0.8 has no option for either) and drops it
before it reads anything but its config. ``unsafe`` runs the same supervisor on the host, with rlimits,
the seccomp filter and an audit hook only; it is used only when the user opted into it.

The root holds only: /usr, the /bin /lib* /sbin links (or binds), the interpreter's prefix and
site-packages, /etc/ld.so.cache and /etc/localtime. No /run, /var, /home, host /tmp or /etc.
"""

from __future__ import annotations

import os
import shutil
import site
import sys

from agentrt.core.errors import ConfigError
from tools._sandbox_seccomp import OWN_PID, build_filter, unsafe_filter

LAUNCHERS = ("bwrap", "namespaces")
NOBODY = 65534
ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ENABLE_HINT = ("install bubblewrap (apt-get install bubblewrap) or enable unprivileged user namespaces "
               "(sysctl kernel.unprivileged_userns_clone=1 user.max_user_namespaces=10000), or set "
               'allow_python = "unsafe" (AGENTRT_ALLOW_PYTHON=unsafe) to run it without isolation')


class SandboxUnavailable(ConfigError):
    """No isolating layer works here and the user did not opt into ``allow_python = "unsafe"``."""


def interpreter() -> str:
    """The real interpreter binary (not a venv's symlink, which points outside what we bind)."""
    return os.path.realpath(sys.executable)


def _covered(path: str, dirs: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def root_view() -> dict[str, list]:
    """What the sandbox's root holds: ``links`` [(path, target)], ``dirs`` and ``files`` bound read-only,
    and ``site`` (site-packages dirs the code may import from, e.g. a venv's)."""
    links: list[tuple[str, str]] = []
    dirs = ["/usr"]
    for top in TOP_LINKS:
        if os.path.islink(top):
            links.append((top, os.readlink(top)))
        elif os.path.isdir(top):
            dirs.append(top)
    exe = interpreter()
    site_dirs = [p for p in site.getsitepackages() if os.path.isdir(p)]
    for extra in (sys.base_prefix, os.path.dirname(exe), *site_dirs):
        extra = os.path.realpath(extra)
        if extra != "/" and os.path.isdir(extra) and not _covered(extra, dirs):
            dirs.append(extra)
    files = [f for f in ETC_FILES if os.path.isfile(f)]
    return {"links": links, "dirs": dirs, "files": files, "site": [os.path.realpath(p) for p in site_dirs]}


def bwrap_argv(view: dict[str, list], disk_mb: int) -> list[str] | None:
    """The bubblewrap command line (up to, not including, the program), or None without bwrap."""
    exe = shutil.which("bwrap")
    if exe is None:
        return None
    argv = [exe, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--as-pid-1"]
    if os.getuid() == 0:
        # Root without a user namespace: the supervisor keeps only what it needs to switch the code to
        # nobody (bwrap run by root would otherwise keep every capability), and SYS_ADMIN until it has
        # remounted /tmp, /dev/shm and /dev (_sandbox_child.finish_bwrap_root).
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        # uid 0 of one user namespace (bwrap nests a second one for any other uid, or for
        # --disable-userns, and CAP_SYS_ADMIN there would not cover the mounts). New user namespaces
        # stay refused: the seccomp filter denies unshare, setns and clone with any CLONE_NEW* flag.
        argv += ["--unshare-user", "--uid", "0", "--gid", "0"]
    argv += ["--cap-add", "CAP_SYS_ADMIN"]
    for path, target in view["links"]:
        argv += ["--symlink", target, path]
    parents = sorted({os.path.dirname(p) for p in view["dirs"] + view["files"]} - {"/"})
    for parent in parents:  # bwrap would make missing parents 0700: nobody could not reach the binds
        for up in _ancestors(parent):
            argv += ["--perms", "0755", "--dir", up]
    for path in view["dirs"] + view["files"]:
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(disk_mb << 20), "--tmpfs", "/tmp",
             "--perms", "1777", "--size", str(disk_mb << 20), "--tmpfs", "/dev/shm",
             "--remount-ro", "/", "--chdir", "/tmp", "--"]
    return argv


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def child_config(launcher: str, limits, status_fd: int, root_dir: str, view: dict[str, list]) -> dict:
    """The JSON config ``_sandbox_child.py`` reads (argv[1])."""
    # No cgroup counts the memory a memfd or a SysV segment holds without a mapping (RLIMIT_AS does
    # not see it): the filter refuses those.
    seccomp = build_filter(refuse_unmapped_memory=True)
    unsafe = unsafe_filter(OWN_PID) if launcher == "unsafe" else None
    return {"launcher": launcher, "cpu_s": limits.cpu_s, "memory_mb": limits.memory_mb,
            "max_procs": limits.max_procs, "disk_mb": limits.disk_mb, "max_files": limits.max_files,
            "status_fd": status_fd, "root_dir": root_dir, "view": view,
            "seccomp": seccomp.hex() if seccomp else None, "unsafe_seccomp": unsafe.hex() if unsafe else None,
            "nobody": NOBODY, "bwrap_root": os.getuid() == 0}


def argv_for(launcher: str, view: dict[str, list], disk_mb: int, source: str, cfg_json: str) -> list[str] | None:
    """The full command line for ``launcher``; None when that launcher is not installed."""
    program = [interpreter(), "-I", "-B", "-u", "-c", source, cfg_json]  # -u: output survives a kill
    if launcher == "bwrap":
        prefix = bwrap_argv(view, disk_mb)
        return None if prefix is None else prefix + program
    return program


def level(launcher: str, layers: list[str]) -> str:
    """The isolation level a result records: ``bwrap+seccomp``, ``namespaces+seccomp``, ``unsafe``."""
    if launcher == "unsafe":
        return "unsafe"
    return f"{launcher}+seccomp" if "seccomp" in layers else launcher
