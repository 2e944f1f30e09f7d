// Signals the daemon sends on an app's behalf, each to one process of the app's uid through a pidfd checked just
// before: never to a process of another uid in the app's group or cgroup (a setuid child is not the app's to stop).

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// A process the daemon signalled or considered, named so a reused pid is never taken for it.
struct SignalledProcess: Hashable, Sendable {
    /// Its pid.
    var pid: pid_t
    /// Its start time in clock ticks after boot (`/proc/PID/stat` field 22).
    var startTime: UInt64
}

/// Sends signals for the apps of one process (`TrackedProcess`) only to processes wholly of the uid the app
/// connected with: real, effective and saved uid all the app's (`ProcessUserIDs.areAll`). The daemon holds
/// `CAP_KILL`; without this rule an app leading a process group with a setuid-root child (or any process of
/// another user it can bring into its group or cgroup) would have the daemon stop or kill that process for it.
///
/// Each process is checked through a pidfd opened first: its stat (group, start time) and its uids are read after
/// the pidfd is open, and count only if the pidfd then shows it still alive, so the reads are of the process the
/// signal goes to. A process whose uids cannot be read is not signalled (fail closed). A SIGSTOP is checked once
/// more after it is sent: a process that turned into another uid's in between (an `execve` of a setuid program
/// under way) is continued at once. What remains is the instant between that last read and the kernel's delivery,
/// which no check from outside the kernel can close.
///
/// A process of another uid left alone is reported to `report`, once per process for the life of this object, and
/// so is a group or cgroup that still showed new members of the app's uid at the last pass.
final class AppSignals {
    /// The uid the app connected (or was launched) with.
    let uid: uid_t
    private let procFS: ProcFS
    /// Hears, in a sentence, of each process of another uid left alone (once per process) and of members a signal
    /// may have missed.
    var report: (String) -> Void
    /// Processes already reported (at most `reportedLimit`: past it, reports repeat rather than the set grow).
    private var reported: Set<SignalledProcess> = []
    /// How many passes over a group or cgroup a SIGSTOP or SIGKILL makes at most: each pass signals the members
    /// the previous ones did not find (forked meanwhile); a stopped or killed process forks no more, so two passes
    /// suffice unless a process of another uid keeps forking ones of the app's uid. Four bounds the time on the loop.
    static let passLimit = 4
    /// The most processes remembered as reported: far more than a group or cgroup of one app holds in practice
    /// (the daemon freezes a cgroup whole only up to 64), and a bound on what an app forking processes of another
    /// uid can make the daemon hold.
    static let reportedLimit = 1024

    init(uid: uid_t, procFS: ProcFS, report: @escaping (String) -> Void = { _ in }) {
        self.uid = uid
        self.procFS = procFS
        self.report = report
    }

    /// What checking one process found.
    private enum Check {
        /// It is the app's: signal it through this pidfd (the caller closes it).
        case owned(PidFD, SignalledProcess)
        /// It runs as another uid, or its uids cannot be read: not to be signalled.
        case foreign(SignalledProcess, why: String)
        /// It is gone, or (when a group or start time was required) no longer the process looked for.
        case elsewhere
    }

    /// Opens a pidfd for `pid` and checks, through it, that the process is in `group` (when given), started at
    /// `startTime` (when given), and runs wholly as the app's uid.
    private func check(_ pid: pid_t, group: pid_t?, startTime: UInt64?) -> Check {
        guard pid > 0, let pidFD = try? PidFD.open(pid: pid) else { return .elsewhere }
        var keepsPidFD = false
        defer { if !keepsPidFD { try? pidFD.close() } }
        // Read after the pidfd is open: if the pidfd shows the process alive afterwards, these were its own files.
        guard let stat = try? procFS.stat(pid), group.map({ stat.processGroupID == $0 }) ?? true,
            startTime.map({ stat.startTime == $0 }) ?? true
        else { return .elsewhere }
        let identity = SignalledProcess(pid: pid, startTime: stat.startTime)
        let ids: ProcessUserIDs
        do {
            ids = try procFS.userIDs(pid)
        } catch {
            if (error as? Errno).map({ $0 == .noSuchProcess || $0 == .noSuchFileOrDirectory }) == true {
                return .elsewhere
            }
            guard (try? pidFD.hasExited) == false else { return .elsewhere }
            return .foreign(identity, why: "its uids cannot be read (\(error))")
        }
        guard (try? pidFD.hasExited) == false else { return .elsewhere }
        guard ids.areAll(uid) else { return .foreign(identity, why: describe(ids)) }
        keepsPidFD = true
        return .owned(pidFD, identity)
    }

