// Every /proc file the daemon reads, malformed and truncated in a fake tree: each read fails closed and says why.

import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskDaemon

/// The files the daemon reads and where, all through `ProcessInspector` or the manager:
///
/// | file                      | read for                                | when it cannot be read or understood       |
/// |---------------------------|-----------------------------------------|--------------------------------------------|
/// | `PID/stat`                | identity (start time), group, listing   | memory kept at its last reading; lock check unknown |
/// | `PID/smaps_rollup`        | memory (PSS)                            | memory kept at its last reading            |
/// | `locks`                   | POSIX and flock locks                   | lock check unknown                         |
/// | `PID/fdinfo/`, `…/N`      | open file description locks             | lock check unknown                         |
/// | the `/proc` listing       | a group leader's members                | leader's memory kept; lock check unknown   |
/// | (any file read whole)     | past `ProcFS.fileSizeLimit`             | an error, never a cut file                 |
/// | `meminfo`                 | MemAvailable, MemTotal                  | no MemAvailable trigger, logged            |
/// | `pressure/memory`         | PSI, for display                        | not shown                                  |
@Suite("Malformed and truncated /proc files")
struct ProcFileTests {
    /// A healthy stat line of pid 100 leading its group, as FakeProcTree writes it.
    static let statLine =
        "100 (app) S 1 100 100 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0 1000 2383872 233 18446744073709551615 1 1 0 0"
        + " 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

    /// Broken versions of a file: empty, garbage, and the healthy text cut inside a line at several points (a
    /// cut at a line's end leaves a file the kernel could have written: fewer locks, or a meminfo without
    /// MemAvailable, which the parsers judge on its own).
    static func broken(_ healthy: String) -> [(String, String)] {
        let bytes = Array(healthy.utf8)
        let cuts = [1, bytes.count / 3, bytes.count / 2, bytes.count - 2].filter { cut in
            cut > 0 && cut < bytes.count && bytes[cut - 1] != UInt8(ascii: "\n")
        }
        return [("empty", ""), ("garbage", "\u{1}\u{0}not a proc file at all\n")]
            + cuts.map { ("cut at byte \($0)", String(decoding: bytes.prefix($0), as: UTF8.self)) }
    }

    private let process = InspectedProcess(key: 1, pid: 100, startTime: 1_000)

    private func inspector(_ tree: FakeProcTree) -> ProcessInspector {
        ProcessInspector(procFS: tree.procFS)
    }

    private func isUnknown(_ check: LockCheck) -> Bool {
        if case .unknown = check { return true }
        return false
    }

    @Test("PID/stat of a tracked process: its memory reading fails and its lock check is unknown, never gone")
    func stat() throws {
        for (label, text) in Self.broken(Self.statLine) {
            let tree = try FakeProcTree()
            try tree.addProcess(pid: 100)
            _ = try tree.directory.write("100/stat", text)
            let sample = inspector(tree).sampleMemory([process], includesProcesses: true)
            #expect(sample.processBytes[1] == nil, "\(label): measured")
            #expect(sample.failures[1]?.contains("stat") == true, "\(label): \(sample.failures)")
            #expect(sample.goneKeys.isEmpty, "\(label): taken for gone")
            #expect(isUnknown(inspector(tree).checkLocks(process)), "\(label): lock check did not fail closed")
        }
    }

