// Starts the real bgtaskd for a test: private socket and configuration, readiness from a real NOTIFY_SOCKET.

import BGTaskCore
import BGTaskPOSIX
import Foundation
import Glibc

/// A real `bgtaskd` process serving a private socket in a scratch directory.
///
/// The harness listens on its own `NOTIFY_SOCKET` and returns only once the daemon sent `READY=1` (it is
/// sent after the socket serves), so tests never sleep for start-up. The daemon's log (stderr) goes to a
/// file the test can read. `stop()` sends SIGTERM and waits; deinit kills whatever is left. The daemon runs
/// under `timeout(1)`, so even if the test process dies without cleaning up, it ends by itself.
public final class DaemonHarness {
    /// A policy in seconds so end-to-end timelines take seconds each. Where an app (a real process, on a machine
    /// the other tests keep busy) must act in time, the window is wide: acknowledging `didEnterBackground` (20 s),
    /// registering once launched (30 s), ending its task once warned (3 s; a test that relays the warning to its
    /// app through the test process gives it 20 s), printing `willTerminate` before the kill (3 s). Where only the
    /// daemon's own countdown runs (a lock holder that never lets go), it stays short. A test of a timeout itself
    /// shortens that one (`fastPolicy(_:_:)`): there the app does nothing, by design.
    public static let fastPolicy = """
        [Policy]
        BackgroundTimeSec=5s
        ExpirationWarningSec=3s
        EnterBackgroundGraceSec=20s
        WillTerminateGraceSec=3s
        LaunchTimeoutSec=30s
        LockedSuspendGraceSec=400ms
        """

    /// The fast policy with `key` set to `value` instead (`"EnterBackgroundGraceSec"`, `"700ms"`): for a test of that
    /// timeout, whose app deliberately never acts in time.
    public static func fastPolicy(_ key: String, _ value: String) -> String {
        fastPolicy.split(separator: "\n").map { $0.hasPrefix(key + "=") ? "\(key)=\(value)" : String($0) }
            .joined(separator: "\n")
    }

    /// The scratch directory holding the socket, configuration and log.
    public let directory: ScratchDirectory
    /// The daemon's socket.
    public let socketPath: String
    /// The configuration file it was started with.
    public let configurationPath: String
    /// The daemon's stderr.
    public let logPath: String
    /// The `timeout` process the daemon runs under (it exits with the daemon's status).
    public let process: SpawnedProcess
    /// The daemon's own pidfd (a child of `process`).
    public let daemonPidFD: PidFD
    /// The longest a test daemon may live, after which `timeout` stops it.
    public static let lifetimeLimit = "600"
    private let collector: NotificationCollector
    private var exitStatus: ExitStatus?
    /// Every `sd_notify` message received so far.
    public var notifications: [String] { collector.messages }

    /// The daemon's pid.
    public var pid: pid_t { daemonPidFD.pid }

