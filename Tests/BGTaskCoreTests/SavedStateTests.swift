// Saving and restoring the policy: a restart keeps every lease, budget and deadline, and refuses a state that
// contradicts itself rather than adopt any of it.

import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskCore

@Suite("Saved policy state")
struct SavedStateTests {
    /// A harness with a suspended app, an app in background holding a lease, and a queued post.
    private func busyHarness() throws -> PolicyHarness {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        let sync = try h.register("sync")
        let task = try h.begin(sync, "upload")
        #expect(task == TaskID(rawValue: 1))
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        try h.setState(sync, .background)
        try h.acknowledgeLast(.didEnterBackground, of: sync)
        try h.post("news", payload: "1", behavior: .coalesce, to: mail)
        h.advance(by: .seconds(100))
        return h
    }

    @Test(
        "a restart keeps leases, remaining time, queued events and the next deadline; the suspended app is suspended again"
    )
    func restartKeepsEverything() throws {
        let h = try busyHarness()
        let mail = try #require(h.core.liveAppID(named: "mail"))
        let sync = try #require(h.core.liveAppID(named: "sync"))
        let remaining = try h.remaining(sync)
        let deadline = h.core.nextDeadline
        _ = h.takeEffects()
        try h.restart()
        #expect(h.takeEffects() == ["restart", "suspend mail"])
        #expect(h.state(mail) == .suspended)
        #expect(h.core.snapshot(of: sync, now: h.now)?.tasks.map(\.id) == [TaskID(rawValue: 1)])
        #expect(try h.remaining(sync) == remaining, "the restart changed the remaining time")
        #expect(h.core.snapshot(of: mail, now: h.now)?.queuedEvents == 1)
        #expect(h.armedDeadline == deadline)
        // Ids keep counting from where they were: no task id is handed out twice.
        #expect(try h.begin(sync, "second") == TaskID(rawValue: 2))
        // The queued post reaches the app when it next runs.
        try h.setState(mail, .active)
        #expect(h.events(of: mail).contains { $0.name == "news" })
    }

    @Test("a deadline that passed while the daemon was down is acted on as soon as it is back")
    func passedDeadline() throws {
        let h = try busyHarness()
        let sync = try #require(h.core.liveAppID(named: "sync"))
        try h.restoreFromSavedState()
        // The daemon was down for ten minutes: the lease's warning and expiry both passed.
        h.loop.advanceTime(by: .seconds(600))
        _ = h.takeEffects()
        h.resumeAfterRestart()
        let effects = h.takeEffects()
        #expect(effects.contains { $0.hasPrefix("sync ← backgroundTaskExpiring") }, "\(effects)")
        #expect(effects.contains("sync task#1 ended (expired)"), "\(effects)")
        #expect(h.state(sync) == .terminated)
    }

