// Shared pieces of the hostile-client tests: the flooding fixture as another user, pipelined calls, suspended apps.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// The heavy hostile-client suites (floods of megabytes or tens of thousands of calls, apps holding memory), run
/// one at a time so that two of them never load the shared two-CPU machine together. Light suites run beside them.
@Suite("Hostile clients (heavy, one at a time)", .serialized)
struct HeavyHostileClientTests {}

/// The uid of `nobody`, the unprivileged peer of these tests.
let nobodyUID: UInt32 = 65534

/// A daemon configuration: the default policy (600 s of background time, so nothing expires during a test) plus
/// `limits`, lines of `[Limits]`.
func configuration(limits: [String] = []) -> String {
    (["[Limits]"] + limits).joined(separator: "\n") + "\n"
}

/// The hostile fixture, run as `user` against `daemon` in `mode` with `arguments`; it ends by itself after
/// `lifetimeSeconds`.
func hostileClient(
    as user: ForeignUser, _ daemon: DaemonHarness, _ mode: String, _ arguments: [String], lifetimeSeconds: Int = 60
) throws -> ChildProcess {
    try user.spawn(
        "BGTaskHostileClient",
        [mode, "--socket", daemon.socketPath, "--lifetime", String(lifetimeSeconds)] + arguments)
}

/// `nobody`, able to run the hostile fixture.
func nobodyWithHostileClient() throws -> ForeignUser {
    try ForeignUser.nobody(executables: ["BGTaskHostileClient"])
}

/// The numbers in a fixture line such as `answered 20 closed 10 failed 0`, by the word before each.
func numbers(in line: String) -> [String: Int] {
    let words = line.split(separator: " ")
    var result: [String: Int] = [:]
    for (word, next) in zip(words, words.dropFirst()) {
        if let value = Int(next) { result[String(word)] = value }
    }
    return result
}

/// One NUL-terminated Varlink call.
func callBytes(_ method: String, _ parameters: [String: JSONValue] = [:]) throws -> [UInt8] {
    let call: JSONValue = ["method": .string(method), "parameters": .object(parameters)]
    return Array(try JSONEncoder().encode(call)) + [0]
}

extension RawVarlinkClient {

    /// Waits until `GetApp(name)` reports `state`, re-asking every 5 ms for at most `timeout`.
    func waitForState(_ state: String, of name: String, timeout: Duration = .seconds(15)) throws {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        var seen = try app(name)["state"]
        while seen != .string(state) {
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("\(name) is \(String(describing: seen)), not \(state), after \(timeout)")
            }
            sleepQuietly(for: .milliseconds(5))
            seen = try app(name)["state"]
        }
    }
}

/// Starts the Python app fixture in background; it acknowledges `didEnterBackground` at once and holds no lease,
/// so the daemon suspends it (SIGSTOP). Returns once `GetApp` says `suspended`.
func startSuspendedApp(_ daemon: DaemonHarness, name: String, control: RawVarlinkClient) throws -> ChildProcess {
    let app = try daemon.startPythonApp(name: name, background: true)
    try control.waitForState("suspended", of: name)
    return app
}

/// A connection from the test process that writes many calls without waiting for their replies (pipelining), then
/// reads the replies: the daemon must stop reading while replies go unread, lose nothing, and keep their order.
final class PipelinedCalls {
    /// The connected socket, non-blocking.
    let descriptor: FileDescriptor
    private let bytes: [UInt8]
    private var sentBytes = 0
    /// Calls sent whole (their NUL included): the daemon owes a reply to each.
    private(set) var callsSent = 0
    /// Every reply read so far, in order.
    private(set) var replies: [[String: JSONValue]] = []
    /// Whether the daemon closed the connection (end of file or reset).
    private(set) var isClosedByServer = false
    private var decoder = VarlinkFrameDecoder(maximumMessageSize: 16 << 20)
    private let jsonDecoder = JSONDecoder()
    private var isClosed = false

    /// Connects to `daemon` with `calls` (each NUL-terminated) ready to send.
    init(_ daemon: DaemonHarness, calls: [[UInt8]]) throws {
        bytes = Array(calls.joined())
        descriptor = try UnixSocket.connect(path: daemon.socketPath)
        try descriptor.setNonBlocking()
    }

    /// Whether every call was sent.
    var isEverythingSent: Bool { sentBytes == bytes.count }
    /// Whether the writing half was shut down: nothing more may be sent (a send would fail with EPIPE, which is
    /// not the daemon closing).
    private(set) var isWritingFinished = false

