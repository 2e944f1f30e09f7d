// A soak run: set up the daemon, the apps and the evidence, follow the schedule, tear down, judge.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSoak
import BGTaskSystem
import Glibc
import Synchronization

/// One soak run from options to report. `log` receives progress lines (the seed first).
public final class SoakRun {
    let options: SoakOptions
    let seed: UInt64
    let faults: [SoakFault]
    let executable: String
    let log: (String) -> Void
    let clock = SoakClock()
    let isRoot = getuid() == 0

    // Set up by `prepare()`.
    var scratch = ""
    var socketPath = ""
    var cgroups: SoakCgroups?
    var stateDisk: StateDisk?
    var service: (any SoakService)?
    var controller: Controller!
    var watch: WatchRecorder?
    var probe: LatencyProbe?
    var statusProbe: StatusProbe?
    var schedule: SoakSchedule!
    var appsLog: FileDescriptor?
    var appsMemoryMaxBytes = 0
    /// Memory-pressure phases: `AppsMemoryMax` lowered under the apps' measured total for a few seconds, then put
    /// back, in the configuration file the daemon reads (its `--config`, or the installed service's own), so
    /// reclamation has work to do and `heaviest-first` something to judge.
    var configurationPath: String?
    /// The daemon's configuration root (the directory of `--config PATH`): it and everything under it the soak
    /// writes is owned by root and writable by no one else, as the daemon trusts configuration.
    var configurationRoot = ""
    var lowMemoryMax: Int?
    var memoryLimitChanges: [MemoryLimitChange] = []
    var pressureEndsAt: Duration?
    var nextPressureAt: Duration = .zero
    let sampler = Sampler(unifiedRoot: CgroupHierarchies.probe().unified)

    // The evidence and the tallies.
    var running: [Int: RunningApp] = [:]
    var generations: [Int: Int] = [:]
    var processSamples: [ProcessSample] = []
    var memorySamples: [MemorySample] = []
    var resourceSamples: [ResourceSample] = []
    var restarts: [RestartEvidence] = []
    var restartTimes: [(cause: RestartCause, downMilliseconds: Double)] = []
    var faultCounts: [SoakFault: Int] = [:]
    var lastApps: AppSnapshot?
    var daemonStoppedAt: Duration?
    var hammerCount = 0
    /// Whether the scratch directory (logs, state, the apps' output) is kept for a look: until the run passes.
    var keepsScratch = true
    /// The probe's lease call round trips, kept when it stops.
    var finalLatencies: [Int64] = []
    /// The status probe's `GetStatus` calls, kept when it stops.
    var statusCalls: [StatusCall] = []
    /// Every fault injected, when it began: the figures mark them.
    var faultMarks: [FaultMark] = []
    /// The fake adapter's `online` as the harness set it (`setPower`).
    var powerChanges: [PowerChange] = []
    /// The submits and cancels made, with their answers.
    var requestOperations: [RequestOperation] = []

    /// The policy the daemon runs with: short, so a minute holds many lifecycles.
    static let backgroundTime: Duration = .seconds(12)
    /// How long after a change (a state, an end, the daemon's stop) the processes are not judged yet: the daemon
    /// and the kernel act on it within that.
    static let settling: Duration = .seconds(2)

    /// A run of `options`; `executable` is this program (re-run as the apps and the hostile client), with
    /// `bgtaskd` beside it.
    public init(options: SoakOptions, executable: String, log: @escaping (String) -> Void) throws {
        self.options = options
        self.executable = executable
        self.log = log
        var entropy = SystemRandomNumberGenerator()
        seed = options.seed ?? (entropy.next() >> 1)
        let defaults = SoakFault.allCases.filter { $0 != .diskFull || (getuid() == 0 && !options.usesSystemd) }
        faults = options.faults ?? defaults
        if faults.contains(.diskFull) && getuid() != 0 {
            throw SoakError("the disk-full fault needs root (a tmpfs in a private mount namespace)")
        }
        if faults.contains(.diskFull) && options.usesSystemd {
            throw SoakError("the disk-full fault is not available with --systemd (the service's runtime directory)")
        }
    }

