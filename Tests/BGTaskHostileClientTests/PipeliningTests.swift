// Pipelining floods: calls written without reading replies, from the test process and from another uid.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Testing

extension HeavyHostileClientTests {
    @Suite("Pipelining floods")
    struct PipeliningTests {
        static let floodCalls = 20_000

        @Test("20,000 calls written without reading: the daemon stops reading, stays bounded, and loses nothing")
        func pipelinedFlood() async throws {
            try await offThePool {
                let daemon = try DaemonHarness(configuration: configuration())
                let vitals = try DaemonVitals(daemon)
                let flood = try PipelinedCalls(daemon, calls: try unknownAppCalls(Self.floodCalls))
                defer { flood.close() }
                let stalled = try flood.writeUntilStalled()
                #expect(
                    stalled,
                    Comment(
                        rawValue: "the daemon read all \(Self.floodCalls) calls though their replies went unread "
                            + "(\(flood.callsSent) sent)"))
                try vitals.expectNoSpin(while: "the flooder waits with \(flood.callsSent) calls sent and no reply read")
                try vitals.expectResidentGrowth(below: 32 << 20)
                try vitals.expectNormalLatency()
                try flood.exchange(untilReplies: Self.floodCalls, timeout: .seconds(60))
                #expect(flood.replies.count == Self.floodCalls, "closed by the daemon: \(flood.isClosedByServer)")
                #expect(firstReplyOutOfOrder(flood.replies) == nil, "replies out of order from this index on")
                flood.close()
                try vitals.expectDescriptorsReturned()
            }
        }

        @Test("a half-closed client whose reads are paused: no spin; every reply, then end of file")
        func halfClosedWhileReadsArePaused() async throws {
            try await offThePool {
                let daemon = try DaemonHarness(configuration: configuration())
                let vitals = try DaemonVitals(daemon)
                let flood = try PipelinedCalls(daemon, calls: try unknownAppCalls(Self.floodCalls))
                defer { flood.close() }
                #expect(try flood.writeUntilStalled(), "the daemon never paused its reads")
                try flood.finishWriting()
                let owed = flood.callsSent
                try vitals.expectNoSpin(while: "a half-closed client with \(owed) calls sent waits without reading")
                try vitals.expectResidentGrowth(below: 32 << 20)
                try vitals.expectNormalLatency()
                try flood.exchange(untilReplies: owed, timeout: .seconds(60))
                #expect(flood.replies.count == owed, "\(flood.replies.count) replies to \(owed) calls")
                #expect(firstReplyOutOfOrder(flood.replies) == nil, "replies out of order from this index on")
                #expect(try flood.readToEnd(), "no end of file after the last reply")
                #expect(
                    flood.replies.count == owed,
                    "\(flood.replies.count) replies in all to \(owed) calls, end of file included")
                flood.close()
                try vitals.expectDescriptorsReturned()
            }
        }

        @Test("pipelined GetStatus from nobody with apps holding memory does not stall other clients")
        func pipelinedStatusFromAnotherUser() async throws {
            try await offThePool {
                let daemon = try DaemonHarness(configuration: configuration())
                var apps: [ChildProcess] = []
                defer { apps.forEach { $0.terminate() } }
                for index in 1...3 {
                    let app = try daemon.startPythonApp(name: "heavy-\(index)")
                    try app.send("alloc 32")
                    try app.waitForLine(startingWith: "allocated")
                    apps.append(app)
                }
                let vitals = try DaemonVitals(daemon)
                let nobody = try nobodyWithHostileClient()
                let calls = 5_000
                let flooder = try hostileClient(
                    as: nobody, daemon, "pipeline",
                    ["--count", String(calls), "--call", #"{"method":"io.bgtask.Lifecycle.GetStatus"}"#])
                defer { flooder.terminate() }
                try flooder.waitForLine(startingWith: "connected")
                let probe = try daemon.connect()
                defer { probe.close() }
                try flooder.send("go")
                // Round trips of another client while the flood lasts (bounded: a stalled daemon ends the probing).
                var latencies: [Int64] = []
                let probingEnds = MonotonicClock.now() + Duration.seconds(10).nanosecondCount
                while !flooder.hasExited && MonotonicClock.now() < probingEnds {
                    let start = MonotonicClock.now()
                    #expect(try probe.call("org.varlink.service.GetInfo").errorName == nil)
                    latencies.append(MonotonicClock.now() - start)
                }
                try #require(!latencies.isEmpty, "the flood ended before another client could make a call")
                let median = Duration.nanoseconds(latencies.sorted()[latencies.count / 2])
                #expect(
                    median <= vitals.latencyLimit,
                    Comment(
                        rawValue:
                            "another client's median round trip during the flood: \(median) over \(latencies.count) "
                            + "calls, baseline \(vitals.baselineLatency)"))
                let outcome = try flooder.waitForLine(startingWith: "replies", timeout: .seconds(60))
                #expect(outcome == "replies \(calls) errors 0")
                probe.close()
                try vitals.expectWithstood(
                    rssGrowthBelow: 16 << 20, while: "the flooder has finished",
                    release: { _ = try flooder.waitForExit() })
            }
        }
    }
}
