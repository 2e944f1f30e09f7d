// A fake /proc tree in a scratch directory, for testing the daemon's /proc readers without real processes.

import BGTaskPOSIX
import Foundation

/// A directory laid out like the parts of `/proc` the daemon reads: `PID/stat`, `PID/status`, `PID/smaps_rollup`,
/// `PID/fdinfo/N`, `locks`, `meminfo` and `pressure/memory`. Point `ProcFS(root:)` at `procFS` to read it.
///
/// Only what a test adds exists, so a missing file stands for a process that is gone or a file that cannot be read.
public final class FakeProcTree {
    /// The scratch directory holding the tree; removed with the tree.
    public let directory: ScratchDirectory

    /// A reader of this tree.
    public var procFS: ProcFS { ProcFS(root: directory.path) }

    /// A reader of this tree that reads files whole only up to `fileSizeLimit` bytes.
    public func procFS(fileSizeLimit: Int) -> ProcFS {
        ProcFS(root: directory.path, fileSizeLimit: fileSizeLimit)
    }

    /// An empty tree with a `meminfo` of 8 GiB, half of it available, and quiet memory pressure.
    public init() throws {
        directory = try ScratchDirectory(prefix: "fake-proc")
        try setMemoryInfo(totalKiB: 8 << 20, availableKiB: 4 << 20)
        try directory.write(
            "pressure/memory",
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        try setLocks("")
    }

    /// Adds (or replaces) a process: its `stat`, its `status` and, unless `pssKiB` is nil, its `smaps_rollup`.
    /// `group` is the process group id written in `stat`; nil makes the process lead its own group. `uid` is its
    /// real, effective, saved and filesystem uid in `status`; nil is the test's own real uid (whose the stand-in
    /// processes the daemon signals are).
    public func addProcess(
        pid: Int32, group: Int32? = nil, startTime: UInt64 = 1_000, state: String = "S", pssKiB: Int64? = 1_024,
        command: String = "app", uid: UInt32? = nil
    ) throws {
        let groupID = group ?? pid
        // Fields after the state: ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
        // cutime cstime priority nice threads itrealvalue starttime, then the rest of a real line.
        let rest =
            "1 \(groupID) \(groupID) 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0 \(startTime) 2383872 233 "
            + "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0"
        try directory.write("\(pid)/stat", "\(pid) (\(command)) \(state) \(rest)\n")
        let id = uid ?? getuid()
        try directory.write(
            "\(pid)/status",
            "Name:\t\(command)\nState:\t\(state)\nTgid:\t\(pid)\nPid:\t\(pid)\nPPid:\t1\n"
                + "Uid:\t\(id)\t\(id)\t\(id)\t\(id)\nGid:\t0\t0\t0\t0\n")
        if let pssKiB {
            try directory.write(
                "\(pid)/smaps_rollup",
                "55d0c0a00000-7ffd2b1fe000 ---p 00000000 00:00 0                          [rollup]\n"
                    + "Rss:              \(pssKiB + 100) kB\nPss:              \(pssKiB) kB\n")
        }
        try FileManager.default.createDirectory(
            atPath: directory.path + "/\(pid)/fdinfo", withIntermediateDirectories: true)
    }

    /// Sets the process's `cgroup` file to the one line of a cgroup2 membership: `0::PATH`, `path` relative to the
    /// hierarchy's root (starting with `/`).
    public func setUnifiedCgroup(pid: Int32, path: String) throws {
        try directory.write("\(pid)/cgroup", "0::\(path)\n")
    }

    /// Removes a file of the tree (`"42/smaps_rollup"`), or a whole process (`"42"`).
    public func remove(_ relativePath: String) throws {
        try FileManager.default.removeItem(atPath: directory.path + "/" + relativePath)
    }

    /// Sets `/proc/locks`.
    public func setLocks(_ text: String) throws {
        try directory.write("locks", text)
    }

    /// Adds `PID/fdinfo/FD` with `text`.
    public func addFileDescriptorInfo(pid: Int32, descriptor: Int32, _ text: String) throws {
        try directory.write("\(pid)/fdinfo/\(descriptor)", text)
    }

    /// Sets `/proc/meminfo`'s `MemTotal` and `MemAvailable`.
    public func setMemoryInfo(totalKiB: Int64, availableKiB: Int64) throws {
        try directory.write(
            "meminfo",
            "MemTotal:       \(totalKiB) kB\nMemFree:        \(availableKiB / 2) kB\n"
                + "MemAvailable:   \(availableKiB) kB\nBuffers:          1024 kB\n")
    }
}
