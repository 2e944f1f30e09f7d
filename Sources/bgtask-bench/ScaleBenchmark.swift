// `bgtask-bench scale`: a private bgtaskd's memory, descriptors and lease latency, empty and with many apps and
// leases.

import BGTaskBenchmarks
import BGTaskPOSIX
import Foundation
import Glibc

/// Grows a private `bgtaskd` to `apps` registered apps with `tasksPerApp` open leases each, and reads what it
/// holds on the way: its resident memory and descriptors empty, with the apps, and with the leases; and the
/// latency of one app's lease round trips with that app alone and at full size, on the same connection.
///
/// The apps are real registrations (one connection each, held open, their event streams read by one thread:
/// `ScaleFleet`), in the foreground, where a lease has no deadline: every lease stays open until the end. The
/// daemon's `GetStatus` must count every app and every lease, or the run fails.
struct ScaleBenchmark {
    /// Apps registered (`--apps`).
    var apps = 1_000
    /// Leases opened on each app (`--tasks-per-app`).
    var tasksPerApp = 50
    /// Round trips per latency measurement (`--calls`), half of them `BeginBackgroundTask`, half
    /// `EndBackgroundTask`: 20,000 take a few seconds with one app in a release build.
    var calls = 20_000

    /// The apps `--apps` accepts: at least the one measured; the benchmark needs a descriptor per app.
    static let appsAllowed = 1...100_000
    /// The leases per app `--tasks-per-app` accepts.
    static let tasksPerAppAllowed = 1...10_000
    /// The round trips `--calls` accepts: an even number (a lease is a begin and an end) in this range.
    static let callsAllowed = 2...2_000_000
    /// Leases made before each measurement and not counted, so caches and the scheduler settle; few, since at
    /// size each takes as long as the daemon's state save.
    static let warmUpLeases = 25
    /// The longest one latency measurement runs: it stops there with the round trips made so far, so a daemon
    /// whose calls grow slow with its size still gets a whole run in about two minutes.
    static let measurementBudget: Duration = .seconds(20)
    /// Descriptors this process needs besides one per app: its standard streams, the client connection, the
    /// lease opener's connections, the drain's pipe, the daemon's start-up, with room to spare.
    static let descriptorsBesideApps = 64
    /// Connections the daemon allows beyond one per app: the client's and the lease opener's, with room to spare.
    static let connectionsBesideApps = 32
    /// How long the private daemon may live: far over the two minutes a run takes.
    static let daemonLifetime: Duration = .seconds(600)

    /// The benchmark as `scale`'s options configure it: `--apps N`, `--tasks-per-app M` and `--calls K`, each at
    /// most once, in any order; or what is wrong with them.
    static func parse(_ options: [String]) -> Result<ScaleBenchmark, BenchError> {
        var benchmark = ScaleBenchmark()
        var given: Set<String> = []
        var remaining = options[...]
        while let option = remaining.popFirst() {
            guard !given.contains(option) else { return .failure(BenchError("\(option) given twice")) }
            given.insert(option)
            let value = remaining.popFirst().flatMap { Int($0) }
            switch option {
            case "--apps":
                guard let value, appsAllowed.contains(value) else {
                    return .failure(BenchError("--apps takes an integer from 1 to \(appsAllowed.upperBound)"))
                }
                benchmark.apps = value
            case "--tasks-per-app":
                guard let value, tasksPerAppAllowed.contains(value) else {
                    return .failure(
                        BenchError("--tasks-per-app takes an integer from 1 to \(tasksPerAppAllowed.upperBound)"))
                }
                benchmark.tasksPerApp = value
            case "--calls":
                guard let value, callsAllowed.contains(value), value.isMultiple(of: 2) else {
                    return .failure(BenchError("--calls takes an even integer from 2 to \(callsAllowed.upperBound)"))
                }
                benchmark.calls = value
            default:
                return .failure(BenchError("unexpected argument \(option)"))
            }
        }
        return .success(benchmark)
    }

    /// The private daemon's configuration: room for exactly `apps` apps of this uid, the leases of each plus the
    /// one measured, and a connection per app and a few more; the default policy otherwise.
    var configuration: String {
        """
        [Limits]
        AppsPerUserMax=\(apps)
        TasksPerAppMax=\(tasksPerApp + 1)
        ConnectionsMax=\(apps + Self.connectionsBesideApps)
        ConnectionsPerUserMax=\(apps + Self.connectionsBesideApps)

        """
    }

    /// The names of the apps; the first is the one whose round trips are measured.
    var appNames: [String] { (0..<apps).map { "scale-\($0)" } }

    /// Runs the benchmark and returns the report; throws when a step fails or a signal interrupts it. The daemon,
    /// the connections and the scratch directories are gone on every path.
    func run() throws -> ScaleReport {
        BenchmarkInterruption.install()
        defer { BenchmarkInterruption.uninstall() }
        try raiseDescriptorLimit()
        let directory = try makeScratchDirectory(prefix: "bgtask-bench-scale-\(getpid())")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Declared before the daemon, so closed after it stopped: the daemon then ends no registration one by one.
        let fleet = try ScaleFleet()
        defer { fleet.close() }
        let daemon = try BenchmarkDaemon(
            executable: try sibling("bgtaskd"), directory: directory, configuration: configuration,
            lifetime: Self.daemonLifetime)
        defer { daemon.stop() }
        try BenchmarkInterruption.check()
        let client = try UnixSocket.connect(path: daemon.socketPath)
        defer { try? client.close() }
        return try grow(daemon, fleet: fleet, client: client)
    }

