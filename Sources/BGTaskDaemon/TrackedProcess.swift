// A process behind one or more registrations: its pidfd, and stopping, continuing and killing it or its group.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// What the daemon stopped, decided at the moment it stopped it and undone exactly: the process alone, the members of
/// the process group the process led at that moment (both with SIGSTOP, each only if of the app's uid), or a cgroup:
/// the one the daemon made for a managed app, or the cgroup2 cgroup of its own a self-registered app was in (frozen).
enum StopTarget: Hashable {
    case process
    case group(pid_t)
    case cgroup(CgroupDirectory)
}

/// The running process of self-registered apps (the cgroup2 freezer when the app has a cgroup of its own, else
/// signals; PSS: docs/ARCHITECTURE.md, Backends).
///
/// One per distinct process, however many names it registered: the daemon holds one pidfd per process, and a
/// process registered under two names is measured and stopped once. Identity is the pidfd, never the bare pid:
/// signals to the process go through it, and its readability is how the daemon learns the process is gone.
///
/// Whether to signal the group is decided each time from the world as it is (`getpgid(pid) == pid` now), never
/// remembered from registration: a process may become a group leader after registering (as `bgtask run` does).
/// A stop is undone on the same target it was made on.
///
/// Signals go only to processes of the app's uid (`signals`): a group's members one by one, each checked
/// through a pidfd. A cgroup the daemon made for a managed app is the app's whole and is frozen and killed whole; a
/// self-registered app's own cgroup only while everything in it is of the app's uid (`mayActOnWhole(_:)`, checked
/// by the manager before freezing and again once frozen, and here before killing), else member by member.
final class TrackedProcess {
    /// The daemon's key for the process, unique while it runs (memory samples and lock checks name it).
    let serial: Int
    let pidFD: PidFD
    /// The uid it connected with.
    let uid: uid_t
    /// How signals reach it and its group: only processes wholly of `uid`.
    let signals: AppSignals
    /// Where the parents of a cgroup's members are read (`isSelfOrDescendant`).
    private let procFS: ProcFS
    /// Its start time in clock ticks after boot: with the pid, the identity /proc reads are checked against.
    let startTime: UInt64
    /// The loop source reporting the pidfd readable (the process exited).
    var exitSource: IOSource?
    /// Registrations of this process the policy still tracks.
    var apps: Set<AppID> = [] {
        didSet { changes?.note(serial) }
    }
    /// What the daemon has stopped, if anything (or decided to stop: see `isStopPending`).
    private(set) var stopped: StopTarget? {
        didSet { changes?.note(serial) }
    }
    /// The stop is decided (and in the state to be saved) but its signal waits for the save: no process is
    /// stopped before the state file says so, since after a crash that file is what continues it.
    private(set) var isStopPending = false
    /// What the daemon stopped the last time it stopped it (shown in `GetApp`), kept after it resumes.
    private(set) var lastStopTarget: StopTarget?
    /// The members a SIGSTOP to its group stopped: the SIGCONT (or SIGKILL) that ends the stop reaches them even
    /// if they left the group meanwhile. Not saved: after a restart, the group's members of the app's uid are what
    /// is continued.
    private var stoppedMembers: Set<SignalledProcess> = []
    private var isReleased = false
    /// The last memory reading in bytes, kept when a later read fails: a failed read never makes the app look
    /// lighter to reclamation.
    var memoryBytes: UInt64?
    /// Whether the latest memory read failed (`memoryBytes` is then the reading before it).
    var isMemoryReadingStale = false
    /// The cgroups the daemon made for it (a managed app): frozen, measured and killed through, removed once empty.
    var cgroups: AppCgroups? {
        didSet { changes?.note(serial) }
    }
    /// Where a change of what the state saves of it (`saved`, but the memory reading) is noted for the journal.
    let changes: ProcessChangeLog?
    /// The process as the daemon's own child (a forked managed app), to reap it and learn how it ended.
    var child: SpawnedProcess?
    /// The unit the service manager runs it as (a managed app it started), e.g. `app-bgtask-mail-1a2b3c4d.service`.
    var unit: String? {
        didSet { changes?.note(serial) }
    }
    /// How the cgroup of its unit is frozen, thawed and killed (through the service manager where it can, else the
    /// cgroup's files); nil for an app without a unit, whose cgroup's files are the way.
    var unitFreezer: UnitFreezer?

