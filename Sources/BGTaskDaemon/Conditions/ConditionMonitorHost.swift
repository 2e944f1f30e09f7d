// What the condition monitor needs of the daemon around it, and how the manager provides it.

import BGTaskCore
import BGTaskSystem

/// The condition monitor's neighbour: where it logs, the loop its sources are watched on, and whom it tells when the
/// conditions change. `Manager` is one; a test's fake is another, so the monitor runs without a whole manager.
///
/// The monitor holds it weakly (the manager owns the monitor): nothing of the monitor outlives its manager.
protocol ConditionMonitorHost: AnyObject {
    /// Where the monitor logs.
    var logger: Logger { get }
    /// The loop the sources (netlink sockets, inotify, the system bus) are watched on.
    var loop: EventLoop { get }
    /// The conditions changed (a value, or a condition gaining or losing its source); `conditions` is all of them
    /// now. Called on the loop: once when every source has first answered (a settled reading, changed or not),
    /// then once per change, after the monitor logged it.
    func conditionsChanged(_ conditions: Conditions)
}

extension Manager: ConditionMonitorHost {
    func conditionsChanged(_ conditions: Conditions) {
        // Scheduled requests wait on them: the core starts those that can run now, and warns running tasks whose
        // condition stopped holding.
        perform(core.conditionsChanged(conditions, now: now))
        updateStatus()
    }
}
