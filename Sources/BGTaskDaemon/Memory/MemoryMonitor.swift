// Watches memory and carries out the core's warn → reclaim decisions: sampling off the loop, warning, killing.

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem

/// The shell of memory reclamation (docs/ARCHITECTURE.md, Memory): samples `/proc/meminfo` on the loop and the
/// apps' memory (PSS) on the inspection worker's thread, feeds the core's `MemoryPressureMachine`, and carries out
/// its decisions through the policy core (`memoryWarning`, `reclamationOrder`, `reclaim`).
///
/// Triggers by adaptive sampling: PSI triggers on `/proc/pressure/memory` need `CAP_SYS_RESOURCE`, and the apps'
/// total against `AppsMemoryMax` can only be read. It is quiet when nothing can trigger: no timer without apps;
/// the apps' memory is sampled only while `AppsMemoryMax` is set or memory is short (reclamation needs it then),
/// and `MemAvailable` alone, seconds apart, when it is far above the warning threshold. Controllers asking for
/// memory (`GetStatus`, `ListApps`, `GetApp`) get the last sample, refreshed in the background when it is old.
///
/// It reaches the daemon only through its host (`MemoryMonitorHost`), held weakly: the manager owns the monitor.
final class MemoryMonitor {
    /// A sample older than this is refreshed (in the background) when a controller asks for memory figures.
    static let displayRefreshAge: Duration = .seconds(5)

    private weak var host: (any MemoryMonitorHost)?
    private let logger: Logger
    private let loop: EventLoop
    private let clock: ManagerClock
    private let procFS: ProcFS
    private let inspector: ProcessInspector
    private(set) var machine: MemoryPressureMachine
    private var timer: ManagerTimer?
    private(set) var isDryRun: Bool
    /// Whether a sample is on the worker, and whether the next one must include the apps (asked meanwhile).
    private var isSampling = false
    private var isProcessSampleWanted = false
    /// Whether the sample out was asked for because a reclaimable app had no reading when a decision was due: the
    /// decision on it goes ahead whatever came meanwhile, so a stream of new apps cannot put reclamation off.
    private var isWeighingNewcomers = false
    /// How long reclamation waits for a victim's process to exit before it stops waiting and goes on with the next.
    /// A SIGKILLed process is gone within milliseconds (a few for a stopped one); one that is not gone after this
    /// will not go soon: its kill was refused, or it is stuck in the kernel (`D` state, such as a task frozen by a
    /// v1 freezer, which dies only once thawed). earlyoom and systemd-oomd bound their waits the same way.
    static let victimExitTimeout: Duration = .seconds(10)

    /// Apps reclaimed, until their processes exit: no new victim while one is pending.
    private var victims = ReclamationVictims()
    /// The last sample, and the last one that measured the apps.
    private(set) var lastSample: MemorySample?
    private(set) var lastProcessSample: MemorySample?
    /// Whether "nothing to reclaim" was already logged in this episode.
    private var reportedNothingToReclaim = false
    /// Processes whose memory could not be read, logged once each until a read succeeds again.
    private var reportedUnreadable: Set<Int> = []
    /// Whether an unreadable `/proc/meminfo` was logged, until it is read again.
    private var reportedUnreadableMemoryInfo = false
    /// What wakes the monitor between samples.
    private(set) var triggers: MemoryTriggers!
    /// When a trigger fired that the next decision has not seen yet: that decision is dated from it.
    private var firedAt: MonotonicInstant?

    /// A monitor for `host`'s processes; `environment` is where the service manager's pressure watch is named
    /// (`$MEMORY_PRESSURE_WATCH`, `$MEMORY_PRESSURE_WRITE`).
    init(
        host: any MemoryMonitorHost, settings: DaemonConfiguration.Memory,
        environment: [String: String] = MemoryTriggers.serviceManagerEnvironment()
    ) {
        self.host = host
        logger = host.logger
        loop = host.loop
        clock = host.clock
        procFS = host.procFS
        inspector = host.inspector
        machine = MemoryPressureMachine(thresholds: Self.thresholds(settings))
        isDryRun = settings.reclaimDryRun
        triggers = MemoryTriggers(logger: logger, loop: loop, clock: clock) { [weak self] instant, what in
            self?.triggerFired(at: instant, what)
        }
        triggers.update(appsMemoryMax: settings.appsMemoryMaxBytes, appsMemoryRoot: host.appsMemoryRoot)
        triggers.armPressure(environment: environment, appsPressureFile: host.appsPressureFile)
    }

    /// Whether the host tracks any process (none once the host is gone).
    private var hasProcesses: Bool { host?.hasMonitoredProcesses ?? false }

    /// A trigger fired: sample now (apps included), and date the decision it leads to from this moment.
    private func triggerFired(at instant: MonotonicInstant, _ what: String) {
        logger.debug("memory trigger: \(what)")
        firedAt = min(firedAt ?? instant, instant)
        guard hasProcesses else { return }
        requestSample(includingProcesses: true)
    }

