// Errno descriptions from real failing calls, and the Signal spelling table.
import BGTaskPOSIX
import Glibc
import Testing

@Suite struct ErrnoTests {
    @Test func descriptionNamesTheCallAndUsesTheLibcMessage() {
        let error = Errno(rawValue: ENOENT, operation: "connect(/run/x.sock)")
        #expect(error.description == "connect(/run/x.sock): " + String(cString: strerror(ENOENT)))
        #expect(Errno(rawValue: EACCES).description == String(cString: strerror(EACCES)))
    }

    @Test func equalityIgnoresTheOperation() {
        #expect(Errno(rawValue: EAGAIN, operation: "read(fd 3)") == .wouldBlock)
        #expect(Errno(rawValue: EAGAIN, operation: "read(fd 3)") != .noSuchFileOrDirectory)
        #expect(Set([Errno(rawValue: EIO, operation: "a"), Errno(rawValue: EIO, operation: "b")]).count == 1)
    }

    @Test func realOpenFailureIsTypedAndNamesThePath() throws {
        try withTemporaryDirectory { directory in
            let missing = directory.path + "/missing"
            let error = #expect(throws: Errno.self) { try FileDescriptor.open(missing, .readOnly) }
            #expect(error == .noSuchFileOrDirectory)
            #expect(error?.description == "open(\(missing)): " + String(cString: strerror(ENOENT)))
        }
    }

    @Test func patternMatchingInCatchClauses() throws {
        let (readEnd, writeEnd) = try FileDescriptor.pipe()
        defer {
            try? readEnd.close()
            try? writeEnd.close()
        }
        try readEnd.setNonBlocking()
        let matched: Bool
        do {
            _ = try readEnd.read(upTo: 16)
            matched = false
        } catch Errno.wouldBlock {
            matched = true
        }
        #expect(matched)
    }

    @Test func connectToMissingSocketDescribesTheCall() throws {
        try withTemporaryDirectory { directory in
            let path = directory.path + "/nobody.sock"
            let error = #expect(throws: Errno.self) { try UnixSocket.connect(path: path) }
            #expect(error == .noSuchFileOrDirectory)
            #expect(error?.description.hasPrefix("connect(\(path)): ") == true)
        }
    }
}

@Suite struct SignalTests {
    static let spellings: [(String, Int32?)] = [
        ("TERM", SIGTERM), ("SIGTERM", SIGTERM), ("15", SIGTERM), ("sigterm", SIGTERM), ("term", SIGTERM),
        ("KILL", SIGKILL), ("9", SIGKILL), ("SIGSTOP", SIGSTOP), ("CONT", SIGCONT), ("HUP", SIGHUP),
        ("USR1", SIGUSR1), ("SIGUSR2", SIGUSR2), ("IOT", SIGABRT), ("CLD", SIGCHLD), ("64", 64), ("1", 1),
        ("RTMIN", __libc_current_sigrtmin()), ("SIGRTMIN+2", __libc_current_sigrtmin() + 2),
        // Hostile or wrong spellings.
        ("", nil), ("SIG", nil), ("0", nil), ("65", nil), ("-15", nil), ("1.5", nil), (" TERM", nil),
        ("TERM ", nil), ("TERMX", nil), ("SIGSIGTERM", nil), ("RTMIN+99", nil), ("RTMIN+", nil),
        ("RTMIN+-1", nil), ("99999999999999999999", nil), ("SIG15", nil), ("TE\u{7f}RM", nil),
    ]

    @Test(arguments: spellings)
    func parses(text: String, expected: Int32?) {
        #expect(Signal(text)?.rawValue == expected, "parsing \(text.debugDescription)")
    }

    @Test func everyNameParsesBackToItsNumber() throws {
        for number in Int32(1)...64 {
            let signal = try #require(Signal(rawValue: number))
            if signal.name.hasPrefix("SIG"), let parsed = Signal(signal.name) {
                #expect(parsed == signal, "\(signal.name)")
            } else {
                // Only glibc's internal signals 32 and 33 have no parseable name.
                #expect(number < __libc_current_sigrtmin(), "\(signal.name)")
            }
        }
        #expect(Signal.terminate.name == "SIGTERM")
        #expect(Signal(rawValue: 0) == nil)
        #expect(Signal(rawValue: 65) == nil)
    }

    @Test func blockingIsPerThreadAndReversible() throws {
        let wasBlocked = try Signal.isBlocked(.user2)
        try Signal.block([.user2])
        #expect(try Signal.isBlocked(.user2))
        if !wasBlocked {
            try Signal.unblock([.user2])
            #expect(try !Signal.isBlocked(.user2))
        }
    }
}
