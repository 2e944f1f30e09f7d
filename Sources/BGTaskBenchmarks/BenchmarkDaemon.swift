// A private bgtaskd for a benchmark: its own socket and configuration, under timeout(1), ready on READY=1.

import BGTaskSystem
import Foundation
import Glibc

/// A failure of a benchmark's own set-up or of a step the benchmark needs to work, with what went wrong.
public struct BenchmarkError: Error, CustomStringConvertible {
    /// What went wrong, for one line.
    public var description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}

/// A `bgtaskd` the benchmark started for itself, apart from any other daemon on the host.
///
/// It runs under `timeout(1)`, so even a benchmark killed outright leaves no daemon behind. Readiness comes from
/// the daemon: the benchmark listens on a `NOTIFY_SOCKET` of its own and returns once `READY=1` arrives, which
/// is sent only after the socket serves. The daemon's standard error goes to a log file in `directory`.
public final class BenchmarkDaemon: Sendable {
    /// The daemon's socket, in `directory`.
    public let socketPath: String
    /// The daemon's log (its standard error).
    public let logPath: String
    /// The `timeout` process the daemon runs under, leading its own process group.
    private let wrapper: SpawnedProcess
    /// The daemon itself, the child of `timeout`.
    private let daemon: PidFD

    /// The daemon's pid.
    public var pid: pid_t { daemon.pid }

    /// Starts `executable --socket DIRECTORY/io.bgtask.Lifecycle --config DIRECTORY/bgtaskd.conf` with
    /// `configuration` as the file's text, under `timeout LIFETIME`, and waits at most 30 s for `READY=1`.
    public init(executable: String, directory: String, configuration: String, lifetime: Duration) throws {
        socketPath = directory + "/io.bgtask.Lifecycle"
        logPath = directory + "/bgtaskd.log"
        let configurationPath = directory + "/bgtaskd.conf"
        try configuration.write(toFile: configurationPath, atomically: true, encoding: .utf8)
        let notifyPath = directory + "/notify"
        let notifications = try UnixSocket.bindDatagram(path: notifyPath)
        defer {
            // Once ready, nobody reads: closing and removing the socket makes the daemon's later sd_notify
            // calls fail at once (it ignores their errors) instead of filling a queue nobody drains.
            try? notifications.close()
            unlink(notifyPath)
        }
        let log = try FileDescriptor.open(logPath, .writeOnly, options: [.create, .truncate], permissions: 0o644)
        defer { try? log.close() }
        let environment = [
            "NOTIFY_SOCKET=\(notifyPath)", "BGTASKD_LOG_LEVEL=notice",
            "PATH=\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")",
        ]
        let seconds = max(1, Int(lifetime.components.seconds))
        // --kill-after bounds a daemon that would not stop on timeout's SIGTERM.
        wrapper = try ProcessSpawner.spawn(
            [
                "timeout", "--kill-after=5", String(seconds), executable, "--socket", socketPath, "--config",
                configurationPath,
            ],
            options: SpawnOptions(
                flags: .newProcessGroup, standardError: .fileDescriptor(log), environment: environment))
        do {
            try Self.waitForReady(on: notifications, of: wrapper, timeout: .seconds(30), logPath: logPath)
            daemon = try Self.onlyChild(of: wrapper.pid)
        } catch {
            try? ProcessGroup(id: wrapper.pid).send(.kill)
            _ = try? wrapper.waitForExit()
            try? wrapper.pidFD.close()
            throw error
        }
    }

    /// Reads `sd_notify` datagrams until one holds `READY=1`; fails if the daemon exits or the time runs out.
    private static func waitForReady(
        on socket: FileDescriptor, of wrapper: SpawnedProcess, timeout: Duration, logPath: String
    ) throws {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while MonotonicClock.now() < deadline {
            if try socket.poll(for: .readable, timeout: .milliseconds(100)).contains(.readable) {
                let assignments = String(decoding: try socket.read(upTo: 65_536), as: UTF8.self).split(separator: "\n")
                if assignments.contains("READY=1") { return }
                continue
            }
            if try wrapper.pidFD.hasExited {
                throw BenchmarkError("bgtaskd exited before it was ready: \(tail(of: logPath))")
            }
        }
        throw BenchmarkError("bgtaskd sent no READY=1 within \(timeout): \(tail(of: logPath))")
    }

    /// A pidfd for the single child of `pid`: the daemon, started by `timeout`.
    private static func onlyChild(of pid: pid_t) throws -> PidFD {
        let path = "/proc/\(pid)/task/\(pid)/children"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
            let child = text.split(separator: " ").first.flatMap({ pid_t($0) })
        else {
            throw BenchmarkError("cannot find bgtaskd under timeout (pid \(pid)) in \(path)")
        }
        // Safe from PID reuse: the daemon is alive (it just sent READY=1) and its parent, timeout, is our
        // unreaped child, which reaps it only when it exits; the pidfd then still names this process.
        return try PidFD.open(pid: child)
    }

    /// The last lines of the log, on one line, for a failure message.
    static func tail(of logPath: String) -> String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        let lines = text.split(separator: "\n").suffix(3)
        return lines.isEmpty ? "its log is empty" : "its log ends: " + lines.joined(separator: " / ")
    }

    /// Whether the daemon is still running.
    public var isRunning: Bool { (try? daemon.hasExited) == false }

    /// Stops the daemon (SIGTERM: it resumes every app it stopped, closes its clients and removes its socket)
    /// and reaps `timeout`; SIGKILL to the group `timeout` leads if it has not stopped within 10 s. Never
    /// throws: this is the clean-up. Call once.
    public func stop() {
        try? daemon.sendSignal(.terminate)
        if (try? wrapper.pidFD.waitForExit(timeout: .seconds(10))) != true {
            try? ProcessGroup(id: wrapper.pid).send(.kill)
            _ = try? wrapper.pidFD.waitForExit(timeout: .seconds(5))
        }
        if (try? wrapper.pidFD.hasExited) == true { _ = try? wrapper.waitForExit() }
        try? daemon.close()
        try? wrapper.pidFD.close()
    }
}

/// A fresh directory under `$TMPDIR` (or `/tmp`), world-traversable (mode 0755) so that a process running as
/// another user can reach the socket and the executable copied into it.
func makeScratchDirectory(prefix: String) throws -> String {
    let base = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
    var template = Array("\(base)/\(prefix)-XXXXXX".utf8CString)
    guard let path = mkdtemp(&template) else {
        throw BenchmarkError("cannot create a directory in \(base): \(Errno(rawValue: errno, operation: "mkdtemp"))")
    }
    let directory = String(cString: path)
    guard chmod(directory, 0o755) == 0 else {
        throw BenchmarkError("cannot open \(directory) to other users: \(Errno(rawValue: errno, operation: "chmod"))")
    }
    return directory
}
