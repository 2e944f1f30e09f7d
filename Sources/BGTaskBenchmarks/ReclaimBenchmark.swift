// `bgtask-bench reclaim`: how soon a suspended app is killed, and its memory back, once the apps cross AppsMemoryMax.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Dispatch
import Foundation
import Glibc
import Synchronization

/// Measures memory reclamation from outside the daemon, per backend configuration this host has: rounds in which
/// a foreground app takes the apps' total over `AppsMemoryMax` while a suspended app of known size is the heaviest
/// (the only) suspended app, each timed from the crossing to the victim's death and to its memory's return.
///
/// Each backend gets a private `bgtaskd` of its own (`MemoryWarningGraceSec=0`, so no grace is counted), with
/// `CgroupRoot=` and `MemoryCgroupRoot=` on cgroups the benchmark made under its own. The `unit` backend
/// (`--systemd`) instead installs the daemon's user units under a contained `systemd --user` manager, which starts
/// the daemon on the benchmark's first connection, and the daemon launches the apps as transient units of that
/// manager, freezing, measuring and killing them as it chooses for units. The apps are this executable in its hidden
/// `reclaim-app` mode, started by the daemon (`Launch`). A round:
///
/// 1. the victim is launched, touches its allocation and is suspended (seen on `Watch`);
/// 2. the foreground app grows to `approachMarginBytes` under the limit, and the benchmark waits until the
///    daemon's own sample shows it (`GetStatus`), as it would see an app growing toward the limit;
/// 3. the benchmark reads the apps' memory as the daemon reads it and has the foreground app touch the rest of the
///    way plus `crossingSlackBytes`; the app reads `CLOCK_MONOTONIC` right after the page that takes the apps over
///    the limit: the **trigger**;
/// 4. one thread waits on the victim's pidfd (**dead**), another reads its memory every 200 µs until it is back
///    (**freed**, `FreedMeasure`: its memory cgroup under `freedCgroupBytes` or removed; for PSS, where the app
///    has no cgroup, a memory cgroup the benchmark put the daemon in, or without root the system's free pages, back
///    by `freedShare` of the victim's size);
/// 5. the daemon's own figure is the `latencyMs` its `History` records for the kill, and the foreground app
///    unmaps what it touched. A third thread reads the apps' total every `holdCheckInterval` meanwhile: a round in
///    which it fell back to the limit before the daemon saw it over (its kill less its latency) measured no
///    crossing, and is run again (counted in the report).
public struct ReclaimBenchmark: Sendable {
    /// What to run.
    public struct Configuration: Sendable {
        /// Rounds per backend.
        public var rounds = 20
        /// The backends to run, in order: by default those whose apps the daemon forks (`Backend.forked`);
        /// `--systemd`, `[.unit]`.
        public var backends = Backend.forked
        /// The directory holding the `bgtaskd` and `bgtask-bench` executables.
        public var executablesDirectory: String

        /// The defaults, with the executables in `executablesDirectory`.
        public init(executablesDirectory: String) {
            self.executablesDirectory = executablesDirectory
        }
    }

    /// A backend configuration: how the daemon freezes apps and measures their memory.
    public enum Backend: String, CaseIterable, Sendable {
        /// `CgroupRoot=` on cgroup2 (`cgroup.freeze`, `cgroup.kill`), `MemoryCgroupRoot=` on v1 memory.
        case unifiedFreezer = "cgroup2 freeze + v1 memory"
        /// `CgroupRoot=` on the v1 freezer, `MemoryCgroupRoot=` on v1 memory.
        case legacyFreezer = "v1 freezer + v1 memory"
        /// No cgroups: SIGSTOP to suspend, PSS to measure, a pidfd to kill.
        case signals = "SIGSTOP + PSS"
        /// The installed units under a contained `systemd --user` manager (`--systemd`): the apps are transient
        /// units, frozen, measured and killed through them as the daemon chooses (its row names the chains).
        case unit = "unit"

        /// The backends whose apps the daemon forks itself, into the benchmark's cgroups or none: the default run.
        public static let forked: [Backend] = [.unifiedFreezer, .legacyFreezer, .signals]

        /// The short name in the cgroups' and directories' names.
        var tag: String {
            switch self {
            case .unifiedFreezer: "cgroup2"
            case .legacyFreezer: "freezer"
            case .signals: "signals"
            case .unit: "unit"
            }
        }

        /// The hierarchy of `CgroupRoot=`; nil: none is set.
        var controlHierarchy: BenchmarkCgroup.Hierarchy? {
            switch self {
            case .unifiedFreezer: .unified
            case .legacyFreezer: .freezer
            case .signals, .unit: nil
            }
        }