    /// Runs the whole soak; the result. Set-up failures and harness failures throw. SIGINT and SIGTERM end it
    /// early, with everything it started stopped and removed.
    public func run() throws -> SoakRunResult {
        log("seed: \(seed)")
        signal(SIGINT) { _ in soakInterrupted.store(true, ordering: .relaxed) }
        signal(SIGTERM) { _ in soakInterrupted.store(true, ordering: .relaxed) }
        defer { cleanUp() }
        try prepare()
        log(
            "schedule \(schedule.digest): \(options.apps) apps for \(options.duration), \(schedule.operations.count) "
                + "operations, faults \(faults.map(\.rawValue).joined(separator: ","))"
                + (options.usesSystemd ? ", under systemd" : ""))
        for slot in schedule.slots { spawn(slot) }
        try follow()
        return finish()
    }

    /// The scratch directory, cgroups, the state's disk, the daemon, the watch, the probe and the schedule.
    private func prepare() throws {
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
        signal(SIGPIPE, SIG_IGN)
        scratch = try makeScratch()
        mkdir(scratch + "/locks", 0o777)
        chmod(scratch + "/locks", 0o1777)
        mkdir(scratch + "/state", 0o755)
        mkdir(scratch + "/logs", 0o755)
        // The apps' logs of the memory they map; launched apps may run as another user.
        mkdir(scratch + "/memory", 0o777)
        chmod(scratch + "/memory", 0o1777)
        appsLog = try FileDescriptor.open(
            scratch + "/apps.log", .writeOnly, options: [.create, .append], permissions: 0o644)
        if isRoot { cgroups = try SoakCgroups(name: "bgtask-soak-\(getpid())") }
        let allocationTotalMiB = 1_024
        schedule = SoakSchedule(
            seed: seed, apps: options.apps, duration: options.duration, faults: faults,
            usesSystemd: options.usesSystemd, canLaunch: cgroups != nil, canScope: cgroups != nil,
            allocationTotalMiB: allocationTotalMiB)
        try preparePowerSupply()
        // About 12 MiB per app of its own (the Swift runtime's share, threads, heap), plus a third of what the
        // apps may map: reclamation has work to do without the host feeling it.
        appsMemoryMaxBytes = (options.apps * 12 + allocationTotalMiB / 3) << 20
        let lifetime = options.duration + .seconds(300)
        // No UPower of the host's system bus: the daemon reads the harness's power tree, in both modes.
        let noSystemBus = "DBUS_SYSTEM_BUS_ADDRESS=unix:path=\(scratch)/no-system-bus"
        if options.usesSystemd {
            let systemdService = try SystemdSoakDaemon(
                configuration: configuration(), environment: [noSystemBus],
                executableDirectory: directory(of: executable), lifetime: lifetime, log: log)
            service = systemdService
            socketPath = systemdService.socketPath
            configurationPath = systemdService.configurationPath
            configurationRoot = systemdService.configurationRoot
        } else {
            var prefix: [String] = []
            if faults.contains(.diskFull) {
                let disk = try StateDisk(directory: scratch + "/state", sizeBytes: 16 << 20, lifetime: lifetime)
                stateDisk = disk
                prefix = disk.nsenterPrefix
            }
            socketPath = scratch + "/io.bgtask.Lifecycle"
            let configurationPath = scratch + "/bgtaskd.conf"
            self.configurationPath = configurationPath
            configurationRoot = scratch
            try ConfigurationFile.write(configuration(), to: configurationPath, root: scratch)
            service = try PrivateSoakDaemon(
                executable: directory(of: executable) + "/bgtaskd",
                arguments: [
                    "--socket", socketPath, "--config", configurationPath, "--state-file",
                    scratch + "/state/state.json", "--log-dir", scratch + "/logs",
                ], prefix: prefix, socketPath: socketPath, notifyPath: scratch + "/notify",
                logPath: scratch + "/bgtaskd.log", lifetime: lifetime, environment: [noSystemBus])
        }
        nextPressureAt = options.duration / 5
        controller = Controller(socketPath: socketPath)
        watch = try WatchRecorder(socketPath: socketPath, clock: clock)
        probe = try LatencyProbe(socketPath: socketPath)
        statusProbe = try StatusProbe(socketPath: socketPath, clock: clock)
    }

