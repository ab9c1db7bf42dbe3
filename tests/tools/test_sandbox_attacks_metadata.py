"""Attacks of the third round (issue #56) on the python tool's ``unsafe`` mode: with its audit hook
disarmed, code changed the metadata of files outside its work dir (chmod, utime, setxattr: Landlock does
not cover them), down to the setuid bit of a root-owned binary. Each attack is asserted the way a user
would check it: the file's mode, owner, times, xattrs and flags are what they were, and the code got EPERM.

What holds: the unsafe mode's second seccomp filter refuses every syscall that changes a file's metadata
(the chmod, chown, utime and xattr families, ``file_setattr`` and the attribute-setting ioctls), path or
fd alike, inside the work dir too (the kernel cannot tell inside from outside without a path)."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import struct
from pathlib import Path

from tools._sandbox_seccomp import native_arch
from tools.python import run_python

from test_sandbox_attacks import LIMITS, TAG

# The audit hook's closure is writable: emptying its prefixes and the work dir it compares with turns
# it off (the same disarming as test_sandbox_attacks_reach.test_unsafe_mode_holds_with_its_audit_hook_defeated).
DISARM = ("import gc\n"
          "for f in gc.get_objects():\n"
          "    if getattr(f, '__name__', '') == 'hook' and getattr(f, '__closure__', None):\n"
          "        for cell in f.__closure__:\n"
          "            if isinstance(cell.cell_contents, str): cell.cell_contents = ''\n"
          "            elif isinstance(cell.cell_contents, tuple): cell.cell_contents = ('none',)\n"
          "            elif isinstance(cell.cell_contents, frozenset): cell.cell_contents = frozenset()\n"
          "            elif isinstance(cell.cell_contents, int): cell.cell_contents = 0\n")

FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_NODUMP_FL, FS_XFLAG_NODUMP = 0x80086601, 0x40086602, 0x40, 0x80
SETXATTRAT, REMOVEXATTRAT, FILE_SETATTR = 463, 466, 469  # the same number on x86_64 and aarch64

# Every way the code tries to change the metadata of the file at ``p`` (an fd ``fd`` is open on it
# read-only), printed as "NAME done" or "NAME refused ERRNO".
ATTEMPTS = """
import ctypes, fcntl, os, struct
libc = ctypes.CDLL(None, use_errno=True)

def raw(nr, *args):
    if libc.syscall(nr, *args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))

class XattrArgs(ctypes.Structure):
    _fields_ = [("value", ctypes.c_uint64), ("size", ctypes.c_uint32), ("flags", ctypes.c_uint32)]

ONE = ctypes.create_string_buffer(b"1")  # module-level: the kernel reads it through a bare address
XA = XattrArgs(ctypes.addressof(ONE), 1, 0)
FATTR = ctypes.create_string_buffer(struct.pack("<IIIII4x", %(xflag)d, 0, 0, 0, 0))  # struct file_attr

def attempts(p, fd, tag):
    return [
        ("chmod-setuid", lambda: os.chmod(p, 0o4755)),
        ("chmod", lambda: os.chmod(p, 0o777)),
        ("fchmodat2", lambda: raw(452, -100, p.encode(), 0o4777, 0)),
        ("fchmod", lambda: os.fchmod(fd, 0o4777)),
        ("chmod-proc-fd", lambda: os.chmod(f"/proc/self/fd/{fd}", 0o6777)),
        ("chown", lambda: os.chown(p, -1, os.getgid())),
        ("fchown", lambda: os.fchown(fd, -1, os.getgid())),
        ("utime", lambda: os.utime(p, (0, 0))),
        ("utime-now", lambda: os.utime(p)),
        ("futimens", lambda: os.utime(fd, (1, 1))),
        ("setxattr", lambda: os.setxattr(p, "user.pwned-" + tag, b"1")),
        ("lsetxattr", lambda: os.setxattr(p, "user.pwned-" + tag, b"1", follow_symlinks=False)),
        ("fsetxattr", lambda: os.setxattr(fd, "user.pwned-" + tag, b"1")),
        ("removexattr", lambda: os.removexattr(p, "user.keep")),
        ("fremovexattr", lambda: os.removexattr(fd, "user.keep")),
        ("setxattrat", lambda: raw(%(setxattrat)d, -100, p.encode(), 0, ("user.pwned-" + tag).encode(),
                                   ctypes.byref(XA), ctypes.c_size_t(16))),
        ("removexattrat", lambda: raw(%(removexattrat)d, -100, p.encode(), 0, b"user.keep")),
        ("chattr", lambda: fcntl.ioctl(fd, %(setflags)d, struct.pack("l", %(nodump)d))),
        ("chattr-high-bits", lambda: raw(%(ioctl)d, fd, ctypes.c_uint64(1 << 32 | %(setflags)d),  # cmd is 32-bit
                                         ctypes.byref(ctypes.c_long(%(nodump)d)))),
        ("file_setattr", lambda: raw(%(file_setattr)d, -100, p.encode(), FATTR, ctypes.c_size_t(24), 0)),
    ]

def attack(p, tag):
    fd = os.open(p, os.O_RDONLY)
    for name, f in attempts(p, fd, tag):
        try: f(); print(tag, name, "done")
        except OSError as e: print(tag, name, "refused", e.errno)
    os.close(fd)