        /// The row's name: the backend's own, and for `unit`, once measured, the chains the daemon froze and measured
        /// its victims with, in the other rows' words ("unit: cgroup2 freeze + PSS").
        func label(for outcome: ReclaimReport.Outcome) -> String {
            guard self == .unit, case .measured(let measurement) = outcome, !measurement.rounds.isEmpty else {
                return rawValue
            }
            let freeze = Set(measurement.rounds.map(\.suspendedWith)).sorted().map { method in
                switch method {
                case "cgroup2": "cgroup2 freeze"
                case "cgroup1": "v1 freezer"
                case "group", "process": "SIGSTOP"
                default: method
                }
            }
            let memory = Set(measurement.rounds.map(\.memoryBackend)).sorted().map { backend in
                switch backend {
                case "cgroup2": "cgroup2 memory"
                case "cgroup1": "v1 memory"
                case "pss": "PSS"
                default: backend
                }
            }
            return "unit: " + Set(freeze).sorted().joined(separator: "/") + " + " + memory.joined(separator: "/")
        }

        /// Why this host cannot run it, or nil when it can.
        public var unavailableReason: String? {
            if self == .unit { return BenchmarkUnitService.unavailableReason }
            guard let control = controlHierarchy else { return nil }
            if geteuid() != 0 { return "the benchmark makes cgroups for it, which needs root" }
            let hierarchies = CgroupHierarchies.probe()
            for hierarchy in [control, .memory] where hierarchy.root(in: hierarchies) == nil {
                return "no \(hierarchy.rawValue) hierarchy is mounted"
            }
            return nil
        }
    }

    /// `AppsMemoryMax`: room for the victim and the foreground app's growth, while a tenth of it (what the daemon
    /// frees past the limit, down to 90%) stays under the victim's size, so one victim is enough.
    public static let appsMemoryMaxBytes: UInt64 = 256 << 20
    /// The victim's allocation.
    public static let victimBytes = 64 << 20
    /// How far under the limit the foreground app grows before the crossing: the daemon samples the apps more
    /// often as they near the limit (50 ms plus up to 950 ms by the square of the headroom), and an app growing toward it would have
    /// been seen this close.
    static let approachMarginBytes: UInt64 = 16 << 20
    /// How far past the limit the crossing touch goes on after the page that crosses it (where the trigger is
    /// stamped), so that the apps stay over the limit in the daemon's readings too: the memory cgroup charges in
    /// batches of 64 pages per CPU, and a PSS reading moves as other processes map or unmap the same libraries.
    static let crossingSlackBytes: UInt64 = 4 << 20
    /// How long before the victim's death its kill may have begun, taking memory back: readings of the apps that
    /// late are not held against the crossing.
    static let killMargin: Duration = .milliseconds(10)
    /// How often the apps' total is read between the crossing and the victim's death, to tell whether it stayed
    /// over the limit.
    static let holdCheckInterval: Duration = .milliseconds(20)
    /// A victim's memory cgroup at or under this is freed: what the kernel keeps charged to an empty cgroup (per-CPU
    /// charge batches, page cache) stays under it.
    static let freedCgroupBytes: UInt64 = 1 << 20
    /// For PSS, where the victim has no cgroup of its own, the share of its size a shared reading must regain to
    /// count as freed: the rest is room for what else moves that reading.
    static let freedShare = 0.75
    /// The longest the daemon waits between samples of the apps while `AppsMemoryMax` is set (a second, as
    /// earlyoom polls at most a second apart): the span over which a crossing's moment is drawn.
    static let longestSampleInterval: Duration = .seconds(1)
    /// How often the freed check reads the victim's memory.
    static let freedPollInterval: Duration = .microseconds(200)
    /// How long a round waits for the victim's death and memory after the crossing.
    static let reclaimTimeout: Duration = .seconds(10)

    /// The configuration.
    public var configuration: Configuration

    /// A benchmark of `configuration`.
    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Runs every backend this host has and returns the report; throws when interrupted or when the run could not be
    /// set up at all. Everything made is removed on every path.
    public func run() throws -> ReclaimReport {
        BenchmarkInterruption.install()
        defer { BenchmarkInterruption.uninstall() }
        let directory = try makeScratchDirectory(prefix: "bgtask-bench-reclaim-\(getpid())")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var rows: [ReclaimReport.Row] = []
        for backend in configuration.backends {
            try BenchmarkInterruption.check()
            if let reason = backend.unavailableReason {
                rows.append(ReclaimReport.Row(backend: backend.rawValue, outcome: .unavailable(reason)))
                continue
            }
            let outcome: ReclaimReport.Outcome
            do {
                let session = try ReclaimSession(
                    backend: backend, configuration: configuration, directory: directory + "/" + backend.tag)
                defer { session.close() }
                outcome = .measured(try session.measure())
            } catch {
                outcome = .failed("\(error)")
            }
            rows.append(ReclaimReport.Row(backend: backend.label(for: outcome), outcome: outcome))
        }
        try BenchmarkInterruption.check()
        return ReclaimReport(rounds: configuration.rounds, rows: rows)
    }
}

