// What the worker thread reads from /proc for the daemon: apps' memory, file locks, and the identity behind both.

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
    /// `/proc/meminfo`; nil when it could not be read.
    var memoryInfo: MemoryInfo?
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
    /// The locks could not be read or attributed: fail closed, as if a lock were held (DESIGN §7).
    case unknown(String)
    /// The process is gone.
    case gone
}

/// The /proc reads behind memory samples and lock checks, over an injected `ProcFS` so tests can use a fake tree.
struct ProcessInspector: Sendable {
    let procFS: ProcFS

    /// The start time of `pid`, for `InspectedProcess`.
    func startTime(of pid: pid_t) throws -> UInt64 {
        try procFS.stat(pid).startTime
    }

    /// The stat of `process` if its pid still names it, else nil (gone, or the pid reused).
    private func liveStat(_ process: InspectedProcess) -> ProcessStat? {
        guard let stat = try? procFS.stat(process.pid), stat.startTime == process.startTime else { return nil }
        return stat
    }

    /// The members of the process groups `leaders` lead, by group, from one pass over every process's stat.
    private func groupMembers(of leaders: Set<pid_t>) -> [pid_t: [pid_t]] {
        guard !leaders.isEmpty, let pids = try? procFS.processIDs() else { return [:] }
        var members: [pid_t: [pid_t]] = [:]
        for pid in pids {
            // A process that exits during the pass simply is not a member any more.
            guard let stat = try? procFS.stat(pid), leaders.contains(stat.processGroupID) else { continue }
            members[stat.processGroupID, default: []].append(pid)
        }
        return members
    }

    /// Reads the system's memory figures and, when `processes` is not empty, each one's memory.
    func sampleMemory(_ processes: [InspectedProcess], includesProcesses: Bool) -> MemorySample {
        let start = MonotonicClock.now()
        var sample = MemorySample(
            memoryInfo: try? procFS.memoryInfo(), pressure: try? procFS.pressure(resource: .memory),
            includesProcesses: includesProcesses, finishedAt: start, durationNanoseconds: 0)
        if includesProcesses {
            var leaders: Set<pid_t> = []
            var live: [(InspectedProcess, leadsGroup: Bool)] = []
            for process in processes {
                guard let stat = liveStat(process) else {
                    sample.goneKeys.insert(process.key)
                    continue
                }
                let leadsGroup = stat.processGroupID == process.pid
                if leadsGroup { leaders.insert(process.pid) }
                live.append((process, leadsGroup))
            }
            let members = groupMembers(of: leaders)
            // Each process is counted once: as itself when it is tracked, else for the group it belongs to.
            var counted = Set(live.map(\.0.pid))
            for (process, leadsGroup) in live {
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
                    if liveStat(process) == nil {
                        sample.goneKeys.insert(process.key)
                    } else {
                        sample.failures[process.key] = "\(error)"
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
        let locks: [FileLock]
        do {
            locks = try procFS.locks()
        } catch {
            return liveStat(process) == nil ? .gone : .unknown("cannot read /proc/locks: \(error)")
        }
        guard let stat = liveStat(process) else { return .gone }
        let leadsGroup = stat.processGroupID == process.pid
        let members = leadsGroup ? Set(groupMembers(of: [process.pid])[process.pid] ?? [process.pid]) : [process.pid]
        let held = locks.filter { !$0.isBlockedWaiter }
        if let lock = held.first(where: { $0.pid > 0 && members.contains($0.pid) }) {
            return .held("a \(lock.kind.rawValue) lock (pid \(lock.pid))")
        }
        guard held.contains(where: { $0.pid == -1 }) else { return .free }
        // Open file description locks have no pid: look for them among the open files of each member.
        for member in members.sorted() {
            do {
                if let lock = try procFS.fileDescriptorLocks(member).first {
                    return .held("an \(lock.kind.rawValue) lock on an open file (pid \(member))")
                }
            } catch {
                // A member that exited meanwhile holds nothing; the app itself gone means nothing to suspend.
                if member != process.pid, (try? procFS.stat(member)) == nil { continue }
                if member == process.pid, liveStat(process) == nil { return .gone }
                return .unknown("cannot read the open files of pid \(member): \(error)")
            }
        }
        return .free
    }
}
