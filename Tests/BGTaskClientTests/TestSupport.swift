// Helpers of the client tests: temporary directories, thread-safe recorders, and waiting without sleeping.
import BGTaskSystem
import Foundation
import Synchronization
import Testing

/// A directory made with `mkdtemp` under `$TMPDIR` (or `/tmp`), removed with its contents by `remove()`.
struct TemporaryDirectory: Sendable {
    let path: String

    init(prefix: String) throws {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(base)/\(prefix)-XXXXXX".utf8CString)
        guard let result = mkdtemp(&template) else { throw Errno(rawValue: errno, operation: "mkdtemp") }
        path = String(cString: result)
    }

    /// Removes the directory tree.
    func remove() {
        try? FileManager.default.removeItem(atPath: path)  // Test cleanup: a leftover directory is harmless.
    }
}

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
                if !condition(all) { Issue.record("condition not met; recorded: \(all)", sourceLocation: sourceLocation) }
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