    static func thresholds(_ settings: DaemonConfiguration.Memory) -> MemoryThresholds {
        MemoryThresholds(
            appsMemoryMax: settings.appsMemoryMaxBytes, warnPercent: Double(settings.warnPercent),
            criticalPercent: Double(settings.criticalPercent), warningGrace: settings.warningGrace)
    }

    /// Takes new settings (configuration reload).
    func update(_ settings: DaemonConfiguration.Memory) {
        machine.thresholds = Self.thresholds(settings)
        isDryRun = settings.reclaimDryRun
        triggers.update(appsMemoryMax: settings.appsMemoryMaxBytes, appsMemoryRoot: host?.appsMemoryRoot)
        if hasProcesses { schedule(after: .zero) }
    }

    /// Makes sure a sample is scheduled while there are apps, and nothing runs without; call when apps come and go.
    func appsChanged() {
        if !hasProcesses {
            victims.removeAll()
            timer?.disarm()
        } else if timer?.deadline == nil && !isSampling {
            schedule(after: .zero)
        }
    }

    /// An app's process is gone; if it was reclaimed, how long after its kill (from a clock read now).
    func victimExited(_ app: AppID) -> Duration? {
        switch victims.exited(app) {
        case .abandoned(let killedAt):
            let sinceKill = clock.freshNow - killedAt
            let name = host?.appName(app) ?? app.description
            logger.notice("\(name)'s process exited at last, \(sinceKill) after its kill", [.app(name)])
            return sinceKill
        case .pending(let killedAt):
            // Whether that was enough is for a sample now to say, not the next tick.
            if victims.pending.isEmpty && machine.isUnderPressure { schedule(after: .zero) }
            return clock.freshNow - killedAt
        case nil:
            return nil
        }
    }

    /// Whether samples must measure the apps: to judge `AppsMemoryMax`, or to rank victims while memory is short.
    private var needsProcessSamples: Bool {
        machine.thresholds.appsMemoryMax != nil || machine.isUnderPressure
    }

    /// The core's wait until the next reading, but at least four times as long as the last reading of the apps
    /// took, so that sampling many apps near the limit costs at most a fifth of the worker's CPU.
    private func pollingInterval(after reading: MemoryReading) -> Duration {
        let interval = machine.interval(after: reading)
        guard let last = lastProcessSample else { return interval }
        return max(interval, .nanoseconds(last.durationNanoseconds * 4))
    }

    private func schedule(after delay: Duration) {
        do {
            if timer == nil {
                // Fired at most 5 ms late: the shortest wait is 50 ms, and a crossing is seen that much later.
                timer = try clock.makeTimer(name: "memory", accuracy: .milliseconds(5)) { [weak self] in
                    guard let self else { return }
                    requestSample(includingProcesses: needsProcessSamples)
                }
            }
            try timer?.rearm(at: clock.now + delay)
        } catch {
            logger.error("cannot schedule the memory monitor: \(error); memory is not watched")
        }
    }

    /// Takes a sample: the system's figures alone on the loop (two small files, `meminfo` and `pressure/memory`,
    /// whose cost does not grow with the apps: a worker round trip would cost more wake-ups than the reads), the
    /// apps' memory on the worker. While a sample is out, remembers that the next must include the apps.
    private func requestSample(includingProcesses: Bool) {
        guard let host, !host.isStopping else { return }
        guard !isSampling else {
            isProcessSampleWanted = isProcessSampleWanted || includingProcesses
            return
        }
        guard includingProcesses else {
            sampleArrived(inspector.sampleMemory([], includesProcesses: false))
            return
        }
        let processes = host.monitoredProcesses.map(\.inspected)
        guard host.submit(.memory(processes: processes)) else {
            schedule(after: .seconds(1))
            return
        }
        isSampling = true
        isProcessSampleWanted = false
    }

    /// A controller wants memory figures: if the apps were last measured long ago (or never), measure them in the
    /// background. The caller answers from what is known now; the next call sees the new sample.
    func refreshForDisplay() {
        guard hasProcesses else { return }
        if let last = lastProcessSample,
            loop.now - last.finishedAt < Self.displayRefreshAge.nanosecondCount
        {
            return
        }
        requestSample(includingProcesses: true)
    }