    /// The saved state of `h` as a JSON object, changed by `change`, restored.
    private func restore(
        _ h: PolicyHarness, changing change: (inout [String: Any]) -> Void
    ) throws -> Lifecycle {
        var object = try #require(
            try JSONSerialization.jsonObject(with: JSONEncoder().encode(h.core.saved)) as? [String: Any])
        change(&object)
        let saved = try JSONDecoder().decode(
            SavedLifecycle.self, from: JSONSerialization.data(withJSONObject: object))
        return try Lifecycle(restoring: saved, policy: h.core.policy)
    }

    @Test(
        "a state that contradicts itself is refused whole",
        arguments: [
            "two apps in one slot", "a live name naming another app", "a task id not below the next",
            "an unknown serial",
            "an event id not below the next", "an identity in a slot millions past the registrations",
        ])
    func contradictions(_ flaw: String) throws {
        let h = try busyHarness()
        let error = #expect(throws: SavedStateError.self) {
            _ = try restore(h) { object in
                var apps = object["apps"] as? [[String: Any]] ?? []
                switch flaw {
                case "two apps in one slot":
                    apps[1]["id"] = apps[0]["id"]
                case "a live name naming another app":
                    var names = object["liveNames"] as? [String: Any] ?? [:]
                    names["mail"] = names["sync"]
                    object["liveNames"] = names
                case "a task id not below the next":
                    object["nextTaskID"] = 1
                case "an unknown serial":
                    object["nextSerial"] = 1
                case "an identity in a slot millions past the registrations":
                    // Serial 1 in slot 10,000,000: the table would allocate ten million slots.
                    apps[0]["id"] = ["rawValue": (1 << 24) | 10_000_000]
                default:
                    object["nextEventID"] = 1
                }
                object["apps"] = apps
            }
        }
        #expect(error != nil, "\(flaw) was restored")
        if flaw.hasPrefix("an identity in a slot") {
            #expect(error?.reason.contains("slots") == true, "\(String(describing: error))")
        }
    }

    @Test("a queued payload the shell's check refuses refuses the state; the same state restores without the check")
    func payloadCheck() throws {
        let h = try busyHarness()
        let saved = h.core.saved
        var checked: [String] = []
        let error = #expect(throws: SavedStateError.self) {
            _ = try Lifecycle(restoring: saved, policy: h.core.policy) { text in
                checked.append(text)
                return false
            }
        }
        #expect(error?.reason.contains("payload") == true, "\(String(describing: error))")
        #expect(checked == ["1"], "the queued post's payload was not the one checked: \(checked)")
        _ = try Lifecycle(restoring: saved, policy: h.core.policy) { $0 == "1" }
    }

    @Test("restoring the same state twice gives the same policy")
    func restoreIsDeterministic() throws {
        let h = try busyHarness()
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let first = try restore(h) { _ in }
        let second = try restore(h) { _ in }
        #expect(try encoder.encode(first.saved) == encoder.encode(second.saved))
        #expect(try encoder.encode(first.saved) == encoder.encode(h.core.saved))
    }

    /// A harness holding scheduled requests in every phase: one running, one pending behind a failure with a
    /// replacement-free retry time, one waiting on power; with a ledger and last-foreground times.
    private func schedulingHarness() throws -> PolicyHarness {
        let h = PolicyHarness()
        h.setWallClockOffset(.seconds(1_800_000_000))
        h.setConditions(Conditions(externalPower: false, network: true))
        let mail = try h.register("mail")
        let wall = WallClockInstant.seconds(1_800_001_000)
        try h.submit(ScheduledRequest(appName: "mail", identifier: "retry", kind: .refresh, earliestBegin: wall))
        h.advance(by: .seconds(5))
        let first = try #require(h.core.scheduledRequests(app: "mail").first)
        guard case .running(_, let task) = first.state else {
            Issue.record("the request did not run: \(first)")
            return h
        }
        try h.complete(mail, task, .failure(retry: true))
        try h.submit(ScheduledRequest(appName: "mail", identifier: "sync", kind: .refresh, earliestBegin: wall))
        try h.submit(
            ScheduledRequest(
                appName: "news", identifier: "backup", kind: .processing, earliestBegin: wall + .seconds(60),
                constraints: [.externalPower]), isLaunchable: true)
        return h
    }

    @Test("scheduled requests, ledgers and last-foreground times survive a save and a restore, a running task too")
    func schedulingRoundTrip() throws {
        let h = try schedulingHarness()
        let requests = h.core.scheduledRequests()
        #expect(requests.count == 3)
        #expect(requests.contains { if case .running = $0.state { true } else { false } })
        let wall = WallClockInstant.seconds(1_800_001_005)
        let used = h.core.scheduledTimeUsed(by: "mail", at: wall)
        #expect(used == .seconds(5))
        let deadline = h.core.nextDeadline
        let savedBefore = h.core.saved
        try h.restart()
        #expect(h.core.scheduledRequests() == requests)
        #expect(h.core.scheduledTimeUsed(by: "mail", at: wall) == used)
        #expect(h.core.nextDeadline == deadline)
        #expect(h.core.saved.savedScheduling == savedBefore.savedScheduling)
        #expect(h.core.saved.savedScheduling.lastForeground["mail"] != nil)
    }

    @Test("a state saved before there were scheduled requests still loads, holding none")
    func oldFormatLoads() throws {
        let h = try busyHarness()
        let restored = try restore(h) { object in
            #expect(object["scheduling"] != nil)
            object["scheduling"] = nil
            // Leases saved then had no isScheduled member, as ordinary leases still have none.
            let apps = object["apps"] as? [[String: Any]] ?? []
            let tasks = apps.flatMap { $0["openTasks"] as? [[String: Any]] ?? [] }
            #expect(!tasks.isEmpty && tasks.allSatisfy { $0["isScheduled"] == nil })
        }
        #expect(restored.scheduledRequestCount == 0)
        #expect(restored.snapshots(now: h.now) == h.core.snapshots(now: h.now))
    }

    @Test(
        "scheduled state that contradicts the registrations is refused",
        arguments: ["a running request whose task is not held", "a scheduled task no request runs"])
    func schedulingContradictions(_ flaw: String) throws {
        let h = try schedulingHarness()
        let error = #expect(throws: SavedStateError.self) {
            _ = try restore(h) { object in
                var scheduling = object["scheduling"] as? [String: Any] ?? [:]
                var requests = scheduling["requests"] as? [String: Any] ?? [:]
                switch flaw {
                case "a running request whose task is not held":
                    var apps = object["apps"] as? [[String: Any]] ?? []
                    apps[0]["openTasks"] = [[String: Any]]()
                    object["apps"] = apps
                default:
                    requests["mail/sync"] = nil
                }
                scheduling["requests"] = requests
                object["scheduling"] = scheduling
            }
        }
        #expect(error != nil, "\(flaw) was restored")
    }

    @Test("an app re-attaching after a restart is told again of its running scheduled task and of every warning sent")
    func reattachRetellsTasks() throws {
        var policy = CorePolicy()
        policy.defaultAppPolicy.backgroundTime = .seconds(20)
        let h = PolicyHarness(policy: policy)
        h.setWallClockOffset(.seconds(1_800_000_000))
        h.setConditions(Conditions(externalPower: true, network: true))
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        _ = h.takeEffects()
        let lease = try h.begin(mail, "upload")
        try h.submit(
            ScheduledRequest(
                appName: "mail", identifier: "sync", kind: .processing, earliestBegin: .seconds(1_800_000_000),
                constraints: [.externalPower]))
        h.advance(by: .seconds(1))
        guard case .running(_, let task) = try #require(h.core.scheduledRequests(app: "mail").first).state else {
            Issue.record("the request did not run: \(h.core.scheduledRequests())")
            return
        }
        // The lease's warning (the budget's last 5 s), then the scheduled task's (its power gone).
        h.advance(by: .seconds(14))
        h.setConditions(Conditions(externalPower: false, network: true))
        let told = h.takeEffects().filter { $0.hasPrefix("mail ← ") }
        #expect(
            told == [
                "mail ← runScheduledTask [\(task.rawValue)](sync)", "mail ← backgroundTaskExpiring [\(lease.rawValue)]",
                "mail ← backgroundTaskExpiring [\(task.rawValue)]",
            ])
        try h.restart()
        _ = h.takeEffects()
        try h.register("mail")
        let retold = h.takeEffects().filter { $0.hasPrefix("mail ← ") }
        #expect(
            retold == [
                "mail ← runScheduledTask [\(task.rawValue)](sync)",
                "mail ← backgroundTaskExpiring [\(lease.rawValue), \(task.rawValue)]",
            ])
        // Told again, nothing changed: no entry, the same deadlines.
        #expect(h.core.scheduledRequests(app: "mail").first?.state == .running(app: mail, task: task))
    }
}
