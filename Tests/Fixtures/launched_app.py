#!/usr/bin/env python3
"""An app for bgtaskd's Launch: started by the daemon, it finds the daemon and its own name in its environment
(BGTASK_SOCKET, BGTASK_APP_NAME), as a managed app does, and prints one line per thing it does or experiences to
its standard output (which the daemon sends to its log).

    --alloc MIB          allocate MIB of anonymous memory, every page written (an mmap of its own, so freeing it
                         gives it back to the kernel at once), after registering; prints "allocated MIB"
    --state S            register in state S (active or background; default active)
    --task               begin a background task after registering; prints "began ID"
    --alloc-delay S      allocate S seconds after registering rather than at once
    --no-ack             never acknowledge events (an app in background then stays there, not suspended,
                         until EnterBackgroundGraceSec ends)
    --free-on-warning    on memoryWarning, free the allocation; prints "freed MIB"
    --arm-pressure       arm the trigger $MEMORY_PRESSURE_WRITE names on $MEMORY_PRESSURE_WATCH; prints
                         "armed PATH" (or "error arm ...")
    --no-register        never register (to see launch-timeout)
    --crash              after registering (and allocating), die of SIGSEGV
    --exit N             after registering, exit with status N
    --report-sandbox P   after registering, write to file P what confines the process: whether it can open an
                         AF_INET socket ("inet ok" or "inet ERRNO"), its NoNewPrivs and Seccomp lines of
                         /proc/self/status and its oom_score_adj ("oom_score_adj N")
    --complete-scheduled on runScheduledTask, complete the task (SetTaskCompleted, success); prints "completed ID"
    --sigterm-marker P   on SIGTERM, append "sigterm PID" to file P and exit 0 (what an app saving its state does);
                         such an app does not exit when its event stream closes
    --report-argv P      at start, write its whole argv to file P as a JSON array (written whole, then renamed into
                         place), and print "argv written"; words after "--" are taken and ignored, for a test of
                         what arguments reach the app
Every event prints "event KIND id=N [tasks=ID,..] [name=..] [likelyVictim=..] [rank=..]". The process bounds its
own lifetime (--lifetime, default 60 s).
"""
import argparse
import base64
import mmap
import os
import signal
import sys
import threading
import time

INTERFACE = "io.bgtask.Lifecycle"
lock = threading.Lock()


def out(*words):
    with lock:
        sys.stdout.write(" ".join(str(word) for word in words) + "\n")
        sys.stdout.flush()


def allocate(mib):
    block = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for offset in range(0, mib << 20, 4096):
        block[offset] = 1
    return block


def arm_pressure():
    path = os.environ.get("MEMORY_PRESSURE_WATCH")
    write = os.environ.get("MEMORY_PRESSURE_WRITE")
    if not path or not write:
        out("error arm no-variables")
        return None
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        os.write(descriptor, base64.b64decode(write, validate=True))
    except OSError as error:
        out("error arm", path, error.strerror)
        return None
    out("armed", path)
    return descriptor


def report_sandbox(path):
    lines = []
    try:
        import socket

        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        lines.append("inet ok")
    except OSError as error:
        lines.append("inet %s" % (errno_name(error.errno),))
    with open("/proc/self/status") as status:
        lines += [line.strip() for line in status if line.startswith(("NoNewPrivs:", "Seccomp:"))]
    with open("/proc/self/oom_score_adj") as oom:
        lines.append("oom_score_adj %s" % oom.read().strip())
    with open(path + ".tmp", "w") as report:
        report.write("\n".join(lines) + "\n")
    os.rename(path + ".tmp", path)
    out("reported", path)


