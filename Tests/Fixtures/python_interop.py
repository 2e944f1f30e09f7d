#!/usr/bin/env python3
"""Talks to bgtaskd with Python's varlink package only, and prints what it saw as one JSON object.

Used by the interoperability test: an independent Varlink implementation must be able to introspect the
service, register with a streamed call, take and end a lease, and receive the typed errors.
"""
import json
import sys

import varlink

INTERFACE = "io.bgtask.Lifecycle"


def error_of(call):
    """The Varlink error name and parameters a call fails with, or None if it succeeds."""
    try:
        call()
    except varlink.VarlinkError as error:
        return {"error": error.error(), "parameters": error.parameters()}
    return None


def main():
    address = "unix:" + sys.argv[1]
    client = varlink.Client(address)
    seen = {}
    with client.open("org.varlink.service") as service:
        info = service.GetInfo()
        seen["info"] = info
        seen["description"] = service.GetInterfaceDescription(INTERFACE)["description"]
    # The description must parse as a Varlink interface for Python's own parser.
    parsed = varlink.Interface(seen["description"])
    seen["parsedMembers"] = sorted(parsed.members.keys())

    with client.open(INTERFACE, namespaced=True) as stream, client.open(INTERFACE, namespaced=True) as calls:
        replies = stream.Register("interop", None, None, _more=True)
        first = next(replies)
        seen["registeredState"] = first.app.state
        task = calls.BeginBackgroundTask("interop", "py-upload").taskId
        seen["taskId"] = task
        seen["tasksWhileOpen"] = [t.name for t in calls.GetApp("interop").app.tasks]
        calls.EndBackgroundTask("interop", task)
        seen["tasksAfterEnd"] = len(calls.GetApp("interop").app.tasks)
        seen["noSuchTask"] = error_of(lambda: calls.EndBackgroundTask("interop", task))
        seen["noSuchApp"] = error_of(lambda: calls.GetApp("nobody-registered-this"))
        calls.SetState("interop", "inactive")
        event = next(replies).event
        seen["eventAfterSetState"] = event.kind

    # Calls the generated proxies would refuse to send (they check the description first), as raw bytes.
    seen["methodNotFound"] = raw_call(sys.argv[1], {"method": INTERFACE + ".NoSuchMethod", "parameters": {}})
    seen["invalidParameter"] = raw_call(sys.argv[1], {"method": INTERFACE + ".BeginBackgroundTask",
                                                       "parameters": {"app": 42}})
    seen["interfaceNotFound"] = raw_call(sys.argv[1], {"method": "com.example.Nope.Call", "parameters": {}})
    print(json.dumps(seen, sort_keys=True))


def raw_call(path, call):
    """Sends one call as bytes (a typed proxy would refuse these) and returns the reply object."""
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(json.dumps(call).encode() + b"\0")
        data = b""
        while not data.endswith(b"\0"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return json.loads(data.rstrip(b"\0"))


if __name__ == "__main__":
    main()