    /// Starts `bgtaskd` with `configuration` (the text of bgtaskd.conf) and waits for `READY=1`.
    /// `files` are written beside the configuration first, by relative path (`apps.d/NAME.conf`, drop-ins).
    ///
    /// `launchPrefix` goes between `timeout` and the daemon (for example `["prlimit", "--nofile=64:64"]`): it
    /// must exec the daemon, so that the daemon stays the only child of `timeout`. With
    /// `standardErrorIsJournalStream`, `JOURNAL_STREAM` names the daemon's standard error, as systemd sets it for a
    /// service whose output goes to the journal: the daemon then logs through the journal's socket.
    ///
    /// With `perUserInstance`, the daemon runs as that user's per-user instance (`--user`, through `setpriv`): the
    /// configuration and `files` go in `config/bgtaskd/` of the scratch directory, which is `$XDG_CONFIG_HOME`, and
    /// the whole scratch directory is the user's, as a user's own files are. `prepare` runs last, on the scratch
    /// directory, before the daemon starts: for a test to make files as an administrator (or an attacker) would.
    public init(
        configuration: String = DaemonHarness.fastPolicy, files: [String: String] = [:], arguments: [String] = [],
        environment: [String: String] = [:], launchPrefix: [String] = [], readyTimeout: Duration = .seconds(30),
        standardErrorIsJournalStream: Bool = false, perUserInstance user: ForeignUser? = nil,
        prepare: ((ScratchDirectory) throws -> Void)? = nil
    ) throws {
        directory = try ScratchDirectory(prefix: "bgtaskd-test")
        socketPath = directory.path + "/io.bgtask.Lifecycle"
        let configurationDirectory = user == nil ? "" : "config/bgtaskd/"
        configurationPath = try directory.write(configurationDirectory + "bgtaskd.conf", configuration)
        for (name, text) in files { try directory.write(configurationDirectory + name, text) }
        logPath = directory.path + "/bgtaskd.log"
        let notifyPath = directory.path + "/notify"
        collector = try NotificationCollector(socket: UnixSocket.bindDatagram(path: notifyPath))
        if let user { try Self.giveAway(directory.path, to: user) }
        try prepare?(directory)
        let log = try FileDescriptor.open(
            logPath, .writeOnly, options: [.create, .truncate], permissions: 0o644)
        defer { try? log.close() }
        var variables = [
            "NOTIFY_SOCKET": notifyPath, "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
            "BGTASKD_LOG_LEVEL": "debug",
        ]
        if standardErrorIsJournalStream {
            var status = stat()
            guard fstat(log.rawValue, &status) == 0 else { throw Errno(rawValue: errno, operation: "fstat(log)") }
            variables["JOURNAL_STREAM"] = "\(status.st_dev):\(status.st_ino)"
        }
        if user != nil { variables["XDG_CONFIG_HOME"] = directory.path + "/config" }
        for (key, value) in environment { variables[key] = value }
        var options = SpawnOptions(flags: .newProcessGroup, standardError: .fileDescriptor(log))
        options.environment = variables.map { "\($0.key)=\($0.value)" }
        let daemon =
            if let user {
                user.command("bgtaskd", ["--socket", socketPath, "--user"] + arguments)
            } else {
                [try Products.path("bgtaskd"), "--socket", socketPath, "--config", configurationPath] + arguments
            }
        process = try ProcessSpawner.spawn(
            ["timeout", "--kill-after=10", Self.lifetimeLimit] + launchPrefix + daemon, options: options)
        let wrapper = process
        do {
            try Self.waitForNotification("READY=1", from: collector, of: wrapper, timeout: readyTimeout)
            daemonPidFD = try Self.childPidFD(of: wrapper.pid)
        } catch {
            try? ProcessGroup(id: wrapper.pid).send(.kill)
            _ = try? wrapper.waitForExit()
            collector.stop()
            throw HarnessError("bgtaskd did not become ready: \(error)\nlog:\n\(Self.read(logPath))")
        }
    }

    /// Makes `path` and everything below it `user`'s (symbolic links themselves, not their targets).
    private static func giveAway(_ path: String, to user: ForeignUser) throws {
        let below = FileManager.default.enumerator(atPath: path)?.allObjects.compactMap { $0 as? String } ?? []
        for entry in [path] + below.map({ path + "/" + $0 }) where lchown(entry, user.uid, user.gid) != 0 {
            throw Errno(rawValue: errno, operation: "lchown(\(entry))")
        }
    }