    /// Writes without reading until every call is sent, or the daemon takes nothing for `patience` (it stopped
    /// reading, as it must while replies go unread); returns whether it stalled.
    func writeUntilStalled(patience: Duration = .seconds(1)) throws -> Bool {
        while !isEverythingSent {
            guard try descriptor.poll(for: .writable, timeout: patience).contains(.writable) else { return true }
            try writeSome()
            if isClosedByServer { return false }
        }
        return false
    }

    /// Ends the writing half (`shutdown(SHUT_WR)`): the daemon reads end of file after the calls sent.
    func finishWriting() throws {
        try UnixSocket.shutdown(descriptor, .write)
        isWritingFinished = true
    }

    /// Reads replies, and sends the rest of the calls as the daemon takes them, until `count` replies arrived, the
    /// daemon closed the connection, or `timeout` passed.
    func exchange(untilReplies count: Int, timeout: Duration = .seconds(30)) throws {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while replies.count < count && !isClosedByServer {
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else { return }
            let isWriting = !isEverythingSent && !isWritingFinished
            let wanted: IOEvents = isWriting ? [.readable, .writable] : .readable
            let ready = try descriptor.poll(for: wanted, timeout: .nanoseconds(remaining))
            if ready.contains(.writable) && isWriting { try writeSome() }
            if !ready.intersection([.readable, .hangUp, .error]).isEmpty { try readSome() }
        }
    }

    /// Reads (sending nothing more) until the daemon closes the connection or `timeout` passes; returns whether
    /// it closed.
    func readToEnd(timeout: Duration = .seconds(10)) throws -> Bool {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while !isClosedByServer {
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else { return false }
            if try !descriptor.poll(for: .readable, timeout: .nanoseconds(remaining)).isEmpty { try readSome() }
        }
        return true
    }

    private func writeSome() throws {
        switch send(bytes[sentBytes...], on: descriptor) {
        case .transferred(let count):
            callsSent += bytes[sentBytes..<(sentBytes + count)].lazy.filter { $0 == 0 }.count
            sentBytes += count
        case .wouldBlock:
            return
        case .closed:
            isClosedByServer = true
        }
    }

    private func readSome() throws {
        switch receive(on: descriptor) {
        case .received(let chunk):
            decoder.append(contentsOf: chunk)
            while let message = try decoder.nextMessage() {
                guard case .object(let reply) = try jsonDecoder.decode(JSONValue.self, from: Data(message)) else {
                    throw HarnessError("reply is not an object: \(String(decoding: message, as: UTF8.self))")
                }
                replies.append(reply)
            }
        case .wouldBlock:
            return
        case .closed:
            isClosedByServer = true
        }
    }

    /// Closes the connection.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        try? descriptor.close()
    }

    deinit { close() }
}

/// `GetApp` calls for apps nobody registered, `p0`, `p1`, ...: each is answered `NoSuchApp` naming its app, so
/// the replies show their order.
func unknownAppCalls(_ count: Int) throws -> [[UInt8]] {
    try (0..<count).map { try callBytes("io.bgtask.Lifecycle.GetApp", ["app": .string("p\($0)")]) }
}

/// The index of the first reply that is not `NoSuchApp` for `p<index>`, or nil when all are in order.
func firstReplyOutOfOrder(_ replies: [[String: JSONValue]]) -> Int? {
    replies.indices.first {
        replies[$0].errorName != "io.bgtask.Lifecycle.NoSuchApp" || replies[$0].parameters["app"] != .string("p\($0)")
    }
}

/// The outcome of one non-blocking send.
enum SendOutcome {
    /// The socket took this many bytes.
    case transferred(Int)
    /// The socket is full.
    case wouldBlock
    /// The peer closed the connection (`EPIPE`, `ECONNRESET`), or the send failed otherwise.
    case closed
}

/// The outcome of one non-blocking read.
enum ReceiveOutcome {
    /// These bytes arrived (never empty).
    case received([UInt8])
    /// Nothing is there yet.
    case wouldBlock
    /// End of file or a reset: the peer closed the connection.
    case closed
}

/// Sends what the socket takes of `bytes` now.
func send(_ bytes: ArraySlice<UInt8>, on socket: FileDescriptor) -> SendOutcome {
    bytes.withUnsafeBytes { buffer in
        do {
            return .transferred(try socket.send(buffer))
        } catch {
            return (error as? Errno) == .wouldBlock ? .wouldBlock : .closed
        }
    }
}

/// Reads what is there, at most 64 KiB.
func receive(on socket: FileDescriptor) -> ReceiveOutcome {
    do {
        let chunk = try socket.read(upTo: 1 << 16)
        return chunk.isEmpty ? .closed : .received(chunk)
    } catch {
        return error == .wouldBlock ? .wouldBlock : .closed
    }
}
