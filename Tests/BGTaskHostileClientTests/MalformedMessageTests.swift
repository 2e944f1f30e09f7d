// Malformed and oversized messages: a typed InvalidMessage error on a connection that stays usable, or, for a
// message past MessageSizeMax (a framing error), a closed connection.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Testing

/// A message that is not a well-formed call, with a label for failure messages.
struct MalformedMessage: Sendable {
    var label: String
    var bytes: [UInt8]
}

private func message(_ text: String) -> [UInt8] { Array(text.utf8) + [0] }

/// Every way a message can fail to be a call, short of its framing. Each must be answered with
/// `io.bgtask.Lifecycle.InvalidMessage`.
private let malformedMessageCases: [MalformedMessage] = [
    MalformedMessage(label: "invalid JSON", bytes: message(#"{"method":"org.varlink.service.GetInfo""#)),
    MalformedMessage(label: "an empty message", bytes: [0]),
    MalformedMessage(
        label: "invalid UTF-8",
        bytes: Array(#"{"method":"org.varlink.service.GetInfo","parameters":{"x":""#.utf8) + [0xFF, 0xFE, 0xC0]
            + Array(#""}}"#.utf8) + [0]),
    MalformedMessage(label: "a JSON array, not an object", bytes: message("[1,2,3]")),
    MalformedMessage(label: "a JSON string, not an object", bytes: message(#""org.varlink.service.GetInfo""#)),
    MalformedMessage(label: "no method", bytes: message(#"{"parameters":{}}"#)),
    MalformedMessage(label: "a method with no interface", bytes: message(#"{"method":"GetInfo"}"#)),
    MalformedMessage(
        label: "a method name in lower case", bytes: message(#"{"method":"org.varlink.service.getInfo"}"#)),
    MalformedMessage(label: "a method that is a number", bytes: message(#"{"method":42}"#)),
    MalformedMessage(
        label: "more given as a string", bytes: message(#"{"method":"org.varlink.service.GetInfo","more":"yes"}"#)),
    MalformedMessage(
        label: "parameters given as an array",
        bytes: message(#"{"method":"org.varlink.service.GetInfo","parameters":[1]}"#)),
    MalformedMessage(
        label: "JSON nested 10,000 deep (40 KiB, under MessageSizeMax)",
        bytes: message(
            #"{"method":"org.varlink.service.GetInfo","parameters":{"x":"#
                + String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000) + "}}")),
]

@Suite("Malformed and oversized messages")
struct MalformedMessageTests {
    @Test("a message that is not a well-formed call is answered InvalidMessage; the connection stays usable")
    func malformedMessages() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: configuration())
            let vitals = try DaemonVitals(daemon)
            // One connection per kind of message, all kept open until the vitals are taken.
            var clients: [RawVarlinkClient] = []
            defer { clients.forEach { $0.close() } }
            for malformed in malformedMessageCases {
                let client = try daemon.connect()
                clients.append(client)
                try client.sendRaw(malformed.bytes)
                guard let reply = try client.receive() else {
                    Issue.record("\(malformed.label): the daemon closed the connection instead of answering")
                    continue
                }
                #expect(reply.errorName == "io.bgtask.Lifecycle.InvalidMessage", "\(malformed.label): \(reply)")
                #expect(
                    reply.parameters["reason"]?.stringValue?.isEmpty == false, "\(malformed.label): no reason: \(reply)"
                )
                // The same connection still serves calls.
                let info = try client.call("org.varlink.service.GetInfo")
                #expect(info.parameters["product"] == "bgtaskd", "\(malformed.label), then GetInfo: \(info)")
            }
            try vitals.expectWithstood(
                rssGrowthBelow: 8 << 20, while: "\(clients.count) clients that sent malformed messages idle",
                release: {
                    clients.forEach { $0.close() }
                    clients.removeAll()
                })
        }
    }

    /// Sends `bytes` and returns whether the daemon closed the connection (the send failing because it already
    /// did counts).
    private func isClosedAfterSending(_ bytes: [UInt8], on client: RawVarlinkClient) throws -> Bool {
        do {
            try client.sendRaw(bytes)
        } catch let error as Errno where error == .brokenPipe || error == .connectionReset {
            return true
        }
        return try client.isClosedByServer()
    }

    @Test("a message past MessageSizeMax, or 1 MiB with no NUL, closes the connection; one just under is answered")
    func framingLimits() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: configuration(limits: ["MessageSizeMax=64K"]))
            let vitals = try DaemonVitals(daemon)
            let oversized = try daemon.connect()
            defer { oversized.close() }
            let pastLimit = String(repeating: "x", count: (64 << 10) + 1024)
            let tooLong = message(#"{"method":"org.varlink.service.GetInfo","parameters":{"pad":"\#(pastLimit)"}}"#)
            #expect(try isClosedAfterSending(tooLong, on: oversized), "a \(tooLong.count)-byte message was not refused")
            let unterminated = try daemon.connect()
            defer { unterminated.close() }
            let noNUL = [UInt8](repeating: UInt8(ascii: "{"), count: 1 << 20)
            #expect(try isClosedAfterSending(noNUL, on: unterminated), "1 MiB with no NUL was not refused")
            let largest = try daemon.connect()
            defer { largest.close() }
            let underLimit = String(repeating: "x", count: 60 << 10)
            try largest.sendRaw(
                message(#"{"method":"org.varlink.service.GetInfo","parameters":{"pad":"\#(underLimit)"}}"#))
            // Whether an unknown parameter is ignored or refused as InvalidParameter, the call gets a reply.
            let reply = try #require(try largest.receive(), "the daemon closed the connection on a 60 KiB message")
            #expect(reply.errorName == nil || reply.errorName == "org.varlink.service.InvalidParameter", "\(reply)")
            #expect(try largest.call("org.varlink.service.GetInfo").errorName == nil)
            try vitals.expectWithstood(
                rssGrowthBelow: 8 << 20, while: "the refused clients and the largest message's client idle",
                release: {
                    for client in [oversized, unterminated, largest] { client.close() }
                })
        }
    }
}
