// What a running process uses, read from /proc: resident memory, CPU time, descriptors, main-thread reads.

import Foundation
import Glibc

/// Readings of one process's resource use from `/proc`, for tests that bound what a peer can make a daemon
/// hold or burn.
///
/// Each reading is a fresh read of the process's files; parsing is separate from reading and throws on text
/// it does not understand, so a test fails with the file's content rather than a wrong number.
public struct ProcessUsage: Sendable {
    /// The process measured.
    public let pid: pid_t
    /// Where procfs is mounted.
    public let procRoot: String

    /// Measures `pid` through the procfs at `procRoot`.
    public init(pid: pid_t, procRoot: String = "/proc") {
        self.pid = pid
        self.procRoot = procRoot
    }

    /// The kernel's clock ticks per second, the unit of the CPU times in `/proc/PID/stat`.
    public static let clockTicksPerSecond: Int = sysconf(Int32(_SC_CLK_TCK))

    /// Resident set size in bytes (`VmRSS` of `/proc/PID/status`).
    public func residentBytes() throws -> Int {
        try Self.residentBytes(status: read("status"))
    }

    /// User plus system CPU time of all the process's threads (fields 14 and 15 of `/proc/PID/stat`).
    public func cpuTime() throws -> Duration {
        let ticks = try Self.cpuTicks(stat: read("stat"))
        return .nanoseconds(ticks * (1_000_000_000 / Int64(Self.clockTicksPerSecond)))
    }

    /// The number of open descriptors (entries of `/proc/PID/fd`).
    public func descriptorCount() throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "\(procRoot)/\(pid)/fd").count
    }

    /// `syscr` of the main thread (`/proc/PID/task/PID/io`): how many read-like system calls the thread whose
    /// id is the pid made (for a daemon, its event loop), excluding every other thread.
    public func mainThreadReadCalls() throws -> Int {
        try Self.field("syscr", in: read("task/\(pid)/io"))
    }

    /// Voluntary context switches summed over every thread (`voluntary_ctxt_switches` of each
    /// `/proc/PID/task/TID/status`): how many times the process went to sleep waiting for something, so how many
    /// times something woke it. A thread that exits takes its count with it.
    public func voluntaryContextSwitches() throws -> Int {
        var total = 0
        for thread in try FileManager.default.contentsOfDirectory(atPath: "\(procRoot)/\(pid)/task") {
            // A thread that exits between the listing and the read has nothing more to count.
            guard let status = try? read("task/\(thread)/status") else { continue }
            total += try Self.field("voluntary_ctxt_switches", in: status)
        }
        return total
    }

    private func read(_ relativePath: String) throws -> String {
        try String(contentsOfFile: "\(procRoot)/\(pid)/\(relativePath)", encoding: .utf8)
    }

    /// `VmRSS` (in kB in the file) of a `/proc/PID/status` text, in bytes.
    public static func residentBytes(status: String) throws -> Int {
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let words = line.dropFirst("VmRSS:".count).split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count == 2, words[1] == "kB", let kilobytes = Int(words[0]) else { break }
            return kilobytes * 1024
        }
        throw HarnessError("no VmRSS in kB in /proc/PID/status: \(status.prefix(400))")
    }

    /// utime + stime (fields 14 and 15) of a `/proc/PID/stat` text, in clock ticks. The fields are counted
    /// after the last `)`, since the command name (field 2) may hold spaces and parentheses.
    public static func cpuTicks(stat: String) throws -> Int64 {
        guard let close = stat.lastIndex(of: ")") else { throw HarnessError("not a stat line: \(stat.prefix(200))") }
        // After ")" come fields 3, 4, ...: field N is at index N - 3.
        let fields = stat[stat.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count > 12, let user = Int64(fields[11]), let system = Int64(fields[12]) else {
            throw HarnessError("no utime and stime in stat line: \(stat.prefix(200))")
        }
        return user + system
    }

    /// The number after `name:` in a `key: value` file such as `/proc/PID/io`.
    public static func field(_ name: String, in text: String) throws -> Int {
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2, parts[0] == name, let value = Int(parts[1].trimmingCharacters(in: .whitespaces)) {
                return value
            }
        }
        throw HarnessError("no \(name) in: \(text.prefix(400))")
    }
}