/// One backend's run: its cgroups, its daemon (a private one, or the installed units under a contained manager),
/// the foreground app and the control connection to it. `close()` undoes all of it: the daemon stopped (with the
/// manager and its units), the launched apps killed through their pidfds, the cgroups emptied and removed.
final class ReclaimSession {
    let backend: ReclaimBenchmark.Backend
    let configuration: ReclaimBenchmark.Configuration
    let directory: String
    let benchExecutable: String
    /// How long any process of the session may live: every round's bounded waits, and time to set up and wind down.
    let lifetime: Duration
    private var cgroups: [BenchmarkCgroup] = []
    private var daemon: (any BenchmarkService)?
    /// The daemon when it runs as the installed units under a contained manager (the `unit` backend).
    private var unitService: BenchmarkUnitService? { daemon as? BenchmarkUnitService }
    private var client: LifecycleClient?
    private var watch: WatchStream?
    private var control: LineChannel?
    /// The launched apps' processes, opened when launched; those still alive at the end are killed.
    private var launched: [PidFD] = []
    /// How a victim measured by PSS, which has no cgroup of its own, is seen freed.
    private var pssFreedMeasure = FreedMeasure.freePages
    private var isClosed = false

    /// The name of the foreground app.
    static let foregroundName = "bench.reclaim.foreground"

    init(backend: ReclaimBenchmark.Backend, configuration: ReclaimBenchmark.Configuration, directory: String) throws {
        self.backend = backend
        self.configuration = configuration
        self.directory = directory
        benchExecutable = configuration.executablesDirectory + "/bgtask-bench"
        lifetime = .seconds(120) + .seconds(75) * configuration.rounds
        do {
            try setUp()
        } catch {
            close()
            throw error
        }
    }

    private var logDirectory: String { directory + "/apps" }

    private func setUp() throws {
        try FileManager.default.createDirectory(atPath: logDirectory, withIntermediateDirectories: true)
        var memorySection = """
            [Memory]
            AppsMemoryMax=\(ReclaimBenchmark.appsMemoryMaxBytes)
            MemoryWarningGraceSec=0

            """
        let name = "bgtask-bench-reclaim-\(getpid())-\(backend.tag)"
        if let hierarchy = backend.controlHierarchy {
            let control = try BenchmarkCgroup(hierarchy, name: name)
            cgroups.append(control)
            let memory = try BenchmarkCgroup(.memory, name: name)
            cgroups.append(memory)
            memorySection += "CgroupRoot=\(control.directory.path)\nMemoryCgroupRoot=\(memory.directory.path)\n"
        }
        // A debug build's app may take a while to start; the apps acknowledge at once, so the grace never runs out.
        let policy = """
            [Policy]
            LaunchTimeoutSec=30s
            EnterBackgroundGraceSec=30s

            """
        let client: LifecycleClient
        if backend == .unit {
            // The manager, the daemon and the apps' units are charged to a memory cgroup of their own, limited,
            // which the daemon does not know of.
            let service = try BenchmarkUnitService(
                executablesDirectory: configuration.executablesDirectory, name: name,
                configuration: policy + memorySection, lifetime: lifetime)
            daemon = service
            if let file = service.enclosingMemoryFile { pssFreedMeasure = .enclosingCgroup(file: file) }
            // The first connection starts the daemon (socket activation); calls wait for it to serve.
            client = try LifecycleClient(socketPath: service.socketPath, timeout: .seconds(10))
            self.client = client
            try service.waitUntilServing()
        } else {
            let started = try BenchmarkDaemon(
                executable: configuration.executablesDirectory + "/bgtaskd", directory: directory,
                configuration: policy + memorySection, lifetime: lifetime, arguments: ["--log-dir", logDirectory])
            daemon = started
            if backend.controlHierarchy == nil && geteuid() == 0 && CgroupHierarchies.probe().memory != nil {
                // The daemon and the apps it launches from now on are charged to a memory cgroup of their own, which
                // the daemon does not know of: it still measures the apps by PSS.
                let enclosing = try BenchmarkCgroup(.memory, name: name + "-enclosing")
                cgroups.append(enclosing)
                try enclosing.directory.move(started.pid)
                pssFreedMeasure = .enclosingCgroup(file: enclosing.directory.path + "/memory.usage_in_bytes")
            }
            client = try LifecycleClient(socketPath: started.socketPath, timeout: .seconds(10))
            self.client = client
        }
        watch = try client.watch()

        let controlPath = directory + "/control.sock"
        let listener = try UnixSocket.listen(path: controlPath, mode: 0o600)
        defer {
            try? listener.close()
            unlink(controlPath)
        }
        let foreground = try launch(
            Self.foregroundName,
            ReclaimApp.Options.arguments(role: .trigger, controlPath: controlPath, lifetime: lifetime))
        let channel = LineChannel(try acceptConnection(on: listener, timeout: .seconds(30)))
        control = channel
        guard let ready = try channel.nextLine(timeout: .seconds(30)), ready == "ready \(foreground.pid)" else {
            throw BenchmarkError("the foreground app did not say it was ready; \(output(of: Self.foregroundName))")
        }
    }

