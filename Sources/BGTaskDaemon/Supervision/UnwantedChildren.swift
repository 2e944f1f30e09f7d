// Children of launches no longer wanted (a failed exec, a deadline passed, a launch the manager cannot accept):
// killed, reaped once their pidfd turns readable, and their cgroups removed.

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// The children `ForkSupervisor` is ending: each killed with whatever is in its cgroups, watched through its pidfd,
/// reaped the moment it exits (the daemon is its parent), and its cgroups handed to `CgroupRemovals`.
final class UnwantedChildren {
    /// A child no longer wanted: killed, and reaped once its pidfd turns readable.
    private struct Ending {
        let child: SpawnedProcess
        let cgroups: AppCgroups?
        let source: IOSource
    }

    private let loop: EventLoop
    private let logger: Logger
    private let cgroupRemovals: CgroupRemovals
    /// Children being ended, by pid (unique among the daemon's unreaped children).
    private var endings: [pid_t: Ending] = [:]
    /// Told when a child was reaped: its place in the supervisor's capacity is free.
    var onReaped: () -> Void = {}

    init(loop: EventLoop, logger: Logger, cgroupRemovals: CgroupRemovals) {
        self.loop = loop
        self.logger = logger
        self.cgroupRemovals = cgroupRemovals
    }

    /// Children killed and not reaped yet: they count against the supervisor's capacity.
    var count: Int { endings.count }

    /// Kills a child no longer wanted and whatever is in its cgroups; it is reaped, and the cgroups removed, once its
    /// pidfd turns readable.
    func end(_ child: SpawnedProcess, cgroups: AppCgroups?) {
        do {
            try child.pidFD.sendSignal(.kill)
        } catch {
            // Gone already (it failed before exec and exited): there is only the reaping left.
            if error != .noSuchProcess { logger.error("cannot kill pid \(child.pid) of a launch: \(error)") }
        }
        cgroups?.killAll()
        do {
            let source = try loop.addIO(fd: child.pidFD.fileDescriptor, events: .readable, name: "launch-end") {
                [unowned self] _, _ in
                self.reapEnded(child.pid)
            }
            endings[child.pid] = Ending(child: child, cgroups: cgroups, source: source)
        } catch {
            logger.error("cannot watch pid \(child.pid) of a launch: \(error); waiting for it to exit")
            Self.reap(child, cgroups: cgroups, within: .seconds(1), logger: logger)
        }
    }

    /// Stops watching every child being ended and hands them over (the supervisor is stopping and reaps them itself).
    func takeAll() -> [(SpawnedProcess, AppCgroups?)] {
        let children = endings.values.map { ending in
            ending.source.cancel()
            return (ending.child, ending.cgroups)
        }
        endings = [:]
        return children
    }

    private func reapEnded(_ pid: pid_t) {
        guard let ending = endings[pid] else { return }
        do {
            // Readable means exited, so this reaps it; nil would only be a spurious wake-up.
            guard try ending.child.exitStatusIfExited() != nil else { return }
        } catch {
            logger.error("cannot reap pid \(pid) of a launch: \(error)")
        }
        ending.source.cancel()
        try? ending.child.pidFD.close()
        endings[pid] = nil
        if let cgroups = ending.cgroups { cgroupRemovals.discard(cgroups) }
        onReaped()
    }

    /// Waits (at most `timeout`) for a killed child to exit, reaps it, closes its pidfd and removes its cgroups.
    static func reap(_ child: SpawnedProcess, cgroups: AppCgroups?, within timeout: Duration, logger: Logger) {
        do {
            if try child.pidFD.waitForExit(timeout: timeout) {
                _ = try child.exitStatusIfExited()
            } else {
                logger.error("pid \(child.pid) of a launch did not exit within \(timeout) of SIGKILL")
            }
        } catch {
            logger.error("cannot reap pid \(child.pid) of a launch: \(error)")
        }
        try? child.pidFD.close()
        if let cgroups, !cgroups.removeEmpty() {
            logger.error("cannot remove \(cgroups.all.map(\.path).joined(separator: ", ")): not empty")
        }
    }
}
