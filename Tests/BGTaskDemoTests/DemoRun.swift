// Runs the real `bgtask demo` as a new user would, in a session of its own, and checks what it leaves behind.
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Glibc

/// One run of the real `bgtask demo` binary: in a new session (so every process it starts, however deep, is
/// found by its session id), with `TMPDIR` pointing at a scratch directory (so anything it leaves there shows).
final class DemoRun {
    /// Where the demo makes its runtime directory; must be empty after the run.
    let temporary: ScratchDirectory
    /// Holds the demo's standard error.
    let logs: ScratchDirectory
    let child: ChildProcess
    /// Every line of standard output so far.
    private(set) var lines: [String] = []
    private let started = ContinuousClock.now

    /// The session the demo leads: its own pid.
    var session: pid_t { child.pid }

    /// Starts `launcher + [bgtask, "demo"] + arguments`; `launcher` is e.g. a `setpriv` command line, and
    /// `bgtask` the path of the bgtask executable to run.
    init(bgtask: String, arguments: [String] = [], launcher: [String] = []) throws {
        temporary = try ScratchDirectory(prefix: "bgtask-demo-tmp")
        // Writable by any user, sticky as /tmp is: the demo may run as another user.
        chmod(temporary.path, 0o1777)
        logs = try ScratchDirectory(prefix: "bgtask-demo-logs")
        let errors = try FileDescriptor.open(
            logs.path + "/stderr", .writeOnly, options: [.create, .truncate], permissions: 0o644)
        defer { try? errors.close() }
        child = try ChildProcess(
            launcher + [bgtask, "demo"] + arguments,
            environment: [
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "TMPDIR": temporary.path,
            ],
            standardError: errors, flags: .newSession)
    }

    /// Reads lines until one contains `text`; returns it.
    @discardableResult
    func waitForLine(containing text: String, timeout: Duration = .seconds(60)) throws -> String {
        let line = try child.waitForLine(timeout: timeout) { $0.contains(text) }
        lines = child.transcript
        return line
    }

    /// Reads standard output to its end, waits for the exit, and returns the status and how long the run took.
    func finish(timeout: Duration = .seconds(120)) throws -> (status: BGTaskPOSIX.ExitStatus, took: Duration) {
        let deadline = ContinuousClock.now + timeout
        // The demo prints at least every 1.5 s while it waits, so a 30 s silence means it hangs.
        while ContinuousClock.now < deadline, try child.nextLine(timeout: .seconds(30)) != nil {}
        lines = child.transcript
        let status = try child.waitForExit(timeout: .seconds(30))
        return (status, ContinuousClock.now - started)
    }

    /// Standard error.
    var errors: String {
        (try? String(contentsOfFile: logs.path + "/stderr", encoding: .utf8)) ?? ""
    }

    /// The whole transcript, for failure messages.
    var transcript: String { lines.joined(separator: "\n") }

    /// The first line containing `text`, and its index.
    func line(containing text: String) -> (index: Int, line: String)? {
        lines.firstIndex { $0.contains(text) }.map { ($0, lines[$0]) }
    }

    /// Every line containing `text`.
    func lines(containing text: String) -> [String] {
        lines.filter { $0.contains(text) }
    }

    /// Every pid the transcript names (`pid 123`, `pid=123`).
    var printedPIDs: Set<pid_t> {
        Set(lines.flatMap(pids(in:)))
    }

    /// The cgroups the demo said it made (`CgroupRoot=PATH`, `MemoryCgroupRoot=PATH`); none when it made none.
    var cgroupsMade: [String] {
        guard let made = line(containing: "the demo made cgroups")?.line else { return [] }
        return made.split(separator: " ").compactMap { word in
            word.split(separator: "=", maxSplits: 1).last.flatMap { $0.hasPrefix("/") ? String($0) : nil }
        }
    }

    /// The live processes whose session is the demo's: whatever it started and did not stop.
    func processesLeft() -> [ProcessStat] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { pid_t($0) }.compactMap { try? ProcFS().stat($0) }
            .filter { $0.sessionID == session }
    }

    /// What is left in the scratch `TMPDIR`: nothing, when the demo cleaned up.
    func temporaryLeftovers() -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: temporary.path)) ?? ["(cannot list \(temporary.path))"]
    }
}

/// The pids a line names (`pid 123`, `pid=123`), in order.
func pids(in line: String) -> [pid_t] {
    var pids: [pid_t] = []
    var rest = Substring(line)
    while let range = rest.range(of: "pid") {
        rest = rest[range.upperBound...]
        guard rest.first == " " || rest.first == "=" else { continue }
        if let pid = pid_t(rest.dropFirst().prefix { $0.isNumber }) { pids.append(pid) }
    }
    return pids
}

/// The value after `key=` in a line (`count=3` gives "3"), up to the next blank.
func value(of key: String, in line: String) -> String? {
    line.split(separator: " ").first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
}

/// The seconds after `label` in a line (`backgroundTimeRemaining 5.49s` gives 5.49).
func seconds(after label: String, in line: String) -> Double? {
    guard let range = line.range(of: label + " ") else { return nil }
    return Double(line[range.upperBound...].prefix { $0.isNumber || $0 == "." })
}
