"""The python sandbox's seccomp filter, built by the (trusted) parent as raw classic-BPF bytes.

The sandbox's supervisor loads it with ``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ...)`` after
``no_new_privs`` and before it forks the user's code, which inherits it (filters cannot be removed).
Deny-list, not allow-list: a general-purpose interpreter needs hundreds of syscalls, while the ones that
matter for escape are few. What it does, per syscall number of the native ABI:

* a foreign ABI (i386 via ``int 0x80``, x32 on x86_64) is refused: the numbers below would not apply;
* ``socket``/``connect``/``bind``/``listen``/``accept*`` -> EPERM: no socket of any family, AF_UNIX
  included (``socketpair`` stays: it makes a connected pair inside the process and reaches nothing;
  asyncio's self-pipe needs it);
* namespaces and mounts (``unshare``, ``setns``, ``mount*``, ``fs*``, ``pivot_root``, ``chroot``,
  ``clone`` with any CLONE_NEW* flag) -> EPERM; ``clone3`` -> ENOSYS, so glibc falls back to ``clone``,
  whose flags the filter can read (clone3 passes them in memory, out of BPF's reach);
* other processes' memory (``ptrace``, ``process_vm_*``, ``pidfd_getfd``, ``kcmp``) -> EPERM;
* large kernel attack surface unprivileged code never needs (``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``io_uring_*`` — io_uring could also open sockets behind seccomp's back —, keyrings,
  ``*_by_handle_at``, module and kexec loading, ``reboot``, swap, ``syslog``, ``acct``, ``quotactl``);
* the supervisor (pid 1 of the sandbox) out of reach: ``kill``/``tkill``/``tgkill``/``rt_*sigqueueinfo``,
  ``pidfd_open`` and ``prlimit64`` aimed at pid 1 -> EPERM; ``pidfd_send_signal`` -> EPERM (it also takes a
  ``/proc/PID`` directory fd, which BPF cannot see);
* without a cgroup to count it (``refuse_unmapped_memory``), memory the code would hold without mapping it,
  which RLIMIT_AS does not see: ``memfd_create``, ``memfd_secret``, SysV ``shmget`` and ``msgget`` -> EPERM.

``unsafe_filter(pid)`` is a second filter the ``unsafe`` mode's code process stacks on top: no ``execve``,
no new process (``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``), signals, ``prlimit64`` and
``pidfd_open`` only for its own pid, and no change to any file's metadata (issue #56: Landlock does not
cover them, and a root caller's code, capabilities dropped, still owns root's files): the ``chmod``,
``chown``, ``utime`` and xattr-setting families, ``file_setattr`` and the ioctls that set inode flags or
fsxattr, by path or by fd, inside the work dir too (BPF sees no path, so it cannot tell inside from out).
"""

from __future__ import annotations

import errno
import platform
import struct

# struct sock_filter {u16 code; u8 jt; u8 jf; u32 k;}, native (little-endian on both supported ABIs).
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data: nr, arch, ip, args[6]
_OFF_ARG1_LOW = 24  # args[1]'s low 32 bits (little-endian): ioctl's cmd is an unsigned int, upper bits ignored
CLONE_NS_FLAGS = 0x7E020080  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME

_DENIED = ("socket", "connect", "bind", "listen", "accept", "accept4", "ptrace", "process_vm_readv",
           "process_vm_writev", "pidfd_getfd", "kcmp", "mount", "umount2", "pivot_root", "chroot", "unshare",
           "setns", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
           "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
           "keyctl", "add_key", "request_key", "open_by_handle_at", "name_to_handle_at", "kexec_load",
           "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff",
           "syslog", "acct", "quotactl", "lookup_dcookie", "vhangup", "pidfd_send_signal")
# Aimed at pid 1 (the supervisor) -> EPERM; any other pid: allowed (the code's own processes).
_PID1 = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "prlimit64")
# Memory held without a mapping of the caller's (RLIMIT_AS does not count it): refused without a cgroup.
_UNMAPPED = ("memfd_create", "memfd_secret", "shmget", "msgget")
# unsafe mode: no new program, no new process; signals and prlimit for its own pid only.
_UNSAFE_DENIED = ("execve", "execveat", "fork", "vfork", "tkill", "pidfd_send_signal")
_UNSAFE_OWN = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "prlimit64", "pidfd_open")
# unsafe mode: no change to a file's mode, owner, times, xattrs or flags (aarch64 has only the *at / f* forms).
_UNSAFE_METADATA = ("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat", "utime",
                    "utimes", "utimensat", "futimesat", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
                    "lremovexattr", "fremovexattr", "setxattrat", "removexattrat", "file_setattr")
