// `bgtask-bench deadlines`: how late expiration warnings reach apps while a hundred apps churn and others poll.

import BGTaskClient
import BGTaskConfig
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import Dispatch
import Foundation
import Glibc
import Synchronization

/// Measures, from the apps' side, how late `backgroundTaskExpiring` arrives against its due time while the
/// daemon is busy: `apps` apps churn through background, lease, warning, suspension and foreground, post
/// notifications to each other, and a process running as `nobody` calls `GetStatus`, `ListApps` and `History`
/// in a loop with pipelined bursts.
///
/// An app's warning is due at the arrival of its `didEnterBackground` (read on the same event stream) plus its
/// budget minus the warning lead, all on `CLOCK_MONOTONIC`; its lateness is its arrival minus that. The apps ask
/// for a `backgroundTime` budget when they register, so the due time does not depend on the daemon's
/// configuration as long as its `BackgroundTimeSec` is longer and its `ExpirationWarningSec` at least
/// `warningLead` (the defaults, 600 s and 5 s, are).
public struct DeadlineBenchmark: Sendable {
    /// What to run.
    public struct Configuration: Sendable {
        /// Apps churning at once.
        public var apps = 100
        /// How long the apps churn.
        public var duration: Duration = .seconds(30)
        /// A running daemon's socket to measure; nil starts a private daemon.
        public var socketPath: String?
        /// The directory holding the `bgtaskd` and `bgtask-bench` executables.
        public var executablesDirectory: String

        /// The defaults, with the executables in `executablesDirectory`.
        public init(executablesDirectory: String) {
            self.executablesDirectory = executablesDirectory
        }
    }

    /// The background time budget each app asks for: 2 s makes a cycle about two seconds long, so a hundred apps
    /// get about fifty warnings a second.
    public static let backgroundTime: Duration = .seconds(2)
    /// The warning lead the daemon gives a registration that asks for a shorter budget: a quarter of it
    /// (`Register.backgroundTimeSec` in docs/PROTOCOL.md), when `ExpirationWarningSec` is not shorter still.
    public static let warningLead: Duration = backgroundTime / 4
    /// The user the status calls come from.
    public static let statusUser = "nobody"

    /// The configuration.
    public var configuration: Configuration

    /// A benchmark of `configuration`.
    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// The private daemon's configuration: room for the run's apps and connections (unknown keys, for limits an
    /// older daemon lacks, are ignored with a warning), and a budget longer than the apps ask for, so that theirs
    /// applies, with the warning they expect.
    func privateDaemonConfiguration() -> String {
        let apps = configuration.apps
        return """
            [Policy]
            BackgroundTimeSec=4s
            ExpirationWarningSec=1s
            EnterBackgroundGraceSec=5s
            WillTerminateGraceSec=1s
            [Limits]
            ConnectionsPerUserMax=\(4 * apps + 64)
            ConnectionsMax=\(4 * apps + 128)
            AppsPerUserMax=\(2 * apps + 16)

            """
    }

