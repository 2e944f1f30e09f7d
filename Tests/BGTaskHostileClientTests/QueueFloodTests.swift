// Floods of posts to a suspended app: distinct names under coalesce and hold, oversized and maximal payloads.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// The events one suspended app may have queued (QueuedEventsPerAppMax's default).
let queuedEventsMax = 64
/// The largest Post payload, as encoded JSON (PostPayloadSizeMax's default).
let payloadSizeMax = 4096

/// A payload whose compact JSON encoding, `{"blob":"xx…"}`, is exactly `bytes` long.
func payload(encodedSize bytes: Int) -> [String: JSONValue] {
    ["blob": .string(String(repeating: "x", count: bytes - #"{"blob":""}"#.count))]
}

/// A `Post` call to `app`.
func postCall(
    _ name: String, to app: String, behavior: String, payload: [String: JSONValue]? = nil
) throws -> [UInt8] {
    var parameters: [String: JSONValue] = ["name": .string(name), "app": .string(app), "behavior": .string(behavior)]
    if let payload { parameters["payload"] = .object(payload) }
    return try callBytes("io.bgtask.Lifecycle.Post", parameters)
}

/// Sends `calls` in batches of `batch` without waiting between calls of a batch; returns the replies in order.
func pipelined(_ calls: [[UInt8]], on client: RawVarlinkClient, batch: Int = 250) throws -> [[String: JSONValue]] {
    var replies: [[String: JSONValue]] = []
    for start in stride(from: 0, to: calls.count, by: batch) {
        let slice = calls[start..<min(start + batch, calls.count)]
        try client.sendRaw(Array(slice.joined()))
        for _ in slice {
            guard let reply = try client.receive(timeout: .seconds(30)) else {
                throw HarnessError("the daemon closed the connection after \(replies.count) replies")
            }
            replies.append(reply)
        }
    }
    return replies
}

/// The first reply that is not a successful post counted as queued, for messages.
func firstFailedPost(_ replies: [[String: JSONValue]]) -> [String: JSONValue]? {
    replies.first { $0.errorName != nil || $0.parameters["queued"] != 1 }
}

/// Resumes `name` (SetState active), then posts a marker it receives at once, and returns the names of the
/// notifications the app printed before the marker: what was queued for it, in delivery order. Stops early, with
/// what it has, once more than `expected` arrived.
func resumeAndCollectNotifications(
    _ name: String, expected: Int, app: ChildProcess, control: RawVarlinkClient
) throws -> [String] {
    let resumed = try control.lifecycle("SetState", ["app": .string(name), "state": "active"])
    guard resumed.errorName == nil else { throw HarnessError("SetState active failed: \(resumed)") }
    let marker = try control.lifecycle("Post", ["name": "marker", "app": .string(name)])
    guard marker.errorName == nil else { throw HarnessError("the marker post after resuming failed: \(marker)") }
    var names: [String] = []
    while names.count <= expected {
        let line = try app.waitForLine(startingWith: "event notification")
        guard let word = line.split(separator: " ").first(where: { $0.hasPrefix("name=") }) else {
            throw HarnessError("a notification with no name: \(line)")
        }
        let posted = String(word.dropFirst("name=".count))
        if posted == "marker" { break }
        names.append(posted)
    }
    return names
}

extension HeavyHostileClientTests {
    @Suite("Post floods to a suspended app")
    struct PostFloodTests {
        static let posts = 10_500
        /// Posts timed one by one at each end of the flood; the ones between are pipelined in batches.
        static let timedPosts = 500

        /// The median of round trips of `calls` made one at a time; fails on any refused post.
        private func medianRoundTrip(_ calls: [[UInt8]], on client: RawVarlinkClient) throws -> Duration {
            var samples: [Int64] = []
            for call in calls {
                let start = MonotonicClock.now()
                let reply = try pipelined([call], on: client)
                samples.append(MonotonicClock.now() - start)
                if let failed = firstFailedPost(reply) { throw HarnessError("a post failed: \(failed)") }
            }
            return .nanoseconds(samples.sorted()[samples.count / 2])
        }

        @Test(
            "10,500 posts with distinct names: the newest 64 kept and delivered in order, the rest counted, cost flat",
            arguments: ["coalesce", "hold"])
        func distinctNameFlood(behavior: String) async throws {
            try await offThePool {
                let daemon = try DaemonHarness(configuration: configuration())
                let control = try daemon.connect()
                let app = try startSuspendedApp(daemon, name: "sleeper", control: control)
                defer { app.terminate() }
                let vitals = try DaemonVitals(daemon)
                let calls = try (0..<Self.posts).map { try postCall("n\($0)", to: "sleeper", behavior: behavior) }
                let first = try medianRoundTrip(Array(calls.prefix(Self.timedPosts)), on: control)
                let middle = try pipelined(
                    Array(calls.dropFirst(Self.timedPosts).dropLast(Self.timedPosts)), on: control)
                #expect(firstFailedPost(middle) == nil, "a post failed: \(String(describing: firstFailedPost(middle)))")
                let last = try medianRoundTrip(Array(calls.suffix(Self.timedPosts)), on: control)
                #expect(
                    last < first * 4,
                    Comment(
                        rawValue:
                            "a post costs more as the queue grows: median \(first) for the first \(Self.timedPosts), "
                            + "\(last) for the last"))
                let state = try control.app("sleeper")
                #expect(state["state"] == "suspended")
                #expect(state["queuedEvents"] == .number(Double(queuedEventsMax)), "queuedEvents: \(state)")
                #expect(
                    state["droppedEvents"] == .number(Double(Self.posts - queuedEventsMax)),
                    "droppedEvents \(String(describing: state["droppedEvents"])), expected \(Self.posts - queuedEventsMax)"
                )
                try vitals.expectResidentGrowth(below: 16 << 20)
                try vitals.expectNoSpin(while: "\(Self.posts) posts wait for a suspended app")
                let delivered = try resumeAndCollectNotifications(
                    "sleeper", expected: queuedEventsMax, app: app, control: control)
                let newest = (Self.posts - queuedEventsMax..<Self.posts).map { "n\($0)" }
                #expect(
                    delivered == newest,
                    Comment(
                        rawValue:
                            "delivered \(delivered.count): \(delivered.prefix(3))…\(delivered.suffix(3)); expected "
                            + "\(newest.prefix(3))…\(newest.suffix(3))"))
                try vitals.expectWithstood(
                    rssGrowthBelow: 16 << 20, while: nil,
                    release: {
                        control.close()
                        app.terminate()
                    })
            }
        }

        @Test("6,000 held posts of the largest payload: all accepted, 64 kept, memory bounded")
        func largestPayloadFlood() async throws {
            try await offThePool {
                let daemon = try DaemonHarness(configuration: configuration())
                let control = try daemon.connect()
                let app = try startSuspendedApp(daemon, name: "hoarder", control: control)
                defer { app.terminate() }
                let vitals = try DaemonVitals(daemon)
                let posts = 6_000
                let largest = payload(encodedSize: payloadSizeMax)
                let calls = try (0..<posts).map {
                    try postCall("h\($0)", to: "hoarder", behavior: "hold", payload: largest)
                }
                let replies = try pipelined(calls, on: control, batch: 100)
                #expect(
                    firstFailedPost(replies) == nil, "a post failed: \(String(describing: firstFailedPost(replies)))")
                let state = try control.app("hoarder")
                #expect(state["queuedEvents"] == .number(Double(queuedEventsMax)), "queuedEvents: \(state)")
                try vitals.expectWithstood(
                    rssGrowthBelow: 12 << 20, while: "\(posts) held posts of \(payloadSizeMax) bytes wait",
                    release: {
                        control.close()
                        app.terminate()
                    })
            }
        }
    }
}

