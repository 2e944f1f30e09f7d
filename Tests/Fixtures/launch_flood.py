#!/usr/bin/env python3
"""Floods bgtaskd with Launch calls, one connection each, for tests of the launch slots. Standard library only, so
any user's python3 runs it (the tests run it as root and, through setpriv, as another user).

    launch_flood.py SOCKET PREFIX COUNT LIFETIME -- ARGV...

Opens COUNT connections to SOCKET and sends on each, in order, a Launch of the app PREFIX-I (I from 0) with ARGV;
prints "sent COUNT" once every call is sent, then "reply I JSON" as each reply comes (the reply's JSON on one line),
or "closed I" for a connection closed with no reply. Exits once every call is answered, or after LIFETIME seconds.
"""
import json
import select
import signal
import socket
import sys


def main():
    path, prefix, count, lifetime = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    argv = sys.argv[sys.argv.index("--") + 1 :]
    signal.alarm(lifetime)
    pending = {}
    for index in range(count):
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(path)
        call = {
            "method": "io.bgtask.Lifecycle.Launch",
            "parameters": {"name": "%s-%d" % (prefix, index), "argv": argv},
        }
        connection.sendall(json.dumps(call).encode() + b"\0")
        pending[connection] = [index, b""]
    print("sent", count, flush=True)
    while pending:
        readable, _, _ = select.select(list(pending), [], [])
        for connection in readable:
            index, buffered = pending[connection]
            chunk = connection.recv(65536)
            buffered += chunk
            if b"\0" in buffered:
                print("reply", index, buffered.split(b"\0")[0].decode(), flush=True)
            elif chunk:
                pending[connection][1] = buffered
                continue
            else:
                print("closed", index, flush=True)
            del pending[connection]
            connection.close()


if __name__ == "__main__":
    main()
