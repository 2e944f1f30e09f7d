// A process behind one or more registrations: its pidfd, and stopping, continuing and killing it or its group.

import BGTaskCore
import BGTaskSystem
import Glibc

/// What the daemon stopped, decided at the moment it stopped it and undone exactly: the process alone, or the
/// process group the process led at that moment.
enum StopTarget: Hashable {
    case process
    case group(pid_t)
}

/// The running process of self-registered apps (DESIGN §3: signal and PSS backends).
///
/// One per distinct process, however many names it registered: the daemon holds one pidfd per process, and a
/// process registered under two names is measured and stopped once. Identity is the pidfd, never the bare pid:
/// signals to the process go through it, and its readability is how the daemon learns the process is gone.
///
/// Whether to signal the group is decided each time from the world as it is (`getpgid(pid) == pid` now), never
/// remembered from registration: a process may become a group leader after registering (as `bgtask run` does).
/// A stop is undone on the same target it was made on.
final class TrackedProcess {
    /// The daemon's key for the process, unique while it runs (memory samples and lock checks name it).
    let serial: Int
    let pidFD: PidFD
    /// The uid it connected with.
    let uid: uid_t
    /// Its start time in clock ticks after boot: with the pid, the identity /proc reads are checked against.
    let startTime: UInt64
    /// The loop source reporting the pidfd readable (the process exited).
    var exitSource: IOSource?
    /// Registrations of this process the policy still tracks.
    var apps: Set<AppID> = []
    /// What the daemon has stopped, if anything (or decided to stop: see `isStopPending`).
    private(set) var stopped: StopTarget?
    /// The stop is decided (and in the state to be saved) but its signal waits for the save: no process is
    /// stopped before the state file says so, since after a crash that file is what continues it.
    private(set) var isStopPending = false
    private var isReleased = false
    /// The last memory reading in bytes, kept when a later read fails (DESIGN §7: fail closed).
    var memoryBytes: UInt64?
    /// Whether the latest memory read failed (`memoryBytes` is then the reading before it).
    var isMemoryReadingStale = false

    var pid: pid_t { pidFD.pid }
    var isStopped: Bool { stopped != nil }
    /// The identity /proc reads are checked against.
    var inspected: InspectedProcess { InspectedProcess(key: serial, pid: pid, startTime: startTime) }

    init(serial: Int, pidFD: PidFD, uid: uid_t, startTime: UInt64) {
        self.serial = serial
        self.pidFD = pidFD
        self.uid = uid
        self.startTime = startTime
    }

    /// The group the process leads right now, if it leads one. The pidfd pins nothing about the pid, so check the
    /// process has not exited first: a live process's pid (and so its group id) cannot be reused.
    private func ledGroup() throws(Errno) -> pid_t? {
        guard try !pidFD.hasExited else { throw Errno.noSuchProcess }
        return try ProcessGroup.isLeader(pid) ? pid : nil
    }

    private func send(_ signal: Signal, to target: StopTarget) throws(Errno) {
        switch target {
        case .process: try pidFD.sendSignal(signal)
        case .group(let id): try ProcessGroup(id: id).send(signal)
        }
    }

    /// Decides to stop the process, or its group if it leads one now; `sendPendingStop()` sends the SIGSTOP.
    func stop() throws(Errno) {
        var target = StopTarget.process
        if let group = try ledGroup() { target = .group(group) }
        stopped = target
        isStopPending = true
    }

    /// Sends the SIGSTOP `stop()` decided, unless it was undone meanwhile (resumed, killed, released).
    func sendPendingStop() throws(Errno) {
        guard isStopPending, !isReleased, let target = stopped else { return }
        isStopPending = false
        do {
            // The decision was made on the world as it was; the group must still be the one the process leads.
            if case .group = target, try ledGroup() == nil {
                stopped = .process
                try send(.stop, to: .process)
            } else {
                try send(.stop, to: target)
            }
        } catch {
            stopped = nil
            throw error
        }
    }

    /// SIGCONT to whatever `stop()` stopped; nothing when nothing is stopped (a stop still pending is dropped).
    func resume() throws(Errno) {
        guard let target = stopped else { return }
        stopped = nil
        if isStopPending {
            isStopPending = false
            return
        }
        try send(.continue, to: target)
    }

    /// SIGKILL to the group it stopped or leads now, else to the process; then `process_mrelease`, so the memory
    /// comes back now rather than when the exit completes.
    func kill() throws(Errno) {
        var target = StopTarget.process
        if let stopped {
            target = stopped
        } else if let group = try ledGroup() {
            target = .group(group)
        }
        stopped = nil
        isStopPending = false
        try send(.kill, to: target)
        // The kill already happened; releasing early is an optimisation the kernel may decline (EINVAL while
        // the exit has not started, ESRCH once it finished).
        try? pidFD.releaseMemory()
    }

    /// After the process exited while the daemon had its group stopped (its leader killed from outside: the OOM
    /// killer, an operator), the rest of the group would stay stopped for good: continue it, or kill it when
    /// `killing` (the daemon was ending the app). The group id stays valid while any member lives (a pid number is
    /// not reused while a group still uses it); a process now holding the leader's pid with another start time
    /// means the group is gone and the number reused, and then nothing is sent.
    func releaseGroupAfterExit(killing: Bool, procFS: ProcFS) throws(Errno) {
        guard case .group(let id) = stopped else { return }
        stopped = nil
        if let stat = try? procFS.stat(id), stat.startTime != startTime { return }
        do {
            try ProcessGroup(id: id).send(killing ? .kill : .continue)
        } catch {
            // No member left: nothing stays stopped.
            if error != .noSuchProcess { throw error }
        }
    }

    /// The process as the state file keeps it.
    var saved: SavedProcess {
        var groupID: pid_t?
        if case .group(let id) = stopped { groupID = id }
        return SavedProcess(
            pid: pid, uid: uid, startTime: startTime, isStopped: stopped != nil, stoppedGroup: groupID,
            apps: apps.sorted(), memoryBytes: memoryBytes)
    }

    /// Takes over what the previous daemon had stopped of this process, as its state file says: a restarted
    /// daemon must undo the stop on the same target the old one made it on.
    func adoptStop(of saved: SavedProcess) {
        guard saved.isStopped else { return }
        stopped = saved.stoppedGroup.map { .group($0) } ?? .process
    }

    /// Stops watching and closes the pidfd.
    func release() {
        isReleased = true
        isStopPending = false
        exitSource?.cancel()
        exitSource = nil
        try? pidFD.close()
    }
}