    /// The daemon's configuration.
    func configuration() -> String {
        """
        [Policy]
        BackgroundTimeSec=\(Self.backgroundTime.components.seconds)s
        ExpirationWarningSec=\(Self.expirationWarning.components.seconds)s
        EnterBackgroundGraceSec=3s
        WillTerminateGraceSec=2s
        LaunchTimeoutSec=20s
        LockedSuspendGraceSec=1s

        [Memory]
        AppsMemoryMax=\(lowMemoryMax ?? appsMemoryMaxBytes)
        MemoryWarningGraceSec=500ms
        \(cgroups.map { "CgroupRoot=\($0.launchRoot.path)" } ?? "")

        [Limits]
        AppsPerUserMax=\(options.apps * 2 + 64)
        ConnectionsMax=\(options.apps * 8 + 1_024)
        ConnectionsPerUserMax=\(options.apps * 8 + 512)
        HistorySize=5000

        """ + Self.schedulingConfiguration(powerSupplyPath: powerSupplyPath)
    }

    /// `RefreshTaskSec` and `ProcessingTaskSec`: short, so a minute holds many tasks that start, are told to stop,
    /// lose their power and complete.
    static let refreshTaskTime: Duration = .seconds(4)
    static let processingTaskTime: Duration = .seconds(7)
    /// The two by kind, as the checker reads them.
    static var scheduledTaskTimes: [String: Duration] { ["refresh": refreshTaskTime, "processing": processingTaskTime] }
    /// `ExpirationWarningSec`.
    static let expirationWarning: Duration = .seconds(3)

    /// Scheduled work's configuration: the harness's power tree, short task times, three at a time (one over the
    /// default, so the cap is reached and freed often).
    static func schedulingConfiguration(powerSupplyPath: String) -> String {
        """
        [Conditions]
        PowerSupplyPath=\(powerSupplyPath)

        [Scheduling]
        ScheduledTasksMax=3
        RefreshTaskSec=\(refreshTaskTime.components.seconds)s
        ProcessingTaskSec=\(processingTaskTime.components.seconds)s

        """
    }

    /// Follows the schedule until the run's duration, sampling every second.
    private func follow() throws {
        var next = 0
        var nextSample = Duration.zero
        var nextProgress = options.duration / 10
        let operations = schedule.operations
        while clock.now() < options.duration {
            if soakInterrupted.load(ordering: .relaxed) { throw SoakError("interrupted: stopped what it started") }
            let now = clock.now()
            while next < operations.count, operations[next].at <= clock.now() {
                try perform(operations[next].operation)
                next += 1
            }
            if now >= nextSample {
                sample()
                respawnEnded(allowingNew: now < options.duration - .seconds(8))
                checkUnexpectedWatchdog()
                updateMemoryPressure(at: now)
                nextSample = now + .seconds(1)
            }
            if now >= nextProgress {
                log(progressLine())
                while nextProgress <= now { nextProgress += options.duration / 10 }
            }
            let wake = min(next < operations.count ? operations[next].at : options.duration, nextSample)
            let wait = wake - clock.now()
            if wait > .zero { usleep(UInt32(min(wait, .milliseconds(200)).components.attoseconds / 1_000_000_000_000)) }
        }
        // Faults a slow run left unreached (each hang costs the watchdog interval) still happen, before the apps
        // end, so that every scheduled fault is injected.
        for (_, operation) in operations[next...] {
            guard case .fault = operation else { continue }
            try perform(operation)
            sample()
        }
    }

    func progressLine() -> String {
        let done = controller.counts.values.reduce(0) { $0 + $1.done }
        let entries = watch?.entries.count ?? 0
        let faultsDone = faultCounts.values.reduce(0, +)
        return "t=\(Int(clock.now().components.seconds))s: \(running.count) apps, \(done) calls answered, "
            + "\(entries) entries watched, \(faultsDone) faults, \(restarts.count) restarts"
    }

    /// One round of samples: the apps as listed, their processes and memory, the daemon's resources.
    func sample() {
        let time = clock.now()
        guard let apps = controller.listApps() else { return }
        lastApps = AppSnapshot(takenAt: time, apps: apps)
        let soakApps = apps.filter { $0.name != LatencyProbe.name }
        processSamples += sampler.processSamples(of: soakApps, at: time)
        // The probe too: it is registered from this process, whose memory (the evidence, growing through the run)
        // the daemon counts among the apps' like any app's.
        memorySamples += sampler.memorySamples(of: apps, at: clock.now())
        if let pid = service?.daemonPID,
            let sample = sampler.resources(of: pid, at: clock.now(), operations: operationCount)
        {
            resourceSamples.append(sample)
        }
    }

