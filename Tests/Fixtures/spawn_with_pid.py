#!/usr/bin/env python3
"""Runs a command as a process with a chosen pid, to test what happens when a pid is reused.

usage: spawn_with_pid.py PID COMMAND [ARGUMENT...]

Creates the child with clone3 and `set_tid` (Linux 5.5; root only), which gives it PID or fails: no other process
can take the pid in between, as one could when `/proc/sys/kernel/ns_last_pid` was set and then forked, while every
fork on the machine (tests run in parallel) took the next pid as well. The child runs COMMAND with this script's
standard streams, and the script exits with its status. Exits 75 (EX_TEMPFAIL) if another process has PID, 77
(EX_NOPERM) without the right to choose a pid, 69 (EX_UNAVAILABLE) where the kernel has no clone3 with set_tid.
"""
import ctypes
import errno
import os
import signal
import struct
import sys

CLONE3 = 435  # The same number on every architecture with the generic syscall table and on x86_64.

target = int(sys.argv[1])
command = sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
tids = (ctypes.c_int * 1)(target)
# struct clone_args up to set_tid_size (CLONE_ARGS_SIZE_VER1): flags, pidfd, child_tid, parent_tid, exit_signal,
# stack, stack_size, tls, set_tid, set_tid_size.
packed = struct.pack("=10Q", 0, 0, 0, 0, signal.SIGCHLD, 0, 0, 0, ctypes.addressof(tids), 1)
arguments = ctypes.create_string_buffer(packed, len(packed))
pid = libc.syscall(ctypes.c_long(CLONE3), arguments, ctypes.c_size_t(len(packed)))
if pid == 0:
    try:
        os.execvp(command[0], command)
    finally:
        os._exit(127)
if pid < 0:
    code = ctypes.get_errno()
    sys.stderr.write("spawn_with_pid: clone3 for pid %d: %s\n" % (target, os.strerror(code)))
    if code == errno.EEXIST:
        sys.exit(75)
    if code == errno.EPERM:
        sys.exit(77)
    sys.exit(69)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