""" % {"xflag": FS_XFLAG_NODUMP, "setxattrat": SETXATTRAT, "removexattrat": REMOVEXATTRAT,
       "setflags": FS_IOC_SETFLAGS, "nodump": FS_NODUMP_FL, "file_setattr": FILE_SETATTR,
       "ioctl": {"x86_64": 16, "aarch64": 29}[native_arch()]}
NAMES = ("chmod-setuid", "chmod", "fchmodat2", "fchmod", "chmod-proc-fd", "chown", "fchown", "utime", "utime-now",
         "futimens", "setxattr", "lsetxattr", "fsetxattr", "removexattr", "fremovexattr", "setxattrat",
         "removexattrat", "chattr", "chattr-high-bits", "file_setattr")


def _landlock_abi() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return max(0, libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))  # ..._VERSION


def _snapshot(path: Path) -> dict:
    """Everything of a file's metadata the attacks aim at; ctime moves on any change to the inode."""
    st = os.lstat(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 4))[0]
    except OSError:  # a file system without inode flags
        flags = None
    finally:
        os.close(fd)
    xattrs = {name: os.getxattr(path, name) for name in os.listxattr(path)}
    return {"mode": oct(st.st_mode), "uid": st.st_uid, "gid": st.st_gid, "mtime": st.st_mtime_ns,
            "ctime": st.st_ctime_ns, "nlink": st.st_nlink, "xattrs": xattrs, "flags": flags}


def _targets(tmp_path: Path) -> list[Path]:
    """A plain file and a copy of a binary, both the test's (root's, as CI runs), outside any work dir,
    with an xattr to remove, a group the code's gid is not, and an mtime the code's utime would move."""
    tmp_path.chmod(0o755)
    plain, binary = tmp_path / f"owned-{TAG}.txt", tmp_path / f"true-{TAG}"
    plain.write_text("plain")
    plain.chmod(0o644)
    shutil.copyfile("/bin/true", binary)
    binary.chmod(0o755)
    for path in (plain, binary):
        try:
            os.setxattr(path, "user.keep", b"keep")
        except OSError as e:  # a file system without user xattrs (tmpfs before Linux 6.6): nothing to remove
            assert e.errno == errno.EOPNOTSUPP, e
        if os.getuid() == 0:
            os.chown(path, 0, 65534)  # an owner may chgrp to a group it is in, without CAP_CHOWN
        os.utime(path, (1_000_000_000, 1_000_000_000))
    return [plain, binary]


def test_unsafe_mode_changes_no_metadata_outside_its_work_dir(tmp_path):
    """The attack of issue #56, disarmed hook first: chmod (setuid included), chown, utime and xattrs,
    by path, by an fd opened read-only, through /proc/self/fd, a symlink or a hard link in the work dir."""
    targets = _targets(tmp_path)
    assert targets[1].stat().st_uid == os.getuid()  # root-owned under CI's root
    before = {path: _snapshot(path) for path in targets}
    landlock = _landlock_abi() > 0
    code = DISARM + ATTEMPTS + "".join(
        f"attack({str(path)!r}, 't{i}')\n"
        f"os.symlink({str(path)!r}, 'link{i}')\nattack('link{i}', 's{i}')\n"
        + (f"try: os.link({str(path)!r}, 'hard{i}'); print('h{i} link done')\n"
           f"except OSError as e: print('h{i} link refused', e.errno)\n" if landlock else "")
        for i, path in enumerate(targets))
    result = run_python(code, LIMITS, launchers=(), allow_unsafe=True)
    text = result.output
    assert result.isolation == "unsafe" and "unsafe-seccomp" in result.layers, text
    for i in range(len(targets)):
        for tag in (f"t{i}", f"s{i}"):
            for name in NAMES:
                assert f"{tag} {name} refused 1\n" in text, (tag, name, text)  # EPERM from seccomp
        if landlock:  # a hard link in the work dir would be the same inode: Landlock refuses the reparenting
            assert f"h{i} link refused" in text, text
    assert " done" not in text and result.exit_code == 0, text
    assert {path: _snapshot(path) for path in targets} == before
    assert not targets[1].stat().st_mode & 0o6000


def test_unsafe_mode_refuses_metadata_changes_in_its_work_dir_too(tmp_path):
    """Inside the work dir the same calls are refused (seccomp sees no path, so it cannot tell inside
    from outside): with the hook armed the message names the rule; disarmed, the kernel answers EPERM.
    Files are still written, copied (content only) and read, and sqlite works."""
    armed = ("import os, shutil, sqlite3\nopen('a.txt', 'w').write('data')\n"
             "shutil.copyfile('a.txt', 'b.txt')\n"
             "db = sqlite3.connect('t.db'); db.execute('create table t (x)'); db.execute('insert into t values (1)')\n"
             "db.commit(); print('sqlite', db.execute('select x from t').fetchall()); db.close()\n"
             "for name, f in (('chmod', lambda: os.chmod('a.txt', 0o600)), ('utime', lambda: os.utime('a.txt')),\n"
             "                ('setxattr', lambda: os.setxattr('a.txt', 'user.x', b'1'))):\n"
             "    try: f(); print(name, 'done')\n    except PermissionError as e: print(name, e)\n"
             "print('files', sorted(os.listdir('.')), open('b.txt').read())\n")
    result = run_python(armed, LIMITS, launchers=(), allow_unsafe=True)
    text = result.output
    assert result.exit_code == 0 and "sqlite [(1,)]" in text and "files ['a.txt', 'b.txt', 't.db'] data" in text, text
    for name in ("chmod", "utime", "setxattr"):
        assert f"{name} sandbox: os.{name} (file metadata) is disabled in the python tool's unsafe mode" in text, text
    disarmed = DISARM + ATTEMPTS + "open('inside.txt', 'w').write('x')\nattack('inside.txt', 'in')\n" \
        "print('still', open('inside.txt').read())\n"
    result = run_python(disarmed, LIMITS, launchers=(), allow_unsafe=True)
    text = result.output
    for name in NAMES:
        assert f"in {name} refused 1\n" in text, (name, text)
    assert "still x" in text and result.exit_code == 0, text
