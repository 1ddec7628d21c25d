"""The seccomp filter of a bubblewrap sandbox: a classic BPF program built here, byte for byte.

``bwrap --seccomp FD`` installs the compiled program it reads from ``FD`` just before it runs the
sandboxed program (bwrap's own setup is not filtered). The filter:

- kills the process when the system call is not of the x86_64 ABI (another architecture, or
  an x32 call): the numbers below mean nothing elsewhere, so it fails closed;
- answers ``EPERM`` to the calls a sandboxed program never needs and that widen what it can
  reach: tracing and reading other processes (``ptrace``, ``process_vm_*``), mounts and new
  namespaces (``mount``, ``unshare``, ``setns``, ``pivot_root``, the new mount API, ``clone``
  with a namespace flag), the kernel's keyrings, BPF, performance counters, module loading,
  ``kexec``, ``reboot``, swap, the clock, ``chroot``, ``acct``, file handles, ``userfaultfd``
  and ``io_uring`` (a path around this filter);
- answers ``ENOSYS`` to ``clone3``, whose flags it cannot read, so libc falls back to ``clone``;
- allows the rest.

``compile_filter()`` returns the program; ``supported()`` says whether this machine is x86_64.
"""

from __future__ import annotations

import errno
import platform
import struct

__all__ = ["DENIED", "compile_filter", "supported"]

AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000

# BPF instruction classes and fields (linux/filter.h, linux/bpf_common.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_JSET_K = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K

_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LOW = 0, 4, 16

#: x86_64 system call numbers answered EPERM.
DENIED: dict[str, int] = {
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "mount": 165,
    "umount2": 166,
    "pivot_root": 155,
    "chroot": 161,
    "unshare": 272,
    "setns": 308,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
    "keyctl": 250,
    "add_key": 248,
    "request_key": 249,
    "bpf": 321,
    "perf_event_open": 298,
    "init_module": 175,
    "finit_module": 313,
    "delete_module": 176,
    "kexec_load": 246,
    "kexec_file_load": 320,
    "reboot": 169,
    "swapon": 167,
    "swapoff": 168,
    "acct": 163,
    "settimeofday": 164,
    "clock_settime": 227,
    "clock_adjtime": 305,
    "adjtimex": 159,
    "iopl": 172,
    "ioperm": 173,
    "quotactl": 179,
    "lookup_dcookie": 212,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
}
_CLONE = 56
_CLONE3 = 435
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME.
_CLONE_NAMESPACES = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x80
)


def supported() -> bool:
    """Whether the filter knows this machine's system calls (x86_64 only)."""
    return platform.machine() in ("x86_64", "AMD64")


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def compile_filter() -> bytes:
    """The filter as ``struct sock_filter`` entries, in the machine's byte order."""
    eperm = _RET_ERRNO | errno.EPERM
    prog = [
        _insn(_LD_W_ABS, 0, 0, _OFF_ARCH),
        _insn(_JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        _insn(_RET_K, 0, 0, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0, 0, _OFF_NR),
        _insn(_JGE_K, 0, 1, _X32_BIT),
        _insn(_RET_K, 0, 0, _RET_KILL_PROCESS),
        _insn(_JEQ_K, 0, 1, _CLONE3),
        _insn(_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS),
    ]
    for number in DENIED.values():
        prog += [_insn(_JEQ_K, 0, 1, number), _insn(_RET_K, 0, 0, eperm)]
    prog += [
        _insn(_JEQ_K, 0, 3, _CLONE),
        _insn(_LD_W_ABS, 0, 0, _OFF_ARG0_LOW),
        _insn(_JSET_K, 0, 1, _CLONE_NAMESPACES),
        _insn(_RET_K, 0, 0, eperm),
        _insn(_RET_K, 0, 0, _RET_ALLOW),
    ]
    return b"".join(prog)
