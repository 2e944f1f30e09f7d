// The logger's stderr form through a real pipe, sd_notify to a real datagram socket, and NSS lookups.
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Glibc
import Testing

@Suite struct LoggerTests {
    static let lines: [(LogPriority, String, [LogField], String)] = [
        (.info, "app entered background", [.app("mail")], "app entered background (APP=mail)"),
        (
            .warning, "terminated", [.app("mail"), .task(3), .reason("task-expired")],
            "warning: terminated (APP=mail TASK=3 REASON=task-expired)"
        ),
        (.error, "kill failed", [.messageID("0123456789abcdef0123456789abcdef")], "error: kill failed"),
        (.notice, "two\nlines\tand\u{1b}[31m", [], "two\\nlines\\tand\\x1b[31m"),
        (
            .info, "quoted", [.app("my app"), LogField("NOTE", "a=\"b\"\\"), LogField("EMPTY", "")],
            #"quoted (APP="my app" NOTE="a=\"b\"\\" EMPTY="")"#
        ),
        (.info, "fake fields", [.app("x) (REASON=spoofed")], #"fake fields (APP="x) (REASON=spoofed")"#),
    ]

    @Test(arguments: lines)
    func formatsOneReadableLine(priority: LogPriority, message: String, fields: [LogField], expected: String) async {
        await offThePool {
            let line = Logger.formatLine(
                identifier: "bgtaskd", pid: 42, priority: priority, message: message,
                fields: fields)
            #expect(line == "bgtaskd[42]: " + expected + "\n")
        }
    }

    @Test func streamModeWritesThroughThePipeAndHonoursTheThreshold() async throws {
        try await offThePool { () throws in
            let (readEnd, writeEnd) = try FileDescriptor.pipe()
            defer { try? readEnd.close() }
            let logger = Logger(destination: .stream, threshold: .info, stream: writeEnd)
            #expect(logger.destination == .stream)
            logger.debug("too chatty")
            logger.warning("app killed", [.app("mail"), .reason("memory-reclaim")])
            logger.info("done")
            try writeEnd.close()
            let output = try readToEnd(readEnd)
            #expect(
                output == "bgtaskd[\(getpid())]: warning: app killed (APP=mail REASON=memory-reclaim)\n"
                    + "bgtaskd[\(getpid())]: done\n")
        }
    }

    @Test func automaticPicksTheStreamWhenStderrIsNotTheJournal() async throws {
        try await offThePool { () throws in
            let (readEnd, writeEnd) = try FileDescriptor.pipe()
            defer {
                try? readEnd.close()
                try? writeEnd.close()
            }
            // systemd sets JOURNAL_STREAM to the device:inode of the service's stderr; a pipe of ours is never it.
            #expect(Logger(stream: writeEnd).destination == .stream)
            #expect(Logger(destination: .journal, stream: writeEnd).destination == .journal)
        }
    }

    @Test func journalModeSendsWithoutTouchingTheStream() async throws {
        try await offThePool { () throws in
            let (readEnd, writeEnd) = try FileDescriptor.pipe()
            defer {
                try? readEnd.close()
                try? writeEnd.close()
            }
            try readEnd.setNonBlocking()
            let logger = Logger(identifier: "bgtask-test", destination: .journal, stream: writeEnd)
            logger.notice("journal test", [.app("test"), LogField("lower-case name", "value\nwith newline")])
            // Accepted by journald, or dropped silently where none runs: either way nothing reached the stream,
            // unless sd_journal_sendv refused the message, in which case the line must be there.
            switch Result(catching: { try readEnd.read(upTo: 4096) }) {
            case .success(let bytes):
                #expect(String(decoding: bytes, as: UTF8.self).hasPrefix("bgtask-test[\(getpid())]: journal test"))
            case .failure(let error):
                #expect(error as? Errno == .wouldBlock)
            }
        }
    }
}

@Suite struct UserDatabaseTests {
    @Test func rootAndNobody() async throws {
        try await offThePool { () throws in
            #expect(try UserDatabase.groupID(named: "root") == 0)
            #expect(try UserDatabase.userName(for: 0) == "root")
            #expect(try UserDatabase.isMember(uid: 0, ofGroup: 0))
            let nobody = try #require(try UserDatabase.userName(for: 65534))
            #expect(nobody == "nobody")
            #expect(try !UserDatabase.isMember(uid: 65534, ofGroup: 0))
        }
    }

    @Test func missingEntries() async throws {
        try await offThePool { () throws in
            #expect(try UserDatabase.groupID(named: "bgtask-no-such-group") == nil)
            #expect(try UserDatabase.groupID(named: "") == nil)
            #expect(try UserDatabase.userName(for: 3_999_999_999) == nil)
            #expect(try !UserDatabase.isMember(uid: 3_999_999_999, ofGroup: 0))
        }
    }

    @Test func membershipAgreesWithId() async throws {
        try await offThePool { () throws in
            let (readEnd, writeEnd) = try FileDescriptor.pipe()
            defer { try? readEnd.close() }
            let options = SpawnOptions(standardOutput: .fileDescriptor(writeEnd))
            let output = try withChild(["id", "-G", "root"], options: options) { child in
                try writeEnd.close()
                let text = try readToEnd(readEnd)
                #expect(try child.waitForExit() == .exited(0))
                return text
            }
            let groups = output.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { gid_t($0) }
            #expect(!groups.isEmpty)
            for group in groups {
                #expect(try UserDatabase.isMember(uid: 0, ofGroup: group), "gid \(group)")
            }
        }
    }
}

@Suite struct ServiceNotifierTests {
    @Test func notifiesARealSocketOnlyWhenNotifySocketIsSet() async throws {
        try await offThePool { () throws in
            try #require(getenv("NOTIFY_SOCKET") == nil, "the test runs outside a Type=notify unit")
            let notifier = ServiceNotifier()
            #expect(!notifier.isSupervised)
            #expect(try !notifier.ready())
            #expect(try ServiceNotifier.listenedDescriptors(unsetEnvironment: false).isEmpty)

            try withTemporaryDirectory { directory in
                let path = directory.path + "/notify.sock"
                let socketFD = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
                #expect(socketFD >= 0)
                let receiver = FileDescriptor(rawValue: socketFD)
                defer { try? receiver.close() }
                var address = sockaddr_un()
                address.sun_family = sa_family_t(AF_UNIX)
                withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
                let bound = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(socketFD, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                    }
                }
                #expect(bound == 0)

                // The only environment change in the test suite, undone right after the calls.
                setenv("NOTIFY_SOCKET", path, 1)
                let results = [
                    try notifier.ready(),
                    try notifier.status("3 apps\nREADY=1"),
                    try notifier.stopping(),
                    try notifier.watchdog(),
                    notifier.isSupervised,
                ]
                unsetenv("NOTIFY_SOCKET")
                #expect(results == [true, true, true, true, true])

                var messages: [String] = []
                while messages.count < 4,
                    try !receiver.poll(for: .readable, timeout: .seconds(10)).isEmpty
                {
                    messages.append(String(decoding: try receiver.read(upTo: 4096), as: UTF8.self))
                }
                #expect(messages == ["READY=1", "STATUS=3 apps READY=1", "STOPPING=1", "WATCHDOG=1"])
            }
        }
    }
}
