// The worker's /proc reads on a fake tree: memory of processes and groups counted once each, identity by start
// time, and file-lock checks that fail closed.

import BGTaskPOSIX
import BGTaskTestSupport
import Testing

@testable import BGTaskDaemon

@Suite("Process inspection on a fake /proc")
struct ProcessInspectionTests {
    private func process(_ key: Int, _ pid: Int32, startTime: UInt64 = 1_000) -> InspectedProcess {
        InspectedProcess(key: key, pid: pid, startTime: startTime)
    }

    // MARK: Memory

    @Test("a process's memory is its PSS; a group leader's adds the rest of its group")
    func groupMemory() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100, group: 1, pssKiB: 1_000)
        try tree.addProcess(pid: 200, pssKiB: 2_000)
        try tree.addProcess(pid: 201, group: 200, pssKiB: 300)
        try tree.addProcess(pid: 202, group: 200, pssKiB: 40)
        try tree.addProcess(pid: 300, group: 1, pssKiB: 5)
        let sample = ProcessInspector(procFS: tree.procFS).sampleMemory(
            [process(1, 100), process(2, 200)], includesProcesses: true)
        #expect(sample.processBytes == [1: 1_000 * 1024, 2: 2_340 * 1024])
        #expect(sample.failures.isEmpty && sample.goneKeys.isEmpty)
        #expect(sample.memoryInfo?.totalBytes == 8 << 30)
        #expect(sample.pressure?.some.average10 == 0)
    }

    @Test("a process tracked in its own right is not counted again in the group it belongs to")
    func countedOnce() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 200, pssKiB: 2_000)
        try tree.addProcess(pid: 201, group: 200, pssKiB: 300)
        let sample = ProcessInspector(procFS: tree.procFS).sampleMemory(
            [process(1, 200), process(2, 201)], includesProcesses: true)
        #expect(sample.processBytes == [1: 2_000 * 1024, 2: 300 * 1024])
    }

    @Test("a pid now naming another process (start time differs) or none is gone, not measured")
    func identity() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100, startTime: 5_000, pssKiB: 1_000)
        let sample = ProcessInspector(procFS: tree.procFS).sampleMemory(
            [process(1, 100, startTime: 1_000), process(2, 999)], includesProcesses: true)
        #expect(sample.processBytes.isEmpty)
        #expect(sample.goneKeys == [1, 2])
    }

    @Test("an unreadable memory file of a live process is a failure with its reason, not a zero")
    func unreadableMemory() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100, pssKiB: nil)
        let sample = ProcessInspector(procFS: tree.procFS).sampleMemory([process(1, 100)], includesProcesses: true)
        #expect(sample.processBytes[1] == nil)
        #expect(sample.failures[1]?.contains("smaps_rollup") == true)
        #expect(sample.goneKeys.isEmpty)
    }

    @Test("without processes only the system's figures are read")
    func systemOnly() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100)
        try tree.setMemoryInfo(totalKiB: 1_000, availableKiB: 50)
        let sample = ProcessInspector(procFS: tree.procFS).sampleMemory([], includesProcesses: false)
        #expect(!sample.includesProcesses)
        #expect(sample.processBytes.isEmpty)
        #expect(sample.memoryInfo?.availableBytes == Int64(50 * 1024))
    }

    // MARK: Locks

    private func check(_ tree: FakeProcTree, _ pid: Int32) -> LockCheck {
        ProcessInspector(procFS: tree.procFS).checkLocks(process(1, pid))
    }

    @Test("locks by pid: the process's own, its group's when it leads one, never a blocked request")
    func locksByPID() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100, group: 1)
        try tree.addProcess(pid: 200)
        try tree.addProcess(pid: 201, group: 200)
        try tree.addProcess(pid: 300, group: 1)
        #expect(check(tree, 100) == .free)
        try tree.setLocks("1: POSIX  ADVISORY  WRITE 100 08:01:4200 0 EOF\n")
        if case .held = check(tree, 100) {} else { Issue.record("own lock not found") }
        #expect(check(tree, 200) == .free)
        try tree.setLocks("1: FLOCK  ADVISORY  WRITE 201 08:01:4200 0 EOF\n")
        if case .held = check(tree, 200) {} else { Issue.record("group member's lock not found") }
        // A process that does not lead its group is not charged with its group's locks.
        try tree.setLocks("1: FLOCK  ADVISORY  WRITE 300 08:01:4200 0 EOF\n")
        #expect(check(tree, 100) == .free)
        try tree.setLocks(
            "1: POSIX  ADVISORY  WRITE 999 08:01:4200 0 EOF\n1: -> POSIX  ADVISORY  WRITE 100 08:01:4200 0 EOF\n")
        #expect(check(tree, 100) == .free)
    }

    @Test("an open file description lock (pid -1) is traced through fdinfo")
    func openFileDescriptionLocks() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100, group: 1)
        try tree.addProcess(pid: 300, group: 1)
        try tree.setLocks("1: OFDLCK ADVISORY  WRITE -1 fe:00:16221300 0 EOF\n")
        try tree.addFileDescriptorInfo(pid: 100, descriptor: 3, "pos:\t0\nflags:\t02100001\nmnt_id:\t27\n")
        try tree.addFileDescriptorInfo(
            pid: 300, descriptor: 3, "pos:\t0\nlock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:16221300 0 EOF\n")
        #expect(check(tree, 100) == .free)
        try tree.addFileDescriptorInfo(
            pid: 100, descriptor: 4,
            "pos:\t0\nflags:\t02100001\nlock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:16221300 0 EOF\n")
        if case .held = check(tree, 100) {} else { Issue.record("the OFD lock was not traced") }
    }

    @Test("locks that cannot be read or understood fail closed")
    func failClosed() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100, group: 1)
        try tree.remove("locks")
        if case .unknown = check(tree, 100) {} else { Issue.record("a missing /proc/locks did not fail closed") }
        try tree.setLocks("1: POSIX garbage\n")
        if case .unknown = check(tree, 100) {} else { Issue.record("a garbled /proc/locks did not fail closed") }
        try tree.setLocks("1: OFDLCK ADVISORY  WRITE -1 fe:00:16221300 0 EOF\n")
        try tree.remove("100/fdinfo")
        if case .unknown = check(tree, 100) {} else { Issue.record("unreadable fdinfo did not fail closed") }
        try tree.addFileDescriptorInfo(pid: 100, descriptor: 3, "lock:\tnonsense\n")
        if case .unknown = check(tree, 100) {} else { Issue.record("a garbled lock line did not fail closed") }
    }

    @Test("a process that is gone has nothing to suspend")
    func gone() throws {
        let tree = try FakeProcTree()
        #expect(check(tree, 100) == .gone)
        try tree.addProcess(pid: 100, startTime: 7)
        #expect(check(tree, 100) == .gone)
    }
}
