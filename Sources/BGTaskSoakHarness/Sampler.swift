// What the harness sees for itself: the apps' processes in /proc and cgroupfs, their memory, the daemon's resources.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSoak
import Glibc

/// Reads `/proc` and `cgroup.events` directly, never through the daemon.
struct Sampler {
    let procFS = ProcFS()
    /// Where cgroup2 is mounted (the daemon reports an app's cgroup as a path in it, or absolute).
    let unifiedRoot: String?

    /// One sample per listed app whose process is alive, with the state the daemon listed.
    func processSamples(of apps: [AppInfo], at time: Duration) -> [ProcessSample] {
        apps.compactMap { app in
            guard app.pid > 0, app.state != .terminated, app.state != .notRunning,
                let stat = try? procFS.stat(pid_t(app.pid))
            else { return nil }
            return ProcessSample(
                takenAt: time, app: app.name, pid: app.pid, stateLetter: stat.state.letter,
                isCgroupFrozen: app.cgroup.flatMap(isFrozen), reportedState: app.state)
        }
    }

    /// Whether `cgroup.events` of `cgroup` says `frozen 1`; nil when it cannot be read.
    func isFrozen(_ cgroup: String) -> Bool? {
        let path = cgroup.hasPrefix("/sys/") ? cgroup : (unifiedRoot ?? "/sys/fs/cgroup") + cgroup
        guard let text = try? FileDescriptor.readText(atPath: path + "/cgroup.events", limit: 4096) else { return nil }
        return text.split(separator: "\n").contains("frozen 1")
    }

    /// The PSS of each listed live app's process.
    func memorySamples(of apps: [AppInfo], at time: Duration) -> [MemorySample] {
        apps.compactMap { app in
            guard app.pid > 0, app.state != .terminated, app.state != .notRunning,
                let bytes = try? procFS.proportionalSetSize(pid_t(app.pid))
            else { return nil }
            return MemorySample(takenAt: time, app: app.name, memoryBytes: Int(bytes), pid: app.pid)
        }
    }

    /// The daemon's VmRSS, open descriptors and CPU seconds; nil when it cannot be read (it just died).
    func resources(of pid: pid_t, at time: Duration, operations: Int) -> ResourceSample? {
        guard let status = try? procFS.read("\(pid)/status"), let stat = try? procFS.read("\(pid)/stat"),
            let descriptors = try? procFS.listDirectory("\(pid)/fd")
        else { return nil }
        var residentBytes = 0
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            residentBytes = (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
        }
        // Fields 14 and 15 (utime, stime) in clock ticks, counted after the command's closing parenthesis.
        guard let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        return ResourceSample(
            takenAt: time, daemonPid: Int(pid), residentBytes: residentBytes, openDescriptors: descriptors.count,
            cpuSeconds: (user + system) / ticks, operations: operations)
    }
}