    /// Measures the empty daemon, the latency with one app, the daemon with every app, then with every lease, and
    /// the latency at that size.
    private func grow(_ daemon: BenchmarkDaemon, fleet: ScaleFleet, client: FileDescriptor) throws -> ScaleReport {
        let empty = try DaemonFootprint.read(pid: daemon.pid)
        let names = appNames
        try fleet.register([names[0]], socketPath: daemon.socketPath)
        let caller = LeaseCaller(connection: client, app: names[0])
        let baseline = try measure(caller)

        var started = MonotonicClock.now()
        try fleet.register(Array(names.dropFirst()), socketPath: daemon.socketPath)
        let registrationSeconds = Double(MonotonicClock.now() - started) / 1e9
        _ = try expectStatus(on: client, tasks: 0, fleet: fleet)
        let withApps = try DaemonFootprint.read(pid: daemon.pid)

        started = MonotonicClock.now()
        try LeaseOpener(socketPath: daemon.socketPath).open(tasksPerApp, on: names)
        let openingSeconds = Double(MonotonicClock.now() - started) / 1e9
        _ = try expectStatus(on: client, tasks: apps * tasksPerApp, fleet: fleet)
        let withTasks = try DaemonFootprint.read(pid: daemon.pid)
        let stateFileBytes = try stateFileSize(of: daemon)

        let atSize = try measure(caller)
        let counted = try expectStatus(on: client, tasks: apps * tasksPerApp, fleet: fleet)
        return ScaleReport(
            apps: apps, tasksPerApp: tasksPerApp, calls: calls, empty: empty, withApps: withApps,
            withTasks: withTasks, baselineNanoseconds: baseline, atSizeNanoseconds: atSize,
            registrationSeconds: registrationSeconds, openingSeconds: openingSeconds, eventsRead: fleet.eventsRead,
            stateFileBytes: stateFileBytes, countedApps: counted.apps, countedTasks: counted.tasks,
            savesOnMemoryFileSystem: BenchmarkDaemon.memoryFileSystem != nil,
            linksRuntimeDynamically: try DaemonFootprint.mapsSwiftRuntimeLibrary(pid: daemon.pid))
    }

    /// The size of the daemon's state file, in bytes.
    private func stateFileSize(of daemon: BenchmarkDaemon) throws -> Int {
        let path = daemon.stateDirectory + "/state.json"
        var status = stat()
        guard stat(path, &status) == 0 else { throw Errno(rawValue: errno, operation: "stat(\(path))") }
        return Int(status.st_size)
    }

    /// Raises this process's soft descriptor limit to the hard one, and fails if even that leaves no room for a
    /// connection per app.
    private func raiseDescriptorLimit() throws {
        let soft = try DescriptorLimit.raiseToHardLimit()
        let needed = apps + Self.descriptorsBesideApps
        guard soft >= needed else {
            throw BenchError("\(apps) apps need \(needed) descriptors; RLIMIT_NOFILE allows this process \(soft)")
        }
    }

    /// `calls` round trips of `caller`'s leases after `warmUpLeases` not counted, or as many as
    /// `measurementBudget` allows; in nanoseconds, ascending. Checks for an interruption after every lease.
    private func measure(_ caller: LeaseCaller) throws -> [Int64] {
        var discarded: [Int64] = []
        try caller.leases(Self.warmUpLeases, into: &discarded)
        var latencies: [Int64] = []
        latencies.reserveCapacity(calls)
        let deadline = MonotonicClock.now() + Self.measurementBudget.nanosecondCount
        while latencies.count < calls, MonotonicClock.now() < deadline {
            try BenchmarkInterruption.check()
            try caller.leases(1, into: &latencies)
        }
        return latencies.sorted()
    }

    /// Asks `GetStatus` on `connection` and fails unless the daemon counts every app and `tasks` open leases, and
    /// every app's stream is still open and read; returns the daemon's counts.
    private func expectStatus(
        on connection: FileDescriptor, tasks: Int, fleet: ScaleFleet
    ) throws -> (apps: Int, tasks: Int) {
        try BenchmarkInterruption.check()
        if let failure = fleet.drainFailure { throw BenchError("the apps' streams are no longer read: \(failure)") }
        guard fleet.streamsEnded == 0 else {
            throw BenchError("the daemon closed \(fleet.streamsEnded) of the apps' event streams")
        }
        try connection.sendAll(Array(#"{"method":"io.bgtask.Lifecycle.GetStatus"}"#.utf8) + [0])
        let reply = try readFrame(connection)
        let parameters =
            (try? JSONSerialization.jsonObject(with: Data(reply)) as? [String: Any])?["parameters"] as? [String: Any]
        guard let liveApps = parameters?["apps"] as? Int, let openTasks = parameters?["tasks"] as? Int else {
            throw BenchError("GetStatus replied without apps and tasks: \(String(decoding: reply, as: UTF8.self))")
        }
        guard liveApps == apps, openTasks == tasks else {
            throw BenchError("GetStatus counts \(liveApps) apps and \(openTasks) leases, not \(apps) and \(tasks)")
        }
        return (liveApps, openTasks)
    }
}
