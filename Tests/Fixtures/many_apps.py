#!/usr/bin/env python3
"""Many small apps at once: forks COUNT children, each registering as PREFIX-N on its own event stream.

usage: many_apps.py --socket PATH --count N --prefix P [--lifetime SECONDS]

Each child registers (state active), then reads and discards its events until the daemon closes the stream or
its lifetime ends; children share the parent's pages, so hundreds cost little memory. The parent prints
"ready N" once every child is registered (or "failed NAME REPLY" for the first refusal), then waits for its
standard input to close (or its lifetime to end) and kills its children.
"""
import argparse
import os
import signal
import socket
import sys


def child(path, name, lifetime, ready):
    signal.alarm(lifetime)
    connection = socket.socket(socket.AF_UNIX)
    connection.connect(path)
    call = b'{"method":"io.bgtask.Lifecycle.Register","parameters":{"name":"%s"},"more":true}\0' % name.encode()
    connection.sendall(call)
    reply = b""
    while not reply.endswith(b"\0"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        reply += chunk
    first = reply.split(b"\0")[0]
    os.write(ready, (b"ok\n" if b'"error"' not in first else b"failed " + name.encode() + b" " + first + b"\n"))
    os.close(ready)
    while connection.recv(65536):
        pass
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--lifetime", type=int, default=60)
    args = parser.parse_args()
    signal.alarm(args.lifetime)
    read_end, write_end = os.pipe()
    children = []
    for index in range(args.count):
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            child(args.socket, "%s-%d" % (args.prefix, index), args.lifetime, write_end)
        children.append(pid)
    os.close(write_end)
    answers = os.fdopen(read_end).read().splitlines()
    failures = [line for line in answers if line != "ok"]
    print(failures[0] if failures else "ready %d" % len(answers), flush=True)
    try:
        sys.stdin.read()
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children:
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
