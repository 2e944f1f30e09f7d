// Floods after a streaming call: bytes with no NUL sent on a Watch or Register stream must not be buffered.

import BGTaskPOSIX
import BGTaskTestSupport
import Testing

extension HeavyHostileClientTests {
    @Suite("Floods after a streaming call")
    struct StreamingFloodTests {
        /// What a streaming connection may make the daemon read before it closes it: MessageSizeMax of unprocessed
        /// input plus one read and the kernel's socket buffers, with a wide margin.
        static let closedWithin = 2 << 20
        static let floodBytes = 64 << 20

        @Test(
            "after a streaming call, input with no NUL closes the connection once past MessageSizeMax",
            arguments: ["watch", "register"])
        func floodAfterStreamingCall(call: String) async throws {
            try await offThePool {
                let daemon = try DaemonHarness(configuration: configuration())
                let vitals = try DaemonVitals(daemon)
                let nobody = try nobodyWithHostileClient()
                let flooder = try hostileClient(
                    as: nobody, daemon, "stream-flood",
                    ["--stream", call, "--bytes", String(Self.floodBytes), "--prefix", "flooder"])
                defer { flooder.terminate() }
                let outcome = try flooder.waitForLine(startingWith: "sent", timeout: .seconds(60))
                let sent = numbers(in: outcome)["sent"] ?? -1
                #expect(outcome.hasSuffix("closed"), "\(call) stream: \(outcome) of \(Self.floodBytes) bytes")
                #expect(
                    sent < Self.closedWithin, "the daemon took \(mebibytes(sent)) before closing the \(call) stream")
                try vitals.expectWithstood(
                    rssGrowthBelow: 16 << 20, while: "a \(call) stream's flooder waits",
                    release: {
                        flooder.closeInput()
                        _ = try flooder.waitForExit()
                    })
            }
        }
    }
}
