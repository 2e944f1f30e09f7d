#!/usr/bin/env python3
"""Runs a command as a process with a chosen pid, to test what happens when a pid is reused.

usage: spawn_with_pid.py PID COMMAND [ARGUMENT...]

Writes PID - 1 to /proc/sys/kernel/ns_last_pid (root only) and forks, until the child gets PID (another process
may take it first on a busy machine); the child then runs COMMAND with this script's standard streams, and the
script exits with its status. Exits 75 (EX_TEMPFAIL) if PID could not be had, 77 (EX_NOPERM) without the right to
write ns_last_pid.
"""
import os
import sys

target = int(sys.argv[1])
command = sys.argv[2:]
for attempt in range(1000):
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as last:
            last.write(str(target - 1))
    except PermissionError:
        sys.exit(77)
    pid = os.fork()
    if pid == 0:
        if os.getpid() != target:
            os._exit(0)
        os.execvp(command[0], command)
    if pid == target:
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
    os.waitpid(pid, 0)
sys.stderr.write("spawn_with_pid: pid %d stayed taken\n" % target)
sys.exit(75)
