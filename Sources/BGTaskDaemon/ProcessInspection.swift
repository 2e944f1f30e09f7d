// What the worker thread reads from /proc for the daemon: apps' memory, file locks, and the identity behind both.

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// A process the daemon tracks, as the worker needs to know it: which pid, and the start time that proves the pid
/// still names the same process (a pid can be reused once its process is reaped; a start time cannot repeat).
struct InspectedProcess: Hashable, Sendable {
    /// The daemon's key for the process (`TrackedProcess.serial`).
    var key: Int
    /// Its pid.
    var pid: pid_t
    /// Its start time, in clock ticks after boot (`/proc/PID/stat` field 22).
    var startTime: UInt64
    /// A cgroup file holding its memory in bytes (`memory.current`, `memory.usage_in_bytes`): read instead of PSS.
    var memoryFile: String? = nil
}

/// Work for the worker thread.
enum InspectionJob: Sendable {
    /// Read `MemAvailable` and pressure and, for each process, its memory.
    case memory(processes: [InspectedProcess])
    /// Check whether a process (with its group, when it leads one) holds a file lock; `request` is echoed back.
    case locks(request: Int, process: InspectedProcess)
}

/// The worker's answer to an `InspectionJob`.
enum InspectionOutcome: Sendable {
    case memory(MemorySample)
    case locks(request: Int, LockCheck)
}

/// One memory sample: the system's figures and each process's memory, read together off the loop.
struct MemorySample: Sendable {
    /// `/proc/meminfo`; nil when it could not be read or understood, with the reason in `memoryInfoFailure`.
    var memoryInfo: MemoryInfo?
    var memoryInfoFailure: String?
    /// `/proc/pressure/memory`; nil without PSI.
    var pressure: Pressure?
    /// Each process's memory in bytes by key: the PSS of the process and, when it leads its group, of the rest
    /// of the group, each process counted once however many tracked processes it relates to.
    var processBytes: [Int: UInt64] = [:]
    /// Processes whose memory could not be read, by key, with the reason (gone processes are left out: their
    /// exit is reported through their pidfds).
    var failures: [Int: String] = [:]
    /// Processes found gone (their pid names another process now, or none).
    var goneKeys: Set<Int> = []
    /// Whether per-process memory was asked for (false: only the system's figures).
    var includesProcesses: Bool
    /// When the sample finished, on `CLOCK_MONOTONIC`, and how long it took.
    var finishedAt: Int64
    var durationNanoseconds: Int64
}

/// Whether a process holds a file lock, or why the answer is "assume it does".
enum LockCheck: Sendable, Equatable {
    /// No lock held by the process or its group.
    case free
    /// A lock is held; the text says which, for the log.
    case held(String)
    /// The locks could not be read or attributed: fail closed, as if a lock were held (freezing a lock holder can
    /// hang every process waiting on the lock).
    case unknown(String)
    /// The process is gone.
    case gone
}

/// Why a read of /proc cannot be trusted, for the log.
struct InspectionFailure: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}

/// The /proc reads behind memory samples and lock checks, over an injected `ProcFS` so tests can use a fake tree.
struct ProcessInspector: Sendable {
    let procFS: ProcFS

    /// The start time of `pid`, for `InspectedProcess`.
    func startTime(of pid: pid_t) throws -> UInt64 {
        try procFS.stat(pid).startTime
    }

    /// What the stat of a tracked process shows.
    private enum Identity {
        /// It runs, with this stat.
        case live(ProcessStat)
        /// It is gone: no such process, or its pid names a process with another start time.
        case gone
        /// Its stat could not be read or understood although it may run: the caller fails closed.
        case unreadable(String)
    }

    /// Whether `error`, from reading a process's files, means the process is gone (reaped, or exiting while read)
    /// rather than that the files cannot be read.
    private static func meansGone(_ error: any Error) -> Bool {
        guard let errno = error as? Errno else { return false }
        return errno == .noSuchFileOrDirectory || errno == .noSuchProcess
    }

    /// Whether `pid` names no process any more.
    private func isGone(_ pid: pid_t) -> Bool {
        do {
            _ = try procFS.stat(pid)
            return false
        } catch {
            return Self.meansGone(error)
        }
    }

    private func identify(_ process: InspectedProcess) -> Identity {
        do {
            let stat = try procFS.stat(process.pid)
            return stat.startTime == process.startTime ? .live(stat) : .gone
        } catch {
            return Self.meansGone(error) ? .gone : .unreadable("cannot read /proc/\(process.pid)/stat: \(error)")
        }
    }

    /// The members of the process groups `leaders` lead, by group, from one pass over every process's stat; or
    /// why the pass cannot be trusted: the process list cannot be read, or a stat that exists cannot be understood
    /// (its process could be a member). A process that exits during the pass simply is not a member any more.
    private func groupMembers(of leaders: Set<pid_t>) -> Result<[pid_t: [pid_t]], InspectionFailure> {
        guard !leaders.isEmpty else { return .success([:]) }
        let pids: [pid_t]
        do {
            pids = try procFS.processIDs()
        } catch {
            return .failure(InspectionFailure("cannot list the processes in \(procFS.root): \(error)"))
        }
        var members: [pid_t: [pid_t]] = [:]
        for pid in pids {
            do {
                let stat = try procFS.stat(pid)
                if leaders.contains(stat.processGroupID) { members[stat.processGroupID, default: []].append(pid) }
            } catch {
                if Self.meansGone(error) { continue }
                return .failure(InspectionFailure("cannot read /proc/\(pid)/stat: \(error)"))
            }
        }
        return .success(members)
    }

