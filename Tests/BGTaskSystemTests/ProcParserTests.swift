// Table-driven tests of the /proc parsers, each table with hostile rows: truncation, overflow, garbage.
import BGTaskPOSIX
import Testing

/// The 52 fields of a real /proc/PID/stat line after the command, with start time 8123 (field 22).
private func statLine(pid: String = "1234", command: String, state: String = "S", tail: String? = nil) -> String {
    let rest =
        tail ?? "1 1234 1234 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0 8123 2383872 233 "
        + "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0"
    return "\(pid) (\(command)) \(state) \(rest)\n"
}

extension String {
    /// The text with the single space after the command's ")" replaced, to build malformed rows.
    fileprivate func replacingFirstSpaceAfterCommand(with replacement: String) -> String {
        guard let close = lastIndex(of: ")") else { return self }
        let after = index(after: close)
        return String(self[..<after]) + replacement + String(self[index(after: after)...])
    }
}

@Suite struct ProcessStatParserTests {
    static let good: [(String, ProcessStat)] = [
        (
            statLine(command: "sleep"),
            ProcessStat(
                pid: 1234, command: "sleep", state: .sleeping, parentPID: 1, processGroupID: 1234,
                sessionID: 1234, startTime: 8123)
        ),
        (
            statLine(command: "my app", state: "T"),
            ProcessStat(
                pid: 1234, command: "my app", state: .stopped, parentPID: 1, processGroupID: 1234,
                sessionID: 1234, startTime: 8123)
        ),
        // A command that fakes the end of the command and the following fields.
        (
            statLine(command: "a) (b", state: "R"),
            ProcessStat(
                pid: 1234, command: "a) (b", state: .running, parentPID: 1, processGroupID: 1234,
                sessionID: 1234, startTime: 8123)
        ),
        (
            statLine(command: ") Z 99 99 99 0 -1", state: "Z"),
            ProcessStat(
                pid: 1234, command: ") Z 99 99 99 0 -1", state: .zombie, parentPID: 1,
                processGroupID: 1234, sessionID: 1234, startTime: 8123)
        ),
        (
            statLine(command: "", state: "D"),
            ProcessStat(
                pid: 1234, command: "", state: .diskSleep, parentPID: 1, processGroupID: 1234,
                sessionID: 1234, startTime: 8123)
        ),
        (
            statLine(command: "((", state: "I"),
            ProcessStat(
                pid: 1234, command: "((", state: .idle, parentPID: 1, processGroupID: 1234,
                sessionID: 1234, startTime: 8123)
        ),
        // Unknown state letters are kept, not rejected.
        (
            statLine(command: "w", state: "W"),
            ProcessStat(
                pid: 1234, command: "w", state: .other("W"), parentPID: 1, processGroupID: 1234,
                sessionID: 1234, startTime: 8123)
        ),
        // Fixed bug, found by the proc fuzz target: a command starting with a combining mark fused with the "("
        // into one Character, so the line did not parse; a process could hide its group this way.
        (
            statLine(command: "\u{329}"),
            ProcessStat(
                pid: 1234, command: "\u{329}", state: .sleeping, parentPID: 1, processGroupID: 1234,
                sessionID: 1234, startTime: 8123)
        ),
        // The same for a prepended mark at the end of the command, which fuses with the ")".
        (
            statLine(command: "a) S 1 1 1 \u{600}"),
            ProcessStat(
                pid: 1234, command: "a) S 1 1 1 \u{600}", state: .sleeping, parentPID: 1, processGroupID: 1234,
                sessionID: 1234, startTime: 8123)
        ),
        // Exactly the 20 fields after the command that are needed, and the largest start time.
        (
            "7 (x) S 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551615",
            ProcessStat(
                pid: 7, command: "x", state: .sleeping, parentPID: 0, processGroupID: 0, sessionID: 0,
                startTime: .max)
        ),
    ]

    @Test(arguments: good)
    func parsesGoodRows(text: String, expected: ProcessStat) throws {
        #expect(try ProcessStat.parse(text) == expected)
    }

