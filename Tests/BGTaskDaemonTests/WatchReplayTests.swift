// `Watch(history:)` against the real daemon: the kept history first, marked replayed, then new entries, with
// nothing lost between them, only what the caller may see, and a replay larger than a stream's output bound
// delivered whole to a client that reads it late.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Watch replaying the kept history", .serialized)
struct WatchReplayTests {
    /// Begins and ends `count` leases of `app` from `control`: each end is a kept entry.
    private func leases(_ count: Int, of app: String, on control: RawVarlinkClient) throws -> [Int] {
        var ended: [Int] = []
        for _ in 0..<count {
            let begun = try control.lifecycle("BeginBackgroundTask", ["app": .string(app)])
            guard let task = begun.parameters["taskId"]?.intValue else { throw HarnessError("no task: \(begun)") }
            try control.lifecycle("EndBackgroundTask", ["app": .string(app), "taskId": .number(Double(task))])
            ended.append(task)
        }
        return ended
    }

    /// Waits for the first reply of a `Watch(history:)` call with a history to replay: the daemon has started the
    /// stream, so whatever is recorded from now on is new. Returns the first replayed entry.
    private func started(_ watcher: RawVarlinkClient) throws -> [String: JSONValue] {
        guard let reply = try watcher.receive(timeout: .seconds(20)) else { throw HarnessError("the stream ended") }
        guard reply.parameters["replayed"] == true, let entry = reply.parameters["entry"]?.objectValue else {
            throw HarnessError("the first reply is not a replayed entry: \(reply)")
        }
        return entry
    }

    /// The replies of `watcher` until one that is not replayed, which is returned apart (after `started`, whose
    /// entry comes first).
    private func replayThenFirstNew(
        _ watcher: RawVarlinkClient, after start: [String: JSONValue]
    ) throws -> (replayed: [[String: JSONValue]], first: [String: JSONValue]) {
        var replayed = [start]
        while true {
            guard let reply = try watcher.receive(timeout: .seconds(20)) else {
                throw HarnessError("the daemon ended the stream after \(replayed.count) replayed entries")
            }
            guard let entry = reply.parameters["entry"]?.objectValue else {
                throw HarnessError("unexpected watch reply \(reply)")
            }
            guard reply.parameters["replayed"] == true else { return (replayed, entry) }
            replayed.append(entry)
        }
    }

    @Test("the newest kept entries come first, in History's order and marked replayed, then new ones; others' are not replayed")
    func replaysThenStreams() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let app = try pythonApp(daemon, name: "replayed")
            defer { app.terminate() }
            let control = try daemon.connect()
            let ended = try leases(3, of: "replayed", on: control)
            let history = try #require(control.lifecycle("History").parameters["entries"]?.arrayValue)

            let watcher = try daemon.connect()
            try watcher.send("io.bgtask.Lifecycle.Watch", ["history": 2], more: true)
            let start = try started(watcher)
            // The first new entry is the test's next lease.
            let next = try leases(1, of: "replayed", on: control)
            let (replayed, first) = try replayThenFirstNew(watcher, after: start)
            #expect(replayed == history.suffix(2).compactMap(\.objectValue), "the newest two, oldest first")
            #expect(replayed.last?["kind"] == "taskEnded" && replayed.last?["taskId"] == .number(Double(ended[2])))
            #expect(first["kind"] == "taskBegan" && first["taskId"] == .number(Double(next[0])))

            // Without history (null or 0) nothing is replayed; a negative count is refused.
            let plain = try daemon.connect()
            try plain.send("io.bgtask.Lifecycle.Watch", ["history": 0], more: true)
            // Leases until the stream, started at some point among them, brings one of them.
            var made: [Int] = []
            var plainFirst: [String: JSONValue]?
            let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
            while plainFirst == nil && MonotonicClock.now() < deadline {
                made += try leases(1, of: "replayed", on: control)
                if case .reply(let reply) = try plain.poll() { plainFirst = reply }
            }
            let received = try #require(plainFirst, "no entry on a plain Watch stream within 20 s")
            #expect(received.parameters["replayed"]?.boolValue != true)
            let taskID = try #require(received.parameters["entry"]?.objectValue?["taskId"]?.intValue)
            #expect(made.contains(taskID), "one of the leases made after the call, not an older entry")
            let refused = try daemon.connect().call("io.bgtask.Lifecycle.Watch", ["history": -1], more: true)
            #expect(refused.errorName == "org.varlink.service.InvalidParameter")

            // Another uid is replayed only what it may see: its own app's entries, none of root's older ones.
            let nobody = try OtherUser(uid: PermissionTests.nobody, gid: PermissionTests.nobody)
            let own = try nobody.app(daemon)
            defer { own.terminate() }
            try own.send("register nobodyapp")
            try own.waitForLine(startingWith: "registered nobodyapp")
            let foreign = try nobody.call(daemon, "Watch", ["history": 1000], more: true)
            #expect(foreign.parameters["replayed"] == true)
            #expect(foreign.parameters["entry"]?.objectValue?["app"] == "nobodyapp")
            #expect(foreign.parameters["entry"]?.objectValue?["kind"] == "registered")
        }
    }

    @Test("a replay past the stream's output bound reaches a client that reads it late, whole, and the stream goes on")
    func largeReplayIsNotTakenForASilentReader() async throws {
        try await offThePool {
            // Room for 3,000 kept entries: about 600 KiB replayed, past the 256 KiB a stream may leave unread.
            let daemon = try DaemonHarness(configuration: DaemonHarness.fastPolicy + "\n[Limits]\nHistorySize=3000\n")
            let app = try pythonApp(daemon, name: "replayed")
            defer { app.terminate() }
            let control = try daemon.connect()
            let ended = try leases(2_500, of: "replayed", on: control)
            let kept = try #require(control.lifecycle("History").parameters["entries"]?.arrayValue).count

            let watcher = try daemon.connect()
            try watcher.send("io.bgtask.Lifecycle.Watch", ["history": 3000], more: true)
            let start = try started(watcher)
            // The watcher reads no more while new entries are made: most of the replay waits in the daemon, past
            // the bound, when they are sent.
            let next = try leases(20, of: "replayed", on: control)
            let (replayed, first) = try replayThenFirstNew(watcher, after: start)
            #expect(replayed.count == kept)
            #expect(replayed.last?["taskId"] == .number(Double(ended.last!)))
            #expect(first["kind"] == "taskBegan" && first["taskId"] == .number(Double(next[0])))
            #expect(!daemon.log.contains("is not reading its stream"))
        }
    }
}
