// Launch slots shared fairly between users: the queue's order and bounds alone (`LaunchQueue`), then the real daemon
// with two users flooding `Launch` while every launched child is held before exec (the apps' cgroup root frozen), so
// the slots stay taken until the test frees one by killing a held child.

import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@testable import BGTaskDaemon

/// The instant `seconds` after the origin.
private func at(_ seconds: Int64) -> MonotonicInstant { .seconds(seconds) }

@Suite("The launch queue's order and bounds")
struct LaunchQueueTests {
    /// Adds `items` of `uid` to `queue`; whether each was taken.
    private func enqueue<Item>(
        _ items: [Item], uid: uid_t, to queue: inout LaunchQueue<Item>, deadline: MonotonicInstant = at(100)
    ) -> [Bool] {
        items.map { queue.enqueue($0, uid: uid, deadline: deadline) }
    }

    /// Takes `count` launches from `queue` as slots free; their items.
    private func take<Item>(_ count: Int, from queue: inout LaunchQueue<Item>) -> [Item?] {
        (0..<count).map { _ in queue.next()?.item }
    }

    @Test(
        "a freed slot goes to the waiting user with the fewest starting; among equals, in turn; a user's own in order"
    )
    func fewestStartingThenInTurn() {
        var queue = LaunchQueue<String>(waitingPerUserMax: 16)
        var added = enqueue(["a0", "a1", "a2", "a3"], uid: 1000, to: &queue)
        // Four slots: the flooding user, alone, gets them all.
        var taken = take(4, from: &queue)
        #expect(taken == ["a0", "a1", "a2", "a3"])
        added += enqueue(["a4", "a5", "a6", "a7"], uid: 1000, to: &queue)
        added += enqueue(["b0", "b1", "b2", "b3"], uid: 1001, to: &queue)
        #expect(added.allSatisfy { $0 })
        // A slot frees: the other user has none starting, then one against three.
        queue.ended(uid: 1000)
        taken = take(1, from: &queue)
        queue.ended(uid: 1000)
        taken += take(1, from: &queue)
        #expect(taken == ["b0", "b1"])
        // Two each: the next slot goes to whoever lost one.
        queue.ended(uid: 1000)
        taken = take(1, from: &queue)
        queue.ended(uid: 1001)
        taken += take(1, from: &queue)
        #expect(taken == ["a4", "b2"])
        #expect(queue.starting == [1000: 2, 1001: 2])

        // Equal counts: in turn, the one served least recently first; a newcomer after those already waiting.
        queue.ended(uid: 1000)
        queue.ended(uid: 1001)
        added = enqueue(["c0"], uid: 1002, to: &queue)
        queue.ended(uid: 1000)
        queue.ended(uid: 1001)
        // Each has 0 starting: 1000 was last served before 1001's last turn, and 1002 has only waited since.
        taken = take(3, from: &queue)
        #expect(added == [true] && taken == ["a5", "b3", "c0"])
        taken = take(3, from: &queue)
        #expect(taken == ["a6", "a7", nil])
        #expect(queue.isEmpty)
    }

    @Test("at most waitingPerUserMax launches of one user wait; other users are not counted against it")
    func boundPerUser() {
        var queue = LaunchQueue<Int>(waitingPerUserMax: 3)
        var added = enqueue([0, 1, 2, 3], uid: 1000, to: &queue)
        #expect(added == [true, true, true, false])
        added = enqueue([0], uid: 1001, to: &queue)
        #expect(added == [true] && queue.waitingCount == 4)
        // One taken out: there is room for one more of that user again.
        _ = queue.next()
        added = enqueue([4, 5], uid: 1000, to: &queue)
        #expect(added == [true, false])
    }

    @Test("waiting launches past their deadline are taken out, earliest first; the next deadline follows")
    func expiry() {
        var queue = LaunchQueue<String>(waitingPerUserMax: 8)
        var added = enqueue(["late"], uid: 1000, to: &queue, deadline: at(30))
        added += enqueue(["early"], uid: 1001, to: &queue, deadline: at(10))
        added += enqueue(["middle"], uid: 1000, to: &queue, deadline: at(20))
        #expect(added.allSatisfy { $0 })
        #expect(queue.nextDeadline == at(10))
        var expired = queue.expire(at: at(9)).map(\.item)
        #expect(expired.isEmpty)
        expired = queue.expire(at: at(20)).map(\.item)
        #expect(expired == ["early", "middle"])
        #expect(queue.nextDeadline == at(30))
        #expect(queue.waitingCount == 1)
        #expect(queue.contains { $0 == "late" } && !queue.contains { $0 == "early" })
        let removed = queue.removeAll().map(\.item)
        #expect(removed == ["late"])
        #expect(queue.nextDeadline == nil && queue.isEmpty)
    }
}