    /// Runs the benchmark and returns its report; throws when the run could not be set up.
    public func run() throws -> DeadlineReport {
        var phases = PhaseTimer()
        let directory = try makeScratchDirectory(prefix: "bgtask-bench-deadlines")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let benchExecutable = configuration.executablesDirectory + "/bgtask-bench"
        // Generous bounds for every process started: the run, plus time to set up and to wind down.
        let lifetime = configuration.duration + .seconds(120)

        let daemon: BenchmarkDaemon?
        let socketPath: String
        if let given = configuration.socketPath {
            daemon = nil
            socketPath = given
        } else {
            let started = try BenchmarkDaemon(
                executable: configuration.executablesDirectory + "/bgtaskd", directory: directory,
                configuration: privateDaemonConfiguration(), lifetime: lifetime)
            daemon = started
            socketPath = started.socketPath
        }
        defer { daemon?.stop() }

        // The build directory may sit where other users cannot enter: the flooder runs from a copy.
        let floodExecutable = directory + "/bgtask-bench"
        try FileManager.default.copyItem(atPath: benchExecutable, toPath: floodExecutable)
        let statusUser = try StatusFloodProcess.user(named: Self.statusUser)

        let names = (0..<configuration.apps).map { "deadline-\(getpid())-\($0)" }
        let window = RunWindow()
        let settings = ChurnSettings(
            benchExecutable: benchExecutable, socketPath: socketPath, backgroundTime: Self.backgroundTime,
            warningLead: Self.warningLead, standInLifetime: lifetime, appNames: names, window: window)

        // All stand-ins first: they start in parallel while the apps wait for their connections.
        var launches: [AppStandIn.Launch] = []
        do {
            for _ in names {
                launches.append(
                    try AppStandIn.launch(executable: benchExecutable, socketPath: socketPath, lifetime: lifetime))
            }
        } catch {
            for launch in launches { launch.abandon() }
            throw BenchmarkError("cannot start the apps' stand-in processes: \(error)")
        }

        phases.end("daemon and stand-ins started")
        let tallies = Mutex<[AppTally]>([])
        let ready = DispatchGroup()
        let finished = DispatchGroup()
        let startGate = DispatchSemaphore(value: 0)
        for (name, launch) in zip(names, launches) {
            let app = ChurningApp(baseName: name, settings: settings)
            ready.enter()
            finished.enter()
            let thread = Thread {
                let tally = app.run(firstStandIn: launch, startGate: startGate, ready: ready)
                tallies.withLock { $0.append(tally) }
                finished.leave()
            }
            thread.name = "app \(name)"
            thread.start()
        }
        // Registering is bounded per app (30 s for the stand-in, 10 s for the reply), so this wait ends.
        ready.wait()

        phases.end("apps registered")
        let daemonCPUBefore = daemon.flatMap { Self.cpuSeconds(ofProcess: $0.pid) }
        let benchmarkCPUBefore = Self.ownCPUSeconds()
        let start = MonotonicClock.now()
        window.end(at: start + configuration.duration.nanosecondCount)
        var flood: StatusFloodProcess?
        var statusFlood = Result<StatusFloodResult, BenchmarkError>.failure(BenchmarkError("not started"))
        do {
            flood = try StatusFloodProcess(
                executable: floodExecutable, socketPath: socketPath, duration: configuration.duration,
                user: statusUser)
        } catch {
            statusFlood = .failure(BenchmarkError("cannot start the status flooder: \(error)"))
        }
        for _ in names { startGate.signal() }
        // Every step of an app is bounded, so this wait ends even if the daemon hangs.
        finished.wait()
        let churnSeconds = Double(MonotonicClock.now() - start) / 1e9
        phases.end("apps churned and ended")
        let benchmarkCPUSeconds = Self.ownCPUSeconds() - benchmarkCPUBefore
        var daemonCPUSeconds: Double?
        if let daemon, let before = daemonCPUBefore, let after = Self.cpuSeconds(ofProcess: daemon.pid) {
            daemonCPUSeconds = after - before
        }

        if let flood {
            statusFlood = Result { try flood.finish(timeout: .seconds(30)) }.mapError { BenchmarkError("\($0)") }
        }
        let loop = Self.daemonLoop(socketPath: socketPath)
        phases.end("status flooder done")
        if let daemon, !daemon.isRunning {
            throw BenchmarkError("bgtaskd exited during the run: \(BenchmarkDaemon.tail(of: daemon.logPath))")
        }

        return DeadlineReport(
            daemonDescription: daemon.map { "a private bgtaskd (pid \($0.pid))" } ?? "the bgtaskd at \(socketPath)",
            apps: configuration.apps, churnSeconds: churnSeconds, tallies: tallies.withLock { $0 },
            statusFlood: statusFlood,
            statusUID: UInt32(statusUser.uid), daemonLoop: loop, daemonCPUSeconds: daemonCPUSeconds,
            benchmarkCPUSeconds: benchmarkCPUSeconds, phases: phases.description)
    }

    /// The daemon's own account of its loop (`GetStatus.loop`: iterations, longest iteration and its source),
    /// for daemons that report it; nil otherwise.
    static func daemonLoop(socketPath: String) -> String? {
        guard let connection = try? VarlinkConnection(socketPath: socketPath) else { return nil }
        defer { connection.close() }
        guard let reply = try? connection.call(LoopProbe(), timeout: .seconds(10)),
            case .object(let loop)? = reply.loop
        else { return nil }
        var parts: [String] = []
        if let iterations = loop["iterations"]?.intValue { parts.append("\(iterations) dispatches") }
        if let longest = loop["longestIterationMs"]?.doubleValue {
            parts.append("longest \(longest) ms (\(loop["longestIterationSource"]?.stringValue ?? "?"))")
        }
        // The histogram: how many dispatches took at most each bound.
        if let bounds = loop["iterationBoundsMs"]?.arrayValue?.compactMap(\.doubleValue),
            let counts = loop["iterationCounts"]?.arrayValue?.compactMap(\.intValue), counts.count == bounds.count + 1
        {
            let buckets = counts.indices.filter { counts[$0] > 0 }.map { index in
                index < bounds.count
                    ? "≤\(bounds[index]) ms: \(counts[index])" : ">\(bounds.last ?? 0) ms: \(counts[index])"
            }
            parts.append("dispatches by duration " + buckets.joined(separator: ", "))
        }
        return parts.joined(separator: "; ")
    }

