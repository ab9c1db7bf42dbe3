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
  ``*_by_handle_at``, module and kexec loading, ``reboot``, swap, ``syslog``, ``acct``, ``quotactl``).
"""

from __future__ import annotations

import errno
import platform
import struct

# struct sock_filter {u16 code; u8 jt; u8 jf; u32 k;}, native (little-endian on both supported ABIs).
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16  # struct seccomp_data: nr, arch, ip, args[6]
CLONE_NS_FLAGS = 0x7E020080  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME

_DENIED = ("socket", "connect", "bind", "listen", "accept", "accept4", "ptrace", "process_vm_readv",
           "process_vm_writev", "pidfd_getfd", "kcmp", "mount", "umount2", "pivot_root", "chroot", "unshare",
           "setns", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
           "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
           "keyctl", "add_key", "request_key", "open_by_handle_at", "name_to_handle_at", "kexec_load",
           "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff",
           "syslog", "acct", "quotactl", "lookup_dcookie", "vhangup")

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
                   acct=163, quotactl=179, lookup_dcookie=212, vhangup=153, clone=56, clone3=435),
    "aarch64": dict(socket=198, connect=203, accept=202, bind=200, listen=201, accept4=242, ptrace=117,
                    process_vm_readv=270, process_vm_writev=271, pidfd_getfd=438, kcmp=272, mount=40,
                    umount2=39, pivot_root=41, chroot=51, unshare=97, setns=268, open_tree=428,
                    move_mount=429, fsopen=430, fsconfig=431, fsmount=432, fspick=433, mount_setattr=442,
                    bpf=280, perf_event_open=241, userfaultfd=282, io_uring_setup=425, io_uring_enter=426,
                    io_uring_register=427, keyctl=219, add_key=217, request_key=218, open_by_handle_at=265,
                    name_to_handle_at=264, kexec_load=104, kexec_file_load=294, init_module=105,
                    finit_module=273, delete_module=106, reboot=142, swapon=224, swapoff=225, syslog=116,
                    acct=89, quotactl=60, lookup_dcookie=18, vhangup=58, clone=220, clone3=435),
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


def native_arch() -> str | None:
    """The ABI name the filter is built for, or None where it has no syscall table."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if machine in SYSCALLS else None


def build_filter(arch: str | None = None) -> bytes | None:
    """The filter program as ``struct sock_filter[]`` bytes; None when the ABI is unsupported."""
    arch = arch or native_arch()
    if arch is None:
        return None
    nr = SYSCALLS[arch]
    # (code, jump-true label or offset, jump-false label or offset, k); labels resolve below.
    prog: list[tuple[int, object, object, int]] = [
        (_LD_ABS, 0, 0, _OFF_ARCH),
        (_JEQ, 0, "kill", AUDIT_ARCH[arch]),
        (_LD_ABS, 0, 0, _OFF_NR),
    ]
    if arch == "x86_64":  # x32 syscalls are the x86_64 numbers with bit 30 set
        prog.append((_JGE, "eperm", 0, 0x40000000))
    prog += [(_JEQ, "eperm", 0, nr[name]) for name in _DENIED]
    prog += [
        (_JEQ, "enosys", 0, nr["clone3"]),
        (_JEQ, "clone", 0, nr["clone"]),
        (_RET, 0, 0, _RET_ALLOW),
    ]
    labels = {"clone": len(prog)}
    prog += [(_LD_ABS, 0, 0, _OFF_ARG0), (_JSET, "eperm", 0, CLONE_NS_FLAGS), (_RET, 0, 0, _RET_ALLOW)]
    labels["enosys"] = len(prog)
    prog.append((_RET, 0, 0, _RET_ERRNO | errno.ENOSYS))
    labels["eperm"] = len(prog)
    prog.append((_RET, 0, 0, _RET_ERRNO | errno.EPERM))
    labels["kill"] = len(prog)
    prog.append((_RET, 0, 0, _RET_KILL_PROCESS))

    def jump(target: object, at: int) -> int:
        return target if isinstance(target, int) else labels[str(target)] - at - 1

    return b"".join(struct.pack("<HBBI", code, jump(jt, i), jump(jf, i), k)
                    for i, (code, jt, jf, k) in enumerate(prog))