    /// The first connection to `listener` (the foreground app's), waiting at most `timeout`.
    private func acceptConnection(on listener: FileDescriptor, timeout: Duration) throws -> FileDescriptor {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            try BenchmarkInterruption.check()
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else {
                throw BenchmarkError(
                    "the foreground app did not connect within \(timeout); \(output(of: Self.foregroundName))")
            }
            let slice = Duration.nanoseconds(min(remaining, 100_000_000))
            if try !listener.poll(for: .readable, timeout: slice).isEmpty,
                let connection = try UnixSocket.accept(listener)
            {
                // Blocking like the app's end: a line is written whole.
                try connection.setNonBlocking(false)
                return connection
            }
        }
    }

    /// `Launch`es this executable as the app `name` with `arguments`, and keeps a pidfd of its process. Launched as
    /// a unit, whose output goes to the journal, the app writes its own log.
    private func launch(_ name: String, _ arguments: [String]) throws -> AppInfo {
        guard let client else { throw BenchmarkError("no daemon") }
        let log = unitService == nil ? [] : ["--log", "\(logDirectory)/\(name).log"]
        let app = try client.launch(name: name, argv: [benchExecutable] + arguments + log)
        // The pid is the app's until its parent (the daemon, or the service manager for a unit) reaps it, and a
        // benchmark app exits only once its registration ends or it is killed, both later than this.
        launched.append(try PidFD.open(pid: pid_t(app.pid)))
        if unitService != nil && app.unit == nil {
            throw BenchmarkError("\(name) was not launched as a unit: the daemon did not launch through the manager")
        }
        return app
    }

    /// The app's output so far (its last lines), for a failure message.
    private func output(of name: String) -> String {
        let text = (try? String(contentsOfFile: "\(logDirectory)/\(name).log", encoding: .utf8)) ?? ""
        let lines = text.split(separator: "\n").suffix(3)
        return lines.isEmpty ? "\(name) printed nothing" : "\(name) printed: " + lines.joined(separator: " / ")
    }

    /// Runs the rounds and gathers them with what the daemon reports of itself.
    func measure() throws -> ReclaimReport.Measurement {
        guard let client, let daemon else { throw BenchmarkError("no daemon") }
        let status = try client.getStatus()
        let foreground = try client.getApp(Self.foregroundName)
        let foregroundGauge = try MemoryGauge(app: foreground)
        var rounds: [ReclaimReport.Round] = []
        var redone = 0
        var freed = Set<String>()
        var attempt = 0
        // A round whose crossing did not hold is not a measurement of reclamation: it is run again, twice the
        // rounds at most in all.
        while rounds.count < configuration.rounds && attempt < 2 * configuration.rounds {
            attempt += 1
            try BenchmarkInterruption.check()
            do {
                let (round, measure) = try round(attempt, foregroundGauge: foregroundGauge)
                guard round.heldOverLimit else {
                    redone += 1
                    continue
                }
                rounds.append(round)
                freed.insert(measure.description)
            } catch {
                throw BenchmarkError("round \(attempt): \(error); \(BenchmarkDaemon.tail(of: daemon.logPath))")
            }
        }
        guard !rounds.isEmpty else {
            throw BenchmarkError(
                "no round's crossing held in \(attempt) tries: each time the apps' total fell back to the limit before "
                    + "the daemon saw it over")
        }
        var backends: [String: String] = [:]
        for (key, value) in status.backends {
            if let text = value.stringValue { backends[key] = text }
        }
        let trigger = status.backends["trigger"]?.stringValue ?? status.memory["trigger"]?.stringValue ?? "polling"
        return ReclaimReport.Measurement(
            rounds: rounds, redone: redone, daemonBackends: backends, trigger: trigger,
            freedMeasure: freed.sorted().joined(separator: "; "))
    }

    /// One round: victim suspended, approach, crossing, death and memory timed, the daemon's figure read.
    private func round(_ index: Int, foregroundGauge: MemoryGauge) throws -> (ReclaimReport.Round, FreedMeasure) {
        guard let client, let control else { throw BenchmarkError("no daemon") }
        let limit = ReclaimBenchmark.appsMemoryMaxBytes
        try waitForDaemon("memory back to normal") { status in status.memory["level"]?.stringValue == "normal" }

        let name = "bench.reclaim.victim-\(index)"
        let victim = try launch(
            name,
            ReclaimApp.Options.arguments(
                role: .victim, allocationBytes: ReclaimBenchmark.victimBytes, lifetime: .seconds(90)))
        // Launched last: the pidfd just opened.
        let victimProcess = launched[launched.count - 1]
        try waitUntilSuspended(name)
        let victimGauge = try MemoryGauge(app: try client.getApp(name))

        // Approach: the apps up to the margin under the limit, and the daemon's sample showing it.
        let before = try victimGauge.read() + foregroundGauge.read()
        guard before + ReclaimBenchmark.approachMarginBytes < limit else {
            throw BenchmarkError("the apps use \(before) bytes before the foreground app grows: too close to \(limit)")
        }
        let approach = limit - ReclaimBenchmark.approachMarginBytes - before
        _ = try touch(approach, on: control)
        let seen = Double(before + approach - ReclaimBenchmark.approachMarginBytes / 2)
        try waitForDaemon("the daemon's sample of the grown app") { status in
            (status.memory["appsBytes"]?.doubleValue ?? 0) >= seen && status.memory["level"]?.stringValue == "normal"
        }
        // Crossing right after that sample would meet the daemon's sampling at the same point every round; a random
        // wait within the longest interval between samples makes the crossing fall anywhere between two of them.
        usleep(UInt32.random(in: 0..<UInt32(ReclaimBenchmark.longestSampleInterval.nanosecondCount / 1000)))

        // How the daemon suspended the victim shows once the freeze is confirmed, well before this.
        let suspended = try client.getApp(name)
        // The crossing: the rest of the way as the daemon reads the apps, stamped at the page past it, plus the slack.
        let victimBytes = try victimGauge.read()
        let total = victimBytes + (try foregroundGauge.read())
        guard total < limit else { throw BenchmarkError("the apps crossed the limit before the crossing touch") }
        let gap = limit - total
        let crossing = gap + ReclaimBenchmark.crossingSlackBytes
        let measure = freedMeasure(victimGauge)
        let isFreed = try measure.check(victimBytes: victimBytes, crossingBytes: crossing)
        let appsBytes: @Sendable () -> UInt64? = {
            guard let victim = try? victimGauge.read(), let foreground = try? foregroundGauge.read() else { return nil }
            return victim + foreground
        }
        let watch = VictimWatch(
            process: victimProcess, isFreed: isFreed, appsBytes: appsBytes, timeout: ReclaimBenchmark.reclaimTimeout)
        let touched: (start: Int64, marked: Int64, end: Int64)
        do {
            touched = try touch(crossing, markAfter: gap + 1, on: control)
        } catch {
            _ = watch.wait()
            throw error
        }
        let (deadAt, freedAt, samples) = watch.wait()
        guard let deadAt else {
            throw BenchmarkError(
                "\(name) was not killed within \(ReclaimBenchmark.reclaimTimeout) of the crossing; \(output(of: name))")
        }
        let entry = try reclaimEntry(of: name)
        try control.send("release")
        guard try control.nextLine(timeout: .seconds(10)) == "released" else {
            throw BenchmarkError("the foreground app did not release its memory")
        }
        if let unitService, let unit = victim.unit {
            // Killed through its unit, the unit ends (and the manager collects it).
            try unitService.waitUntilEnded(unit)
        }
        // Until the daemon's first sample over the limit (its kill less its latency; a margin for the kill itself),
        // the apps must have stayed over it: a reading at or under it means the crossing did not hold (for PSS, the
        // shares of libraries other processes map move the apps' total by megabytes).
        let seenOver = deadAt - Int64((entry.latencyMs ?? 0) * 1e6) - ReclaimBenchmark.killMargin.nanosecondCount
        let heldOverLimit = !samples.contains { $0.at >= touched.marked && $0.at < seenOver && $0.bytes <= limit }
        let result = ReclaimReport.Round(
            deadMilliseconds: Double(deadAt - touched.marked) / 1e6,
            freedMilliseconds: freedAt.map { Double($0 - touched.marked) / 1e6 },
            daemonMilliseconds: entry.latencyMs,
            crossingMilliseconds: Double(touched.marked - touched.start) / 1e6, crossingBytes: gap,
            heldOverLimit: heldOverLimit, suspendedWith: suspended.suspendedWith?.rawValue ?? "?",
            memoryBackend: suspended.memoryBackend ?? "?", band: entry.band?.rawValue ?? "?")
        return (result, measure)
    }

    /// How a victim read by `gauge` is seen freed: its own cgroup, else the session's measure for PSS.
    private func freedMeasure(_ gauge: MemoryGauge) -> FreedMeasure {
        if case .cgroup(let file) = gauge { return .victimCgroup(file: file) }
        return pssFreedMeasure
    }

    /// Has the foreground app touch `bytes` more; its stamps before the first page, after the page holding byte
    /// `markAfter` (by default the last) and after the last page.
    private func touch(_ bytes: UInt64, markAfter mark: UInt64? = nil, on control: LineChannel) throws -> (
        start: Int64, marked: Int64, end: Int64
    ) {
        try control.send("touch \(bytes) \(mark ?? bytes)")
        guard let reply = try control.nextLine(timeout: .seconds(10)) else {
            throw BenchmarkError("the foreground app closed its control connection; \(output(of: Self.foregroundName))")
        }
        let words = reply.split(separator: " ")
        guard words.count == 4, words[0] == "touched", let start = Int64(words[1]), let marked = Int64(words[2]),
            let end = Int64(words[3])
        else {
            throw BenchmarkError("the foreground app answered \(reply.debugDescription)")
        }
        return (start, marked, end)
    }

    /// Calls `GetStatus` every 20 ms until `condition` holds, at most 10 s.
    private func waitForDaemon(_ what: String, _ condition: (GetStatusReply) -> Bool) throws {
        guard let client else { throw BenchmarkError("no daemon") }
        let deadline = MonotonicClock.now() + Duration.seconds(10).nanosecondCount
        while true {
            try BenchmarkInterruption.check()
            let status = try client.getStatus()
            if condition(status) { return }
            guard MonotonicClock.now() < deadline else {
                throw BenchmarkError("waited 10 s for \(what); GetStatus memory: \(status.memory)")
            }
            usleep(20_000)
        }
    }

    /// Reads `Watch` until the daemon records `name` suspended, at most 30 s.
    private func waitUntilSuspended(_ name: String) throws {
        guard let watch else { throw BenchmarkError("no daemon") }
        let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
        while true {
            try BenchmarkInterruption.check()
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else {
                throw BenchmarkError("\(name) was not suspended within 30 s; \(output(of: name))")
            }
            let entry: HistoryEntry
            switch try Self.next(on: watch, timeout: .nanoseconds(min(remaining, 100_000_000))) {
            case .entry(let next): entry = next
            case .timedOut: continue
            case .ended: throw BenchmarkError("the daemon ended the Watch stream")
            }
            guard entry.app == name else { continue }
            if entry.kind == .stateChanged && entry.state == .suspended { return }
            if entry.kind == .terminated {
                throw BenchmarkError(
                    "\(name) was terminated (\(entry.reason?.rawValue ?? "?")) before it was suspended; "
                        + output(of: name))
            }
        }
    }

    /// What waiting on `Watch` gave.
    private enum WatchItem {
        case entry(HistoryEntry)
        case timedOut
        case ended
    }

    /// The next entry of `watch`, waiting at most `timeout`.
    private static func next(on watch: WatchStream, timeout: Duration) throws(ClientError) -> WatchItem {
        do {
            guard let entry = try watch.next(timeout: timeout) else { return .ended }
            return .entry(entry)
        } catch {
            if case .timedOut = error { return .timedOut }
            throw error
        }
    }

    /// The daemon's record of reclaiming `name` (`History`): recorded when it kills, so there by the time the
    /// victim is dead; looked for a second at most.
    private func reclaimEntry(of name: String) throws -> HistoryEntry {
        guard let client else { throw BenchmarkError("no daemon") }
        let deadline = MonotonicClock.now() + Duration.seconds(1).nanosecondCount
        while true {
            if let entry = try client.history(limit: 64).last(where: {
                $0.app == name && $0.kind == .terminated && $0.reason == .memoryReclaim
            }) {
                return entry
            }
            guard MonotonicClock.now() < deadline else {
                throw BenchmarkError("\(name) died, but History records no memory-reclaim of it")
            }
            usleep(10_000)
        }
    }

    /// Stops the daemon, kills the launched apps still alive through their pidfds, empties and removes the cgroups.
    /// Never throws: this is the clean-up. Later calls do nothing.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        control?.close()
        watch?.close()
        client?.close()
        // The daemon resumes what it stopped when it stops; apps whose registration ends exit by themselves. Under a
        // contained manager, the manager exits too, stopping the apps' units and removing its cgroups.
        daemon?.stop()
        for process in launched {
            if (try? process.hasExited) == false {
                try? process.sendSignal(.kill)
                _ = try? process.waitForExit(timeout: .seconds(5))
            }
            try? process.close()
        }
        for cgroup in cgroups.reversed() {
            let left = cgroup.remove()
            if !left.isEmpty { reportFailure("bgtask-bench: could not remove \(left.joined(separator: ", "))") }
        }
    }

    deinit { close() }
}