    /// A sample came back from the worker.
    func sampleArrived(_ sample: MemorySample) {
        isSampling = false
        lastSample = sample
        if let failure = sample.memoryInfoFailure {
            if !reportedUnreadableMemoryInfo {
                reportedUnreadableMemoryInfo = true
                let watched = machine.thresholds.appsMemoryMax == nil ? "nothing" : "only the apps' total"
                logger.error("\(failure); MemAvailable is not watched (\(watched) can trigger reclamation)")
            }
        } else if reportedUnreadableMemoryInfo {
            reportedUnreadableMemoryInfo = false
            logger.notice("\(procFS.root)/meminfo is readable again")
        }
        if sample.includesProcesses {
            lastProcessSample = sample
            applyProcessReadings(sample)
        }
        defer {
            if isProcessSampleWanted && hasProcesses {
                requestSample(includingProcesses: true)
            }
        }
        guard let host, host.hasMonitoredProcesses, !host.isStopping else { return }
        let system = systemReading(sample)
        if !sample.includesProcesses {
            // MemAvailable alone: if it calls for action, measure the apps before deciding anything.
            if machine.assess(system).level > .normal || machine.isUnderPressure {
                requestSample(includingProcesses: true)
            } else {
                schedule(after: pollingInterval(after: system))
            }
            return
        }
        decide(on: sample)
    }

    /// Stores each process's reading on its `TrackedProcess`; an unreadable one keeps its last reading (failing
    /// closed: it is never silently immune to reclamation) and is logged once.
    private func applyProcessReadings(_ sample: MemorySample) {
        guard let host else { return }
        for (key, bytes) in sample.processBytes {
            guard let process = host.monitoredProcess(serial: key) else { continue }
            process.memoryBytes = bytes
            process.isMemoryReadingStale = false
            reportedUnreadable.remove(key)
        }
        for (key, reason) in sample.failures {
            guard let process = host.monitoredProcess(serial: key) else { continue }
            process.isMemoryReadingStale = true
            if reportedUnreadable.insert(key).inserted {
                let last = process.memoryBytes.map { "keeping its last reading, \($0) bytes" } ?? "no reading yet"
                logger.warning(
                    "cannot read the memory of pid \(process.pid) (\(reason)); \(last)",
                    process.apps.map { .app(host.appName($0)) })
            }
        }
    }

    /// Each reclaimable app's memory, a process's reading given to one of its apps only (the oldest), so a
    /// process registered under two names is not counted twice.
    func readings() -> [AppID: UInt64] {
        guard let host else { return [:] }
        let core = host.core
        var readings: [AppID: UInt64] = [:]
        for process in host.monitoredProcesses {
            guard let bytes = process.memoryBytes,
                let app = process.apps.sorted().first(where: { core.reclamationBand(of: $0) != nil })
            else { continue }
            readings[app] = bytes
        }
        return readings
    }

    /// Whether a process of an app that reclamation could choose has never been measured.
    private func hasUnweighedReclaimableApp(_ host: any MemoryMonitorHost) -> Bool {
        let core = host.core
        return host.monitoredProcesses.contains { process in
            process.memoryBytes == nil && process.apps.contains { core.reclamationBand(of: $0) != nil }
        }
    }

    private func systemReading(_ sample: MemorySample, appsBytes: UInt64 = 0) -> MemoryReading {
        MemoryReading(
            appsBytes: appsBytes, availableBytes: sample.memoryInfo.map { UInt64(max(0, $0.availableBytes)) },
            totalBytes: sample.memoryInfo.map { UInt64(max(0, $0.totalBytes)) })
    }

    /// The memory of the processes of victims reclamation gave up waiting for, each process once.
    private var abandonedBytes: UInt64 { victims.abandonedBytes(host: host) }

    private func decide(on sample: MemorySample) {
        guard let host else { return }
        // Reclamation goes on with the next victim instead of stalling for the rest of the episode.
        victims.abandonOverdue(now: clock.freshNow, host: host, logger: logger)
        // An app that registered, or was adopted again after a restart, while this sample was out has no reading:
        // ranked without it, lighter apps of its band would die before it. When memory calls for action, weigh it
        // first (once: the decision on the next sample goes ahead), keeping the trigger's time.
        let weighingNewcomers = isWeighingNewcomers
        isWeighingNewcomers = false
        if !weighingNewcomers, hasUnweighedReclaimableApp(host),
            machine.isUnderPressure
                || machine.assess(systemReading(sample, appsBytes: readings().values.reduce(0, +))).level > .normal
        {
            isWeighingNewcomers = true
            requestSample(includingProcesses: true)
            if isSampling { return }
            isWeighingNewcomers = false
        }
        let apps = readings()
        let current = systemReading(sample, appsBytes: apps.values.reduce(0, +) + abandonedBytes)
        // Dated from the trigger that led to this sample, if one did (the threshold fires in the allocation that
        // crosses the limit; the sample and its decision come a little later).
        let now = firedAt ?? clock.now
        firedAt = nil
        let wasUnderPressure = machine.isUnderPressure
        let (decision, assessment) = machine.observe(current, victimsPending: !victims.pending.isEmpty, now: now)
        switch decision {
        case .none:
            if wasUnderPressure && !machine.isUnderPressure {
                logger.notice("memory is back within its limits")
                reportedNothingToReclaim = false
            }
        case .warn(let bytesToFree):
            logger.notice("memory warning: \(assessment.trigger); asking apps to free \(bytesToFree) bytes")
            host.feedMemoryInput { core in core.memoryWarning(readings: apps, bytesToFree: bytesToFree, now: now) }
            // Re-measure when the grace is up (at once with no grace), not at the next tick.
            schedule(after: min(machine.thresholds.warningGrace, pollingInterval(after: current)))
            return
        case .reclaim(let bytesToFree, let triggeredAt):
            reclaim(
                bytesToFree: bytesToFree, readings: apps, triggeredAt: triggeredAt, trigger: assessment.trigger,
                host: host)
        }
        schedule(after: pollingInterval(after: current))
    }