    static let hostile: [String] = [
        "",
        "\n",
        "1234",
        "1234 (sleep",
        "1234 sleep) S 1",
        ")( S",
        "1234 (sleep) S 1 1234",  // Truncated.
        statLine(command: "sleep").split(separator: " ").prefix(21).joined(separator: " "),  // One field short.
        statLine(pid: "99999999999999999999", command: "x"),  // Pid overflows.
        statLine(pid: "-5", command: "x"),
        statLine(pid: "0", command: "x"),
        statLine(pid: "+5", command: "x"),
        statLine(pid: "abc", command: "x"),
        statLine(pid: "", command: "x"),
        statLine(command: "x", state: "SS"),
        statLine(command: "x", state: ""),  // Fixed bug: an empty field shifted the later ones.
        statLine(command: "x").replacingFirstSpaceAfterCommand(with: "  "),
        "1234 (x)S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1",
        statLine(command: "x", tail: "99999999999 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1"),  // Parent overflows.
        statLine(command: "x", tail: "1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551616"),  // Start overflows.
        statLine(command: "x", tail: "1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -1"),
        statLine(command: "x", tail: "1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 +1"),
        statLine(command: "x", tail: "p q r s t u v w x y z a b c d e f g h i j"),
        "\u{0}\u{1}\u{2}(\u{ff}) \u{7f}",
        String(repeating: "(", count: 10_000) + String(repeating: ")", count: 10_000),
    ]

    @Test(arguments: hostile)
    func rejectsHostileRows(text: String) {
        #expect(throws: ProcParseError.self) { try ProcessStat.parse(text) }
    }

    @Test func errorQuotesABoundedPartOfTheInput() {
        let huge = String(repeating: "x", count: 100_000)
        let error = #expect(throws: ProcParseError.self) { try ProcessStat.parse(huge) }
        #expect((error?.description.count ?? .max) < 200)
    }
}

/// A `/proc/PID/status` as the kernel prints it (6.x, abridged after `Groups:`), with `uidLine` in its place.
private func statusText(name: String = "sleep", uidLine: String = "Uid:\t1000\t1000\t1000\t1000") -> String {
    "Name:\t\(name)\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t1\n"
        + "TracerPid:\t0\n\(uidLine)\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t27 1000 \n"
        + "VmPeak:\t    8380 kB\nThreads:\t1\n"
}

@Suite struct UserIDParserTests {
    static let good: [(String, ProcessUserIDs)] = [
        (statusText(), ProcessUserIDs(real: 1000, effective: 1000, saved: 1000, filesystem: 1000)),
        // A setuid-root program its user started: the real uid stays, the others are root's.
        (
            statusText(uidLine: "Uid:\t1000\t0\t0\t0"),
            ProcessUserIDs(real: 1000, effective: 0, saved: 0, filesystem: 0)
        ),
        (
            statusText(uidLine: "Uid:\t0\t65534\t4294967294\t65534"),
            ProcessUserIDs(real: 0, effective: 65534, saved: 4_294_967_294, filesystem: 65534)
        ),
        // Spaces instead of tabs, and a line alone, are taken.
        ("Uid: 1 2 3 4\n", ProcessUserIDs(real: 1, effective: 2, saved: 3, filesystem: 4)),
        ("Uid:\t7\t7\t7\t7", ProcessUserIDs(real: 7, effective: 7, saved: 7, filesystem: 7)),
        // A process named to look like a Uid line: the kernel prints it after "Name:", where it does not count.
        (
            statusText(name: "Uid:\t0\t0\t0\t0"),
            ProcessUserIDs(real: 1000, effective: 1000, saved: 1000, filesystem: 1000)
        ),
    ]

    @Test(arguments: good)
    func parsesGoodRows(text: String, expected: ProcessUserIDs) throws {
        #expect(try ProcessUserIDs.parse(text) == expected)
    }

