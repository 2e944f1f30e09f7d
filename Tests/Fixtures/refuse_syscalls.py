#!/usr/bin/env python3
"""Runs a program under a seccomp filter that refuses some system calls with ENOSYS, as an older kernel would.

Usage: refuse_syscalls.py NAME[,NAME...] PROGRAM [ARGUMENT...]

NAME is clone3 or close_range: what a service manager's filter refuses (systemd's RestrictNamespaces= answers
clone3 with ENOSYS so that callers fall back to clone, whose flags it can inspect) or what a kernel before 5.11 lacks;
or fcntl-getfd, fcntl(fd, F_GETFD) only, to make a fallback that reads descriptor flags fail.
The filter (with no_new_privs, so no privilege is needed) stays on across exec and is inherited by every child.
"""
import ctypes
import errno
import os
import platform
import sys

# AUDIT_ARCH_* (<linux/audit.h>) of the architectures the filter knows: a call made under another ABI passes.
AUDIT_ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# fcntl's number on each of them; clone3 and close_range have the same number everywhere (both came after the system
# call tables were unified in Linux 5.1).
FCNTL_NUMBERS = {"x86_64": 72, "aarch64": 25}
F_GETFD = 1
# Each name: the system call's number, and (argument index, value) when only calls with that argument are refused.
RULES = {
    "clone3": (435, None),
    "close_range": (436, None),
    "fcntl-getfd": (FCNTL_NUMBERS.get(platform.machine()), (1, F_GETFD)),
}

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K
OFFSET_NR = 0  # struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6];
OFFSET_ARCH = 4
OFFSET_ARGS = 16  # the low 32 bits of args[i] at 16 + 8 * i (both architectures above are little-endian)


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: refuse_syscalls.py NAME[,NAME...] PROGRAM [ARGUMENT...]")
    names = sys.argv[1].split(",")
    unknown = [name for name in names if name not in RULES]
    if unknown:
        sys.exit(f"refuse_syscalls.py: unknown system call(s) {unknown}; known: {sorted(RULES)}")
    arch = AUDIT_ARCHES.get(platform.machine())
    if arch is None:
        sys.exit(f"refuse_syscalls.py: no AUDIT_ARCH known for {platform.machine()}")
    refusal = SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS)
    rules = []
    for name in names:
        number, argument = RULES[name]
        if argument is None:
            # Not this call: skip the refusal.
            rules += [SockFilter(BPF_LD_W_ABS, 0, 0, OFFSET_NR), SockFilter(BPF_JEQ_K, 0, 1, number), refusal]
        else:
            index, value = argument
            rules += [
                SockFilter(BPF_LD_W_ABS, 0, 0, OFFSET_NR),
                SockFilter(BPF_JEQ_K, 0, 3, number),  # not this call: skip the argument's check and the refusal
                SockFilter(BPF_LD_W_ABS, 0, 0, OFFSET_ARGS + 8 * index),
                SockFilter(BPF_JEQ_K, 0, 1, value),
                refusal,
            ]
    program = [
        SockFilter(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        # Another ABI: skip every rule, to the last instruction (allow).
        SockFilter(BPF_JEQ_K, 0, len(rules), arch),
    ]
    program += rules
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
