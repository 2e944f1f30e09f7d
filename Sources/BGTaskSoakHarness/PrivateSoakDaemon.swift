// The daemon run by the harness without systemd: the harness plays the service manager, watchdog included.

import BGTaskPOSIX
import Glibc
import Synchronization

/// `bgtaskd` under `timeout(1)` (so it never outlives the run), with `WATCHDOG_USEC` and a `NOTIFY_SOCKET` the
/// harness reads: `READY=1` ends a start, `WATCHDOG=1` pings are timed, and silence past the watchdog interval
/// gets what systemd gives it: SIGABRT (with SIGCONT, as systemd sends), SIGKILL after a short abort timeout, the
/// `ExecStopPost=` step (`bgtaskd --release-stopped`) and a new daemon.
final class PrivateSoakDaemon: SoakService {
    let socketPath: String
    private let executable: String
    private let arguments: [String]
    private let prefix: [String]
    /// Added to the daemon's environment, `NAME=VALUE` each.
    private let environment: [String]
    private let logPath: String
    private let notifyPath: String
    private let lifetime: Duration
    private let socket: FileDescriptor
    private var wrapper: SpawnedProcess?
    private var daemon: PidFD?
    /// Counts of READY=1 and the last WATCHDOG=1, written by the reader thread.
    private let notifications = NotifyReader()
    private var isStopped = false
    private var unexpected: [(stoppedAt: Int64, readyAt: Int64)] = []

    var daemonPID: pid_t? { daemon?.pid }

    /// Starts `executable` with `arguments` (after `prefix`, such as `nsenter` into the state's namespace) and
    /// waits for it to be ready; `environment` is added to the daemon's (`NAME=VALUE` each).
    init(
        executable: String, arguments: [String], prefix: [String], socketPath: String, notifyPath: String,
        logPath: String, lifetime: Duration, environment: [String] = []
    ) throws {
        self.environment = environment
        self.executable = executable
        self.arguments = arguments
        self.prefix = prefix
        self.socketPath = socketPath
        self.logPath = logPath
        self.notifyPath = notifyPath
        self.lifetime = lifetime
        do {
            socket = try UnixSocket.bindDatagram(path: notifyPath)
        } catch {
            throw SoakError("cannot listen on \(notifyPath): \(error)")
        }
        let socket = socket
        let reader = notifications
        try DetachedThread.start(name: "soak-notify") {
            while !reader.closing.load(ordering: .relaxed) {
                guard (try? socket.poll(for: .readable, timeout: .milliseconds(200)))?.contains(.readable) == true,
                    let bytes = try? socket.read(upTo: 65_536)
                else { continue }
                let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
                let now = MonotonicClock.now()
                reader.notified.withLock { state in
                    if lines.contains("READY=1") { state.readyCount += 1; state.lastPing = now }
                    if lines.contains("WATCHDOG=1") { state.lastPing = now }
                }
            }
        }
        _ = try start()
    }

    /// Starts a daemon and waits at most 60 s for its READY=1; when it was ready.
    private func start() throws -> Int64 {
        let before = notifications.notified.withLock { $0.readyCount }
        let log = try FileDescriptor.open(logPath, .writeOnly, options: [.create, .append], permissions: 0o644)
        defer { try? log.close() }
        let seconds = max(1, lifetime.components.seconds)
        let process = try ProcessSpawner.spawn(
            ["timeout", "--kill-after=5", String(seconds)] + prefix + [executable] + arguments,
            options: SpawnOptions(
                flags: .newProcessGroup, standardOutput: .fileDescriptor(log), standardError: .fileDescriptor(log),
                environment: [
                    "PATH=\(ProcessEnvironment.current()["PATH"] ?? "/usr/bin:/bin")", "BGTASKD_LOG_LEVEL=notice",
                    "NOTIFY_SOCKET=\(notifyPath)",
                    "WATCHDOG_USEC=\(soakWatchdogInterval.components.seconds * 1_000_000)",
                ] + environment))
        wrapper = process
        let deadline = MonotonicClock.now() + Duration.seconds(60).nanosecondCount
        while notifications.notified.withLock({ $0.readyCount }) == before {
            if (try? process.pidFD.hasExited) != false {
                _ = try? process.waitForExit()
                wrapper = nil
                throw SoakError("bgtaskd exited before it was ready; see \(logPath)")
            }
            guard MonotonicClock.now() < deadline else {
                throw SoakError("bgtaskd sent no READY=1 within 60 s; see \(logPath)")
            }
            usleep(10_000)
        }
        let readyAt = notifications.notified.withLock { $0.lastPing }
        let childrenPath = "\(process.pid)/task/\(process.pid)/children"
        guard let text = try? ProcFS().read(childrenPath),
            let child = text.split(separator: " ").first.flatMap({ pid_t($0) }),
            let pidFD = try? PidFD.open(pid: child)
        else { throw SoakError("cannot find bgtaskd under timeout (pid \(process.pid))") }
        daemon = pidFD
        return readyAt
    }