/// How the benchmark reads an app's memory: the way the daemon reads it (`App.memoryBackend`).
enum MemoryGauge: Sendable {
    /// A cgroup file holding bytes: v1 `memory.usage_in_bytes` or cgroup2 `memory.current`.
    case cgroup(file: String)
    /// The process's PSS (a launched app leads a session of its own, with no other process in it here).
    case proportionalSetSize(pid: pid_t)

    /// The gauge for `app`, from its `memoryBackend` and its process's cgroups.
    init(app: AppInfo) throws {
        let pid = pid_t(app.pid)
        switch app.memoryBackend {
        case "cgroup1":
            guard let memory = try CgroupHierarchies.probe().cgroups(of: pid).memory else {
                throw BenchmarkError("\(app.name) is measured by cgroup1, but is in no v1 memory cgroup")
            }
            self = .cgroup(file: memory.path + "/memory.usage_in_bytes")
        case "cgroup2":
            guard let unified = try CgroupHierarchies.probe().cgroups(of: pid).unified else {
                throw BenchmarkError("\(app.name) is measured by cgroup2, but is in no cgroup2 cgroup")
            }
            self = .cgroup(file: unified.path + "/memory.current")
        case "pss":
            self = .proportionalSetSize(pid: pid)
        default:
            throw BenchmarkError("\(app.name)'s memory is measured by \(app.memoryBackend ?? "nothing")")
        }
    }