@Suite("Sizes and shared queue bounds")
struct BoundedSizeTests {
    @Test("coalesce and hold entries share one bound of 64: the oldest go first, whatever their behaviour")
    func behavioursShareTheBound() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: configuration())
            let control = try daemon.connect()
            let app = try startSuspendedApp(daemon, name: "mixed", control: control)
            defer { app.terminate() }
            let vitals = try DaemonVitals(daemon)
            let coalesced = try (0..<40).map { try postCall("c\($0)", to: "mixed", behavior: "coalesce") }
            let held = try (0..<40).map { try postCall("h\($0)", to: "mixed", behavior: "hold") }
            let replies = try pipelined(coalesced + held, on: control)
            #expect(firstFailedPost(replies) == nil, "a post failed: \(String(describing: firstFailedPost(replies)))")
            let state = try control.app("mixed")
            #expect(state["queuedEvents"] == .number(Double(queuedEventsMax)), "queuedEvents: \(state)")
            #expect(state["droppedEvents"] == .number(Double(80 - queuedEventsMax)), "droppedEvents: \(state)")
            let delivered = try resumeAndCollectNotifications(
                "mixed", expected: queuedEventsMax, app: app, control: control)
            #expect(delivered == (16..<40).map { "c\($0)" } + (0..<40).map { "h\($0)" }, "delivered: \(delivered)")
            try vitals.expectWithstood(
                rssGrowthBelow: 8 << 20, while: "the resumed app idles",
                release: {
                    control.close()
                    app.terminate()
                })
        }
    }

    @Test("a Post payload over PostPayloadSizeMax is refused with LimitExceeded; one at the limit is accepted")
    func payloadOverLimit() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: configuration())
            let vitals = try DaemonVitals(daemon)
            let client = try daemon.connect()
            let atLimit = try client.lifecycle(
                "Post", ["name": "fits", "payload": .object(payload(encodedSize: payloadSizeMax))])
            #expect(atLimit.errorName == nil, "a payload of exactly \(payloadSizeMax) bytes: \(atLimit)")
            let over = try client.lifecycle(
                "Post", ["name": "too-big", "payload": .object(payload(encodedSize: payloadSizeMax + 1))])
            #expect(over.errorName == "io.bgtask.Lifecycle.LimitExceeded", "\(over)")
            #expect(
                over.parameters == ["limit": "PostPayloadSizeMax", "max": .number(Double(payloadSizeMax))], "\(over)")
            let large = try client.lifecycle(
                "Post", ["name": "much-too-big", "payload": .object(payload(encodedSize: 60_000))])
            #expect(large.errorName == "io.bgtask.Lifecycle.LimitExceeded", "a 60,000-byte payload: \(large)")
            try vitals.expectWithstood(rssGrowthBelow: 8 << 20, while: "the client idles", release: { client.close() })
        }
    }

    @Test("names over 255 bytes are refused: notification and task names (app names already are)")
    func namesOverLimit() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: configuration())
            let app = try daemon.startPythonApp(name: "named")
            defer { app.terminate() }
            let vitals = try DaemonVitals(daemon)
            let client = try daemon.connect()
            let longest = String(repeating: "n", count: 255)
            let tooLong = longest + "n"
            let invalidName: [String: JSONValue] = ["parameter": "name"]
            #expect(try client.lifecycle("Post", ["name": .string(longest)]).errorName == nil)
            let post = try client.lifecycle("Post", ["name": .string(tooLong)])
            #expect(
                post.errorName == "org.varlink.service.InvalidParameter" && post.parameters == invalidName, "\(post)")
            let begun = try client.lifecycle("BeginBackgroundTask", ["app": "named", "name": .string(longest)])
            #expect(begun.errorName == nil, "\(begun)")
            let task = try client.lifecycle("BeginBackgroundTask", ["app": "named", "name": .string(tooLong)])
            #expect(
                task.errorName == "org.varlink.service.InvalidParameter" && task.parameters == invalidName, "\(task)")
            try vitals.expectWithstood(
                rssGrowthBelow: 8 << 20, while: "the client idles",
                release: {
                    client.close()
                    app.terminate()
                })
        }
    }
}