    /// Waits for the daemon and its wrapper to exit, SIGKILL after `timeout`; then runs the stop-post step.
    private func reap(timeout: Duration) {
        if let daemon, (try? daemon.waitForExit(timeout: timeout)) != true { try? daemon.sendSignal(.kill) }
        if let wrapper {
            if (try? wrapper.pidFD.waitForExit(timeout: .seconds(10))) != true {
                try? ProcessGroup(id: wrapper.pid).send(.kill)
            }
            _ = try? wrapper.waitForExit()
            try? wrapper.pidFD.close()
        }
        try? daemon?.close()
        daemon = nil
        wrapper = nil
        releaseStopped()
    }

    /// `ExecStopPost=`: `bgtaskd --release-stopped` thaws whatever the state file says is stopped.
    private func releaseStopped() {
        guard
            let process = try? ProcessSpawner.spawn(
                ["timeout", "30"] + prefix + [executable, "--release-stopped"] + arguments,
                options: SpawnOptions(standardOutput: .nullDevice, standardError: .nullDevice))
        else { return }
        _ = try? process.waitForExit()
        try? process.pidFD.close()
    }

    func reload() {
        try? daemon?.sendSignal(.hangUp)
    }

    func killAndRestart() throws -> (stoppedAt: Int64, readyAt: Int64) {
        let stoppedAt = MonotonicClock.now()
        try? daemon?.sendSignal(.kill)
        reap(timeout: .seconds(5))
        return (stoppedAt, try start())
    }

    func hangUntilWatchdog() throws -> (stoppedAt: Int64, readyAt: Int64) {
        let stoppedAt = MonotonicClock.now()
        try? daemon?.sendSignal(.stop)
        // The watchdog: silence past the interval since the last ping.
        while MonotonicClock.now() - notifications.notified.withLock({ $0.lastPing })
            < soakWatchdogInterval.nanosecondCount
        {
            usleep(50_000)
        }
        return (stoppedAt, try watchdogAbort())
    }

    /// What systemd does on a watchdog timeout: SIGABRT and SIGCONT, SIGKILL after 3 s, stop-post, restart.
    private func watchdogAbort() throws -> Int64 {
        try? daemon?.sendSignal(.abort)
        try? daemon?.sendSignal(.continue)
        reap(timeout: .seconds(3))
        return try start()
    }

    func restart() throws -> (stoppedAt: Int64, readyAt: Int64) {
        let stoppedAt = MonotonicClock.now()
        try? daemon?.sendSignal(.terminate)
        reap(timeout: .seconds(15))
        return (stoppedAt, try start())
    }

    func unexpectedWatchdogRestarts() -> [(stoppedAt: Int64, readyAt: Int64)] {
        guard daemon != nil else { return [] }
        let silence = MonotonicClock.now() - notifications.notified.withLock { $0.lastPing }
        if silence >= soakWatchdogInterval.nanosecondCount {
            let stoppedAt = MonotonicClock.now()
            if let readyAt = try? watchdogAbort() { unexpected.append((stoppedAt, readyAt)) }
        }
        defer { unexpected = [] }
        return unexpected
    }

    func stop() {
        guard !isStopped else { return }
        isStopped = true
        try? daemon?.sendSignal(.terminate)
        reap(timeout: .seconds(15))
        notifications.closing.store(true, ordering: .relaxed)
        usleep(300_000)
        try? socket.close()
        unlink(notifyPath)
    }
}

/// What the notify socket's reader thread shares with the harness.
final class NotifyReader: Sendable {
    /// READY=1 messages so far, and when the last READY=1 or WATCHDOG=1 came (`CLOCK_MONOTONIC` ns).
    let notified = Mutex<(readyCount: Int, lastPing: Int64)>((0, 0))
    /// Set to end the thread.
    let closing = Atomic<Bool>(false)
}
