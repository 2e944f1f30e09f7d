// Starting the app fixture written against Python's varlink package (Tests/Fixtures/python_app.py).

import Foundation

extension DaemonHarness {
    /// Starts the Python app fixture as `name` and returns once it registered.
    ///
    /// It prints one line per event (`event KIND id=N [name=..] [count=N] [payload=..]`), acknowledges each, and
    /// takes commands on stdin (`begin NAME`, `end ID`, `alloc MIB`, ...; see the script). It ends by itself
    /// after `lifetimeSeconds`, and `ChildProcess` kills it when the test lets go of it.
    public func startPythonApp(
        name: String, background: Bool = false, lifetimeSeconds: Int = 60
    ) throws -> ChildProcess {
        var arguments = [
            "python3", Products.packageRoot + "/Tests/Fixtures/python_app.py", "--socket", socketPath, "--name", name,
            "--lifetime", String(lifetimeSeconds),
        ]
        if background { arguments.append("--background") }
        let app = try ChildProcess(arguments)
        try app.waitForLine(startingWith: "registered")
        return app
    }
}