    static let hostile: [String] = [
        "",
        "\n",
        statusText(uidLine: ""),  // No Uid line.
        statusText(uidLine: " Uid:\t0\t0\t0\t0"),  // Not at the start of a line: no Uid line.
        statusText(uidLine: "uid:\t0\t0\t0\t0"),
        statusText(uidLine: "Uid:\t1000\t1000\t1000"),  // Three ids.
        statusText(uidLine: "Uid:\t1000\t1000\t1000\t1000\t0"),  // Five.
        statusText(uidLine: "Uid:"),
        statusText(uidLine: "Uid:\t-1\t0\t0\t0"),
        statusText(uidLine: "Uid:\t+1\t0\t0\t0"),
        statusText(uidLine: "Uid:\t4294967295\t0\t0\t0"),  // (uid_t)-1 names no user.
        statusText(uidLine: "Uid:\t4294967296\t0\t0\t0"),  // Past a uid.
        statusText(uidLine: "Uid:\t99999999999999999999999\t0\t0\t0"),
        statusText(uidLine: "Uid:\t00000000001000\t0\t0\t0"),
        statusText(uidLine: "Uid:\t1000\tx\t0\t0"),
        statusText(uidLine: "Uid:\t1e3\t0\t0\t0"),
        statusText(uidLine: "Uid:\t\u{661}\t0\t0\t0"),  // An Arabic-Indic digit one.
        statusText(uidLine: "Uid:\u{301}\t0\t0\t0\t0"),  // A combining mark fused with the colon.
        // Two Uid lines: which one the kernel meant cannot be known.
        statusText(uidLine: "Uid:\t0\t0\t0\t0\nUid:\t1000\t1000\t1000\t1000"),
        statusText(uidLine: "Uid:\t1000\t1000\t1000\t1000\nUid:\t0\t0\t0\t0"),
        "\u{0}\u{1}Uid:\u{ff}",
        "Uid:" + String(repeating: "\t1", count: 10_000),
    ]

    @Test(arguments: hostile)
    func rejectsHostileRows(text: String) {
        #expect(throws: ProcParseError.self) { try ProcessUserIDs.parse(text) }
    }

    @Test func errorQuotesABoundedPartOfTheInput() {
        let error = #expect(throws: ProcParseError.self) {
            try ProcessUserIDs.parse("Uid:" + String(repeating: "\t1", count: 10_000))
        }
        #expect((error?.description.count ?? .max) < 200)
    }

    @Test func wholeOnlyWhenRealEffectiveAndSavedAreTheUid() {
        #expect(ProcessUserIDs(real: 1000, effective: 1000, saved: 1000, filesystem: 1000).areAll(1000))
        // The filesystem uid does not decide whose signals reach it.
        #expect(ProcessUserIDs(real: 1000, effective: 1000, saved: 1000, filesystem: 0).areAll(1000))
        #expect(!ProcessUserIDs(real: 1000, effective: 0, saved: 0, filesystem: 0).areAll(1000))
        #expect(!ProcessUserIDs(real: 1000, effective: 1000, saved: 0, filesystem: 1000).areAll(1000))
        #expect(!ProcessUserIDs(real: 0, effective: 1000, saved: 1000, filesystem: 1000).areAll(1000))
        #expect(!ProcessUserIDs(real: 1000, effective: 1000, saved: 1000, filesystem: 1000).areAll(0))
    }
}

@Suite struct LockParserTests {
    static let good: [(String, FileLock)] = [
        (
            "1: POSIX  ADVISORY  WRITE 1234 08:01:1311 0 EOF",
            FileLock(
                ordinal: 1, isBlockedWaiter: false, kind: .posix, enforcement: .advisory, access: .write,
                pid: 1234, file: .init(deviceMajor: 8, deviceMinor: 1, inode: 1311), start: 0, end: nil)
        ),
        (
            "2: FLOCK  ADVISORY  READ  5678 00:2a:789 0 EOF",
            FileLock(
                ordinal: 2, isBlockedWaiter: false, kind: .flock, enforcement: .advisory, access: .read,
                pid: 5678, file: .init(deviceMajor: 0, deviceMinor: 0x2a, inode: 789), start: 0, end: nil)
        ),
        (
            "3: OFDLCK ADVISORY  WRITE -1 fd:01:42 100 199",
            FileLock(
                ordinal: 3, isBlockedWaiter: false, kind: .openFileDescription, enforcement: .advisory,
                access: .write, pid: -1, file: .init(deviceMajor: 0xfd, deviceMinor: 1, inode: 42), start: 100,
                end: 199)
        ),
        (
            "3: -> OFDLCK ADVISORY  WRITE -1 fd:01:42 100 199",
            FileLock(
                ordinal: 3, isBlockedWaiter: true, kind: .openFileDescription, enforcement: .advisory,
                access: .write, pid: -1, file: .init(deviceMajor: 0xfd, deviceMinor: 1, inode: 42), start: 100,
                end: 199)
        ),
        (
            "4:  -> FLOCK  ADVISORY  WRITE 77 103:02:18446744073709551615 0 EOF",
            FileLock(
                ordinal: 4, isBlockedWaiter: true, kind: .flock, enforcement: .advisory, access: .write,
                pid: 77, file: .init(deviceMajor: 0x103, deviceMinor: 2, inode: .max), start: 0, end: nil)
        ),
        (
            "5: LEASE  ACTIVE    UNLCK 99 00:1f:4242 0 EOF",
            FileLock(
                ordinal: 5, isBlockedWaiter: false, kind: .lease, enforcement: .active, access: .unlock,
                pid: 99, file: .init(deviceMajor: 0, deviceMinor: 0x1f, inode: 4242), start: 0, end: nil)
        ),
        (
            "6: POSIX  MANDATORY WRITE 0 08:01:1 0 0",
            FileLock(
                ordinal: 6, isBlockedWaiter: false, kind: .posix, enforcement: .mandatory, access: .write,
                pid: 0, file: .init(deviceMajor: 8, deviceMinor: 1, inode: 1), start: 0, end: 0)
        ),
        (
            "7: POSIX  *NOINODE* READ  12 <none>:0 0 EOF",
            FileLock(
                ordinal: 7, isBlockedWaiter: false, kind: .posix, enforcement: .noInode, access: .read,
                pid: 12, file: nil, start: 0, end: nil)
        ),
    ]

