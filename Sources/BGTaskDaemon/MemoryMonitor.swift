// Watches memory and carries out the core's warn → reclaim decisions: measuring apps, warning, killing.

import BGTaskConfig
import BGTaskCore
import BGTaskSystem

/// The shell of DESIGN §4: reads the apps' memory (PSS) and `/proc/meminfo`, feeds the core's
/// `MemoryPressureMachine`, and carries out its decisions through the policy core (`memoryWarning`,
/// `reclamationOrder`, `reclaim`).
///
/// Triggers by adaptive polling (100 ms–1 s, faster as headroom shrinks): PSI triggers on
/// `/proc/pressure/memory` need `CAP_SYS_RESOURCE`, and the apps' total against `AppsMemoryMax` can only be
/// read. It runs only while there are apps to watch, so an idle daemon does not wake for it.
final class MemoryMonitor {
    private unowned let manager: Manager
    private(set) var machine: MemoryPressureMachine
    private var timer: TimerSource?
    private var isArmed = false
    private(set) var isDryRun: Bool
    /// Apps reclaimed whose processes have not exited yet: no new victim until they are gone.
    private var pendingVictims: Set<AppID> = []
    /// The last reading, for `GetStatus`.
    private(set) var lastReading: MemoryReading?
    /// Whether "nothing to reclaim" was already logged in this episode.
    private var reportedNothingToReclaim = false

    init(manager: Manager, settings: DaemonConfiguration.Memory) {
        self.manager = manager
        machine = MemoryPressureMachine(thresholds: Self.thresholds(settings))
        isDryRun = settings.reclaimDryRun
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
    }

    /// Makes sure a reading is scheduled while there are apps; call when apps come and go.
    func appsChanged() {
        if manager.processes.isEmpty {
            pendingVictims.removeAll()
            if isArmed {
                try? timer?.setEnabled(false)
                isArmed = false
            }
        } else if !isArmed {
            schedule(after: .zero)
        }
    }

    /// A reclaimed app's process is gone.
    func victimExited(_ app: AppID) {
        pendingVictims.remove(app)
    }

    private func schedule(after delay: Duration) {
        let due = manager.loop.now + delay.nanosecondCount
        do {
            if let timer {
                try timer.rearm(at: due)
            } else {
                timer = try manager.loop.addTimer(at: due, accuracy: .milliseconds(20), name: "memory") {
                    [unowned self] _ in
                    self.isArmed = false
                    self.tick()
                }
            }
            isArmed = true
        } catch {
            manager.logger.error("cannot schedule the memory monitor: \(error); memory is not watched")
        }
    }

    /// Each app's memory, for the apps the policy could still reclaim or warn (not those already ending).
    func measureApps() -> [AppID: UInt64] {
        var readings: [AppID: UInt64] = [:]
        for (app, process) in manager.processes where manager.core.reclamationBand(of: app) != nil {
            if let bytes = process.memoryBytes(manager.procFS) { readings[app] = UInt64(bytes) }
        }
        return readings
    }

    private func reading(apps: [AppID: UInt64]) -> MemoryReading {
        let info = try? manager.procFS.memoryInfo()
        return MemoryReading(
            appsBytes: apps.values.reduce(0, +), availableBytes: info.map { UInt64(max(0, $0.availableBytes)) },
            totalBytes: info.map { UInt64(max(0, $0.totalBytes)) })
    }

    private func tick() {
        guard !manager.processes.isEmpty, !manager.isStopping else { return }
        let apps = measureApps()
        let current = reading(apps: apps)
        lastReading = current
        let now = manager.now
        let wasUnderPressure = machine.isUnderPressure
        let (decision, assessment) = machine.observe(current, victimsPending: !pendingVictims.isEmpty, now: now)
        switch decision {
        case .none:
            if wasUnderPressure && !machine.isUnderPressure {
                manager.logger.notice("memory is back within its limits")
                reportedNothingToReclaim = false
            }
        case .warn(let bytesToFree):
            manager.logger.notice("memory warning: \(assessment.trigger); asking apps to free \(bytesToFree) bytes")
            manager.perform(manager.core.memoryWarning(readings: apps, bytesToFree: bytesToFree, now: now))
        case .reclaim(let bytesToFree, let triggeredAt):
            reclaim(bytesToFree: bytesToFree, readings: apps, triggeredAt: triggeredAt, trigger: assessment.trigger)
        }
        schedule(after: machine.interval(after: current))
    }

    /// Reclaims in the core's order until `bytesToFree` is covered, re-checking the trigger before each kill.
    private func reclaim(bytesToFree: UInt64, readings: [AppID: UInt64], triggeredAt: MonotonicInstant, trigger: String)
    {
        let order = manager.core.reclamationOrder(readings: readings)
        let victims = Reclamation.victims(in: order, toFree: bytesToFree)
        guard !victims.isEmpty else {
            if !reportedNothingToReclaim {
                manager.logger.warning(
                    "memory is short (\(trigger)) but no app can be reclaimed"
                        + (manager.core.policy.reclaimForeground ? "" : " (ReclaimForeground=no)"))
                reportedNothingToReclaim = true
            }
            return
        }
        for victim in victims {
            // Re-check just before each kill: an app may have shrunk or gone since the reading, and a victim
            // already chosen no longer counts (it is being terminated).
            guard machine.assess(reading(apps: measureApps())).level > .normal else {
                manager.logger.notice("memory recovered before reclaiming \(victim.name): nothing killed")
                return
            }
            if isDryRun {
                manager.logger.notice(
                    "ReclaimDryRun: would reclaim \(victim.name) (band \(victim.band.name), "
                        + "\(victim.memoryBytes) bytes; \(trigger))", [.app(victim.name)])
                continue
            }
            do {
                manager.perform(
                    try manager.core.reclaim(
                        victim.app, memoryBytes: victim.memoryBytes, triggeredAt: triggeredAt, now: manager.now))
                pendingVictims.insert(victim.app)
            } catch {
                manager.logger.warning("cannot reclaim \(victim.name): \(error)")
            }
        }
    }
}
