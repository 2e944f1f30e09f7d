#!/usr/bin/env python3
"""Runs a program under a seccomp filter that refuses some system calls with ENOSYS, as an older kernel would.

Usage: refuse_syscalls.py NAME[,NAME...] PROGRAM [ARGUMENT...]

NAME is clone3 or close_range: what a service manager's filter refuses (systemd's RestrictNamespaces= answers
clone3 with ENOSYS so that callers fall back to clone, whose flags it can inspect) or what a kernel before 5.11 lacks.
The filter (with no_new_privs, so no privilege is needed) stays on across exec and is inherited by every child.
"""
import ctypes
import errno
import os
import platform
import sys

# The same numbers on every architecture: both came after the system call tables were unified (Linux 5.1).
SYSCALL_NUMBERS = {"clone3": 435, "close_range": 436}
# AUDIT_ARCH_* (<linux/audit.h>) of the architectures the filter knows: a call made under another ABI passes.
AUDIT_ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K
OFFSET_NR = 0  # struct seccomp_data: int nr; __u32 arch; ...
OFFSET_ARCH = 4


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: refuse_syscalls.py NAME[,NAME...] PROGRAM [ARGUMENT...]")
    names = sys.argv[1].split(",")
    unknown = [name for name in names if name not in SYSCALL_NUMBERS]
    if unknown:
        sys.exit(f"refuse_syscalls.py: unknown system call(s) {unknown}; known: {sorted(SYSCALL_NUMBERS)}")
    arch = AUDIT_ARCHES.get(platform.machine())
    if arch is None:
        sys.exit(f"refuse_syscalls.py: no AUDIT_ARCH known for {platform.machine()}")
    program = [
        SockFilter(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        # Another ABI: skip to the last instruction (allow).
        SockFilter(BPF_JEQ_K, 0, 2 * len(names) + 1, arch),
        SockFilter(BPF_LD_W_ABS, 0, 0, OFFSET_NR),
    ]
    for name in names:
        program += [
            SockFilter(BPF_JEQ_K, 0, 1, SYSCALL_NUMBERS[name]),
            SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        ]
    program.append(SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    filters = (SockFilter * len(program))(*program)
    fprog = SockFprog(len(program), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        sys.exit(f"refuse_syscalls.py: prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        sys.exit(f"refuse_syscalls.py: prctl(PR_SET_SECCOMP): {os.strerror(ctypes.get_errno())}")
    os.execv(sys.argv[2], sys.argv[2:])


main()