    /// Starts or ends a memory-pressure phase: every fifth of the run (at most two minutes apart), 8 s with
    /// `AppsMemoryMax` at three quarters of the apps' total as last sampled, then the configured limit again.
    /// The configuration is rewritten (a daemon restarted meanwhile reads it too) and the daemon sent SIGHUP.
    func updateMemoryPressure(at now: Duration) {
        guard let configurationPath else { return }
        if let endsAt = pressureEndsAt {
            guard now >= endsAt else { return }
            pressureEndsAt = nil
            nextPressureAt = now + min(options.duration / 5, .seconds(120))
            setMemoryLimit(nil, configurationPath: configurationPath)
            return
        }
        guard now >= nextPressureAt, now < options.duration - .seconds(12), let last = memorySamples.last?.takenAt
        else { return }
        let total = memorySamples.reversed().prefix { $0.takenAt == last }.reduce(0) { $0 + $1.memoryBytes }
        guard total > 0 else { return }
        pressureEndsAt = now + .seconds(8)
        setMemoryLimit(max(total / 4 * 3, 32 << 20), configurationPath: configurationPath)
    }

    private func setMemoryLimit(_ bytes: Int?, configurationPath: String) {
        lowMemoryMax = bytes
        do {
            try ConfigurationFile.write(configuration(), to: configurationPath, root: configurationRoot)
        } catch {
            log("cannot rewrite \(configurationPath): \(error)")
            return
        }
        service?.reload()
        let limit = bytes ?? appsMemoryMaxBytes
        memoryLimitChanges.append(MemoryLimitChange(at: clock.now(), appsMemoryMax: limit))
        log(
            "t=\(Int(clock.now().components.seconds))s: AppsMemoryMax=\(limit >> 20) MiB"
                + (bytes == nil ? " again" : " (memory pressure)"))
    }

    /// Samples the processes of `apps` (suspended when the daemon was last asked) three times, a second apart,
    /// starting past the settling time after the daemon's final stop: the daemon lets every process go when it
    /// stops, so one still stopped or frozen is a stray stop. The daemon is not asked about them (it is gone).
    func sampleAfterStop(_ apps: [AppInfo]) {
        guard !apps.isEmpty, let stoppedAt = daemonStoppedAt else { return }
        let firstAt = stoppedAt + Self.settling + .seconds(1)
        var held = 0
        for round in 0..<3 {
            let due = firstAt + .seconds(round)
            let wait = due - clock.now()
            if wait > .zero { usleep(UInt32(wait.nanosecondCount / 1_000)) }
            for var sample in sampler.processSamples(of: apps, at: clock.now()) {
                sample.reportedState = nil
                if sample.isHeld { held += 1 }
                processSamples.append(sample)
            }
        }
        log("after the final stop: \(apps.count) suspended apps' processes sampled 3 times, \(held) samples held")
    }

    /// Calls the harness made plus entries the daemon recorded: the operations the CPU is divided by.
    var operationCount: Int { controller.callCount + (watch?.entries.count ?? 0) }

    /// A watchdog restart nobody injected a hang for: recorded as such (and judged a violation).
    func checkUnexpectedWatchdog() {
        guard let service else { return }
        for times in service.unexpectedWatchdogRestarts() {
            let after = controller.listApps(within: .seconds(10)) ?? []
            recordRestart(
                .watchdog, hang: false, before: lastApps ?? AppSnapshot(takenAt: .zero, apps: []), times: times,
                after: after)
        }
    }

    /// Adds a restart to the evidence.
    func recordRestart(
        _ cause: RestartCause, hang: Bool, before: AppSnapshot, times: (stoppedAt: Int64, readyAt: Int64),
        after: [AppInfo]
    ) {
        let afterSnapshot = AppSnapshot(takenAt: clock.now(), apps: after)
        restarts.append(
            RestartEvidence(
                cause: cause, wasHangInjected: hang, before: before, stoppedAt: clock.since(times.stoppedAt),
                readyAt: clock.since(times.readyAt), after: afterSnapshot))
        restartTimes.append((cause, Double(times.readyAt - times.stoppedAt) / 1e6))
        lastApps = afterSnapshot
    }

