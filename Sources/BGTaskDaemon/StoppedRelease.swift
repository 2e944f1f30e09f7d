// `bgtaskd --release-stopped`: the service's ExecStopPost= safety net, continuing whatever the state file says the
// daemon had stopped, even after the daemon itself was killed outright.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// Continues every process (or process group) the saved state says the daemon stopped, then records in the state
/// file that they run again, so the next daemon suspends them afresh rather than believe they are still stopped.
///
/// Run by systemd after the service stops for any reason (`ExecStopPost=`): a clean stop has already continued
/// everything and finds nothing to do; a `kill -9`, a crash or a watchdog abort leaves suspended apps stopped,
/// and this is what continues them. Each target is checked first: a process only if its pid still names the
/// process that registered (same start time); a group whose leader has exited only if no other process has
/// taken the leader's pid (a group id cannot be reused while the group has members), and then only its members of
/// the app's uid.
public enum StoppedRelease {
    /// Does the release; returns the exit status (0 unless the state file cannot be rewritten). `now` is the
    /// monotonic clock's reading the state's save time is checked against (the real clock but in tests).
    public static func run(
        statePath: String, logger: Logger, procFS: ProcFS = ProcFS(),
        now: MonotonicInstant = MonotonicInstant(nanoseconds: MonotonicClock.now())
    ) -> Int32 {
        let store = StateStore(path: statePath)
        var state: DaemonState
        switch store.load(bootID: StateStore.bootID(procFS: procFS), now: now) {
        case .none:
            logger.info("no state at \(statePath): nothing was left stopped")
            return 0
        case .unusable(let reason):
            // The daemon sets it aside at its next start; nothing in it can be trusted to name a process.
            logger.warning("cannot use \(statePath) (\(reason)): not continuing anything from it")
            return 0
        case .state(let loaded):
            // The snapshot with its journals: a stop journaled after the snapshot is found too.
            state = loaded.state
        }
        let stopped = state.processes.indices.filter { state.processes[$0].isStopped }
        guard !stopped.isEmpty else {
            logger.info("bgtaskd left nothing stopped")
            return 0
        }
        var released = 0
        for index in stopped {
            if release(state.processes[index], procFS: procFS, logger: logger) { released += 1 }
            state.processes[index].isStopped = false
            state.processes[index].stoppedGroup = nil
            state.processes[index].frozenCgroup = nil
        }
        logger.notice("continued \(released) of \(stopped.count) process(es) bgtaskd had stopped")
        do {
            // The state saved is the snapshot with its journals applied: it stands alone, and the journals go
            // (replayed after it, they would say the processes are still stopped).
            var whole = state
            whole.journal = nil
            try store.save(whole)
            store.removeJournals(before: Int.max)
        } catch {
            logger.error("cannot record the release in \(statePath): \(error)")
            return 1
        }
        return 0
    }

    /// Continues what the daemon stopped of one process; whether a signal went out.
    private static func release(_ saved: SavedProcess, procFS: ProcFS, logger: Logger) -> Bool {
        if let path = saved.frozenCgroup {
            // A cgroup of the app's own: whatever is still in it is the app's, and must run.
            do {
                try CgroupDirectory(path: path).setFrozen(false)
                logger.info("thawed \(path)")
                return true
            } catch {
                if error.rawValue != ENOENT { logger.error("cannot thaw \(path): \(error)") }
                return false
            }
        }
        let liveStat = try? procFS.stat(saved.pid)
        let isSameProcess = liveStat?.startTime == saved.startTime
        if let group = saved.stoppedGroup {
            // The group id is the leader's pid. Another process holding that pid means the group is gone and the
            // number reused: nothing to continue there.
            if liveStat != nil && !isSameProcess {
                logger.info("pid \(saved.pid) is another process now: its old group is gone")
                return false
            }
            // Its members of the app's uid only: the daemon stopped no other (and one stopped by its own user
            // since is not the daemon's to continue).
            let signals = AppSignals(uid: saved.uid, procFS: procFS) { logger.notice($0) }
            do {
                let continued = try signals.send(.continue, toGroup: group)
                logger.info(
                    "continued process group \(group) (\(continued.count) process(es) of uid \(saved.uid))")
                return !continued.isEmpty
            } catch {
                logger.error("cannot continue process group \(group): \(error)")
                return false
            }
        }
        guard isSameProcess else {
            logger.info("pid \(saved.pid) is gone or another process now: nothing to continue")
            return false
        }
        do {
            let pidFD = try PidFD.open(pid: saved.pid)
            defer { try? pidFD.close() }
            // Checked again through the pidfd: the stat read above was of this very process if it is still alive.
            guard try !pidFD.hasExited, (try? procFS.stat(saved.pid))?.startTime == saved.startTime else {
                return false
            }
            try AppSignals(uid: saved.uid, procFS: procFS).send(.continue, toProcess: pidFD, startTime: saved.startTime)
            logger.info("continued pid \(saved.pid)")
            return true
        } catch {
            if error != .noSuchProcess { logger.error("cannot continue pid \(saved.pid): \(error)") }
            return false
        }
    }
}