    @Test("PID/stat of another process while a group leader's members are listed: the pass cannot be trusted")
    func memberStat() throws {
        for (label, text) in Self.broken(Self.statLine.replacingOccurrences(of: "100 (app)", with: "101 (app)")) {
            let tree = try FakeProcTree()
            try tree.addProcess(pid: 100, pssKiB: 1_000)
            try tree.addProcess(pid: 101, group: 100, pssKiB: 500)
            _ = try tree.directory.write("101/stat", text)
            let sample = inspector(tree).sampleMemory([process], includesProcesses: true)
            #expect(sample.processBytes[1] == nil, "\(label): a sum without the member")
            #expect(sample.failures[1]?.contains("101/stat") == true, "\(label): \(sample.failures)")
            #expect(isUnknown(inspector(tree).checkLocks(process)), "\(label): lock check did not fail closed")
        }
        // A member that is gone (no stat at all) is simply not a member.
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100, pssKiB: 1_000)
        try tree.addProcess(pid: 101, group: 100, pssKiB: 500)
        try tree.remove("101/stat")
        #expect(inspector(tree).sampleMemory([process], includesProcesses: true).processBytes[1] == 1_000 * 1024)
        #expect(inspector(tree).checkLocks(process) == .free)
    }

    @Test("the /proc listing: entries that are not processes are passed over; a member listed but gone is no member")
    func listing() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100, pssKiB: 1_000)
        try tree.addProcess(pid: 101, group: 100, pssKiB: 500)
        for junk in [
            "self/stat", "thread-self/stat", "sys/stat", "0123/stat", "99999999999/stat", "-5/stat", "1a/stat",
        ] {
            _ = try tree.directory.write(junk, "garbage that must never be parsed\n")
        }
        try FileManager.default.createDirectory(
            atPath: tree.directory.path + "/102", withIntermediateDirectories: true)
        let sample = inspector(tree).sampleMemory([process], includesProcesses: true)
        #expect(sample.processBytes[1] == 1_500 * 1024, "\(sample)")
        #expect(sample.failures.isEmpty)
        #expect(inspector(tree).checkLocks(process) == .free)
    }

    @Test("a file past the whole-file limit is an error, never cut; /proc/locks is scanned whatever its size")
    func sizeLimits() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100)
        let small = ProcessInspector(procFS: tree.procFS(fileSizeLimit: 4096))
        // 40 KiB of other processes' locks, ten times the limit, with the app's lock last.
        var rows = (1...500).map { "\($0): POSIX  ADVISORY  WRITE \(1_000 + $0) 08:01:\(4_200 + $0) 0 EOF\n" }
        try tree.setLocks(rows.joined())
        #expect(small.checkLocks(process) == .free)
        rows.append("501: FLOCK  ADVISORY  WRITE 100 08:01:9999 0 EOF\n")
        try tree.setLocks(rows.joined())
        #expect(small.checkLocks(process) == .held("a FLOCK lock (pid 100)"))
        // A row longer than any the kernel writes is garbage.
        try tree.setLocks("1: POSIX  ADVISORY  WRITE 999 08:01:4200 0 " + String(repeating: "9", count: 5_000) + "\n")
        #expect(isUnknown(small.checkLocks(process)))
        // A stat too large to read whole fails closed.
        _ = try tree.directory.write(
            "100/stat", Self.statLine.dropLast() + String(repeating: " 0", count: 3_000) + "\n")
        #expect(isUnknown(small.checkLocks(process)))
        let sample = small.sampleMemory([process], includesProcesses: true)
        #expect(sample.failures[1]?.contains("larger than 4096") == true, "\(sample.failures)")
        #expect(inspector(tree).sampleMemory([process], includesProcesses: true).processBytes[1] == 1_024 * 1024)
    }

    @Test("PID/smaps_rollup: a failure with its reason, not a zero (empty is the kernel's zero)")
    func smapsRollup() throws {
        let healthy =
            "55d0c0a00000-7ffd2b1fe000 ---p 00000000 00:00 0                          [rollup]\n"
            + "Rss:              1124 kB\nPss:              1024 kB\n"
        // Empty is what the kernel shows for a process without memory (one exiting): 0 bytes, not a failure.
        for (label, text) in Self.broken(healthy) where label != "empty" {
            let tree = try FakeProcTree()
            try tree.addProcess(pid: 100)
            _ = try tree.directory.write("100/smaps_rollup", text)
            let sample = inspector(tree).sampleMemory([process], includesProcesses: true)
            #expect(
                sample.processBytes[1] == nil, "\(label): measured as \(String(describing: sample.processBytes[1]))")
            #expect(sample.failures[1] != nil, "\(label): no failure")
        }
    }

    @Test("locks: unknown when cut or garbled, free when empty")
    func locks() throws {
        let healthy = "1: POSIX  ADVISORY  WRITE 999 08:01:4200 0 EOF\n2: FLOCK  ADVISORY  WRITE 998 08:01:4201 0 EOF\n"
        for (label, text) in Self.broken(healthy) where label != "empty" {
            let tree = try FakeProcTree()
            try tree.addProcess(pid: 100)
            try tree.setLocks(text)
            #expect(isUnknown(inspector(tree).checkLocks(process)), "\(label): \(inspector(tree).checkLocks(process))")
        }
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100)
        try tree.setLocks("")
        #expect(inspector(tree).checkLocks(process) == .free)
    }

    @Test("PID/fdinfo/N with an OFD lock in /proc/locks: unknown when its lock line is cut or garbled")
    func fileDescriptorInfo() throws {
        let healthy =
            "pos:\t0\nflags:\t02100001\nmnt_id:\t27\nlock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:16221300 0 EOF\n"
        // Cuts that end inside the lock line (an earlier cut is a file with no lock line: nothing held there).
        let lockStart = healthy.distance(from: healthy.startIndex, to: healthy.range(of: "lock:")!.lowerBound)
        for cut in [lockStart + 3, lockStart + 12, lockStart + 30, healthy.count - 5] {
            let tree = try FakeProcTree()
            try tree.addProcess(pid: 100)
            try tree.setLocks("1: OFDLCK ADVISORY  WRITE -1 fe:00:16221300 0 EOF\n")
            try tree.addFileDescriptorInfo(pid: 100, descriptor: 3, String(healthy.prefix(cut)))
            #expect(isUnknown(inspector(tree).checkLocks(process)), "cut at \(cut)")
        }
    }

    @Test("meminfo: no figures, with the reason; pressure/memory: not shown")
    func systemFiles() throws {
        let healthyMemory = "MemTotal:       8388608 kB\nMemFree:        2097152 kB\nMemAvailable:   4194304 kB\n"
        for (label, text) in Self.broken(healthyMemory) {
            let tree = try FakeProcTree()
            _ = try tree.directory.write("meminfo", text)
            let sample = inspector(tree).sampleMemory([], includesProcesses: false)
            #expect(sample.memoryInfo == nil, "\(label): \(String(describing: sample.memoryInfo))")
            #expect(sample.memoryInfoFailure?.contains("meminfo") == true, "\(label)")
        }
        let healthyPressure =
            "some avg10=1.50 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        for (label, text) in Self.broken(healthyPressure) {
            let tree = try FakeProcTree()
            _ = try tree.directory.write("pressure/memory", text)
            let sample = inspector(tree).sampleMemory([], includesProcesses: false)
            #expect(sample.pressure == nil, "\(label): \(String(describing: sample.pressure))")
            #expect(sample.memoryInfo != nil, "\(label): a bad pressure file cost the memory figures")
        }
    }

    @Test("the manager logs an unreadable meminfo once, and again when it is back")
    func managerLogsMemoryInfo() async throws {
        try await offThePool {
            let harness = try ManagerHarness(configuration: "[Memory]\nAppsMemoryMax=1G\n")
            defer { harness.close() }
            _ = try harness.tree.directory.write("meminfo", "MemTotal: 8388608 kB\n")
            _ = try harness.register("app")
            try harness.step(until: "the failure to be logged") {
                harness.manager.advanceTime(by: .seconds(1))
                return harness.log.contains("meminfo")
            }
            try harness.advance(by: .seconds(5))
            #expect(harness.log.components(separatedBy: "MemAvailable is not watched").count == 2)
            try harness.tree.setMemoryInfo(totalKiB: 8 << 20, availableKiB: 4 << 20)
            try harness.step(until: "the recovery to be logged") {
                harness.manager.advanceTime(by: .seconds(1))
                return harness.log.contains("meminfo is readable again")
            }
        }
    }
}
