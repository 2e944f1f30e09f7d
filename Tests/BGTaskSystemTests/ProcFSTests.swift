// ProcFS's reading rules on a scratch tree: whole files or an error, never a cut file; line scans that stop early.

import BGTaskPOSIX
import BGTaskTestSupport
import Glibc
import Testing

@Suite("ProcFS reading")
struct ProcFSTests {
    @Test("read: a file past the limit is EFBIG, not its first bytes")
    func sizeLimit() throws {
        let directory = try ScratchDirectory(prefix: "procfs")
        _ = try directory.write("big", String(repeating: "x", count: 5_000))
        _ = try directory.write("fits", String(repeating: "x", count: 4_096))
        let procFS = ProcFS(root: directory.path, fileSizeLimit: 4_096)
        #expect(try procFS.read("fits").utf8.count == 4_096)
        let error = #expect(throws: Errno.self) { try procFS.read("big") }
        #expect(error == .fileTooLarge)
    }

    @Test("readLines: empty or ending in a newline; anything else was cut short")
    func cutShort() throws {
        let directory = try ScratchDirectory(prefix: "procfs")
        let procFS = ProcFS(root: directory.path)
        _ = try directory.write("whole", "a\nb\n")
        _ = try directory.write("empty", "")
        _ = try directory.write("cut", "a\nb")
        #expect(try procFS.readLines("whole") == "a\nb\n")
        #expect(try procFS.readLines("empty") == "")
        let error = #expect(throws: ProcParseError.self) { try procFS.readLines("cut") }
        #expect(error?.reason.contains("cut short") == true)
    }

    @Test("scanLines: every line in order across reads, stopping when asked; cut or overlong lines are errors")
    func scanLines() throws {
        let directory = try ScratchDirectory(prefix: "procfs")
        let procFS = ProcFS(root: directory.path)
        // 200,000 lines: several 64 KiB reads, lines split across them.
        let lines = (0..<200_000).map { "line \($0)" }
        _ = try directory.write("many", lines.joined(separator: "\n") + "\n")
        var seen: [String] = []
        try procFS.scanLines("many") { line in
            seen.append(String(line))
            return true
        }
        #expect(seen == lines)
        var visited = 0
        try procFS.scanLines("many") { _ in
            visited += 1
            return visited < 10
        }
        #expect(visited == 10)
        _ = try directory.write("cut", "a\nb")
        #expect(throws: ProcParseError.self) { try procFS.scanLines("cut") { _ in true } }
        _ = try directory.write("long", "a\n" + String(repeating: "b", count: ProcFS.lineLengthLimit + 1) + "\n")
        let error = #expect(throws: ProcParseError.self) { try procFS.scanLines("long") { _ in true } }
        #expect(error?.line == 2)
        let missing = #expect(throws: Errno.self) { try procFS.scanLines("missing") { _ in true } }
        #expect(missing == .noSuchFileOrDirectory)
    }

    @Test("userIDs: the Uid line of PID/status; this process's own match getuid and geteuid")
    func userIDs() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 42, uid: 65534)
        #expect(
            try tree.procFS.userIDs(42)
                == ProcessUserIDs(real: 65534, effective: 65534, saved: 65534, filesystem: 65534))
        let missing = #expect(throws: Errno.self) { try tree.procFS.userIDs(43) }
        #expect(missing == .noSuchFileOrDirectory)
        _ = try tree.directory.write("44/status", "Name:\tx\nUid:\t1\t2\t3\t4")
        #expect(throws: ProcParseError.self) { try tree.procFS.userIDs(44) }
        let own = try ProcFS().userIDs(getpid())
        #expect(own.real == getuid() && own.effective == geteuid())
    }

    @Test("processes(inGroup:): every process whose stat shows the group; gone and unreadable ones left out")
    func groupMembers() throws {
        let tree = try FakeProcTree()
        try tree.addProcess(pid: 100)
        try tree.addProcess(pid: 101, group: 100)
        try tree.addProcess(pid: 102, group: 100, startTime: 7)
        try tree.addProcess(pid: 200)
        try tree.addProcess(pid: 201, group: 200)
        _ = try tree.directory.write("103/stat", "garbage\n")
        let members = try tree.procFS.processes(inGroup: 100)
        #expect(Set(members.map(\.pid)) == [100, 101, 102])
        #expect(members.first { $0.pid == 102 }?.startTime == 7)
        #expect(try tree.procFS.processes(inGroup: 300).isEmpty)
        // The real /proc: this process's group has this process in it.
        let group = try ProcessGroup.of(getpid())
        #expect(try ProcFS().processes(inGroup: group.id).contains { $0.pid == getpid() })
    }
}
