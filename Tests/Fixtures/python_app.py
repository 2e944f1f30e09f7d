#!/usr/bin/env python3
"""An app for bgtaskd written against Python's varlink package: an independent client for end-to-end tests.

It registers, prints every event on its stream as one line, acknowledges events (unless --ack never), and
obeys commands on stdin, one per line:
    begin NAME      -> "began ID"          end ID      -> "ended ID"
    remaining       -> "remaining SECONDS|unlimited"
    ack EVENTID     -> "acked EVENTID"     exit CODE   (exits at once)
    complete ID success|failure|retry -> "completed ID" (SetTaskCompleted of a scheduled task)
    alloc MIB       -> "allocated MIB"     (memory written page by page, so it counts in PSS)
    lock KIND PATH  -> "locked KIND"       (KIND: flock, posix or ofd, an exclusive lock on PATH, kept)
    lead            -> "leading"           (makes a process group of our own, after registering)
    child           -> "child PID"         (a child in our process group that sleeps out our lifetime)
    child-lock KIND PATH -> "child PID"    (the same, printed once the child holds a KIND lock on PATH)
    child-as RUID EUID SUID -> "child PID" (the same, printed once the child runs with these user ids: a member
                                           of another uid, or a setuid child's real/effective/saved mix; root only)
Failures print "error NAME". The process bounds its own lifetime (--lifetime, default 60 s), and so do its
children.

    --stay          keep running once stdin ends (a service's stdin is /dev/null), until --lifetime or SIGTERM
    --notify        as a systemd service of Type=notify: READY=1 once registered, then WATCHDOG=1 every third of
                    $WATCHDOG_USEC when the service has a watchdog (each ping printed as "ping")
    --sigterm-marker P   on SIGTERM, append "sigterm PID" to file P and exit 0
"""
import argparse
import fcntl
import os
import signal
import socket
import struct
import sys
import threading
import time

import varlink

INTERFACE = "io.bgtask.Lifecycle"
print_lock = threading.Lock()


def out(*words):
    with print_lock:
        sys.stdout.write(" ".join(str(word) for word in words) + "\n")
        sys.stdout.flush()


def describe(event):
    words = ["event", event.kind, "id=%d" % event.id]
    task_ids = getattr(event, "taskIds", None)
    if task_ids is not None:
        words.append("tasks=" + ",".join(str(task) for task in task_ids))
    for field in ("name", "count", "likelyVictim", "rank"):
        value = getattr(event, field, None)
        if value is not None:
            words.append("%s=%s" % (field, value))
    payload = getattr(event, "payload", None)
    if payload is not None:
        items = payload.items() if isinstance(payload, dict) else vars(payload).items()
        words.append("payload=" + ",".join("%s:%s" % (k, v) for k, v in sorted(items)))
    return words