# ioctl commands (the same on both ABIs) by which a file's owner changes its attributes through an fd,
# read-only ones included: inode flags (chattr: FS_IOC_SETFLAGS, its 32-bit form), struct fsxattr
# (FS_IOC_FSSETXATTR), the generation (FS_IOC_SETVERSION, EXT4_IOC_SETVERSION, 32-bit forms), fs-verity
# (FS_IOC_ENABLE_VERITY: the file stays read-only), an encryption policy (FS_IOC_SET_ENCRYPTION_POLICY),
# a btrfs subvolume's read-only flag (BTRFS_IOC_SUBVOL_SETFLAGS). Those that need a capability are left out.
_SET_ATTR_IOCTLS = (0x40086602, 0x40046602, 0x401C5820, 0x40087602, 0x40047602, 0x40086604, 0x40046604,
                    0x40806685, 0x800C6613, 0x4008941A)
CLONE_THREAD = 0x10000
OWN_PID = 0x7FFFFFF0  # placeholder for the code's pid in unsafe_filter(); the child patches it in (no real pid)

# Syscall numbers (asm/unistd_64.h; asm-generic/unistd.h for aarch64), checked against libseccomp by
# the tests where it is installed.
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": dict(socket=41, connect=42, accept=43, bind=49, listen=50, accept4=288, ptrace=101,
                   process_vm_readv=310, process_vm_writev=311, pidfd_getfd=438, kcmp=312, mount=165,
                   umount2=166, pivot_root=155, chroot=161, unshare=272, setns=308, open_tree=428,
                   move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442,
                   bpf=321, perf_event_open=298, userfaultfd=323, io_uring_setup=425, io_uring_enter=426,
                   io_uring_register=427, keyctl=250, add_key=248, request_key=249, open_by_handle_at=304,
                   name_to_handle_at=303, kexec_load=246, kexec_file_load=320, init_module=175,
                   finit_module=313, delete_module=176, reboot=169, swapon=167, swapoff=168, syslog=103,
                   acct=163, quotactl=179, lookup_dcookie=212, vhangup=153, clone=56, clone3=435,
                   pidfd_send_signal=424, kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129,
                   rt_tgsigqueueinfo=297, pidfd_open=434, prlimit64=302, memfd_create=319, memfd_secret=447,
                   shmget=29, msgget=68, execve=59, execveat=322, fork=57, vfork=58, ioctl=16, chmod=90,
                   fchmod=91, fchmodat=268, fchmodat2=452, chown=92, fchown=93, lchown=94, fchownat=260,
                   utime=132, utimes=235, utimensat=280, futimesat=261, setxattr=188, lsetxattr=189,
                   fsetxattr=190, removexattr=197, lremovexattr=198, fremovexattr=199),
    "aarch64": dict(socket=198, connect=203, accept=202, bind=200, listen=201, accept4=242, ptrace=117,
                    process_vm_readv=270, process_vm_writev=271, pidfd_getfd=438, kcmp=272, mount=40,
                    umount2=39, pivot_root=41, chroot=51, unshare=97, setns=268, open_tree=428,
                    move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442,
                    bpf=280, perf_event_open=241, userfaultfd=282, io_uring_setup=425, io_uring_enter=426,
                    io_uring_register=427, keyctl=219, add_key=217, request_key=218, open_by_handle_at=265,
                    name_to_handle_at=264, kexec_load=104, kexec_file_load=294, init_module=105,
                    finit_module=273, delete_module=106, reboot=142, swapon=224, swapoff=225, syslog=116,
                    acct=89, quotactl=60, lookup_dcookie=18, vhangup=58, clone=220, clone3=435,
                    pidfd_send_signal=424, kill=129, tkill=130, tgkill=131, rt_sigqueueinfo=138,
                    rt_tgsigqueueinfo=240, pidfd_open=434, prlimit64=261, memfd_create=279, memfd_secret=447,
                    shmget=194, msgget=186, execve=221, execveat=281, ioctl=29, fchmod=52, fchmodat=53,
                    fchmodat2=452, fchown=55, fchownat=54, utimensat=88, setxattr=5, lsetxattr=6, fsetxattr=7,
                    removexattr=14, lremovexattr=15, fremovexattr=16),
}
# Newer than the libseccomp the tests compare with (2.5): the unified numbers every ABI shares since 424.
NEWER_SYSCALLS = dict(setxattrat=463, removexattrat=466, file_setattr=469)
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def native_arch() -> str | None:
    """The ABI name the filter is built for, or None where it has no syscall table."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if machine in SYSCALLS else None


def build_filter(arch: str | None = None, *, refuse_unmapped_memory: bool = True) -> bytes | None:
    """The sandbox's filter as ``struct sock_filter[]`` bytes; None when the ABI is unsupported.
    ``refuse_unmapped_memory``: refuse memfd and SysV shared memory / queues (when no cgroup counts them)."""
    arch = arch or native_arch()
    if arch is None:
        return None
    nr = SYSCALLS[arch]
    denied = _DENIED + (_UNMAPPED if refuse_unmapped_memory else ())
    prog = _head(arch) + [(_JEQ, "eperm", 0, nr[name]) for name in denied]
    prog += [(_JEQ, "enosys", 0, nr["clone3"]), (_JEQ, "clone", 0, nr["clone"])]
    prog += [(_JEQ, "pid1", 0, nr[name]) for name in _PID1]
    prog.append((_RET, 0, 0, _RET_ALLOW))
    blocks = {
        "clone": [(_LD_ABS, 0, 0, _OFF_ARG0), (_JSET, "eperm", 0, CLONE_NS_FLAGS), (_RET, 0, 0, _RET_ALLOW)],
        "pid1": [(_LD_ABS, 0, 0, _OFF_ARG0), (_JEQ, "eperm", 0, 1), (_RET, 0, 0, _RET_ALLOW)],
    }
    return _assemble(prog, blocks)


def unsafe_filter(pid: int, arch: str | None = None) -> bytes | None:
    """The filter the ``unsafe`` mode's code process (``pid``) stacks on the sandbox's: no exec, no new
    process, no signal or prlimit for any process but its own (by its pid: 0 would name its process group,
    which holds the supervisor), no change to any file's metadata."""
    arch = arch or native_arch()
    if arch is None:
        return None
    nr = {**SYSCALLS[arch], **NEWER_SYSCALLS}
    denied = _UNSAFE_DENIED + _UNSAFE_METADATA
    prog = _head(arch) + [(_JEQ, "eperm", 0, nr[name]) for name in denied if name in nr]
    prog += [(_JEQ, "own", 0, nr[name]) for name in _UNSAFE_OWN]
    prog += [(_JEQ, "ioctl", 0, nr["ioctl"]), (_JEQ, "thread", 0, nr["clone"]), (_RET, 0, 0, _RET_ALLOW)]
    blocks = {
        "own": [(_LD_ABS, 0, 0, _OFF_ARG0), (_JEQ, "allow", "eperm", pid)],  # not 0: its group holds the supervisor
        "thread": [(_LD_ABS, 0, 0, _OFF_ARG0), (_JSET, "allow", "eperm", CLONE_THREAD)],
        "ioctl": [(_LD_ABS, 0, 0, _OFF_ARG1_LOW), *[(_JEQ, "eperm", 0, cmd) for cmd in _SET_ATTR_IOCTLS],
                  (_RET, 0, 0, _RET_ALLOW)],
        "allow": [(_RET, 0, 0, _RET_ALLOW)],
    }
    return _assemble(prog, blocks)


