// The demo's own bgtaskd: started under timeout(1) on a private socket, ready when it says READY=1, stopped at the end.
import BGTaskSystem
import Foundation
import Glibc

/// A `bgtaskd` the demo started for itself, apart from any other daemon on the host.
///
/// It runs under `timeout(1)`, so even if bgtask is killed outright (SIGKILL leaves no chance to clean up) the
/// daemon ends by itself. Readiness comes from the daemon: the demo listens on a `NOTIFY_SOCKET` of its own, as
/// systemd would, and returns once `READY=1` arrives — sent only after the socket serves.
final class PrivateDaemon {
    /// The daemon's socket.
    let socketPath: String
    /// The daemon's standard error: its log, shown if it fails.
    let logPath: String
    /// The `timeout` process the daemon runs under, leading its own process group.
    let wrapper: SpawnedProcess
    /// The daemon itself, the child of `timeout`.
    let daemon: PidFD
    /// How long after the spawn `READY=1` came.
    let startUpTime: Duration
    private var exitStatus: ExitStatus?

    /// The daemon's pid.
    var pid: pid_t { daemon.pid }

    /// Starts `executable --socket DIRECTORY/io.bgtask.Lifecycle --config CONFIGURATION` under `timeout LIFETIME`
    /// and waits at most `readyTimeout` for `READY=1`.
    init(
        executable: String, directory: String, configurationPath: String, lifetime: Duration,
        readyTimeout: Duration = .seconds(30)
    ) throws(DemoFailure) {
        let socketPath = directory + "/io.bgtask.Lifecycle"
        let logPath = directory + "/bgtaskd.log"
        self.socketPath = socketPath
        self.logPath = logPath
        let notifyPath = directory + "/notify"
        let notifications = try performing("cannot listen on \(notifyPath)") { () throws(Errno) in
            try UnixSocket.bindDatagram(path: notifyPath)
        }
        defer {
            // Once ready, nobody reads: closing and removing the socket makes the daemon's later sd_notify
            // calls fail at once (it ignores their errors) instead of filling a queue nobody drains.
            try? notifications.close()
            unlink(notifyPath)
        }
        let log = try performing("cannot create \(logPath)") { () throws(Errno) in
            try FileDescriptor.open(logPath, .writeOnly, options: [.create, .truncate], permissions: 0o600)
        }
        defer { try? log.close() }
        var environment = [
            "NOTIFY_SOCKET=\(notifyPath)", "PATH=\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")",
        ]
        if let level = ProcessInfo.processInfo.environment["BGTASKD_LOG_LEVEL"] {
            environment.append("BGTASKD_LOG_LEVEL=\(level)")
        }
        let started = ContinuousClock.now
        let seconds = max(1, Int(lifetime.inSeconds.rounded(.up)))
        do throws(Errno) {
            // timeout(1) makes itself a process group leader, so the terminal's Ctrl-C reaches bgtask only, which
            // then stops the daemon in order; --kill-after bounds a daemon that would not stop on SIGTERM.
            wrapper = try ProcessSpawner.spawn(
                [
                    "timeout", "--kill-after=5", String(seconds), executable, "--socket", socketPath, "--config",
                    configurationPath,
                ],
                options: SpawnOptions(
                    flags: .newProcessGroup, standardError: .fileDescriptor(log), environment: environment))
        } catch {
            throw DemoFailure("cannot start timeout(1) for bgtaskd: \(error); is coreutils installed?")
        }
        do throws(DemoFailure) {
            try Self.waitForReady(on: notifications, of: wrapper, timeout: readyTimeout, logPath: logPath)
            daemon = try Self.onlyChild(of: wrapper.pid)
        } catch {
            try? ProcessGroup(id: wrapper.pid).send(.kill)
            _ = try? wrapper.waitForExit()
            try? wrapper.pidFD.close()
            throw error
        }
        startUpTime = ContinuousClock.now - started
    }

    /// Reads `sd_notify` datagrams until one holds `READY=1`; fails if the daemon exits or the time runs out.
    private static func waitForReady(
        on socket: FileDescriptor, of wrapper: SpawnedProcess, timeout: Duration, logPath: String
    ) throws(DemoFailure) {
        let deadline = ContinuousClock.now + timeout
        while true {
            try Interruption.check()
            let ready = try performing("waiting for READY=1") { () throws(Errno) in
                try socket.poll(for: .readable, timeout: .milliseconds(100))
            }
            if ready.contains(.readable) {
                let message = try performing("reading the notify socket") { () throws(Errno) in
                    try socket.read(upTo: 65_536)
                }
                let assignments = String(decoding: message, as: UTF8.self).split(separator: "\n")
                if assignments.contains("READY=1") { return }
                continue
            }
            if (try? wrapper.pidFD.hasExited) ?? true {
                let status = (try? wrapper.waitForExit()).map { " (\($0))" } ?? ""
                throw DemoFailure("bgtaskd exited before it was ready\(status): \(Self.tail(of: logPath))")
            }
            guard ContinuousClock.now < deadline else {
                throw DemoFailure("bgtaskd sent no READY=1 within \(Transcript.seconds(timeout)): \(tail(of: logPath))")
            }
        }
    }

    /// A pidfd for the single child of `pid`: the daemon, started by `timeout`.
    private static func onlyChild(of pid: pid_t) throws(DemoFailure) -> PidFD {
        let path = "/proc/\(pid)/task/\(pid)/children"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
            let child = text.split(separator: " ").first.flatMap({ pid_t($0) })
        else {
            throw DemoFailure("cannot find bgtaskd under timeout (pid \(pid)) in \(path)")
        }
        // Safe from PID reuse: the daemon is alive (it just sent READY=1) and its parent, timeout, is our
        // unreaped child, which reaps it only when it exits; the pidfd then still names this process.
        return try performing("pidfd_open(bgtaskd)") { () throws(Errno) in try PidFD.open(pid: child) }
    }

    /// The last lines of the daemon's log, on one line, for a failure message.
    static func tail(of logPath: String) -> String {
        let lines = lastLines(of: logPath, count: 3)
        return lines.isEmpty ? "its log is empty" : "its log ends: " + lines.joined(separator: " / ")
    }

    /// The last `count` lines of the log at `logPath`.
    static func lastLines(of logPath: String, count: Int) -> [String] {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(count).map(String.init)
    }

    /// Stops the daemon (SIGTERM: it resumes every app it stopped, closes its clients and removes its socket)
    /// and reaps `timeout`; SIGKILL to the whole group if it has not stopped within `timeout`. Never throws:
    /// this is the clean-up.
    @discardableResult
    func stop(timeout: Duration = .seconds(10)) -> (status: ExitStatus?, took: Duration) {
        let started = ContinuousClock.now
        if let exitStatus { return (exitStatus, .zero) }
        try? daemon.sendSignal(.terminate)
        if (try? wrapper.pidFD.waitForExit(timeout: timeout)) != true {
            try? ProcessGroup(id: wrapper.pid).send(.kill)
            _ = try? wrapper.pidFD.waitForExit(timeout: .seconds(5))
        }
        let status = (try? wrapper.pidFD.hasExited) == true ? try? wrapper.waitForExit() : nil
        exitStatus = status
        try? daemon.close()
        try? wrapper.pidFD.close()
        return (status, ContinuousClock.now - started)
    }
}
