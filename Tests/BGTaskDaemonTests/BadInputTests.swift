// Hostile clients: garbage, oversized and malformed messages, connection floods, clients that never read.
// After each, the daemon must be alive, serve a fresh client normally, and hold no descriptor more than before.

import BGTaskCore
import BGTaskDaemon
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// What the daemon must do with a hostile message.
enum HostileOutcome: Sendable, Equatable {
    /// Close the connection (framing or protocol error).
    case closed
    /// Answer with this Varlink error and keep serving the connection.
    case error(String)
}

struct HostileRow: Sendable, CustomTestStringConvertible {
    var label: String
    var bytes: [UInt8]
    var outcome: HostileOutcome
    var testDescription: String { label }
}

private func call(_ json: String) -> [UInt8] { Array(json.utf8) + [0] }

private let hostileRows: [HostileRow] = {
    var random = SeededGenerator(seed: 0xBAD_1DEA)
    // No NUL inside: one message, answered once.
    let garbage = (0..<4096).map { _ in UInt8.random(in: 1...255, using: &random) }
    let big = String(repeating: "a", count: 1 << 20)
    let lifecycle = "io.bgtask.Lifecycle."
    // Not a well-formed call, but framed: answered, and the connection keeps serving.
    let invalid = HostileOutcome.error("io.bgtask.Lifecycle.InvalidMessage")
    return [
        HostileRow(label: "4 KiB of random bytes", bytes: garbage + [0], outcome: invalid),
        HostileRow(label: "1 MiB without a terminator", bytes: Array(big.utf8), outcome: .closed),
        HostileRow(
            label: "a 1 MiB message", bytes: call(#"{"method":"\#(lifecycle)GetStatus","parameters":{"p":"\#(big)"}}"#),
            outcome: .closed),
        HostileRow(
            label: "invalid UTF-8",
            bytes: Array(#"{"method":"\#(lifecycle)GetStatus","parameters":{"x":""#.utf8) + [0xFF, 0xFE, 0xC0]
                + Array(#""}}"#.utf8) + [0],
            outcome: invalid),
        HostileRow(label: "unterminated JSON", bytes: call(#"{"method":"\#(lifecycle)GetStatus""#), outcome: invalid),
        HostileRow(label: "an empty message", bytes: [0], outcome: invalid),
        HostileRow(label: "a JSON array, not an object", bytes: call("[1,2,3]"), outcome: invalid),
        HostileRow(label: "no method", bytes: call(#"{"parameters":{}}"#), outcome: invalid),
        HostileRow(label: "a method that is not a string", bytes: call(#"{"method":7}"#), outcome: invalid),
        HostileRow(
            label: "more of the wrong type", bytes: call(#"{"method":"\#(lifecycle)GetStatus","more":"yes"}"#),
            outcome: invalid),
        HostileRow(
            label: "deeply nested arrays", bytes: call(String(repeating: "[", count: 30_000)), outcome: invalid),
        HostileRow(
            label: "an unknown method", bytes: call(#"{"method":"\#(lifecycle)Frobnicate"}"#),
            outcome: .error("org.varlink.service.MethodNotFound")),
        HostileRow(
            label: "an unknown interface", bytes: call(#"{"method":"org.example.Nope.Call"}"#),
            outcome: .error("org.varlink.service.InterfaceNotFound")),
        HostileRow(
            label: "app given as a number",
            bytes: call(#"{"method":"\#(lifecycle)BeginBackgroundTask","parameters":{"app":42}}"#),
            outcome: .error("org.varlink.service.InvalidParameter")),
        HostileRow(
            label: "taskId given as a string",
            bytes: call(#"{"method":"\#(lifecycle)EndBackgroundTask","parameters":{"app":"a","taskId":"x"}}"#),
            outcome: .error("org.varlink.service.InvalidParameter")),
        HostileRow(
            label: "an unknown state word",
            bytes: call(#"{"method":"\#(lifecycle)SetState","parameters":{"app":"a","state":"bogus"}}"#),
            outcome: .error("org.varlink.service.InvalidParameter")),
        HostileRow(
            label: "SetState of an app nobody registered",
            bytes: call(#"{"method":"\#(lifecycle)SetState","parameters":{"app":"a","state":"suspended"}}"#),
            outcome: .error("io.bgtask.Lifecycle.NoSuchApp")),
        HostileRow(
            label: "a payload that is not an object",
            bytes: call(#"{"method":"\#(lifecycle)Post","parameters":{"name":"n","payload":"text"}}"#),
            outcome: .error("org.varlink.service.InvalidParameter")),
        HostileRow(
            label: "a negative history limit",
            bytes: call(#"{"method":"\#(lifecycle)History","parameters":{"limit":-1}}"#),
            outcome: .error("org.varlink.service.InvalidParameter")),
        HostileRow(
            label: "Register without more",
            bytes: call(#"{"method":"\#(lifecycle)Register","parameters":{"name":"x"}}"#),
            outcome: .error("org.varlink.service.ExpectedMore")),
        HostileRow(
            label: "an app name with control characters",
            bytes: call(#"{"method":"\#(lifecycle)Register","parameters":{"name":"a\u0007b"},"more":true}"#),
            outcome: .error("org.varlink.service.InvalidParameter")),
        HostileRow(
            label: "an unsupported upgrade",
            bytes: call(#"{"method":"\#(lifecycle)GetStatus","upgrade":true}"#),
            outcome: .error("org.varlink.service.MethodNotImplemented")),
    ]
}()

@Suite("Bad input")
struct BadInputTests {
    /// A fresh daemon per case, so a failure cannot leak into the next one.
    private func requireDaemon() throws -> DaemonHarness {
        try DaemonHarness()
    }

    /// The daemon answers a fresh client normally.
    private func expectHealthy(_ daemon: DaemonHarness) throws {
        #expect(daemon.isRunning)
        let client = try daemon.connect()
        let info = try client.call("org.varlink.service.GetInfo")
        #expect(info.parameters["product"] == "bgtaskd")
        let status = try client.lifecycle("GetStatus")
        #expect(status.parameters["version"] == .string(Manager.version))
    }

    @Test("hostile message", arguments: hostileRows)
    func hostileMessage(row: HostileRow) async throws {
        try await offThePool {
            let daemon = try requireDaemon()
            let baseline = try daemon.waitForDescriptorCount(atMost: .max)
            do {
                let client = try daemon.connect()
                var sendFailure: Errno?
                do {
                    try client.sendRaw(row.bytes)
                } catch let error as Errno where error == Errno(rawValue: EPIPE) || error == .connectionReset {
                    // The daemon closed the connection before taking the whole message: what `.closed` asks for.
                    sendFailure = error
                }
                if let sendFailure { #expect(row.outcome == .closed, "send failed: \(sendFailure)") }
                switch row.outcome {
                case .closed:
                    #expect(try client.isClosedByServer(), "the daemon kept the connection open")
                case .error(let name):
                    let reply = try #require(try client.receive(), "the daemon closed the connection")
                    #expect(reply.errorName == name)
                    // The connection still serves calls after a typed error.
                    let again = try client.call("org.varlink.service.GetInfo")
                    #expect(again.errorName == nil)
                }
            }
            try expectHealthy(daemon)
            #expect(try daemon.waitForDescriptorCount(atMost: baseline) <= baseline)
        }
    }

    @Test("500 connections opened and dropped")
    func connectionFlood() async throws {
        try await offThePool {
            let daemon = try requireDaemon()
            let baseline = try daemon.waitForDescriptorCount(atMost: .max)
            var clients: [RawVarlinkClient] = []
            for _ in 0..<500 { clients.append(try daemon.connect()) }
            // Beyond ConnectionsPerUserMax (256) the daemon closes at once; the ones it kept still answer.
            let answered = try clients.prefix(5).map { try $0.call("org.varlink.service.GetInfo").errorName == nil }
            #expect(answered == [true, true, true, true, true])
            #expect(try clients.last?.isClosedByServer() == true)
            clients.removeAll()
            try expectHealthy(daemon)
            #expect(try daemon.waitForDescriptorCount(atMost: baseline) <= baseline)
            #expect(daemon.log.contains("ConnectionsPerUserMax=256 reached"))
        }
    }

    @Test("a client that never reads its event stream is disconnected; the daemon never blocks")
    func clientThatNeverReads() async throws {
        try await offThePool {
            let daemon = try requireDaemon()
            let baseline = try daemon.waitForDescriptorCount(atMost: .max)
            // A separate process, so that once it is gone the daemon has nothing of it left to track: it registers,
            // reads the first reply, and then never reads again.
            let stalled = try ChildProcess([
                "python3", "-c",
                """
                import socket, sys, time
                s = socket.socket(socket.AF_UNIX)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect(sys.argv[1])
                s.sendall(b'{"method":"io.bgtask.Lifecycle.Register","parameters":{"name":"stalled"},"more":true}\\0')
                first = b""
                while not first.endswith(b"\\0"):
                    first += s.recv(1)
                print("registered", flush=True)
                time.sleep(60)
                """,
                daemon.socketPath,
            ])
            try stalled.waitForLine(startingWith: "registered")
            let control = try daemon.connect()
            // Just under PostPayloadSizeMax (4 KiB).
            let payload: [String: JSONValue] = ["blob": .string(String(repeating: "x", count: 4_000))]
            var posts = 0
            // Each post answers promptly however full the stalled client's buffers are.
            while try control.app("stalled")["state"] != "notRunning" && posts < 2_000 {
                let reply = try control.lifecycle(
                    "Post", ["name": "flood", "payload": .object(payload), "app": "stalled"])
                #expect(reply.errorName == nil, "\(reply)")
                if reply.errorName != nil { break }
                posts += 1
            }
            #expect(posts < 2_000, "the stalled client was never disconnected")
            #expect(try control.app("stalled")["state"] == "notRunning")
            #expect(daemon.log.contains("is not reading"))
            stalled.terminate()
            control.close()
            try expectHealthy(daemon)
            #expect(try daemon.waitForDescriptorCount(atMost: baseline) <= baseline)
        }
    }
}