    /// The app's memory in bytes now.
    func read() throws -> UInt64 {
        switch self {
        case .cgroup(let file):
            return try CgroupNumber.parse(FileDescriptor.readText(atPath: file, limit: 4096), file: file)
        case .proportionalSetSize(let pid):
            return UInt64(max(0, try ProcFS().proportionalSetSize(pid)))
        }
    }
}

/// How the benchmark tells that a victim's memory is back.
enum FreedMeasure: Sendable {
    /// The victim's own memory cgroup (the cgroup backends): at `freedCgroupBytes` or less, or removed.
    case victimCgroup(file: String)
    /// A v1 memory cgroup the benchmark put the daemon in (or, for units, their service manager), unknown to the
    /// daemon, so that the apps it launches are charged there (the PSS backend, as root): its usage back down by a
    /// share of the victim from where the crossing left it. Only the daemon, its apps (and the manager) are charged
    /// to it, so little else moves it.
    case enclosingCgroup(file: String)
    /// The system's free pages (the PSS backend without root): back up by that share. The rest of the machine moves
    /// them too, so this one is noisy.
    case freePages

    /// What it reads, for the report.
    var description: String {
        switch self {
        case .victimCgroup: "its memory cgroup at \(ReclaimBenchmark.freedCgroupBytes >> 20) MiB or less, or removed"
        case .enclosingCgroup:
            "a memory cgroup around the daemon and its apps (for units, and their manager), unknown to the daemon, "
                + "back down by \(Int(ReclaimBenchmark.freedShare * 100))% of the victim"
        case .freePages:
            "the system's free pages, per-CPU lists included, back up by "
                + "\(Int(ReclaimBenchmark.freedShare * 100))% of the victim"
        }
    }