    /// Ends every app but the suspended ones, waits for the daemon to record their ends, stops the daemon, checks
    /// that the suspended apps' processes were let go (`no-stray-stops`), ends them, and judges the evidence.
    private func finish() -> SoakRunResult {
        // Scheduled work ends first: the requests held now are what request-never-lost judges, and each is then
        // cancelled (recorded like any cancel), so that no scheduled task begins in an app kept alive past the
        // daemon's stop (a suspended one would be woken for it).
        let heldAtEnd = heldRequests()
        for key in (heldAtEnd ?? []).sorted() { cancel(key.app, identifier: key.identifier) }
        // The suspended apps outlive the daemon: a daemon that stops must leave none of them stopped or frozen.
        // They hold no task (an app is suspended once its last one ended), so nothing they did is left unjudged.
        let listed = controller.listApps() ?? []
        let suspended = listed.filter { $0.state == .suspended && $0.pid > 0 && $0.name != LatencyProbe.name }
        let suspendedNames = Set(suspended.map(\.name))
        let keptSlots = Set(running.filter { suspendedNames.contains($0.value.name) }.keys)
        log("ending the apps (\(keptSlots.count) suspended ones after the daemon stops)")
        for slot in running.keys.sorted() where !keptSlots.contains(slot) { running[slot]?.kill() }
        let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
        while MonotonicClock.now() < deadline {
            reapAll()
            let live = controller.listApps()?.filter {
                $0.name != LatencyProbe.name && $0.state != .terminated && $0.state != .notRunning
                    && !suspendedNames.contains($0.name)
            }
            if live?.isEmpty == true && running.keys.allSatisfy(keptSlots.contains) { break }
            usleep(200_000)
        }
        sample()
        // The daemon's own account, for a failed run's post-mortem beside the entries received.
        let history = controller.call("History") { client throws(ClientError) in try client.history() } ?? []
        finalLatencies = probe?.latencies ?? []
        probe?.stop()
        probe = nil
        statusProbe?.stop()
        statusCalls = statusProbe?.results ?? []
        statusProbe = nil
        usleep(500_000)
        service?.stop()
        daemonStoppedAt = clock.now()
        watch?.stop()
        sampleAfterStop(suspended.filter { app in keptSlots.contains { running[$0]?.name == app.name } })
        for slot in running.keys.sorted() { running[slot]?.kill() }
        if let cgroups { cgroups.killEverything() }
        let end = clock.now()
        let evidence = SoakEvidence(
            entries: watch?.entries ?? [], processSamples: processSamples, memorySamples: memorySamples,
            restarts: restarts, resourceSamples: resourceSamples, daemonStoppedAt: daemonStoppedAt, end: end,
            watchGaps: watch?.gaps ?? [], memoryLimitChanges: memoryLimitChanges, watchListings: watch?.listings ?? [],
            allocationChanges: allocationChanges(),
            scheduled: ScheduledEvidence(
                powerChanges: powerChanges, operations: requestOperations,
                receipts: scheduledReceipts(), heldAtEnd: heldAtEnd))
        let criteria = SoakCriteria(
            backgroundTime: Self.backgroundTime, budgetGrace: .seconds(3), settling: Self.settling,
            appsMemoryMax: appsMemoryMaxBytes, restartTolerance: .seconds(2), warmUpFraction: 0.3,
            // The apps' connections come and go with the churn (two or three each, and up to a quarter of the apps
            // between registrations at a time): descriptors vary by that much without a leak. A daemon process is
            // judged once it has lived 60 samples (60 s): after a restart the apps come back over tens of seconds
            // (their clients back off while it is down; a 15-minute run saw descriptors climb for 30 s), which is
            // not growth.
            descriptorSlack: max(8, options.apps / 2), minimumResourceSamples: 60, reactionBound: .seconds(1),
            expirationWarning: Self.expirationWarning, scheduledTaskTimes: Self.scheduledTaskTimes)
        let report = SoakChecker.check(evidence, criteria: criteria)
        let figures = SoakFigures.figures(
            evidence, statusCalls: statusCalls, faults: faultMarks, runDuration: options.duration, criteria: criteria)
        let result = SoakRunResult(
            run: self, evidence: evidence, report: report, figures: figures, warmUpFraction: criteria.warmUpFraction)
        keepsScratch = !result.isPassing
        if keepsScratch {
            writeEntries(evidence.entries, to: "entries.txt")
            writeEntries(
                history.map { ObservedEntry(observedAt: clock.fromWallClock($0.time), entry: $0) }, to: "history.txt")
        }
        return result
    }