    /// Reclaims in the core's order until `bytesToFree` is covered, re-checking the trigger before each kill
    /// against a fresh `MemAvailable` and the apps still reclaimable.
    private func reclaim(
        bytesToFree: UInt64, readings: [AppID: UInt64], triggeredAt: MonotonicInstant, trigger: String,
        host: any MemoryMonitorHost
    ) {
        let order = host.core.reclamationOrder(readings: readings)
        guard bytesToFree > 0, !order.isEmpty else {
            if !reportedNothingToReclaim {
                logger.warning(
                    "memory is short (\(trigger)) but no app can be reclaimed"
                        + (host.core.policy.reclaimForeground ? "" : " (ReclaimForeground=no)"))
                reportedNothingToReclaim = true
            }
            return
        }
        // The ranking the kills come from, so that the journal explains each choice: the apps in order with their
        // bands, pids and the bytes each was last measured at (victims come from the front; a dozen is enough).
        let shown = order.prefix(12).map { candidate in
            let pid = host.monitoredProcess(of: candidate.app).map { "pid \($0.pid), " } ?? ""
            return "\(candidate.name) (\(candidate.band.name), \(pid)\(candidate.memoryBytes) bytes)"
        }
        let more = order.count > shown.count ? ", and \(order.count - shown.count) more" : ""
        logger.notice(
            "reclaiming \(bytesToFree) bytes (\(trigger)); apps in reclamation order: "
                + shown.joined(separator: ", ") + more)
        // Each victim is the first of the order as the apps are at its kill, not as they were at the round's start:
        // a kill's consequences can move another app between bands (its end frees a scheduled-work slot, and a
        // suspended app woken to run a scheduled task is then in background with a task). Ranked once, such an app
        // died from its new band before the suspended apps ranked after it (the --systemd soak hour: soak-19, woken
        // for a scheduled task 30 ms into a round, was killed 14th of 108 while suspended apps were left).
        var taken: Set<AppID> = []
        var freed: UInt64 = 0
        while freed < bytesToFree {
            let current = host.core.reclamationOrder(readings: readings.filter { !taken.contains($0.key) })
            guard let victim = current.first else { return }
            taken.insert(victim.app)
            freed = freed.addingReportingOverflow(victim.memoryBytes).overflow ? .max : freed + victim.memoryBytes
            // Re-check just before each kill: memory may have come back since the sample, and a victim already
            // chosen no longer counts (it is being terminated).
            let core = host.core
            let remaining =
                readings.filter { core.reclamationBand(of: $0.key) != nil }.values.reduce(0, +) + abandonedBytes
            let info = try? procFS.memoryInfo()
            let reading = MemoryReading(
                appsBytes: remaining, availableBytes: info.map { UInt64(max(0, $0.availableBytes)) },
                totalBytes: info.map { UInt64(max(0, $0.totalBytes)) })
            guard machine.assess(reading).level > .normal else {
                logger.notice("memory recovered before reclaiming \(victim.name): nothing killed")
                return
            }
            if isDryRun {
                logger.notice(
                    "ReclaimDryRun: would reclaim \(victim.name) (band \(victim.band.name), "
                        + "\(victim.memoryBytes) bytes; \(trigger))", [.app(victim.name)])
                continue
            }
            do {
                let decidedAt = clock.freshNow
                try host.feedMemoryInput { core throws(LifecycleError) in
                    let actions = try core.reclaim(
                        victim.app, memoryBytes: victim.memoryBytes, triggeredAt: triggeredAt, trigger: trigger,
                        now: decidedAt)
                    // A victim from the moment the core decided it, before its actions are carried out.
                    victims.killed(victim.app, at: decidedAt)
                    return actions
                }
            } catch {
                logger.warning("cannot reclaim \(victim.name): \(error)")
            }
        }
    }

    /// The apps' total from the last sample that measured them, each process once (victims that would not die
    /// included).
    var appsBytes: UInt64? {
        lastProcessSample == nil ? nil : readings().values.reduce(0, +) + abandonedBytes
    }
}