    /// A check of whether the victim's memory is back, for a victim holding `victimBytes` (as the daemon measures
    /// it) just before the foreground app touches `crossingBytes` more. Reads the baseline now, for the shared
    /// measures.
    func check(victimBytes: UInt64, crossingBytes: UInt64) throws -> @Sendable () -> Bool {
        let share = Int64(Double(victimBytes) * ReclaimBenchmark.freedShare)
        switch self {
        case .victimCgroup(let file):
            return {
                switch Self.readCgroupBytes(file) {
                case .gone: true
                case .bytes(let bytes): bytes <= ReclaimBenchmark.freedCgroupBytes
                case .unreadable: false
                }
            }
        case .enclosingCgroup(let file):
            guard case .bytes(let baseline) = Self.readCgroupBytes(file) else {
                throw BenchmarkError("cannot read \(file)")
            }
            let target = Int64(baseline) + Int64(crossingBytes) - share
            return {
                guard case .bytes(let bytes) = Self.readCgroupBytes(file) else { return false }
                return Int64(bytes) <= target
            }
        case .freePages:
            let target = Int64(try FreeMemory.read()) - Int64(crossingBytes) + share
            return { (try? FreeMemory.read()).map { Int64($0) >= target } ?? false }
        }
    }

    /// What reading a cgroup's memory file gave.
    private enum CgroupReading {
        case bytes(UInt64)
        /// The cgroup was removed: nothing is charged to it any more.
        case gone
        case unreadable
    }