def take_lock(kind, path):
    """Takes an exclusive lock of `kind` on `path` and returns the open file, which must stay open."""
    handle = open(path, "w")
    if kind == "flock":
        fcntl.flock(handle, fcntl.LOCK_EX)
    else:
        command = fcntl.F_OFD_SETLKW if kind == "ofd" else fcntl.F_SETLKW
        fcntl.fcntl(handle, command, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
    return handle


def spawn_child(lifetime, lock=None, uids=None):
    """Forks a child that stays in our process group until our lifetime ends, holding `lock` if given, running
    with the real, effective and saved user ids `uids` if given."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        signal.alarm(lifetime)
        if uids:
            os.setresuid(*uids)
        held = take_lock(*lock) if lock else None
        os.write(write_end, b"x")
        while True:
            signal.pause()
    os.close(write_end)
    os.read(read_end, 1)
    os.close(read_end)
    return pid


def notify(message):
    """Sends `message` to the service manager ($NOTIFY_SOCKET, as sd_notify does)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as channel:
        channel.sendto(message.encode(), address)


def ping_watchdog():
    """Pings the service manager's watchdog every third of its interval, for as long as the process runs."""
    interval = int(os.environ.get("WATCHDOG_USEC", "0")) / 1e6
    if interval <= 0:
        return
    while True:
        notify("WATCHDOG=1")
        out("ping")
        time.sleep(interval / 3)


def on_sigterm_write(path):
    def handler(number, frame):
        with open(path, "a") as marker:
            marker.write("sigterm %d\n" % os.getpid())
        os._exit(0)

    signal.signal(signal.SIGTERM, handler)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--background", action="store_true")
    parser.add_argument("--ack", choices=["auto", "never"], default="auto")
    parser.add_argument("--lifetime", type=int, default=60)
    parser.add_argument("--new-group", action="store_true", help="lead a process group of our own")
    parser.add_argument("--stay", action="store_true")
    parser.add_argument("--notify", action="store_true")
    parser.add_argument("--sigterm-marker")
    args = parser.parse_args()
    if args.sigterm_marker:
        on_sigterm_write(args.sigterm_marker)
    if args.new_group:
        os.setpgid(0, 0)
    signal.alarm(args.lifetime)

    client = varlink.Client("unix:" + args.socket)
    stream_connection = client.open(INTERFACE, namespaced=True)
    ack_connection = client.open(INTERFACE, namespaced=True)
    calls = client.open(INTERFACE, namespaced=True)

    def read_events():
        try:
            state = "background" if args.background else None
            for reply in stream_connection.Register(args.name, None, state, _more=True):
                app = getattr(reply, "app", None)
                if app is not None:
                    out("registered", app.state, "pid=%d" % os.getpid())
                    if args.notify:
                        notify("READY=1")
                        threading.Thread(target=ping_watchdog, daemon=True).start()
                    continue
                event = reply.event
                out(*describe(event))
                if args.ack == "auto":
                    ack_connection.Acknowledge(args.name, event.id)
        except varlink.VarlinkError as error:
            out("error", error.error())
        except (BrokenPipeError, ConnectionError, OSError):
            pass
        out("stream-closed")

    # A signal goes to any thread that does not block it, and Python runs its handler only once the main thread
    # wakes: the event thread (and the watchdog's, which it starts) blocks SIGTERM, so SIGTERM wakes the main thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=read_events, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    held = []
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "begin":
                out("began", calls.BeginBackgroundTask(args.name, words[1] if len(words) > 1 else None).taskId)
            elif words[0] == "end":
                calls.EndBackgroundTask(args.name, int(words[1]))
                out("ended", words[1])
            elif words[0] == "remaining":
                seconds = getattr(calls.BackgroundTimeRemaining(args.name), "seconds", None)
                out("remaining", "unlimited" if seconds is None else seconds)
            elif words[0] == "complete":
                outcome = words[2]
                calls.SetTaskCompleted(args.name, int(words[1]), outcome == "success", outcome == "retry")
                out("completed", words[1])
            elif words[0] == "ack":
                ack_connection.Acknowledge(args.name, int(words[1]))
                out("acked", words[1])
            elif words[0] == "alloc":
                block = bytearray(int(words[1]) << 20)
                block[::4096] = b"\x01" * (len(block) // 4096)
                held.append(block)
                out("allocated", words[1])
            elif words[0] == "lock":
                held.append(take_lock(words[1], words[2]))
                out("locked", words[1])
            elif words[0] == "lead":
                os.setpgid(0, 0)
                out("leading")
            elif words[0] == "child":
                out("child", spawn_child(args.lifetime))
            elif words[0] == "child-as":
                out("child", spawn_child(args.lifetime, uids=[int(word) for word in words[1:4]]))
            elif words[0] == "child-lock":
                out("child", spawn_child(args.lifetime, (words[1], words[2])))
            elif words[0] == "exit":
                os._exit(int(words[1]))
            else:
                out("error", "unknown-command")
        except varlink.VarlinkError as error:
            out("error", error.error())
    while args.stay:
        signal.pause()
    os._exit(0)


if __name__ == "__main__":
    main()