    @Test(arguments: good)
    func parsesGoodRows(text: String, expected: FileLock) throws {
        #expect(try FileLock.parse(line: Substring(text)) == expected)
    }

    static let hostile: [String] = [
        "1:",
        "1: POSIX  ADVISORY  WRITE 1234",  // Truncated.
        "1: POSIX  ADVISORY  WRITE 1234 08:01:1311 0 EOF trailing",
        "x: POSIX  ADVISORY  WRITE 1234 08:01:1311 0 EOF",
        "1 POSIX  ADVISORY  WRITE 1234 08:01:1311 0 EOF",
        "-> POSIX  ADVISORY  WRITE 1234 08:01:1311 0 EOF",
        "1: BOGUS  ADVISORY  WRITE 1234 08:01:1311 0 EOF",
        "1: POSIX  SOMETIMES WRITE 1234 08:01:1311 0 EOF",
        "1: POSIX  ADVISORY  SCRIBBLE 1234 08:01:1311 0 EOF",
        "1: POSIX  ADVISORY  WRITE 99999999999 08:01:1311 0 EOF",  // Pid overflows.
        "1: POSIX  ADVISORY  WRITE -2 08:01:1311 0 EOF",
        "1: POSIX  ADVISORY  WRITE 12 zz:01:1311 0 EOF",
        "1: POSIX  ADVISORY  WRITE 12 08:01 0 EOF",
        "1: POSIX  ADVISORY  WRITE 12 :01:5 0 EOF",
        "1: POSIX  ADVISORY  WRITE 12 08:01:18446744073709551616 0 EOF",  // Inode overflows.
        "1: POSIX  ADVISORY  WRITE 12 100000000:01:5 0 EOF",  // Major overflows 32 bits.
        "1: POSIX  ADVISORY  WRITE 12 08:01:5 -1 EOF",
        "1: POSIX  ADVISORY  WRITE 12 08:01:5 10 5",  // Ends before it starts.
        "1: POSIX  ADVISORY  WRITE 12 08:01:5 0 99999999999999999999",
        "1: POSIX  ADVISORY  WRITE 12 08:01:5 0 eof",
        "\u{0}: \u{1} \u{2}",
    ]

    @Test(arguments: hostile)
    func rejectsHostileRows(text: String) {
        #expect(throws: ProcParseError.self) { try FileLock.parse(line: Substring(text)) }
    }

    @Test func parseAllSkipsBlankLinesAndNamesTheBadLine() throws {
        let text = "1: POSIX  ADVISORY  WRITE 1 08:01:2 0 EOF\n\n1: -> POSIX  ADVISORY  WRITE 3 08:01:2 0 EOF\n"
        let locks = try FileLock.parseAll(text)
        #expect(locks.map(\.pid) == [1, 3])
        #expect(locks.map(\.isBlockedWaiter) == [false, true])
        #expect(try FileLock.parseAll("").isEmpty)
        let error = #expect(throws: ProcParseError.self) { try FileLock.parseAll(text + "3: garbage\n") }
        #expect(error?.line == 4)
    }
}