    private static func readCgroupBytes(_ file: String) -> CgroupReading {
        do {
            return .bytes(try CgroupNumber.parse(FileDescriptor.readText(atPath: file, limit: 4096), file: file))
        } catch let error as Errno where error == .noSuchFileOrDirectory || error.rawValue == ENODEV {
            return .gone
        } catch {
            return .unreadable
        }
    }
}

/// Three threads timing a victim's end: one blocked on its pidfd (dead), one reading its memory every
/// `ReclaimBenchmark.freedPollInterval` (freed), one reading the apps' total every
/// `ReclaimBenchmark.holdCheckInterval` until the victim is dead; all give up after `timeout`.
final class VictimWatch: Sendable {
    /// One reading of the apps' total: when it began, and the bytes.
    struct Sample: Sendable {
        var at: Int64
        var bytes: UInt64
    }

    private let deadAt = Mutex<Int64?>(nil)
    private let freedAt = Mutex<Int64?>(nil)
    private let samples = Mutex<[Sample]>([])
    private let finished = DispatchGroup()

    init(
        process: PidFD, isFreed: @escaping @Sendable () -> Bool, appsBytes: @escaping @Sendable () -> UInt64?,
        timeout: Duration
    ) {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        finished.enter()
        let dead = Thread { [self] in
            if (try? process.waitForExit(timeout: timeout)) == true {
                let now = MonotonicClock.now()
                deadAt.withLock { $0 = now }
            }
            finished.leave()
        }
        finished.enter()
        let freed = Thread { [self] in
            var pause = timespec(tv_sec: 0, tv_nsec: Int(ReclaimBenchmark.freedPollInterval.nanosecondCount))
            while MonotonicClock.now() < deadline {
                if isFreed() {
                    let now = MonotonicClock.now()
                    freedAt.withLock { $0 = now }
                    break
                }
                nanosleep(&pause, nil)
            }
            finished.leave()
        }
        finished.enter()
        let held = Thread { [self] in
            let interval = UInt32(ReclaimBenchmark.holdCheckInterval.nanosecondCount / 1000)
            while MonotonicClock.now() < deadline && deadAt.withLock({ $0 == nil }) {
                // Stamped before the reading starts: one that starts after the crossing must see the apps over the
                // limit, while one that ends after it may have read the foreground app before (a PSS read of a few
                // hundred megabytes takes milliseconds). A reading that fails (the victim gone) says nothing.
                let startedAt = MonotonicClock.now()
                if let bytes = appsBytes() {
                    samples.withLock { $0.append(Sample(at: startedAt, bytes: bytes)) }
                }
                usleep(interval)
            }
            finished.leave()
        }
        dead.start()
        freed.start()
        held.start()
    }

    /// Waits for the threads (each ends by the timeout); the `CLOCK_MONOTONIC` stamps, nil where it did not happen,
    /// and the readings of the apps' total.
    func wait() -> (dead: Int64?, freed: Int64?, samples: [Sample]) {
        finished.wait()
        return (deadAt.withLock { $0 }, freedAt.withLock { $0 }, samples.withLock { $0 })
    }
}

/// The system's free memory as the page allocator holds it: the free pages of every zone plus those on the per-CPU
/// page lists (`/proc/zoneinfo`).
///
/// Not `MemFree` or `MemAvailable`: pages an exiting process frees go to the per-CPU lists first, which on these
/// kernels grow to thousands of pages per CPU (`high:` in `/proc/zoneinfo`) and are counted as free only when
/// drained, up to seconds later, so `/proc/meminfo` shows a 64 MiB exit late and in part.
enum FreeMemory {
    /// The free bytes now.
    static func read() throws -> UInt64 {
        let text = try ProcFS().read("zoneinfo")
        return try parse(text) * UInt64(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// The free pages in a `/proc/zoneinfo` text: the sum of each zone's `pages free N` and each per-CPU list's
    /// `count: N`. Throws when the text has no zone's free pages, or a number does not parse.
    static func parse(_ text: String) throws -> UInt64 {
        var pages: UInt64 = 0
        var zones = 0
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ", omittingEmptySubsequences: true)
            let value: Substring
            if words.count == 3, words[0] == "pages", words[1] == "free" {
                value = words[2]
                zones += 1
            } else if words.count == 2, words[0] == "count:" {
                value = words[1]
            } else {
                continue
            }
            guard let number = UInt64(value) else {
                throw BenchmarkError("/proc/zoneinfo: \(String(line).debugDescription) has no page count")
            }
            let (sum, overflow) = pages.addingReportingOverflow(number)
            guard !overflow else { throw BenchmarkError("/proc/zoneinfo: page counts beyond 64 bits") }
            pages = sum
        }
        guard zones > 0 else { throw BenchmarkError("/proc/zoneinfo lists no zone's free pages") }
        return pages
    }
}