/// The held launches' flood as another user runs it: the flood script copied where any user may read it.
private struct Flood {
    let script: String
    private let copy: ScratchDirectory

    init() throws {
        copy = try ScratchDirectory(prefix: "bgtaskd-launch-flood")
        script = try copy.write(
            "launch_flood.py",
            try String(contentsOfFile: Products.packageRoot + "/Tests/Fixtures/launch_flood.py", encoding: .utf8))
    }

    /// Starts a flood of `count` Launches of `prefix-I` running `argv` against `daemon`, as `user` (nil: root), and
    /// waits until every call is sent.
    func start(
        _ daemon: DaemonHarness, prefix: String, count: Int, argv: [String], as user: ForeignUser? = nil
    ) throws -> ChildProcess {
        let command =
            ["/usr/bin/python3", script, daemon.socketPath, prefix, String(count), "300", "--"] + argv
        let flood = try user.map { try $0.spawn(command) } ?? ChildProcess(command)
        try flood.waitForLine(startingWith: "sent \(count)")
        return flood
    }
}

extension ForeignUser {
    /// Starts `command` (a program of the system, not of this package) as this user.
    fileprivate func spawn(_ command: [String]) throws -> ChildProcess {
        let groupList = groups.isEmpty ? "--clear-groups" : "--groups=" + groups.map(String.init).joined(separator: ",")
        return try ChildProcess(["setpriv", "--reuid=\(uid)", "--regid=\(gid)", groupList] + command)
    }
}

extension LaunchFixture {
    /// The launched children held before exec in the frozen cgroup root, by the name of the app each is for (from
    /// its cgroup, `app-NAME-RANDOM`).
    fileprivate func heldLaunches() -> [String: pid_t] {
        guard let root = control?.cgroup else { return [:] }
        var held: [String: pid_t] = [:]
        for path in appCgroups where path.hasPrefix(root.path + "/") {
            guard let pid = try? CgroupDirectory(path: path).processes().first else { continue }
            let directory = String(path.dropFirst(root.path.count + 1).dropFirst("app-".count))
            held[String(directory[..<(directory.lastIndex(of: "-") ?? directory.endIndex)])] = pid
        }
        return held
    }

    /// Waits until `count` launches are held; them.
    fileprivate func waitForHeldLaunches(_ count: Int, timeout: Duration = .seconds(30)) throws -> [String: pid_t] {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            let held = heldLaunches()
            if held.count == count { return held }
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("\(held.count) launches held, not \(count): \(held)\ndaemon log:\n\(daemon.log)")
            }
            usleep(10_000)
        }
    }

    /// Waits until the daemon's log says `count` launches waited for a slot.
    fileprivate func waitForWaitingLaunches(_ count: Int, timeout: Duration = .seconds(30)) throws {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while daemon.log.components(separatedBy: "waits for a launch slot").count - 1 < count {
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("fewer than \(count) launches waiting\ndaemon log:\n\(daemon.log)")
            }
            usleep(20_000)
        }
    }
}

/// The replies a flood printed, by app index: the error name, or "" for a launch that started.
private func floodReplies(_ flood: ChildProcess, count: Int) throws -> [Int: String] {
    var replies: [Int: String] = [:]
    while replies.count < count {
        let line = try flood.waitForLine(timeout: .seconds(60)) { $0.hasPrefix("reply ") || $0.hasPrefix("closed ") }
        let words = line.split(separator: " ", maxSplits: 2).map(String.init)
        guard words.count >= 2, let index = Int(words[1]) else { throw HarnessError("bad flood line \(line)") }
        guard words[0] == "reply", words.count == 3,
            case .object(let reply) = try JSONDecoder().decode(JSONValue.self, from: Data(words[2].utf8))
        else {
            replies[index] = "closed"
            continue
        }
        replies[index] = reply["error"]?.stringValue ?? ""
    }
    return replies
}

@Suite("Launch slots", .serialized, .requires(.cgroup(.unified), .root(for: "launching apps as another user")))
struct LaunchSlotTests {
    /// Long enough that no held launch in these tests times out.
    static let patientPolicy = DaemonHarness.fastPolicy("LaunchTimeoutSec", "120s")