    /// Why a process with `ids` is not the app's, for the log.
    private func describe(_ ids: ProcessUserIDs) -> String {
        "its real, effective and saved uids are \(ids.real), \(ids.effective) and \(ids.saved), not all the app's "
            + "\(uid)"
    }

    private func noteForeign(_ process: SignalledProcess, why: String, in place: String) {
        if reported.contains(process) { return }
        if reported.count < Self.reportedLimit { reported.insert(process) }
        report("leaving pid \(process.pid) alone (\(place)): \(why)")
    }

    /// Sends `signal` through `pidFD` to the process it names; for SIGSTOP, checks its uids again afterwards and
    /// continues it when they changed in between. Whether the signal reached it (false: gone, or undone).
    private func deliver(_ signal: Signal, to pidFD: PidFD, _ process: SignalledProcess, in place: String)
        throws(Errno) -> Bool
    {
        do {
            try pidFD.sendSignal(signal)
        } catch {
            if error == .noSuchProcess { return false }
            throw error
        }
        guard signal == .stop else { return true }
        if let ids = try? procFS.userIDs(process.pid), ids.areAll(uid) { return true }
        // Its uids changed since the check, or can no longer be read: undo the stop if it is still there to undo.
        try? pidFD.sendSignal(.continue)
        let now = (try? procFS.userIDs(process.pid)).map(describe) ?? "its uids cannot be read"
        noteForeign(process, why: "\(now) (it changed while being stopped; continued again)", in: place)
        return false
    }

    // MARK: The app's own process

    /// Sends `signal` to the app's own process through its pidfd, if the process runs wholly as the app's uid.
    /// Throws `.noSuchProcess` when it is gone and `.notPermitted` (naming why) when it runs as another uid or its
    /// uids cannot be read: a registered process that `execve`d a setuid program is not the app's to signal either.
    func send(_ signal: Signal, toProcess pidFD: PidFD, startTime: UInt64) throws(Errno) {
        let ids: ProcessUserIDs
        do {
            ids = try procFS.userIDs(pidFD.pid)
        } catch {
            if let errno = error as? Errno, errno == .noSuchProcess || errno == .noSuchFileOrDirectory {
                throw Errno.noSuchProcess
            }
            guard try !pidFD.hasExited else { throw Errno.noSuchProcess }
            throw Errno(
                rawValue: EPERM, operation: "\(signal.name) to pid \(pidFD.pid) (its uids cannot be read: \(error))")
        }
        // Read before this check: if the process is still alive now, the file read was its own.
        guard try !pidFD.hasExited else { throw Errno.noSuchProcess }
        guard ids.areAll(uid) else {
            throw Errno(
                rawValue: EPERM,
                operation: "\(signal.name) to pid \(pidFD.pid) (\(describe(ids)))")
        }
        let process = SignalledProcess(pid: pidFD.pid, startTime: startTime)
        guard try deliver(signal, to: pidFD, process, in: "the app's own process") else {
            throw signal == .stop
                ? Errno(rawValue: EPERM, operation: "SIGSTOP to pid \(pidFD.pid) (its uids changed)")
                : Errno.noSuchProcess
        }
    }

    // MARK: Groups and cgroups