    /// How long each phase of a run took, for the report.
    struct PhaseTimer: CustomStringConvertible {
        private var last = MonotonicClock.now()
        private var phases: [(name: String, seconds: Double)] = []

        /// Ends the phase running since the last call (or since the timer was made), naming it `name`.
        mutating func end(_ name: String) {
            let now = MonotonicClock.now()
            phases.append((name, Double(now - last) / 1e9))
            last = now
        }

        var description: String {
            phases.map { "\($0.name) \(String(format: "%.1f", $0.seconds)) s" }.joined(separator: ", ")
        }
    }

    /// The user and system CPU time of process `pid` (all its threads), in seconds: fields 14 and 15 of
    /// `/proc/PID/stat`, in clock ticks. Nil when unreadable.
    static func cpuSeconds(ofProcess pid: pid_t) -> Double? {
        guard let text = try? ProcFS().read("\(pid)/stat"), let end = text.lastIndex(of: ")") else { return nil }
        // Fields from the third (the state) on follow the command name's closing parenthesis.
        let fields = text[text.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The user and system CPU time of this process, every thread included, in seconds.
    static func ownCPUSeconds() -> Double {
        var usage = rusage()
        // getrusage(RUSAGE_SELF) cannot fail with a valid pointer.
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let user = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
        let system = Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        return user + system
    }

    /// `GetStatus`, read only for its `loop` member.
    private struct LoopProbe: VarlinkMethodCall {
        typealias Reply = LoopProbeReply
        static let methodName = GetStatusParameters.methodName
    }

    /// The `loop` member of a `GetStatus` reply, absent from daemons that do not report it.
    private struct LoopProbeReply: Codable, Sendable {
        var loop: JSONValue?
    }

    // MARK: Hidden modes

    /// The hidden `app-process` mode: an app's stand-in process (see `AppStandIn`). Returns the exit status.
    public static func runAppProcess(socketPath: String) -> Int32 {
        AppStandIn.serve(socketPath: socketPath)
    }

    /// The hidden `status-flood` mode (see `StatusFlood`). Returns the exit status.
    public static func runStatusFlood(socketPath: String, duration: Duration) -> Int32 {
        StatusFlood.run(socketPath: socketPath, duration: duration)
    }
}

// MARK: Command line

extension DeadlineBenchmark {
    /// A command line of the `deadlines`, `app-process` or `status-flood` mode that cannot be run.
    public struct UsageError: Error, CustomStringConvertible {
        /// What is wrong with it.
        public var description: String
    }

    /// The options of a mode, parsed from `arguments` (those after the mode's name): `--apps N`,
    /// `--duration D` (systemd time syntax: `30s`, `2min`, `500ms`; a bare number is seconds) and
    /// `--socket PATH`, each at most once, only those in `allowed`.
    public static func options(_ arguments: [String], allowed: Set<String>) throws(UsageError)
        -> (apps: Int?, duration: Duration?, socketPath: String?)
    {
        var result: (apps: Int?, duration: Duration?, socketPath: String?) = (nil, nil, nil)
        var remaining = arguments[...]
        while let option = remaining.popFirst() {
            guard allowed.contains(option) else { throw UsageError(description: "unexpected argument \(option)") }
            guard let value = remaining.popFirst() else { throw UsageError(description: "\(option) needs a value") }
            switch option {
            case "--apps":
                guard result.apps == nil else { throw UsageError(description: "--apps given twice") }
                guard let count = Int(value), count > 0 else {
                    throw UsageError(description: "--apps takes a positive integer, not \(value)")
                }
                result.apps = count
            case "--duration":
                guard result.duration == nil else { throw UsageError(description: "--duration given twice") }
                let duration: Duration
                do {
                    duration = try SystemdSyntax.parseTimeSpan(value)
                } catch {
                    throw UsageError(description: "--duration: \(error)")
                }
                guard duration > .zero else { throw UsageError(description: "--duration must be positive") }
                result.duration = duration
            default:
                guard result.socketPath == nil else { throw UsageError(description: "--socket given twice") }
                result.socketPath = value
            }
        }
        return result
    }
}