@Suite struct MemoryParserTests {
    static let meminfo = """
        MemTotal:        2000000 kB
        MemFree:          100000 kB
        MemAvailable:     500000 kB
        Buffers:           10000 kB

        """

    @Test func parsesMeminfo() throws {
        let info = try MemoryInfo.parse(MemoryParserTests.meminfo)
        #expect(info == MemoryInfo(totalBytes: 2_000_000 * 1024, availableBytes: 500_000 * 1024))
    }

    static let hostileMeminfo: [String] = [
        "",
        "MemTotal:        2000000 kB\n",  // No MemAvailable (kernels before 3.14).
        "MemAvailable:     500000 kB\n",
        "MemTotal: 99999999999999999999 kB\nMemAvailable: 1 kB\n",
        "MemTotal: 18014398509481984 kB\nMemAvailable: 1 kB\n",  // Fits Int64 but its bytes do not.
        "MemTotal: 10 kB\nMemAvailable: 20 kB\n",  // More available than exists.
        "MemTotal: 10\nMemAvailable: 5 kB\n",
        "MemTotal: -10 kB\nMemAvailable: 5 kB\n",
        "MemTotal: ten kB\nMemAvailable: 5 kB\n",
        "MemTotal: 10 MB\nMemAvailable: 5 kB\n",
    ]

    @Test(arguments: hostileMeminfo)
    func rejectsHostileMeminfo(text: String) {
        #expect(throws: ProcParseError.self) { try MemoryInfo.parse(text) }
    }

    static let rollup = """
        55f5c0a7d000-7ffd1e5fe000 ---p 00000000 00:00 0                          [rollup]
        Rss:                1408 kB
        Pss_Anon:            100 kB
        Pss:                 262 kB
        Pss_Dirty:            80 kB

        """

    @Test func parsesPssNotItsNeighbours() throws {
        #expect(try ProportionalSetSize.parse(MemoryParserTests.rollup) == 262 * 1024)
        #expect(try ProportionalSetSize.parse("") == 0)  // Kernel thread, or memory already released.
    }

    static let hostileRollup: [String] = [
        "Rss: 1408 kB\n",
        "Pss_Anon: 100 kB\n",
        "Pss: abc kB\n",
        "Pss: 262\n",
        "Pss: 262 MB\n",
        "Pss: -262 kB\n",
        "Pss: 9223372036854775807 kB\n",
        "Pss: 1 kB extra\n",
    ]

    @Test(arguments: hostileRollup)
    func rejectsHostileRollups(text: String) {
        #expect(throws: ProcParseError.self) { try ProportionalSetSize.parse(text) }
    }
}

@Suite struct PressureParserTests {
    @Test func parsesSomeAndFull() throws {
        let text =
            "some avg10=1.25 avg60=0.50 avg300=0.10 total=123456\n"
            + "full avg10=0.75 avg60=0.00 avg300=100.00 total=18446744073709551615\n"
        let pressure = try Pressure.parse(text)
        #expect(
            pressure.some
                == PressureStall(
                    average10: 1.25, average60: 0.5, average300: 0.1,
                    totalMicroseconds: 123_456))
        #expect(
            pressure.full
                == PressureStall(
                    average10: 0.75, average60: 0, average300: 100,
                    totalMicroseconds: .max))
    }

    @Test func fullIsOptionalAndUnknownKeysAreIgnored() throws {
        let pressure = try Pressure.parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=0 avg3600=2.00 newkey=x\n")
        #expect(pressure.full == nil)
        #expect(pressure.some.totalMicroseconds == 0)
    }

    static let hostile: [String] = [
        "",
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",  // No some line.
        "some avg10=0.00 avg60=0.00 avg300=0.00\n",  // No total.
        "some avg10=0.00 avg60=0.00 total=0\n",
        "some avg10=nan avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=inf avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=0x1p3 avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=-1.00 avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=100.01 avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=1e2 avg60=0.00 avg300=0.00 total=0\n",
        "some avg10= avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=18446744073709551616\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=+1\n",
        "some avg10 0.00\n",
        "bogus avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\ngarbage\n",
    ]

    @Test(arguments: hostile)
    func rejectsHostileText(text: String) {
        #expect(throws: ProcParseError.self) { try Pressure.parse(text) }
    }
}