    /// Sends `signal` to each member of process group `group` that runs wholly as the app's uid, skipping (and
    /// reporting) the others. SIGSTOP and SIGKILL pass over the group again while a pass finds members the earlier
    /// ones did not, at most `passLimit` times; SIGKILL reaches the leader last, so that the group is never left
    /// with stopped members and no leader (the kernel would then send SIGHUP to every member, another uid's too).
    /// SIGCONT makes one pass. SIGCONT and SIGKILL also go to each of `also` (what an earlier SIGSTOP stopped) that
    /// is no longer in the group, if it is the same process and still the app's: nothing the daemon stopped stays
    /// stopped.
    ///
    /// Returns the processes signalled; throws when the processes cannot be listed, after continuing `also`.
    func send(_ signal: Signal, toGroup group: pid_t, also: Set<SignalledProcess> = []) throws(Errno)
        -> Set<SignalledProcess>
    {
        precondition(group > 1, "refusing to signal process group \(group)")
        let place = "in process group \(group)"
        var signalled: Set<SignalledProcess> = []
        var failure: Errno?
        do {
            signalled = try sendInPasses(signal, in: place) { () throws(Errno) in
                let members = try procFS.processes(inGroup: group).map {
                    (pid: $0.pid, startTime: Optional($0.startTime), group: Optional(group))
                }
                return members.filter { $0.pid != group } + members.filter { $0.pid == group }
            }
        } catch {
            failure = error
        }
        if signal == .continue || signal == .kill {
            for process in also where !signalled.contains(process) {
                guard
                    case .owned(let pidFD, let identity) = check(process.pid, group: nil, startTime: process.startTime)
                else { continue }
                defer { try? pidFD.close() }
                if (try? deliver(signal, to: pidFD, identity, in: place)) == true { signalled.insert(identity) }
            }
        }
        if let failure { throw failure }
        return signalled
    }

    /// Sends `signal` to each process of `cgroup` (its own `cgroup.procs`, not its children's) that runs wholly
    /// as the app's uid, in passes as for a group; returns the processes signalled.
    @discardableResult
    func send(_ signal: Signal, toCgroup cgroup: CgroupDirectory) throws(Errno) -> Set<SignalledProcess> {
        try sendInPasses(signal, in: "in \(cgroup.path)") { () throws(Errno) in
            do {
                return try cgroup.processes().map { (pid: $0, startTime: UInt64?.none, group: pid_t?.none) }
            } catch let error as Errno {
                throw error
            } catch {
                throw Errno(rawValue: EIO, operation: "\(cgroup.path)/cgroup.procs: \(error)")
            }
        }
    }

    /// Whether every one of `pids` (a cgroup's processes) runs wholly as the app's uid, reporting each that does
    /// not. A process gone meanwhile does not count against it.
    func ownsAll(_ pids: [pid_t], in place: String) -> Bool {
        var ownsAll = true
        for pid in pids {
            switch check(pid, group: nil, startTime: nil) {
            case .owned(let pidFD, _): try? pidFD.close()
            case .foreign(let process, let why):
                noteForeign(process, why: why, in: "in \(place)")
                ownsAll = false
            case .elsewhere: break
            }
        }
        return ownsAll
    }

    /// The passes of a member-by-member signal: each lists the members (`members`, in the order to signal them)
    /// and signals those of the app's uid not signalled yet.
    private func sendInPasses(
        _ signal: Signal, in place: String,
        members: () throws(Errno) -> [(pid: pid_t, startTime: UInt64?, group: pid_t?)]
    ) throws(Errno) -> Set<SignalledProcess> {
        var signalled: Set<SignalledProcess> = []
        let passes = signal == .stop || signal == .kill ? Self.passLimit : 1
        for pass in 1...passes {
            var foundNew = false
            for member in try members() {
                if let startTime = member.startTime,
                    signalled.contains(SignalledProcess(pid: member.pid, startTime: startTime))
                {
                    continue
                }
                switch check(member.pid, group: member.group, startTime: member.startTime) {
                case .owned(let pidFD, let process):
                    defer { try? pidFD.close() }
                    guard !signalled.contains(process) else { continue }
                    if try deliver(signal, to: pidFD, process, in: place) {
                        signalled.insert(process)
                        foundNew = true
                        if signal == .kill { try? pidFD.releaseMemory() }
                    }
                case .foreign(let process, let why):
                    noteForeign(process, why: why, in: place)
                case .elsewhere:
                    break
                }
            }
            if !foundNew { return signalled }
            if pass == passes && passes > 1 {
                report(
                    "new members of the app's uid kept appearing (\(place)) through \(passes) passes of "
                        + "\(signal.name): some may have missed it")
            }
        }
        return signalled
    }
}
