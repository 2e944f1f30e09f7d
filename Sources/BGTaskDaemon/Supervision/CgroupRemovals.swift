// The cgroups of managed apps that ended, removed once empty: what is left in them is killed, and the removal
// retried on a timer while something in them is still exiting.

import BGTaskCore
import BGTaskSystem

/// Removes the cgroups `ForkSupervisor` made for apps that ended: at once when they are empty, else once what is
/// left in them (killed) has exited, retried every `interval` for at most `timeout`.
final class CgroupRemovals {
    /// How long the removal of an ended app's cgroups is retried while something in them is still exiting, and how
    /// often.
    static let timeout: Duration = .seconds(30)
    static let interval: Duration = .milliseconds(100)

    private let clock: ManagerClock
    private let logger: Logger
    /// Ended apps' cgroups not empty yet, with when to give up on each.
    private var pending: [(AppCgroups, MonotonicInstant)] = []
    private var timer: ManagerTimer?

    init(clock: ManagerClock, logger: Logger) {
        self.clock = clock
        self.logger = logger
    }

    /// Kills what is left in `cgroups` and removes them, now or once they are empty.
    func discard(_ cgroups: AppCgroups) {
        if cgroups.isPopulated { cgroups.killAll() }
        if cgroups.removeEmpty() { return }
        pending.append((cgroups, clock.now + Self.timeout))
        armTimer()
    }

    private func armTimer() {
        guard !pending.isEmpty else { return }
        do {
            if timer == nil {
                timer = try clock.makeTimer(name: "cgroup-removal", accuracy: .milliseconds(20)) {
                    [unowned self] in
                    self.retry()
                }
            }
            try timer?.rearm(at: clock.now + Self.interval)
        } catch {
            logger.error("cannot schedule removing ended apps' cgroups: \(error)")
        }
    }

    private func retry() {
        let current = clock.now
        pending = pending.filter { cgroups, deadline in
            if cgroups.removeEmpty() { return false }
            if current >= deadline {
                logger.error(
                    "cannot remove \(cgroups.all.map(\.path).joined(separator: ", ")): still not empty after "
                        + "\(Self.timeout)")
                return false
            }
            cgroups.killAll()
            return true
        }
        armTimer()
    }
}