    @Test(
        "two users flooding Launch: each freed slot goes to the user with fewer starting, and both users' launches start"
    )
    func fairBetweenUsers() async throws {
        try await withFrozenLaunchRoot(policy: Self.patientPolicy) { fixture, root in
            let flood = try Flood()
            let nobody = try ForeignUser.nobody(executables: [])
            let argv = ["/bin/sleep", "120"]
            let rootFlood = try flood.start(fixture.daemon, prefix: "root", count: 8, argv: argv)
            defer { rootFlood.terminate() }
            // The first user alone: it takes every slot.
            var held = try fixture.waitForHeldLaunches(4)
            #expect(held.keys.allSatisfy { $0.hasPrefix("root-") }, "\(held)")
            let nobodyFlood = try flood.start(fixture.daemon, prefix: "nobody", count: 8, argv: argv, as: nobody)
            defer { nobodyFlood.terminate() }
            try fixture.waitForWaitingLaunches(12)
            #expect(try fixture.waitForHeldLaunches(4) == held, "a launch started while every slot was taken")

            // Freeing slots one at a time (killing a held child of the user holding more, the first user on a tie):
            // each goes to the user with fewer starting, so within two turns they hold two each.
            var killed: Set<String> = []
            var granted: [String] = []
            for _ in 0..<6 {
                let counts = Dictionary(grouping: held.keys) { $0.hasPrefix("root-") ? "root" : "nobody" }
                    .mapValues(\.count)
                let victimUser = (counts["nobody"] ?? 0) > (counts["root"] ?? 0) ? "nobody" : "root"
                let victim = try #require(held.keys.sorted().first { $0.hasPrefix(victimUser + "-") })
                let pidFD = try PidFD.open(pid: try #require(held[victim]))
                try pidFD.sendSignal(.kill)
                try? pidFD.close()
                killed.insert(victim)
                let before = Set(held.keys)
                let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
                var now = fixture.heldLaunches()
                while Set(now.keys).subtracting(before).isEmpty || now[victim] != nil {
                    guard MonotonicClock.now() < deadline else {
                        throw HarnessError("no launch took the freed slot: \(now)\n\(fixture.daemon.log)")
                    }
                    usleep(10_000)
                    now = fixture.heldLaunches()
                }
                let newcomer = try #require(Set(now.keys).subtracting(before).first)
                let user = newcomer.hasPrefix("root-") ? "root" : "nobody"
                let left = (counts[victimUser] ?? 0) - 1
                let other = counts[victimUser == "root" ? "nobody" : "root"] ?? 0
                // The slot went to whichever user had fewer starting once the victim was gone.
                #expect(user == (left < other ? victimUser : (victimUser == "root" ? "nobody" : "root")), "\(now)")
                granted.append(user)
                held = now
            }
            #expect(granted.prefix(2) == ["nobody", "nobody"], "\(granted)")
            let final = Dictionary(grouping: held.keys) { $0.hasPrefix("root-") ? "root" : "nobody" }.mapValues(\.count)
            #expect(final == ["root": 2, "nobody": 2], "\(held)")

            // Every launch not killed starts once the children may run: each user's too. (A child killed before
            // exec closes its handshake as an exec would: its launch may be answered either way, and its app ends.)
            try root.requestFreeze(false)
            let rootReplies = try floodReplies(rootFlood, count: 8)
            let nobodyReplies = try floodReplies(nobodyFlood, count: 8)
            for (user, replies) in [("root", rootReplies), ("nobody", nobodyReplies)] {
                let spared = replies.filter { !killed.contains("\(user)-\($0.key)") }
                #expect(spared.count == 8 - killed.count { $0.hasPrefix(user + "-") }, "\(killed)")
                #expect(spared.values.allSatisfy { $0.isEmpty }, "\(user): \(replies)")
                let others = replies.filter { killed.contains("\(user)-\($0.key)") }.values
                #expect(others.allSatisfy { $0.isEmpty || $0 == "io.bgtask.Lifecycle.LaunchFailed" }, "\(replies)")
                print("launch slots: \(user): \(spared.count) of 8 started, \(others.count) killed")
            }
            let rootStarted = rootReplies.values.filter { $0.isEmpty }.count
            let nobodyStarted = nobodyReplies.values.filter { $0.isEmpty }.count
            #expect(rootStarted > 0 && nobodyStarted > 0, "\(rootReplies) \(nobodyReplies)")
            // The launched apps run as their callers.
            let nobodyIndex = try #require(nobodyReplies.first { $0.value.isEmpty }?.key)
            let nobodyApp = try fixture.client.app("nobody-\(nobodyIndex)")
            #expect(nobodyApp["uid"]?.intValue == 65534, "\(nobodyApp)")
        }
    }

    @Test("a launch that gets no slot within its LaunchTimeoutSec fails with LaunchFailed saying so; held ones go on")
    func waitingPastItsTimeout() async throws {
        try await withFrozenLaunchRoot(
            policy: Self.patientPolicy, files: ["apps.d/org.example.impatient.conf": "[Policy]\nLaunchTimeoutSec=1s\n"]
        ) { fixture, root in
            let flood = try Flood()
            let holders = try flood.start(fixture.daemon, prefix: "holder", count: 4, argv: ["/bin/sleep", "120"])
            defer { holders.terminate() }
            _ = try fixture.waitForHeldLaunches(4)
            let impatient = try fixture.daemon.connect()
            let sentAt = MonotonicClock.now()
            try impatient.send("io.bgtask.Lifecycle.Launch", fixture.launchParameters("org.example.impatient"))
            let reply = try #require(try impatient.receive(timeout: .seconds(30)), "closed")
            let waited = Double(MonotonicClock.now() - sentAt) / 1e9
            #expect(reply.errorName == "io.bgtask.Lifecycle.LaunchFailed", "\(reply)")
            let reason = reply.parameters["reason"]?.stringValue ?? ""
            #expect(reason.contains("no launch slot came free within 1"), "\(reason)")
            #expect(reason.contains("LaunchesInFlightMax"), "\(reason)")
            #expect(waited >= 0.9, "answered after \(waited) s, before its LaunchTimeoutSec")
            #expect(fixture.heldLaunches()["org.example.impatient"] == nil)
            #expect(throws: (any Error).self) { try fixture.client.app("org.example.impatient") }
            // The launches holding the slots are untouched: they start once they may.
            try root.requestFreeze(false)
            let replies = try floodReplies(holders, count: 4)
            #expect(replies.values.allSatisfy { $0.isEmpty }, "\(replies)")
        }
    }

    @Test("at most 64 launches of one user wait: the next is refused with LimitExceeded LaunchesWaitingPerUserMax")
    func waitingBoundedPerUser() async throws {
        try await withFrozenLaunchRoot(policy: Self.patientPolicy) { fixture, _ in
            let flood = try Flood()
            let holders = try flood.start(fixture.daemon, prefix: "holder", count: 4, argv: ["/bin/sleep", "120"])
            defer { holders.terminate() }
            _ = try fixture.waitForHeldLaunches(4)
            let waiting = try flood.start(fixture.daemon, prefix: "waiting", count: 64, argv: ["/bin/sleep", "120"])
            defer { waiting.terminate() }
            try fixture.waitForWaitingLaunches(64)
            let extra = try fixture.daemon.connect()
            try extra.send("io.bgtask.Lifecycle.Launch", fixture.launchParameters("org.example.extra"))
            let refused = try #require(try extra.receive(timeout: .seconds(30)), "closed")
            #expect(refused.errorName == "io.bgtask.Lifecycle.LimitExceeded", "\(refused)")
            #expect(refused.parameters["limit"] == "LaunchesWaitingPerUserMax", "\(refused)")
            #expect(refused.parameters["max"]?.intValue == 64, "\(refused)")
            // Another user still waits for its turn.
            let nobody = try ForeignUser.nobody(executables: [])
            let other = try flood.start(
                fixture.daemon, prefix: "other", count: 1, argv: ["/bin/sleep", "120"], as: nobody)
            defer { other.terminate() }
            try fixture.waitForWaitingLaunches(65)
            #expect(other.transcript.allSatisfy { !$0.hasPrefix("reply") }, "\(other.transcript)")
        }
    }
}

/// Runs `body` with a launch fixture whose apps' cgroup root is frozen (thawed again after), so every launched
/// child stops the moment it joins its cgroup, before it execs: its launch holds its slot until the test lets it go.
private func withFrozenLaunchRoot(
    policy: String, files: [String: String] = [:],
    _ body: @escaping @Sendable (LaunchFixture, CgroupDirectory) throws -> Void
) async throws {
    try await withLaunchFixture(policy: policy, files: files) { fixture in
        let root = try #require(fixture.control?.cgroup, "no CgroupRoot")
        try #require(root.has("cgroup.freeze"), "the apps' cgroup root cannot be frozen")
        try root.requestFreeze(true)
        defer { try? root.requestFreeze(false) }
        #expect(try root.waitUntil(frozen: true, timeout: .seconds(10)))
        try body(fixture, root)
    }
}
