// The apps memory reclamation killed, followed until their processes exit or the wait for them runs out.

import BGTaskCore
import BGTaskSystem

/// The victims of memory reclamation, from the core's decision to kill each until its process is gone.
///
/// A victim is pending while its process may still exit soon: no new victim is chosen meanwhile (its memory is not
/// back yet). Past `MemoryMonitor.victimExitTimeout` it is abandoned: reclamation goes on with the next, and its
/// memory keeps counting in the apps' total until its process does exit.
struct ReclamationVictims {
    /// Apps reclaimed whose processes have not exited yet, with when each was killed.
    private(set) var pending: [AppID: MonotonicInstant] = [:]
    /// Victims reclamation gave up waiting for, with when each was killed.
    private var abandoned: [AppID: MonotonicInstant] = [:]

    /// How a reclaimed app's process exit is counted, with when the app was killed.
    enum Exit {
        case pending(killedAt: MonotonicInstant)
        case abandoned(killedAt: MonotonicInstant)
    }

    /// The core decided to reclaim `app` at `instant`.
    mutating func killed(_ app: AppID, at instant: MonotonicInstant) {
        pending[app] = instant
    }

    /// Forgets every victim (no app is left).
    mutating func removeAll() {
        pending.removeAll()
        abandoned.removeAll()
    }

    /// An app's process is gone: whether it was a victim, and which kind; it is one no more.
    mutating func exited(_ app: AppID) -> Exit? {
        if let killedAt = abandoned.removeValue(forKey: app) { return .abandoned(killedAt: killedAt) }
        return pending.removeValue(forKey: app).map { .pending(killedAt: $0) }
    }

    /// Stops waiting for victims killed more than `MemoryMonitor.victimExitTimeout` before `now`, each logged with
    /// its own message id; forgets abandoned ones whose process `host` no longer tracks.
    mutating func abandonOverdue(now: MonotonicInstant, host: any MemoryMonitorHost, logger: Logger) {
        // One whose process the daemon no longer tracks is nothing to count.
        abandoned = abandoned.filter { host.monitoredProcess(of: $0.key) != nil }
        for (app, killedAt) in pending where now - killedAt >= MemoryMonitor.victimExitTimeout {
            pending[app] = nil
            abandoned[app] = killedAt
            let name = host.appName(app)
            let pid = host.monitoredProcess(of: app).map { " (pid \($0.pid))" } ?? ""
            logger.warning(
                "\(name)'s process\(pid) has not exited \(now - killedAt) after it was killed to reclaim memory "
                    + "(its kill was refused, or it is stuck in the kernel): no longer waiting for it; its memory "
                    + "still counts, and reclamation goes on with the next victim",
                [.app(name), .messageID(MessageID.reclaimVictimStuck)])
        }
    }

    /// The memory of the processes of abandoned victims, each process once.
    func abandonedBytes(host: (any MemoryMonitorHost)?) -> UInt64 {
        var counted = Set<Int>()
        var total: UInt64 = 0
        for app in abandoned.keys {
            guard let process = host?.monitoredProcess(of: app), counted.insert(process.serial).inserted else { continue }
            total += process.memoryBytes ?? 0
        }
        return total
    }
}