    /// Reads the system's memory figures and, when `processes` is not empty, each one's memory.
    func sampleMemory(_ processes: [InspectedProcess], includesProcesses: Bool) -> MemorySample {
        let start = MonotonicClock.now()
        var sample = MemorySample(
            pressure: try? procFS.pressure(resource: .memory), includesProcesses: includesProcesses,
            finishedAt: start, durationNanoseconds: 0)
        do {
            sample.memoryInfo = try procFS.memoryInfo()
        } catch {
            sample.memoryInfoFailure = "cannot read \(procFS.root)/meminfo: \(error)"
        }
        if includesProcesses {
            var leaders: Set<pid_t> = []
            var live: [(InspectedProcess, leadsGroup: Bool)] = []
            for process in processes {
                switch identify(process) {
                case .live(let stat):
                    // A cgroup of the app's own counts its group too: no scan of /proc for the members.
                    let leadsGroup = stat.processGroupID == process.pid && process.memoryFile == nil
                    if leadsGroup { leaders.insert(process.pid) }
                    live.append((process, leadsGroup))
                case .gone:
                    sample.goneKeys.insert(process.key)
                case .unreadable(let reason):
                    sample.failures[process.key] = reason
                }
            }
            let members: [pid_t: [pid_t]]
            switch groupMembers(of: leaders) {
            case .success(let found):
                members = found
            case .failure(let failure):
                // A group leader's sum would miss its members: its reading fails (the last one is kept).
                members = [:]
                for (process, leadsGroup) in live where leadsGroup { sample.failures[process.key] = failure.reason }
                live.removeAll { $0.leadsGroup }
            }
            // Each process is counted once: as itself when it is tracked, else for the group it belongs to.
            var counted = Set(live.map(\.0.pid))
            for (process, leadsGroup) in live {
                if let file = process.memoryFile {
                    // The app's own cgroup measures it whole (every process, page cache included).
                    do {
                        sample.processBytes[process.key] = try CgroupNumber.parse(
                            FileDescriptor.readText(atPath: file, limit: 4096), file: file)
                    } catch {
                        sample.failures[process.key] = "\(error)"
                    }
                    continue
                }
                do {
                    var bytes = UInt64(max(0, try procFS.proportionalSetSize(process.pid)))
                    if leadsGroup {
                        for member in members[process.pid] ?? [] where !counted.contains(member) {
                            counted.insert(member)
                            // A member that exited since the pass frees its memory: not counting it is right.
                            if let memberBytes = try? procFS.proportionalSetSize(member) {
                                bytes += UInt64(max(0, memberBytes))
                            }
                        }
                    }
                    sample.processBytes[process.key] = bytes
                } catch {
                    switch identify(process) {
                    case .gone: sample.goneKeys.insert(process.key)
                    case .live, .unreadable: sample.failures[process.key] = "\(error)"
                    }
                }
            }
        }
        sample.finishedAt = MonotonicClock.now()
        sample.durationNanoseconds = sample.finishedAt - start
        return sample
    }

    /// Whether `process`, or any process of its group when it leads one, holds a file lock: a POSIX or flock lock
    /// by pid in `/proc/locks`, or an open file description lock (pid -1 there) found in the `lock:` lines of its
    /// open files. Anything unreadable answers `.unknown`: the caller treats it as a lock (fail closed).
    func checkLocks(_ process: InspectedProcess) -> LockCheck {
        let stat: ProcessStat
        switch identify(process) {
        case .live(let found): stat = found
        case .gone: return .gone
        case .unreadable(let reason): return .unknown(reason)
        }
        var members: Set<pid_t> = [process.pid]
        if stat.processGroupID == process.pid {
            switch groupMembers(of: [process.pid]) {
            case .success(let found): members.formUnion(found[process.pid] ?? [])
            case .failure(let failure): return .unknown(failure.reason)
            }
        }
        // One pass over /proc/locks, never held whole: any user can make it huge.
        var heldByMember: FileLock?
        var hasOpenFileDescriptionLock = false
        do {
            try procFS.scanLocks { lock in
                guard !lock.isBlockedWaiter else { return true }
                if lock.pid == -1 { hasOpenFileDescriptionLock = true }
                if lock.pid > 0 && members.contains(lock.pid) {
                    heldByMember = lock
                    return false
                }
                return true
            }
        } catch {
            if case .gone = identify(process) { return .gone }
            return .unknown("cannot read /proc/locks: \(error)")
        }
        if let lock = heldByMember { return .held("a \(lock.kind.rawValue) lock (pid \(lock.pid))") }
        guard hasOpenFileDescriptionLock else { return .free }
        // Open file description locks have no pid: look for them among the open files of each member.
        for member in members.sorted() {
            do {
                if let lock = try procFS.fileDescriptorLocks(member).first {
                    return .held("an \(lock.kind.rawValue) lock on an open file (pid \(member))")
                }
            } catch {
                // A member that exited meanwhile holds nothing; the app itself gone means nothing to suspend.
                if member == process.pid {
                    if case .gone = identify(process) { return .gone }
                } else if Self.meansGone(error) || isGone(member) {
                    continue
                }
                return .unknown("cannot read the open files of pid \(member): \(error)")
            }
        }
        return .free
    }
}
