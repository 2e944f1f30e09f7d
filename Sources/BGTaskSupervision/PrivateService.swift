// A service started for the caller alone: under timeout(1), its log in a file, ready when it says READY=1.

import BGTaskPOSIX
import Glibc

/// Why a private service did not become ready.
public enum PrivateServiceError: Error, CustomStringConvertible {
    /// Setting it up failed: the notify socket, the log file, or starting `timeout(1)`.
    case cannotStart(String)
    /// It exited before sending `READY=1` (with `timeout(1)`'s status when it could be reaped).
    case exitedBeforeReady(ExitStatus?)
    /// It sent no `READY=1` within the time.
    case notReady(within: Duration)
    /// The caller's `check` threw while waiting (an interruption): its error.
    case interrupted(any Error)

    public var description: String {
        switch self {
        case .cannotStart(let what): what
        case .exitedBeforeReady(let status): "it exited before it was ready" + (status.map { " (\($0))" } ?? "")
        case .notReady(let timeout): "it sent no READY=1 within \(timeout)"
        case .interrupted(let error): "interrupted: \(error)"
        }
    }
}

/// A service run for the caller alone, as systemd would run it but without systemd: the bgtaskd of `bgtask demo`
/// and of the benchmarks.
///
/// It runs under `timeout --kill-after=5 LIFETIME`, which leads a process group of its own, so the service ends by
/// itself even when the caller is killed outright, and the terminal's Ctrl-C reaches only the caller, which then
/// stops the service in order. Readiness comes from the service: the caller listens on a `NOTIFY_SOCKET` of its
/// own and returns once `READY=1` arrives.
public struct PrivateService: Sendable {
    /// `timeout(1)`: the caller's child, leading the service's process group.
    public let wrapper: SpawnedProcess
    /// The service, the only child of `timeout`.
    public let service: PidFD

    /// The service's pid.
    public var pid: pid_t { service.pid }

    /// Starts `arguments` under `timeout`, with standard error written to `logPath` (created with `logPermissions`)
    /// and `NOTIFY_SOCKET` naming a datagram socket bound at `notifyPath` for the wait, and waits at most
    /// `readyTimeout` for `READY=1`. `environment` is the service's whole environment besides `NOTIFY_SOCKET`.
    /// `check` runs between waits, to abandon the wait (an interruption). On failure the group is killed and
    /// `timeout` reaped. The notify socket is closed and removed once ready: the service's later `sd_notify` calls
    /// then fail at once (bgtaskd ignores their errors) instead of filling a queue nobody drains.
    public static func start(
        _ arguments: [String], lifetime: Duration, environment: [String], notifyPath: String, logPath: String,
        logPermissions: mode_t = 0o644, readyTimeout: Duration, check: () throws -> Void = {}
    ) throws(PrivateServiceError) -> PrivateService {
        let notifications: FileDescriptor
        let wrapper: SpawnedProcess
        do {
            notifications = try UnixSocket.bindDatagram(path: notifyPath)
        } catch {
            throw .cannotStart("cannot listen on \(notifyPath): \(error)")
        }
        defer {
            try? notifications.close()
            unlink(notifyPath)
        }
        do {
            let log = try FileDescriptor.open(
                logPath, .writeOnly, options: [.create, .truncate], permissions: logPermissions)
            defer { try? log.close() }
            let seconds = max(1, Int((Double(lifetime.nanosecondCount) / 1e9).rounded(.up)))
            wrapper = try ProcessSpawner.spawn(
                ["timeout", "--kill-after=5", String(seconds)] + arguments,
                options: SpawnOptions(
                    flags: .newProcessGroup, standardError: .fileDescriptor(log),
                    environment: environment + ["NOTIFY_SOCKET=\(notifyPath)"]))
        } catch {
            throw .cannotStart("cannot start timeout(1) for \(arguments.first ?? "the service"): \(error)")
        }
        do throws(PrivateServiceError) {
            try waitForReady(on: notifications, of: wrapper, timeout: readyTimeout, check: check)
            return PrivateService(wrapper: wrapper, service: try onlyChild(of: wrapper.pid))
        } catch {
            try? ProcessGroup(id: wrapper.pid).send(.kill)
            _ = try? wrapper.waitForExit()
            try? wrapper.pidFD.close()
            throw error
        }
    }

    /// Reads `sd_notify` datagrams until one holds `READY=1`; fails if the service exits or the time runs out.
    private static func waitForReady(
        on socket: FileDescriptor, of wrapper: SpawnedProcess, timeout: Duration, check: () throws -> Void
    ) throws(PrivateServiceError) {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            do {
                try check()
            } catch {
                throw .interrupted(error)
            }
            do {
                if try socket.poll(for: .readable, timeout: .milliseconds(100)).contains(.readable) {
                    let message = String(decoding: try socket.read(upTo: 65_536), as: UTF8.self)
                    if message.split(separator: "\n").contains("READY=1") { return }
                    continue
                }
            } catch {
                throw .cannotStart("cannot read the notify socket: \(error)")
            }
            if (try? wrapper.pidFD.hasExited) ?? true {
                throw .exitedBeforeReady(try? wrapper.waitForExit())
            }
            guard MonotonicClock.now() < deadline else { throw .notReady(within: timeout) }
        }
    }

    /// A pidfd for the single child of `pid`: the service, started by `timeout`.
    private static func onlyChild(of pid: pid_t) throws(PrivateServiceError) -> PidFD {
        let path = "\(pid)/task/\(pid)/children"
        guard let text = try? ProcFS().read(path),
            let child = text.split(separator: " ").first.flatMap({ pid_t($0) })
        else {
            throw .cannotStart("cannot find the service under timeout (pid \(pid)) in /proc/\(path)")
        }
        // Safe from PID reuse: the service is alive (it just sent READY=1) and its parent, timeout, is the caller's
        // unreaped child, which reaps it only when it exits; the pidfd then still names this process.
        do {
            return try PidFD.open(pid: child)
        } catch {
            throw .cannotStart("pidfd_open(\(child)): \(error)")
        }
    }

    /// Stops the service (SIGTERM) and reaps `timeout`; SIGKILL to the whole group if it has not stopped within
    /// `timeout`. Returns `timeout(1)`'s exit status when it could be reaped. Never throws: this is the clean-up.
    /// Call once.
    public func stop(timeout: Duration) -> ExitStatus? {
        try? service.sendSignal(.terminate)
        if (try? wrapper.pidFD.waitForExit(timeout: timeout)) != true {
            try? ProcessGroup(id: wrapper.pid).send(.kill)
            _ = try? wrapper.pidFD.waitForExit(timeout: .seconds(5))
        }
        let status = (try? wrapper.pidFD.hasExited) == true ? try? wrapper.waitForExit() : nil
        try? service.close()
        try? wrapper.pidFD.close()
        return status
    }
}