    var pid: pid_t { pidFD.pid }
    var isStopped: Bool { stopped != nil }
    /// The identity /proc reads are checked against.
    var inspected: InspectedProcess {
        InspectedProcess(key: serial, pid: pid, startTime: startTime, memoryFile: cgroups?.memorySource?.path)
    }

    /// A process to track; `procFS` is where the uids of what it signals are read.
    init(
        serial: Int, pidFD: PidFD, uid: uid_t, startTime: UInt64, procFS: ProcFS, changes: ProcessChangeLog? = nil
    ) {
        self.changes = changes
        self.serial = serial
        self.pidFD = pidFD
        self.uid = uid
        self.startTime = startTime
        signals = AppSignals(uid: uid, procFS: procFS)
        self.procFS = procFS
    }

    /// Whether `cgroup` is the one the daemon made for it (a managed app): the app's whole, whoever runs in it.
    private func isMade(_ cgroup: CgroupDirectory) -> Bool {
        cgroups?.control?.path == cgroup.path
    }

    /// Whether a cgroup of the app's own (not one the daemon made) may be frozen or killed whole for it: it has
    /// no child cgroup, at most `ProcessTable.ownCgroupProcessLimit` processes, among them the app's own, and every
    /// one of them is the app's process or descends from it and is wholly of the app's uid (each one that is not
    /// of it is reported). False when it cannot be read. Checked before a freeze is decided, again just before it
    /// is written, once it shows frozen, and before a kill: a process of the same user moved in meanwhile (a shell,
    /// another app) is not the app's to freeze.
    func mayActOnWhole(_ cgroup: CgroupDirectory) -> Bool {
        guard !cgroup.hasChildCgroups, let pids = try? cgroup.processes(),
            pids.count <= ProcessTable.ownCgroupProcessLimit,
            pids.contains(pid), pids.allSatisfy(isSelfOrDescendant)
        else { return false }
        return signals.ownsAll(pids, in: cgroup.path)
    }

    /// Whether `other` is this process or descends from it: parents followed through `/proc` (at most 64 steps),
    /// this process known by its start time, so a reused pid is never taken for it. False when a step cannot be
    /// read, or the chain reaches init or a subreaper first.
    func isSelfOrDescendant(_ other: pid_t) -> Bool {
        var current = other
        for _ in 0..<64 {
            guard let stat = try? procFS.stat(current) else { return false }
            if current == pid { return stat.startTime == startTime }
            guard stat.parentPID > 1 else { return false }
            current = stat.parentPID
        }
        return false
    }

    /// The group the process leads right now, if it leads one. The pidfd pins nothing about the pid, so check the
    /// process has not exited first: a live process's pid (and so its group id) cannot be reused.
    private func ledGroup() throws(Errno) -> pid_t? {
        guard try !pidFD.hasExited else { throw Errno.noSuchProcess }
        return try ProcessGroup.isLeader(pid) ? pid : nil
    }

    private func send(_ signal: Signal, to target: StopTarget) throws(Errno) {
        switch target {
        case .process:
            try signals.send(signal, toProcess: pidFD, startTime: startTime)
        case .group(let id):
            let signalled = try signals.send(signal, toGroup: id, also: signal == .stop ? [] : stoppedMembers)
            stoppedMembers = signal == .stop ? stoppedMembers.union(signalled) : []
        case .cgroup(let cgroup) where !isMade(cgroup) && signal == .kill:
            // A cgroup of the app's own: killed whole only if all of it is still the app's.
            try killOwn(cgroup, isFrozen: true)
        case .cgroup(let cgroup):
            do {
                switch signal {
                case .stop: try setFrozen(cgroup, true)
                case .continue: try setFrozen(cgroup, false)
                case .kill:
                    // A cgroup the daemon made: the app's whole. cgroup.kill (Linux 5.14) takes every process at
                    // once, frozen or not; without it each process gets SIGKILL through a pidfd, and a v1 freezer
                    // is thawed so the kill completes.
                    try killMade(cgroup)
                default: try signals.send(signal, toProcess: pidFD, startTime: startTime)
                }
            } catch let error as Errno {
                // The cgroup is gone: so is whatever was in it.
                throw error.rawValue == ENOENT ? Errno.noSuchProcess : error
            } catch {
                throw Errno(rawValue: EIO, operation: "\(cgroup): \(error)")
            }
        }
    }