def errno_name(number):
    import errno

    return errno.errorcode.get(number, str(number))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--alloc", type=int, default=0)
    parser.add_argument("--state", choices=["active", "background"], default="active")
    parser.add_argument("--task", action="store_true")
    parser.add_argument("--alloc-delay", type=float, default=0)
    parser.add_argument("--no-ack", action="store_true")
    parser.add_argument("--free-on-warning", action="store_true")
    parser.add_argument("--arm-pressure", action="store_true")
    parser.add_argument("--no-register", action="store_true")
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--exit", type=int)
    parser.add_argument("--lifetime", type=int, default=60)
    parser.add_argument("--report-sandbox")
    parser.add_argument("--complete-scheduled", action="store_true")
    parser.add_argument("--sigterm-marker")
    parser.add_argument("--report-argv")
    parser.add_argument("words", nargs="*")
    args = parser.parse_args()
    signal.alarm(args.lifetime)
    if args.sigterm_marker:
        marker = args.sigterm_marker

        def on_sigterm(number, frame):
            with open(marker, "a") as handle:
                handle.write("sigterm %d\n" % os.getpid())
            os._exit(0)

        signal.signal(signal.SIGTERM, on_sigterm)
    name = os.environ["BGTASK_APP_NAME"]
    out("started", name, "pid=%d" % os.getpid())
    if args.report_argv:
        import json

        with open(args.report_argv + ".part", "w") as report:
            json.dump(sys.argv, report)
        os.rename(args.report_argv + ".part", args.report_argv)
        out("argv written")
    held = {"trigger": arm_pressure() if args.arm_pressure else None, "block": None}
    if args.no_register:
        while True:
            signal.pause()

    # Imported here: an app that never registers runs under any python3, with or without the package.
    import varlink

    client = varlink.Client("unix:" + os.environ["BGTASK_SOCKET"])
    stream = client.open(INTERFACE, namespaced=True)
    acks = client.open(INTERFACE, namespaced=True)
    calls = client.open(INTERFACE, namespaced=True)
    registered = threading.Event()
    # Events are acknowledged only once the start-up work (allocation, task) is done: acknowledging
    # didEnterBackground lets the daemon suspend the app, which would freeze it halfway.
    started = threading.Event()

    def read_events():
        try:
            for reply in stream.Register(name, None, args.state, _more=True):
                app = getattr(reply, "app", None)
                if app is not None:
                    out("registered", app.state, "pid=%d" % os.getpid())
                    registered.set()
                    continue
                event = reply.event
                words = ["event", event.kind, "id=%d" % event.id]
                task_ids = getattr(event, "taskIds", None)
                if task_ids:
                    words.append("tasks=%s" % ",".join(str(task) for task in task_ids))
                for field in ("name", "likelyVictim", "rank"):
                    value = getattr(event, field, None)
                    if value is not None:
                        words.append("%s=%s" % (field, value))
                out(*words)
                if event.kind == "memoryWarning" and args.free_on_warning and held["block"] is not None:
                    held["block"].close()
                    held["block"] = None
                    out("freed", args.alloc)
                if not args.no_ack:
                    started.wait()
                    acks.Acknowledge(name, event.id)
                if event.kind == "runScheduledTask" and args.complete_scheduled:
                    for task in task_ids or []:
                        calls.SetTaskCompleted(name, task, True, None)
                        out("completed", task)
        except varlink.VarlinkError as error:
            out("error", error.error())
        except (BrokenPipeError, ConnectionError, OSError):
            pass
        out("stream-closed")
        # An app that saves its state on SIGTERM outlives the daemon's going away (the client library reconnects):
        # it ends when told to, or at its lifetime.
        if not args.sigterm_marker:
            os._exit(0)

    # A signal goes to any thread that does not block it, and Python runs its handler only once the main thread
    # wakes: the event thread blocks SIGTERM (it inherits the mask it starts with), so SIGTERM wakes the main thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=read_events, daemon=True).start()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    registered.wait()
    if args.alloc_delay:
        started.set()
        time.sleep(args.alloc_delay)
    if args.alloc:
        held["block"] = allocate(args.alloc)
        out("allocated", args.alloc)
    if args.task:
        out("began", calls.BeginBackgroundTask(name, "work").taskId)
    if args.report_sandbox:
        report_sandbox(args.report_sandbox)
    started.set()
    if args.exit is not None:
        os._exit(args.exit)
    if args.crash:
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGSEGV)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
