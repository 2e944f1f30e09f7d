// What bgtaskd sends to the journal, captured on a journal socket of the test's own: every field of the native
// protocol, with the MESSAGE_IDs the man page lists.

import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Glibc
import Synchronization
import Testing

/// A datagram socket standing in for journald's `/run/systemd/journal/socket`, parsing the native protocol
/// (`KEY=value` lines, or `KEY`, a 64-bit little-endian length and the value, for values with newlines).
final class JournalCapture: @unchecked Sendable {
    let directory: ScratchDirectory
    private let socket: FileDescriptor
    private let received = Mutex<[[String: String]]>([])
    private let stopped = Atomic<Bool>(false)
    private var reader: Thread?

    /// Everything received so far.
    var entries: [[String: String]] { received.withLock { $0 } }

    /// Binds the socket and reads it on a thread of its own from now on: a datagram socket holds only a few
    /// unread messages (`net.unix.max_dgram_qlen`, 10 by default, where journald raises it), and a sender finding
    /// it full blocks, so the capture must keep up as journald does.
    init() throws {
        directory = try ScratchDirectory(prefix: "journal")
        socket = try UnixSocket.bindDatagram(path: directory.path + "/socket")
        let thread = Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                guard let ready = try? socket.poll(for: .readable, timeout: .milliseconds(50)), !ready.isEmpty,
                    let datagram = try? socket.read(upTo: 1 << 20)
                else { continue }
                let entry = Self.parse(datagram)
                received.withLock { $0.append(entry) }
            }
        }
        reader = thread
        thread.start()
    }

    /// Stops reading (the thread ends within 50 ms).
    func stop() {
        stopped.store(true, ordering: .relaxed)
    }

    deinit { stop() }

    /// Waits at most `timeout` for `condition` to hold of the entries received.
    func wait(for what: String, timeout: Duration = .seconds(20), _ condition: ([[String: String]]) -> Bool) throws {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while !condition(entries) {
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("no \(what) in the journal; got \(entries)")
            }
            usleep(10_000)
        }
    }

    static func parse(_ datagram: [UInt8]) -> [String: String] {
        var fields: [String: String] = [:]
        var index = 0
        while index < datagram.count {
            let lineEnd = datagram[index...].firstIndex(of: UInt8(ascii: "\n")) ?? datagram.count
            let line = datagram[index..<lineEnd]
            if let equals = line.firstIndex(of: UInt8(ascii: "=")) {
                fields[String(decoding: line[..<equals], as: UTF8.self)] = String(
                    decoding: line[(equals + 1)...], as: UTF8.self)
                index = lineEnd + 1
            } else {
                // KEY\n, then the value's length (8 bytes, little endian), the value and a newline.
                let key = String(decoding: line, as: UTF8.self)
                let lengthStart = lineEnd + 1
                guard lengthStart + 8 <= datagram.count else { break }
                let length = datagram[lengthStart..<lengthStart + 8].reversed().reduce(0) { $0 << 8 | Int($1) }
                let valueStart = lengthStart + 8
                guard valueStart + length <= datagram.count else { break }
                fields[key] = String(decoding: datagram[valueStart..<valueStart + length], as: UTF8.self)
                index = valueStart + length + 1
            }
        }
        return fields
    }
}

@Suite("Journal fields")
struct JournalTests {
    /// Runs the daemon in a private mount namespace whose `/run/systemd/journal` is the capture's directory, so
    /// libsystemd's fixed socket path reaches the test.
    static func launchPrefix(_ capture: JournalCapture) -> [String] {
        [
            "unshare", "--mount", "sh", "-c",
            "mount --make-rprivate / && mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal "
                + "&& mount --bind \"$1\" /run/systemd/journal && shift && exec \"$@\"",
            "sh", capture.directory.path,
        ]
    }

    @Test(
        "registration, expiration warning, task expiry, termination and kill carry their MESSAGE_IDs and fields",
        .requires(.root(for: "a private mount namespace")))
    func fields() async throws {
        try await offThePool {
            let capture = try JournalCapture()
            let daemon = try DaemonHarness(
                launchPrefix: Self.launchPrefix(capture), standardErrorIsJournalStream: true)
            defer {
                _ = try? daemon.stop()
                capture.stop()
            }
            let app = try pythonApp(daemon, name: "journaled", acknowledge: true)
            defer { app.terminate() }
            try app.send("begin upload")
            _ = try app.waitForLine(startingWith: "began")
            let control = try daemon.connect()
            #expect(try control.lifecycle("SetState", ["app": "journaled", "state": "background"]).errorName == nil)
            // The fast policy: the warning after about 0.9 s, the expiry at 1.5 s, SIGKILL 0.5 s later.
            try capture.wait(for: "the kill") { entries in
                entries.contains { $0["MESSAGE_ID"] == "a2478b7e6b4049baaa2fb132f7882cd2" }
            }
            func entry(_ id: String) -> [String: String]? {
                capture.entries.first { $0["MESSAGE_ID"] == id && $0["BGTASK_APP"] == "journaled" }
            }
            let registered = try #require(entry("e2447215fdee45da9a26e1f3dcce598d"), "\(capture.entries)")
            #expect(registered["PRIORITY"] == "6")
            #expect(registered["SYSLOG_IDENTIFIER"] == "bgtaskd")
            #expect(registered["MESSAGE"] == "journaled registered")
            let warning = try #require(entry("19a38df8fa13415988d0612acc980932"))
            #expect(warning["PRIORITY"] == "5")
            let expired = try #require(entry("962703a73a624a5d8fed129fa46b667b"))
            #expect(expired["BGTASK_TASK"] == "1")
            #expect(expired["PRIORITY"] == "4")
            let terminated = try #require(entry("e988254e4d8f4f88bfb51e5f7384e969"))
            #expect(terminated["BGTASK_REASON"] == "task-expired")
            let killed = try #require(entry("a2478b7e6b4049baaa2fb132f7882cd2"))
            #expect(killed["BGTASK_REASON"] == "task-expired")
            #expect(killed["MESSAGE"] == "killed journaled with SIGKILL (task-expired)")
            // Nothing went to standard error: the daemon chose the journal.
            #expect(!daemon.log.contains("journaled registered"), "\(daemon.log)")
        }
    }
}