    /// Freezes or thaws `cgroup`: a unit's through its `UnitFreezer` (the service manager where it can), any other
    /// through its own files.
    private func setFrozen(_ cgroup: CgroupDirectory, _ frozen: Bool) throws(Errno) {
        guard isMade(cgroup), let unitFreezer, let unit else { return try cgroup.setFrozen(frozen) }
        if frozen {
            try unitFreezer.freeze(unit, cgroup: cgroup)
        } else {
            try unitFreezer.thaw(unit, cgroup: cgroup)
        }
    }

    /// Kills everything in a cgroup the daemon made or was given for the app: a unit's through its `UnitFreezer`
    /// (`cgroup.kill`, else the service manager's `KillUnit`), any other through its own files.
    private func killMade(_ cgroup: CgroupDirectory) throws {
        guard let unitFreezer, let unit else { return _ = try cgroup.killEverything() }
        try unitFreezer.kill(unit, cgroup: cgroup, mainProcess: pidFD)
    }

    /// Decides to stop the process: freezing `cgroup` when it is given (a cgroup2 cgroup of the app's own), else
    /// SIGSTOP to its group if it leads one now, or to it alone; `sendPendingStop()` carries it out.
    func stop(freezing cgroup: CgroupDirectory? = nil) throws(Errno) {
        var target = StopTarget.process
        if let cgroup {
            guard try !pidFD.hasExited else { throw Errno.noSuchProcess }
            target = .cgroup(cgroup)
        } else if let group = try ledGroup() {
            target = .group(group)
        }
        stopped = target
        isStopPending = true
    }

    /// Whether the daemon froze (or decided to freeze) it through a cgroup: the freeze is confirmed from
    /// `cgroup.events`, and one that does not come falls back to SIGSTOP (`fallBackToSignals`).
    var frozenCgroup: CgroupDirectory? {
        if case .cgroup(let cgroup) = stopped { return cgroup }
        return nil
    }

    /// The cgroup of the app's own (not one the daemon made) whose freeze is decided but not yet written: what is
    /// in it is checked again before it is.
    var pendingOwnCgroupFreeze: CgroupDirectory? {
        guard isStopPending, case .cgroup(let cgroup) = stopped, !isMade(cgroup) else { return nil }
        return cgroup
    }

    /// Whether the daemon froze it through a cgroup of the app's own (not one the daemon made).
    var frozenOwnCgroup: CgroupDirectory? {
        guard let cgroup = frozenCgroup, !isMade(cgroup) else { return nil }
        return cgroup
    }

    /// A freeze that did not confirm, or that may not stand (the cgroup holds a process of another uid): thaws the
    /// cgroup (when the freeze was written) and decides a SIGSTOP instead, which `sendPendingStop()` sends (after
    /// the state saying so is saved).
    func fallBackToSignals() throws(Errno) {
        guard case .cgroup(let cgroup) = stopped else { return }
        // A freeze still pending was never written: the cgroup is not the daemon's to thaw.
        if !isStopPending { try? setFrozen(cgroup, false) }
        stopped = nil
        isStopPending = false
        try stop()
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
            lastStopTarget = stopped
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
        let wasWritten = !isStopPending
        if let stopped {
            target = stopped
        } else if let control = cgroups?.control {
            // A managed app: everything in its cgroup.
            target = .cgroup(control)
        } else if let group = try ledGroup() {
            target = .group(group)
        }
        stopped = nil
        isStopPending = false
        if case .cgroup(let cgroup) = target, !isMade(cgroup) {
            try killOwn(cgroup, isFrozen: wasWritten)
        } else {
            try send(.kill, to: target)
        }
        // The kill already happened; releasing early is an optimisation the kernel may decline (EINVAL while
        // the exit has not started, ESRCH once it finished).
        try? pidFD.releaseMemory()
    }