def _head(arch: str) -> list[tuple[int, object, object, int]]:
    prog: list[tuple[int, object, object, int]] = [
        (_LD_ABS, 0, 0, _OFF_ARCH),
        (_JEQ, 0, "kill", AUDIT_ARCH[arch]),
        (_LD_ABS, 0, 0, _OFF_NR),
    ]
    if arch == "x86_64":  # x32 syscalls are the x86_64 numbers with bit 30 set
        prog.append((_JGE, "eperm", 0, 0x40000000))
    return prog


def _assemble(prog: list[tuple[int, object, object, int]], blocks: dict[str, list]) -> bytes:
    """Append the named blocks and the return blocks, resolve labels to forward offsets, pack."""
    labels: dict[str, int] = {}
    for name, block in blocks.items():
        labels[name] = len(prog)
        prog = prog + block
    for name, ret in (("enosys", _RET_ERRNO | errno.ENOSYS), ("eperm", _RET_ERRNO | errno.EPERM),
                      ("kill", _RET_KILL_PROCESS)):
        labels[name] = len(prog)
        prog = prog + [(_RET, 0, 0, ret)]

    def jump(target: object, at: int) -> int:
        offset = target if isinstance(target, int) else labels[str(target)] - at - 1
        if not 0 <= offset <= 255:  # classic BPF jumps forward by at most 255 instructions
            raise ValueError(f"seccomp filter jump out of range at {at}")
        return offset

    return b"".join(struct.pack("<HBBI", code, jump(jt, i), jump(jf, i), k)
                    for i, (code, jt, jf, k) in enumerate(prog))