    /// A pidfd for the single child of `pid` (the daemon under `timeout`).
    private static func childPidFD(of pid: pid_t) throws -> PidFD {
        let children = try String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)
        guard let child = children.split(separator: " ").first.flatMap({ pid_t($0) }) else {
            throw HarnessError("timeout (pid \(pid)) has no child")
        }
        return try PidFD.open(pid: child)
    }

    private static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    /// Waits until an `sd_notify` message containing `text` arrives.
    public func waitForNotification(_ text: String, timeout: Duration = .seconds(10)) throws {
        try Self.waitForNotification(text, from: collector, of: process, timeout: timeout)
    }

    private static func waitForNotification(
        _ text: String, from collector: NotificationCollector, of process: SpawnedProcess, timeout: Duration
    ) throws {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while !collector.waitForMessage(containing: text, timeout: .milliseconds(100)) {
            // Only once nothing more is queued does an exited daemon mean the message will never come.
            if try process.pidFD.hasExited && !collector.waitForMessage(containing: text, timeout: .milliseconds(200)) {
                throw HarnessError("bgtaskd exited without sending \(text)")
            }
            guard MonotonicClock.now() < deadline else { throw HarnessError("no \(text) within \(timeout)") }
        }
    }

    /// The daemon's log so far.
    public var log: String { Self.read(logPath) }

    /// Whether the daemon is still running.
    public var isRunning: Bool {
        exitStatus == nil && !((try? daemonPidFD.hasExited) ?? true)
    }

    /// The number of descriptors the daemon has open (`/proc/PID/fd`).
    public func openDescriptorCount() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
    }

    /// Waits until the daemon's descriptor count is at most `count` (it closes connections asynchronously).
    public func waitForDescriptorCount(atMost count: Int, timeout: Duration = .seconds(10)) throws -> Int {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        var current = try openDescriptorCount()
        while current > count && MonotonicClock.now() < deadline {
            // A bounded wait on the daemon's pidfd: returns early only if it dies, which the caller sees.
            _ = try daemonPidFD.waitForExit(timeout: .milliseconds(20))
            current = try openDescriptorCount()
        }
        return current
    }

    /// A raw client connected to the daemon.
    public func connect() throws -> RawVarlinkClient {
        try RawVarlinkClient(path: socketPath)
    }

    /// Sends SIGTERM and waits for a clean exit.
    @discardableResult
    public func stop(timeout: Duration = .seconds(20)) throws -> ExitStatus {
        if let exitStatus { return exitStatus }
        try daemonPidFD.sendSignal(.terminate)
        guard try process.pidFD.waitForExit(timeout: timeout) else {
            throw HarnessError("bgtaskd did not stop within \(timeout) of SIGTERM\nlog:\n\(log)")
        }
        let status = try process.waitForExit()
        exitStatus = status
        return status
    }

    /// Kills the whole process group (the `timeout` wrapper leads it, the daemon is in it) and reaps it.
    public func terminate() {
        guard exitStatus == nil else { return }
        try? ProcessGroup(id: process.pid).send(.kill)
        // Bounded: the group was just killed; a wrapper that somehow survives is left to `timeout`'s own limit.
        if (try? process.pidFD.waitForExit(timeout: .seconds(10))) == true {
            exitStatus = try? process.waitForExit()
        }
    }

    deinit {
        terminate()
        collector.stop()
        try? daemonPidFD.close()
        try? process.pidFD.close()
    }
}

/// Reads `sd_notify` messages on a thread of its own, as a service manager does, so the daemon's datagrams
/// never pile up (a full queue would block the daemon in `sd_notify`).
final class NotificationCollector: @unchecked Sendable {
    // @unchecked: every field is read and written with `condition` locked, except `socket`, which is immutable
    // and closed only after the reading thread finished.
    private let socket: FileDescriptor
    private let condition = NSCondition()
    private var received: [String] = []
    private var isStopping = false
    private var isFinished = false

    init(socket: FileDescriptor) {
        self.socket = socket
        let thread = Thread { [self] in self.readUntilStopped() }
        thread.name = "bgtask-notify-collector"
        thread.start()
    }

    var messages: [String] {
        condition.lock()
        defer { condition.unlock() }
        return received
    }

    private func readUntilStopped() {
        while true {
            condition.lock()
            let stopping = isStopping
            condition.unlock()
            if stopping { break }
            guard let ready = try? socket.poll(for: .readable, timeout: .milliseconds(50)), ready.contains(.readable),
                let bytes = try? socket.read(upTo: 65536)
            else { continue }
            condition.lock()
            received.append(String(decoding: bytes, as: UTF8.self))
            condition.broadcast()
            condition.unlock()
        }
        condition.lock()
        isFinished = true
        condition.broadcast()
        condition.unlock()
    }

    /// Waits up to `timeout` for a message containing `text` (true if one arrived, now or before).
    func waitForMessage(containing text: String, timeout: Duration) -> Bool {
        let limit = Date(timeIntervalSinceNow: Double(timeout.nanosecondCount) / 1e9)
        condition.lock()
        defer { condition.unlock() }
        while !received.contains(where: { $0.contains(text) }) {
            guard condition.wait(until: limit) else { return received.contains(where: { $0.contains(text) }) }
        }
        return true
    }

    /// Stops the thread and closes the socket.
    func stop() {
        condition.lock()
        isStopping = true
        while !isFinished { condition.wait() }
        condition.unlock()
        try? socket.close()
    }
}
