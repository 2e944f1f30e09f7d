// Shared pieces of the daemon's end-to-end tests: apps as real processes, the Watch stream, /proc checks.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// An app process written against Python's `varlink` package (Tests/Fixtures/python_app.py).
func pythonApp(
    _ daemon: DaemonHarness, name: String, background: Bool = false, acknowledge: Bool = true,
    newGroup: Bool = false
) throws -> ChildProcess {
    var arguments = [
        "python3", Products.packageRoot + "/Tests/Fixtures/python_app.py", "--socket", daemon.socketPath, "--name",
        name, "--lifetime", "60",
    ]
    if background { arguments.append("--background") }
    if !acknowledge { arguments += ["--ack", "never"] }
    if newGroup { arguments.append("--new-group") }
    let app = try ChildProcess(arguments)
    try app.waitForLine(startingWith: "registered")
    return app
}

extension ChildProcess {
    /// The first line starting with `prefix` the child printed: one already read, or the next such line.
    func seenLine(startingWith prefix: String, timeout: Duration = .seconds(20)) throws -> String {
        if let line = transcript.first(where: { $0.hasPrefix(prefix) }) { return line }
        return try waitForLine(startingWith: prefix, timeout: timeout)
    }
}

/// A `Watch` stream on its own connection.
final class WatchStream {
    let client: RawVarlinkClient
    private(set) var entries: [[String: JSONValue]] = []
    /// The daemon watched, for its log when an entry does not come.
    private weak var daemon: DaemonHarness?

    init(_ daemon: DaemonHarness) throws {
        self.daemon = daemon
        client = try daemon.connect()
        try client.send("io.bgtask.Lifecycle.Watch", more: true)
    }

    /// Waits for an entry of `kind` about `app` (and `extra` fields, if given); returns it.
    @discardableResult
    func waitFor(
        _ kind: String, app: String, _ extra: [String: JSONValue] = [:], timeout: Duration = .seconds(15)
    ) throws -> [String: JSONValue] {
        let matches: ([String: JSONValue]) -> Bool = { entry in
            entry["kind"] == .string(kind) && entry["app"] == .string(app)
                && extra.allSatisfy { entry[$0.key] == $0.value }
        }
        if let found = entries.first(where: matches) { return found }
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            let remaining = deadline - MonotonicClock.now()
            var reply: [String: JSONValue]?
            var problem = "the stream ended"
            do {
                if remaining > 0 { reply = try client.receive(timeout: .nanoseconds(remaining)) }
            } catch {
                problem = "\(error)"
            }
            guard let reply else {
                let log = daemon.map { $0.log.split(separator: "\n").suffix(40).joined(separator: "\n") } ?? ""
                throw HarnessError(
                    "no \(kind) for \(app) on the watch stream (\(problem)); saw \(entries.suffix(10)); the daemon "
                        + "logged last:\n\(log)")
            }
            guard let entry = reply.parameters["entry"]?.objectValue else {
                throw HarnessError("unexpected watch reply \(reply)")
            }
            entries.append(entry)
            if matches(entry) { return entry }
        }
    }
}

/// The state letter of `/proc/PID/stat` once it satisfies `condition`, waiting at most `timeout`.
func waitForProcessState(
    _ pid: pid_t, timeout: Duration = .seconds(10), _ condition: (ProcessState) -> Bool
) throws -> ProcessState {
    let procFS = ProcFS()
    let pidFD = try PidFD.open(pid: pid)
    defer { try? pidFD.close() }
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    var state = try procFS.stat(pid).state
    while !condition(state) && MonotonicClock.now() < deadline {
        // The pidfd reports only exit, so this is a bounded 5 ms wait between reads of /proc.
        if try pidFD.waitForExit(timeout: .milliseconds(5)) { break }
        state = try procFS.stat(pid).state
    }
    return state
}

/// The integer after `prefix ` in a line such as "began 7".
func number(after prefix: String, in line: String) throws -> Int {
    guard line.hasPrefix(prefix + " "), let value = Int(line.dropFirst(prefix.count + 1).split(separator: " ")[0])
    else { throw HarnessError("expected \"\(prefix) N\", got \"\(line)\"") }
    return value
}