    /// Removes everything the run made: processes, cgroups, the state's disk, the scratch directory (kept, and
    /// named, when `keepsScratch`).
    func cleanUp() {
        probe?.stop()
        statusProbe?.stop()
        for slot in running.keys.sorted() { running[slot]?.kill() }
        service?.stop()
        service = nil
        watch?.stop()
        reapAll()
        cgroups?.remove()
        cgroups = nil
        stateDisk?.close()
        stateDisk = nil
        try? appsLog?.close()
        appsLog = nil
        guard !scratch.isEmpty else { return }
        if keepsScratch {
            log("the run's daemon log, state and apps' output are kept in \(scratch)")
        } else if let remover = try? ProcessSpawner.spawn(["rm", "-rf", "--one-file-system", scratch]) {
            _ = try? remover.waitForExit()
            try? remover.pidFD.close()
        }
    }
}

extension SoakRun {
    /// Writes the entries received, one line each, beside the daemon's log: for a failed run's post-mortem.
    func writeEntries(_ entries: [ObservedEntry], to name: String) {
        let lines = entries.map { observed in
            let entry = observed.entry
            var line =
                "\(format(observed.observedAt.secondsValue, 3)) \(format(entry.time, 6)) \(entry.app) "
                + entry.kind.rawValue
            if let state = entry.state { line += " state=\(state.rawValue)" }
            if let task = entry.taskId { line += " task=\(task)" }
            if let name = entry.taskName { line += " name=\(name)" }
            if let tasks = entry.taskIds { line += " tasks=\(tasks.map(String.init).joined(separator: ","))" }
            if let end = entry.taskEnd { line += " end=\(end.rawValue)" }
            if let reason = entry.reason { line += " reason=\(reason.rawValue)" }
            return line
        }
        try? writeFile(scratch + "/" + name, lines.joined(separator: "\n") + "\n")
    }
}

/// Set by SIGINT and SIGTERM: the run stops at its next step and cleans up.
let soakInterrupted = Atomic<Bool>(false)

/// The directory part of `path`.
func directory(of path: String) -> String {
    guard let slash = path.lastIndex(of: "/") else { return "." }
    return String(path[..<slash])
}

/// Writes `text` to `path`, replacing it.
func writeFile(_ path: String, _ text: String) throws {
    let file = try FileDescriptor.open(path, .writeOnly, options: [.create, .truncate], permissions: 0o644)
    defer { try? file.close() }
    try file.writeAll(Array(text.utf8))
}

/// A fresh directory under `$TMPDIR` (or `/tmp`), mode 0755 so another user's hostile client reaches the socket.
extension SoakRun {
    /// What the apps logged of the memory they map (`AllocationLog`), on the run's clock. A line cut short by a
    /// kill mid-write is left out.
    func allocationChanges() -> [AllocationChange] {
        let directory = ProcFS(root: scratch + "/memory", fileSizeLimit: 4 << 20)
        var changes: [AllocationChange] = []
        for file in (try? directory.listDirectory("")) ?? [] {
            guard let dot = file.lastIndex(of: "."), let pid = Int(file[file.index(after: dot)...]),
                let text = try? directory.read(file)
            else { continue }
            let app = String(file[..<dot])
            for line in text.split(separator: "\n") {
                let fields = line.split(separator: " ")
                guard fields.count == 2 || (fields.count == 3 && fields[2] == "touching"),
                    let nanoseconds = Int64(fields[0]), let bytes = Int(fields[1])
                else { continue }
                changes.append(
                    AllocationChange(
                        at: clock.since(nanoseconds), app: app, pid: pid, allocatedBytes: bytes,
                        isTouching: fields.count == 3))
            }
        }
        return changes
    }
}

func makeScratch() throws -> String {
    do {
        return try TemporaryDirectory.make(prefix: "bgtask-soak")
    } catch {
        throw SoakError("cannot make a scratch directory: \(error)")
    }
}