    /// After the process exited while the daemon had its group stopped (its leader killed from outside: the OOM
    /// killer, an operator), the rest of the group would stay stopped for good: continue it, or kill it when
    /// `killing` (the daemon was ending the app). The group id stays valid while any member lives (a pid number is
    /// not reused while a group still uses it); a process now holding the leader's pid with another start time
    /// means the group is gone and the number reused, and then nothing is sent; else its members of the app's uid
    /// get the signal. A frozen cgroup the daemon made is thawed (or killed) whole: the rest of its processes are the
    /// app's. A cgroup of the app's own is thawed, or killed as `kill()` kills it (whole only if all of it is still
    /// the app's).
    func releaseGroupAfterExit(killing: Bool, procFS: ProcFS) throws(Errno) {
        if case .cgroup(let cgroup) = stopped, !isMade(cgroup) {
            stopped = nil
            if killing {
                try killOwn(cgroup, isFrozen: !isStopPending)
            } else {
                try thaw(cgroup)
            }
            return
        }
        if case .cgroup(let cgroup) = stopped {
            stopped = nil
            do {
                if killing { try killMade(cgroup) }
                try setFrozen(cgroup, false)
            } catch let error as Errno {
                // The cgroup, or the process the kill also went to, is gone.
                if error.rawValue != ENOENT && error != .noSuchProcess { throw error }
            } catch {
                throw Errno(rawValue: EIO, operation: "\(cgroup): \(error)")
            }
            return
        }
        guard case .group(let id) = stopped else { return }
        stopped = nil
        if let stat = try? procFS.stat(id), stat.startTime != startTime { return }
        // Its members of the app's uid (none left: nothing stays stopped).
        try send(killing ? .kill : .continue, to: .group(id))
    }

    /// SIGKILL to what is in a cgroup of the app's own (not one the daemon made), then a thaw. Frozen (`isFrozen`:
    /// the daemon wrote the freeze), nothing in it can fork or `execve`: when every process in it is then the app's,
    /// `cgroup.kill` takes them all at once. Otherwise each process of the app's uid gets SIGKILL through a pidfd,
    /// and the rest are left alone, running again once thawed.
    private func killOwn(_ cgroup: CgroupDirectory, isFrozen: Bool) throws(Errno) {
        do {
            if isFrozen, try cgroup.isFrozen(), mayActOnWhole(cgroup) {
                _ = try cgroup.killEverything()
            } else {
                try signals.send(.kill, toCgroup: cgroup)
            }
        } catch let error as Errno {
            // The cgroup is gone: so is whatever was in it.
            throw error.rawValue == ENOENT ? Errno.noSuchProcess : error
        } catch {
            throw Errno(rawValue: EIO, operation: "\(cgroup): \(error)")
        }
        if isFrozen { try thaw(cgroup) }
    }

    /// Thaws a cgroup the daemon froze; one gone already needs nothing.
    private func thaw(_ cgroup: CgroupDirectory) throws(Errno) {
        do {
            try cgroup.setFrozen(false)
        } catch {
            if error.rawValue != ENOENT { throw error }
        }
    }

    /// The process as the state file keeps it.
    var saved: SavedProcess {
        var groupID: pid_t?
        if case .group(let id) = stopped { groupID = id }
        return SavedProcess(
            serial: serial, pid: pid, uid: uid, startTime: startTime, isStopped: stopped != nil, stoppedGroup: groupID,
            frozenCgroup: frozenCgroup?.path, apps: apps.sorted(), memoryBytes: memoryBytes,
            controlCgroup: cgroups?.control?.path, memoryCgroup: cgroups?.memory?.path, unit: unit)
    }

    /// Takes over what the previous daemon had stopped of this process (as its state file says, once checked:
    /// `Manager.trustedStop(of:process:)`): a restarted daemon must undo the stop on the same target the old one
    /// made it on.
    func adoptStop(_ target: StopTarget) {
        stopped = target
        lastStopTarget = target
    }

    /// Stops watching and closes the pidfd.
    func release() {
        isReleased = true
        stoppedMembers = []
        signals.report = { _ in }
        isStopPending = false
        exitSource?.cancel()
        exitSource = nil
        try? pidFD.close()
    }
}

/// The processes whose saved form changed since the journal last took them (by serial): added, removed, stopped,
/// continued, their registrations or cgroups changed. A memory reading alone is not a change: it is saved with the
/// next change of the process and in every snapshot, and a restarted daemon reads memory again anyway.
final class ProcessChangeLog {
    private(set) var serials: Set<Int> = []

    func note(_ serial: Int) {
        serials.insert(serial)
    }

    /// The serials noted since the last call.
    func take() -> Set<Int> {
        defer { serials = [] }
        return serials
    }
}
