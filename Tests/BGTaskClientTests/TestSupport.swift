// Helpers of the client tests: thread-safe recorders, the scripted daemon's scope, and the apps as processes.
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Synchronization
import Testing

/// Values appended from any thread, read and awaited from the test.
final class Recorder<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])
    private let changed = NSCondition()

    /// Appends `value` and wakes waiters.
    func append(_ value: Value) {
        changed.lock()
        values.withLock { $0.append(value) }
        changed.broadcast()
        changed.unlock()
    }

    /// What was recorded so far.
    var all: [Value] { values.withLock { $0 } }

    /// Waits until the recorded values satisfy `condition`, at most `timeout`; returns the values then, and
    /// records an issue if the condition never held.
    @discardableResult
    func wait(
        timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation,
        until condition: ([Value]) -> Bool
    ) -> [Value] {
        let deadline = Date().addingTimeInterval(Double(timeout.components.seconds))
        changed.lock()
        defer { changed.unlock() }
        while !condition(all) {
            if !changed.wait(until: deadline) {
                if !condition(all) {
                    Issue.record("condition not met; recorded: \(all)", sourceLocation: sourceLocation)
                }
                return all
            }
        }
        return all
    }

    /// Waits until at least `count` values were recorded.
    @discardableResult
    func wait(
        forCount count: Int, timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation
    ) -> [Value] {
        wait(timeout: timeout, sourceLocation: sourceLocation) { $0.count >= count }
    }
}

/// Runs `body` with a scripted daemon that is stopped afterwards, whatever happens.
func withScriptedDaemon<Result>(
    respond: ScriptedDaemon.Responder? = nil,
    _ body: (ScriptedDaemon) throws -> Result
) throws -> Result {
    let daemon = try ScriptedDaemon(respond: respond)
    defer { daemon.stop() }
    return try body(daemon)
}

/// The fixture app's command line: it exits by itself after `lifetime` seconds.
func fixtureCommand(socketPath: String, lifetime: Int = 60) throws -> [String] {
    [try Products.path("BGTaskFixtureApp"), "--socket", socketPath, "--lifetime", String(lifetime)]
}

/// The example's command line; `--deadline` makes it give up by itself after 120 s. Run directly rather than under
/// `timeout`, so the test's pidfd is the app's own: the process the daemon stops and the one the cleanup signals.
func photoUploaderCommand(socketPath: String, photos: Int, chunkMilliseconds: Int) throws -> [String] {
    [
        try Products.path("PhotoUploader"), "--socket", socketPath, "--photos", String(photos), "--chunk-ms",
        String(chunkMilliseconds), "--deadline", "120",
    ]
}

/// Runs `body` with a started child, ended afterwards whatever happens: SIGTERM and SIGCONT first (so a stopped
/// child acts on them), then SIGKILL when it is still there 10 s later (ChildProcess's deinit).
func withChild<Result>(_ arguments: [String], _ body: (ChildProcess) throws -> Result) throws -> Result {
    let child = try ChildProcess(arguments)
    defer {
        if !child.hasExited {
            try? child.process.pidFD.sendSignal(.terminate)  // ESRCH: it exited meanwhile, which is the goal.
            try? child.process.pidFD.sendSignal(.continue)
            _ = try? child.waitForExit(timeout: .seconds(10))  // Still running: the deinit's SIGKILL follows.
        }
    }
    return try body(child)
}

extension ChildProcess {
    /// Sends `command` and returns the next line that starts with one of `prefixes` or with "error".
    @discardableResult
    func run(_ command: String, expecting prefixes: String...) throws -> String {
        try send(command)
        return try waitForLine { line in line.hasPrefix("error") || prefixes.contains { line.hasPrefix($0) } }
    }
}
