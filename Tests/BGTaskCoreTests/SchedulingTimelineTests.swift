// Timelines for scheduled requests: submit and its refusals, what makes a request runnable and in which order, how
// its task runs, ends and is settled, the wall clock, restarts and reboots, and the wake-ups blocked requests do not
// cause (docs/ARCHITECTURE.md, Scheduled requests).

import BGTaskCore
import BGTaskTestSupport
import Testing

/// The wall-clock time at the harness's start (monotonic 1000 s).
private let epoch = WallClockInstant.seconds(1_800_000_000)
/// Wall clock less monotonic clock at the harness's start.
private let offset = Duration.seconds(1_800_000_000 - 1000)

extension Conditions {
    /// Every condition has a source and holds.
    fileprivate static let allHold = Conditions(
        externalPower: true, batteryNotLow: true, network: true, unmeteredNetwork: true, idle: true)
}

extension PolicyHarness {
    /// The wall-clock time now, with the offset the harness started with.
    fileprivate var wallNow: WallClockInstant { epoch + (now - .seconds(1000)) }

    /// Where request `identifier` of `app` stands, and its snapshot.
    fileprivate func request(_ app: String, _ identifier: String) -> ScheduledRequestSnapshot? {
        core.scheduledRequests(app: app).first { $0.request.identifier == identifier }
    }

    /// The task running request `identifier` of `app`.
    fileprivate func runningTask(_ app: String, _ identifier: String) -> TaskID? {
        if case .running(_, let task) = request(app, identifier)?.state { return task }
        return nil
    }
}

/// A harness with the wall clock and the conditions reported, as the daemon reports them at start.
private func scheduler(
    _ configure: (inout CorePolicy) -> Void = { _ in }, conditions: Conditions = .allHold
) -> PolicyHarness {
    var policy = CorePolicy()
    configure(&policy)
    let h = PolicyHarness(policy: policy)
    h.setWallClockOffset(offset)
    h.setConditions(conditions)
    return h
}

private func request(
    _ app: String, _ identifier: String, _ kind: ScheduledTaskKind = .refresh, at due: WallClockInstant,
    requires constraints: Set<Constraint> = []
) -> ScheduledRequest {
    ScheduledRequest(appName: app, identifier: identifier, kind: kind, earliestBegin: due, constraints: constraints)
}

/// A refresh request of `app` belonging to `owner`, as the daemon submits every request.
private func ownedRequest(
    _ app: String, _ identifier: String, by owner: UInt32, at due: WallClockInstant
) -> ScheduledRequest {
    ScheduledRequest(appName: app, identifier: identifier, kind: .refresh, earliestBegin: due, ownerUID: owner)
}

@Suite("Scheduled requests")
struct SchedulingTimelineTests {
    // MARK: Submit

    @Test("an identifier is 1-255 bytes without control characters or '/'; a bad one is refused, nothing held")
    func identifierValidation() throws {
        let h = scheduler()
        let bad = ["", String(repeating: "x", count: 256), "a/b", "tab\there", "bell\u{7}", "del\u{7F}", "c1\u{85}"]
        for identifier in bad {
            #expect(throws: SchedulingError.invalidIdentifier(identifier)) {
                try h.submit(request("mail", identifier, at: h.wallNow))
            }
        }
        #expect(h.core.scheduledRequestCount == 0)
        // 255 bytes of UTF-8 (127 two-byte letters and one more) is the longest accepted.
        try h.submit(request("mail", String(repeating: "é", count: 127) + "x", at: h.wallNow))
        #expect(h.core.scheduledRequestCount == 1)
    }

    @Test("a constraint this host has no source for refuses the submit, naming every such constraint")
    func missingSource() throws {
        let h = scheduler(conditions: Conditions(externalPower: true, batteryNotLow: true))
        #expect(throws: SchedulingError.missingSources([.network, .idle])) {
            try h.submit(request("mail", "sync", at: h.wallNow, requires: [.idle, .network, .externalPower]))
        }
        #expect(h.core.scheduledRequestCount == 0)
        try h.submit(request("mail", "sync", at: h.wallNow, requires: [.externalPower, .batteryNotLow]))
        #expect(h.core.scheduledRequestCount == 1)
    }

    @Test("ScheduledRequestsPerAppMax and ScheduledRequestsMax refuse a new request; a replacement still fits")
    func bounds() throws {
        let h = scheduler {
            $0.scheduledRequestsPerAppMax = 2
            $0.scheduledRequestsMax = 3
        }
        try h.submit(request("alpha", "one", at: h.wallNow))
        try h.submit(request("alpha", "two", at: h.wallNow))
        #expect(throws: SchedulingError.limitExceeded(limit: "ScheduledRequestsPerAppMax", max: 2)) {
            try h.submit(request("alpha", "three", at: h.wallNow))
        }
        try h.submit(request("beta", "one", at: h.wallNow))
        #expect(throws: SchedulingError.limitExceeded(limit: "ScheduledRequestsMax", max: 3)) {
            try h.submit(request("gamma", "one", at: h.wallNow))
        }
        try h.submit(request("alpha", "one", .processing, at: h.wallNow))
        #expect(
            h.core.scheduledRequests().map { "\($0.request.appName)/\($0.request.identifier)" } == [
                "alpha/one", "alpha/two", "beta/one",
            ])
        #expect(h.request("alpha", "one")?.request.kind == .processing)
    }

    @Test("ScheduledRequestsPerUserMax counts a uid's requests over every app name; requests of no owner do not count")
    func perUserBound() throws {
        let h = scheduler { $0.scheduledRequestsPerUserMax = 2 }
        func owned(_ app: String, _ identifier: String, by uid: UInt32?) -> ScheduledRequest {
            ScheduledRequest(
                appName: app, identifier: identifier, kind: .refresh, earliestBegin: h.wallNow, ownerUID: uid)
        }
        try h.submit(owned("alpha", "one", by: 1000))
        try h.submit(owned("beta", "one", by: 1000))
        #expect(throws: SchedulingError.limitExceeded(limit: "ScheduledRequestsPerUserMax", max: 2)) {
            try h.submit(owned("gamma", "one", by: 1000))
        }
        // Another user, and a replacement of a request held, still fit.
        try h.submit(owned("gamma", "one", by: 1001))
        try h.submit(owned("alpha", "one", by: 1000))
        try h.submit(owned("delta", "one", by: nil))
        #expect(h.core.scheduledRequestCount == 4)
    }

    @Test(
        "a request runs only in a registration of its owner's uid; another user's registration of the name leaves it waiting"
    )
    func ownerUID() throws {
        let h = scheduler()
        try h.submit(
            ScheduledRequest(
                appName: "mail", identifier: "sync", kind: .refresh, earliestBegin: h.wallNow, ownerUID: 1000))
        let impostor = try h.register("mail", uid: 1001)
        #expect(h.takeEffects() == [])
        #expect(h.request("mail", "sync")?.state == .pending(due: h.wallNow, waitingOn: []))
        #expect(h.core.nextDeadline == nil)
        h.closeRegistration(impostor)
        _ = h.takeEffects()
        try h.register("mail", pid: 4242, uid: 1000)
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](sync)"])
    }

    @Test("a submit with an identifier in use replaces the request; one that is running is replaced when it ends")
    func replace() throws {
        let h = scheduler()
        try h.submit(request("mail", "sync", at: h.wallNow + .seconds(600)))
        try h.submit(request("mail", "sync", .processing, at: h.wallNow + .seconds(60)))
        #expect(h.core.scheduledRequestCount == 1)
        #expect(h.request("mail", "sync")?.request.kind == .processing)
        #expect(h.request("mail", "sync")?.state == .pending(due: h.wallNow + .seconds(60), waitingOn: []))

        let mail = try h.register("mail")
        try h.submit(request("mail", "fetch", at: h.wallNow))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](fetch)"])
        try h.submit(request("mail", "fetch", .processing, at: h.wallNow + .seconds(30)))
        #expect(h.request("mail", "fetch")?.state == .running(app: mail, task: TaskID(rawValue: 1)))
        #expect(h.request("mail", "fetch")?.hasReplacement == true)
        #expect(h.request("mail", "fetch")?.request.kind == .refresh)
        try h.complete(mail, TaskID(rawValue: 1), .success)
        #expect(h.request("mail", "fetch")?.request.kind == .processing)
        #expect(h.request("mail", "fetch")?.state == .pending(due: h.wallNow + .seconds(30), waitingOn: []))
        h.advance(by: .seconds(30))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [2](fetch)"])
    }

    // MARK: Runnable

    @Test("a request runs once due, not before; the next wake-up is its due time")
    func dueGating() throws {
        let h = scheduler()
        try h.register("mail")
        try h.submit(request("mail", "sync", at: h.wallNow + .seconds(60), requires: [.network]))
        #expect(h.core.nextDeadline == h.now + .seconds(60))
        h.advance(by: .seconds(59))
        #expect(h.takeEffects() == [])
        h.advance(by: .seconds(1))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](sync)"])
    }

    @Test("a request due but waiting on a constraint runs when it holds, and adds no wake-up meanwhile")
    func constraintGating() throws {
        let h = scheduler(conditions: Conditions(externalPower: false, network: true))
        try h.register("mail")
        try h.submit(request("mail", "backup", .processing, at: h.wallNow + .seconds(60), requires: [.externalPower]))
        #expect(h.core.nextDeadline == nil)
        #expect(
            h.request("mail", "backup")?.state == .pending(due: h.wallNow + .seconds(60), waitingOn: [.externalPower]))
        h.advance(by: .seconds(120))
        #expect(h.takeEffects() == [])
        h.setConditions(Conditions(externalPower: false, network: false))
        #expect(h.takeEffects() == [])
        h.setConditions(Conditions(externalPower: true, network: false))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](backup)"])
    }

    @Test("ScheduledTasksMax caps what runs at once; the order is earliest due, then recent foreground, then names")
    func capAndFairOrder() throws {
        let h = scheduler({ $0.scheduledTasksMax = 1 }, conditions: Conditions(externalPower: false))
        let alpha = try h.register("alpha")
        let beta = try h.register("beta")
        let gamma = try h.register("gamma")
        // alpha left the foreground first, beta a second later; gamma stays in the foreground.
        try h.setState(alpha, .background)
        try h.acknowledgeLast(.didEnterBackground, of: alpha)
        h.advance(by: .seconds(1))
        try h.setState(beta, .background)
        try h.acknowledgeLast(.didEnterBackground, of: beta)
        h.advance(by: .seconds(1))
        _ = h.takeEffects()
        let due = h.wallNow - .seconds(10)
        for (app, identifier) in [("alpha", "x"), ("beta", "x"), ("gamma", "x"), ("gamma", "w")] {
            try h.submit(request(app, identifier, at: due, requires: [.externalPower]))
        }
        try h.submit(request("alpha", "early", at: due - .seconds(10), requires: [.externalPower]))
        #expect(h.takeEffects() == [])

        h.setConditions(Conditions(externalPower: true))
        #expect(h.takeEffects() == ["resume alpha", "alpha ← runScheduledTask [1](early)"])
        // The cap is reached: the others wait, and plan no wake-up of their own.
        #expect(h.core.scheduledRequests().filter { if case .pending = $0.state { true } else { false } }.count == 4)
        #expect(h.core.nextDeadline == h.now + .seconds(25))
        try h.complete(alpha, TaskID(rawValue: 1), .success)
        #expect(h.takeEffects() == ["suspend alpha", "gamma ← runScheduledTask [2](w)"])
        try h.complete(gamma, TaskID(rawValue: 2), .success)
        #expect(h.takeEffects() == ["gamma ← runScheduledTask [3](x)"])
        try h.complete(gamma, TaskID(rawValue: 3), .success)
        #expect(h.takeEffects() == ["resume beta", "beta ← runScheduledTask [4](x)"])
        try h.complete(beta, TaskID(rawValue: 4), .success)
        #expect(h.takeEffects() == ["suspend beta", "resume alpha", "alpha ← runScheduledTask [5](x)"])
    }

    @Test("an app's scheduled time is capped over a rolling day; a spent budget wakes the core when it frees")
    func dailyBudget() throws {
        let h = scheduler { $0.scheduledTimePerDay = .seconds(60) }
        try h.register("mail")
        try h.submit(request("mail", "backup", .processing, at: h.wallNow))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](backup)"])
        let began = h.now
        // A processing task gets 10 minutes, but only 60 s of the day are left.
        h.advance(by: .seconds(55))
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring [1]"])
        #expect(warningReasons(h) == ["its scheduled task's time is nearly up"])
        h.advance(by: .seconds(5))
        #expect(h.takeEffects() == ["mail task#1 ended (expired)"])
        #expect(h.core.scheduledTimeUsed(by: "mail", at: h.wallNow) == .seconds(60))
        #expect(h.request("mail", "backup")?.state == .pending(due: h.wallNow + .seconds(30), waitingOn: []))
        // Its backoff passes with the day's budget spent: the next wake-up is when 30 s of it have left the window.
        let frees = began + .seconds(24 * 60 * 60 + 30)
        #expect(h.core.nextDeadline == frees)
        h.advance(by: frees - h.now - .seconds(1))
        #expect(h.takeEffects() == [])
        h.advance(by: .seconds(1))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [2](backup)"])
        h.advance(by: .seconds(25))
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring [2]"])
        h.advance(by: .seconds(5))
        #expect(h.takeEffects() == ["mail task#2 ended (expired)"])
    }

    @Test("ledgers of app names holding no request are bounded, and forgotten once their day is over")
    func ledgersBounded() throws {
        let h = scheduler { $0.scheduledRequestsMax = 3 }
        for index in 0..<6 {
            let app = try h.register("app\(index)")
            try h.submit(request("app\(index)", "once", at: h.wallNow))
            h.advance(by: .seconds(1))
            try h.complete(app, try #require(h.runningTask("app\(index)", "once")), .success)
        }
        #expect(h.core.saved.savedScheduling.ledgerCount == 3)
        #expect(
            (0..<6).map { h.core.scheduledTimeUsed(by: "app\($0)", at: h.wallNow) } == [
                .zero, .zero, .zero, .seconds(1), .seconds(1), .seconds(1),
            ])
        h.advance(by: .seconds(24 * 60 * 60))
        try h.submit(request("app0", "again", at: h.wallNow))
        #expect(h.core.saved.savedScheduling.ledgerCount == 0)
    }

    // MARK: Running one

    @Test("a registered app gets a lease named after the identifier, with its kind's time and warning")
    func runsInRegisteredApp() throws {
        let h = scheduler()
        let mail = try h.register("mail")
        try h.submit(request("mail", "sync", at: h.wallNow))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](sync)"])
        let event = try #require(h.events(of: mail).last)
        #expect(event.kind == .runScheduledTask && event.name == "sync" && event.taskIDs == [TaskID(rawValue: 1)])
        let lease = try #require(h.core.snapshot(of: mail, now: h.now)?.tasks.first)
        #expect(lease.id == TaskID(rawValue: 1) && lease.name == "sync")
        h.advance(by: .seconds(25))
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring [1]"])
    }

    @Test("a suspended app is woken into background for its task, and suspended again when it completes")
    func wakesSuspendedApp() throws {
        let h = scheduler()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        #expect(h.state(mail) == .suspended)
        _ = h.takeEffects()
        try h.submit(request("mail", "sync", at: h.wallNow))
        #expect(h.takeEffects() == ["resume mail", "mail ← runScheduledTask [1](sync)"])
        #expect(h.state(mail) == .background)
        h.advance(by: .seconds(20))
        #expect(h.takeEffects() == [])
        try h.complete(mail, TaskID(rawValue: 1), .success)
        #expect(h.takeEffects() == ["suspend mail"])
        #expect(h.core.scheduledRequestCount == 0)
    }

    @Test("a scheduled task runs on its own time, not the app's background budget")
    func ownTimeNotSharedBudget() throws {
        let h = scheduler { $0.processingTaskTime = .seconds(900) }
        let mail = try h.register("mail", backgroundTime: .seconds(60))
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        h.advance(by: .seconds(120))
        _ = h.takeEffects()
        #expect(try h.remaining(mail) == .zero)
        try h.submit(request("mail", "index", .processing, at: h.wallNow))
        #expect(h.takeEffects() == ["resume mail", "mail ← runScheduledTask [1](index)"])
        h.advance(by: .seconds(890))
        #expect(h.takeEffects() == [])
        #expect(h.state(mail) == .background)
        try h.complete(mail, TaskID(rawValue: 1), .success)
        #expect(h.takeEffects() == ["suspend mail"])
    }

    @Test("an app that is not running is launched when launchable, and gets its task once it registers")
    func launchesApp() throws {
        let h = scheduler()
        try h.submit(request("mail", "sync", at: h.wallNow), isLaunchable: true)
        #expect(h.takeEffects() == ["launch mail"])
        #expect(h.request("mail", "sync")?.state == .launching)
        try h.launch("mail", forScheduledWork: true)
        // Launched for its task, it starts in background whatever its registration asks (here: active).
        let mail = try h.register("mail", uid: 0)
        #expect(h.takeEffects() == ["mail ← didEnterBackground", "mail ← runScheduledTask [1](sync)"])
        #expect(h.state(mail) == .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        try h.complete(mail, TaskID(rawValue: 1), .success)
        #expect(h.takeEffects() == ["suspend mail"])
    }

    @Test("an app launched for a task whose constraint is lost meanwhile still starts in background, and is suspended")
    func launchedAppStartsInBackgroundWithoutItsTask() throws {
        let h = scheduler(conditions: Conditions(externalPower: true))
        try h.submit(request("mail", "backup", at: h.wallNow, requires: [.externalPower]), isLaunchable: true)
        #expect(h.takeEffects() == ["launch mail"])
        try h.launch("mail", forScheduledWork: true)
        h.setConditions(Conditions(externalPower: false))
        let mail = try h.register("mail", uid: 0)
        #expect(h.takeEffects() == ["mail ← didEnterBackground"])
        #expect(h.request("mail", "backup")?.state == .pending(due: h.wallNow, waitingOn: [.externalPower]))
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        #expect(h.takeEffects() == ["suspend mail"])
        // A launch the shell made for someone else (`Launch`) starts as its registration asks.
        let other = try h.launch("notes")
        #expect(try h.register("notes", uid: 0) == other)
        #expect(h.state(other) == .active)
    }

    @Test("an app that is not running and not launchable: the request waits, with no wake-up, until it registers")
    func waitsForRegistration() throws {
        let h = scheduler()
        try h.submit(request("mail", "sync", at: h.wallNow))
        #expect(h.takeEffects() == [])
        #expect(h.core.nextDeadline == nil)
        h.advance(by: .seconds(3600))
        try h.register("mail")
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](sync)"])
    }

    @Test("a launch that does not register in time, or fails, puts the request back with backoff")
    func launchTimeout() throws {
        let h = scheduler()
        try h.submit(request("mail", "sync", at: h.wallNow), isLaunchable: true)
        #expect(h.takeEffects() == ["launch mail"])
        // Thrice LaunchTimeoutSec (5 s): the wait for a launch slot, the launch itself, then the registration.
        h.advance(by: .seconds(14))
        #expect(h.request("mail", "sync")?.state == .launching)
        h.advance(by: .seconds(1))
        #expect(h.request("mail", "sync")?.state == .pending(due: h.wallNow + .seconds(30), waitingOn: []))
        #expect(h.request("mail", "sync")?.failures == 1)
        h.advance(by: .seconds(30))
        #expect(h.takeEffects() == ["launch mail"])
        h.launchFailed("mail")
        #expect(h.request("mail", "sync")?.state == .pending(due: h.wallNow + .seconds(60), waitingOn: []))
        #expect(h.request("mail", "sync")?.failures == 2)
    }

    // MARK: Owners

    @Test("a launch is for the owner of the request it is for: .launch carries it, and the owner's requests share it")
    func launchCarriesTheOwner() throws {
        let h = scheduler()
        try h.submit(ownedRequest("mail", "sync", by: 1000, at: h.wallNow), isLaunchable: true)
        try h.submit(ownedRequest("mail", "fetch", by: 1000, at: h.wallNow), isLaunchable: true)
        #expect(h.takeEffects() == ["launch mail for uid 1000"])
        #expect(h.launchRequests.map(\.owner) == [1000])
        #expect(h.request("mail", "fetch")?.state == .launching && h.request("mail", "sync")?.state == .launching)
        try h.launch("mail", uid: 1000, forScheduledWork: true)
        let mail = try h.register("mail", uid: 1000)
        #expect(
            h.takeEffects() == [
                "mail ← didEnterBackground", "mail ← runScheduledTask [1](fetch)", "mail ← runScheduledTask [2](sync)",
            ])
        #expect(h.state(mail) == .background)
    }

    @Test(
        "two owners of one unpinned name: one launch at a time, the other's request waits and never runs in the first's app"
    )
    func twoOwnersOfOneName() throws {
        let h = scheduler()
        try h.submit(ownedRequest("mail", "alice", by: 1000, at: h.wallNow), isLaunchable: true)
        try h.submit(ownedRequest("mail", "bob", by: 1001, at: h.wallNow), isLaunchable: true)
        // One launch, for the first in the fair order; the other owner's request neither launches a second copy nor
        // waits on this launch.
        #expect(h.takeEffects() == ["launch mail for uid 1000"])
        #expect(h.request("mail", "bob")?.state == .pending(due: h.wallNow, waitingOn: []))
        // A failure of a launch for the other owner does not touch this owner's.
        h.launchFailed("mail", owner: 1001)
        #expect(h.request("mail", "alice")?.state == .launching)
        #expect(h.request("mail", "bob")?.failures == 0)

        try h.launch("mail", uid: 1000, forScheduledWork: true)
        let alice = try h.register("mail", uid: 1000)
        #expect(h.takeEffects() == ["mail ← didEnterBackground", "mail ← runScheduledTask [1](alice)"])
        try h.acknowledgeLast(.didEnterBackground, of: alice)
        try h.complete(alice, TaskID(rawValue: 1), .success)
        #expect(h.takeEffects() == ["suspend mail"])
        // Suspended, the first owner's app still holds the name: the other's request waits, with no wake-up for it.
        h.advance(by: .seconds(3600))
        #expect(h.takeEffects() == [])
        #expect(h.request("mail", "bob")?.state == .pending(due: h.wallNow - .seconds(3600), waitingOn: []))
        #expect(h.core.nextDeadline == nil)
        #expect(h.events(of: alice).allSatisfy { $0.name != "bob" })

        // The name is free once that app is gone: launched now for the other owner, and run in its own app.
        h.processExited(alice)
        #expect(h.takeEffects() == ["mail terminated (exited)", "launch mail for uid 1001"])
        try h.launch("mail", uid: 1001, forScheduledWork: true)
        let bob = try h.register("mail", uid: 1001)
        #expect(h.takeEffects() == ["mail ← didEnterBackground", "mail ← runScheduledTask [2](bob)"])
        #expect(h.request("mail", "bob")?.state == .running(app: bob, task: TaskID(rawValue: 2)))
        #expect(h.launchRequests.map(\.owner) == [1000, 1001])
    }

    @Test(
        "a pin change cancels exactly the requests whose owner is not the pinned user: a running one warned then ended, each with its reason"
    )
    func pinChangeCancelsWhatNoLongerFits() throws {
        let h = scheduler()
        let mail = try h.register("mail", uid: 1000)
        try h.submit(ownedRequest("mail", "running", by: 1000, at: h.wallNow))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](running)"])
        try h.submit(ownedRequest("mail", "later", by: 1000, at: h.wallNow + .seconds(600)))
        try h.submit(ownedRequest("mail", "theirs", by: 1001, at: h.wallNow + .seconds(600)))
        try h.submit(ownedRequest("notes", "sync", by: 1000, at: h.wallNow + .seconds(600)))
        try h.submit(ownedRequest("photos", "upload", by: 1000, at: h.wallNow + .seconds(600)))
        _ = h.takeEffects()

        // mail is now 1001's, photos nobody's; notes stays unpinned.
        let pins: [String: UInt32?] = ["mail": 1001, "photos": nil]
        h.setPins(pins)
        let mailReason = "mail is now pinned to uid 1001 (User=), not to its owner uid 1000"
        let photosReason = "photos is now pinned to a user that cannot be resolved (User=)"
        #expect(
            h.takeEffects() == [
                "mail request later cancelled: \(mailReason)", "mail ← backgroundTaskExpiring [1]",
                "mail request running cancelled: \(mailReason)", "photos request upload cancelled: \(photosReason)",
            ])
        let held = h.core.scheduledRequests().map { "\($0.request.appName)/\($0.request.identifier)" }
        #expect(held == ["mail/theirs", "notes/sync"])
        // The running one ended as a cancel ends it: warned with the reason, its task ended as asked.
        #expect(h.core.snapshot(of: mail, now: h.now)?.tasks.isEmpty == true)
        #expect(warningReasons(h) == [mailReason])
        let ended = h.actions.compactMap { action -> TaskEndCause? in
            guard case .audit(let entry) = action, entry.kind == .taskEnded else { return nil }
            return entry.taskEnd
        }
        #expect(ended == [.ended])
        // The history's entries name the request and its owner, and no registration.
        let cancelled = h.actions.compactMap { action -> AuditEntry? in
            guard case .audit(let entry) = action, entry.kind == .requestCancelled else { return nil }
            return entry
        }
        #expect(cancelled.map(\.requestIdentifier) == ["later", "running", "upload"])
        #expect(cancelled.map(\.ownerUID) == [1000, 1000, 1000])
        #expect(cancelled.allSatisfy { $0.app == nil })

        // The same pins again: everything held fits.
        h.setPins(pins)
        #expect(h.takeEffects() == [])
        #expect(h.core.scheduledRequestCount == 2)
    }

    @Test("a pin change cancels a request whose app is being launched for it: the app, once registered, gets no task")
    func pinChangeWhileLaunching() throws {
        let h = scheduler()
        try h.submit(ownedRequest("mail", "sync", by: 1000, at: h.wallNow), isLaunchable: true)
        #expect(h.takeEffects() == ["launch mail for uid 1000"])
        h.setPins(["mail": 1001])
        #expect(
            h.takeEffects() == [
                "mail request sync cancelled: mail is now pinned to uid 1001 (User=), not to its owner uid 1000"
            ])
        #expect(h.core.scheduledRequestCount == 0)
        try h.launch("mail", uid: 1000, forScheduledWork: true)
        let mail = try h.register("mail", uid: 1000)
        #expect(h.takeEffects() == ["mail ← didEnterBackground"])
        #expect(h.state(mail) == .background)
    }

    // MARK: Constraints lost

    @Test("a constraint lost mid-task: the warning at once, constraints-lost after the grace, and a rerun later")
    func constraintLost() throws {
        let h = scheduler(conditions: Conditions(externalPower: true))
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        _ = h.takeEffects()
        try h.submit(request("mail", "backup", .processing, at: h.wallNow, requires: [.externalPower]))
        #expect(h.takeEffects() == ["resume mail", "mail ← runScheduledTask [1](backup)"])
        h.advance(by: .seconds(10))
        h.setConditions(Conditions(externalPower: false))
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring [1]"])
        // The audit trail (and so the journal and Watch) says why it must end.
        #expect(warningReasons(h) == ["ac stopped holding"])
        // Power coming back during the grace does not undo the warning: the app was told to stop.
        h.setConditions(Conditions(externalPower: true))
        h.setConditions(Conditions(externalPower: false))
        h.advance(by: .seconds(4))
        #expect(h.takeEffects() == [])
        h.advance(by: .seconds(1))
        #expect(h.takeEffects() == ["mail task#1 ended (constraints-lost)", "suspend mail"])
        #expect(h.request("mail", "backup")?.failures == 0)
        #expect(
            h.request("mail", "backup")?.state == .pending(due: h.wallNow - .seconds(15), waitingOn: [.externalPower]))
        #expect(h.core.nextDeadline == nil)
        h.setConditions(Conditions(externalPower: true))
        #expect(h.takeEffects() == ["resume mail", "mail ← runScheduledTask [2](backup)"])
    }

    @Test("an app that stops its task when warned of a lost constraint keeps the request, with no backoff")
    func constraintLostAppStops() throws {
        let h = scheduler(conditions: Conditions(network: true))
        let mail = try h.register("mail")
        try h.submit(request("mail", "upload", at: h.wallNow, requires: [.network]))
        h.setConditions(Conditions(network: false))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](upload)", "mail ← backgroundTaskExpiring [1]"])
        try h.end(mail, TaskID(rawValue: 1))
        #expect(h.request("mail", "upload")?.failures == 0)
        h.setConditions(Conditions(network: true))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [2](upload)"])
        // Told to stop, the app may still give up on the request.
        h.setConditions(Conditions(network: false))
        try h.complete(mail, TaskID(rawValue: 2), .failure(retry: false))
        #expect(h.core.scheduledRequestCount == 0)
    }

    // MARK: Completion

    @Test("success, failure without retry, and an end without completion each remove the request")
    func completionRemoves() throws {
        let h = scheduler()
        let mail = try h.register("mail")
        for (identifier, finish) in [
            ("a", { try h.complete(mail, $0, .success) }),
            ("b", { try h.complete(mail, $0, .failure(retry: false)) }),
            ("c", { try h.end(mail, $0) }),
        ] as [(String, (TaskID) throws -> Void)] {
            try h.submit(request("mail", identifier, at: h.wallNow))
            let task = try #require(h.runningTask("mail", identifier))
            try finish(task)
            #expect(h.request("mail", identifier) == nil)
            #expect(h.core.snapshot(of: mail, now: h.now)?.tasks.isEmpty == true)
        }
        #expect(throws: SchedulingError.noSuchTask(app: "mail", task: TaskID(rawValue: 1))) {
            try h.complete(mail, TaskID(rawValue: 1), .success)
        }
        let lease = try h.begin(mail, "ordinary")
        #expect(throws: SchedulingError.noSuchTask(app: "mail", task: lease)) {
            try h.complete(mail, lease, .success)
        }
    }

    @Test("failure with retry waits 30 s, doubling with each failure in a row, at most an hour")
    func retryBackoff() throws {
        let h = scheduler()
        let mail = try h.register("mail")
        try h.submit(request("mail", "sync", at: h.wallNow))
        for seconds in [30, 60, 120, 240, 480, 960, 1920, 3600, 3600] as [Int64] {
            let task = try #require(h.runningTask("mail", "sync"))
            try h.complete(mail, task, .failure(retry: true))
            #expect(h.request("mail", "sync")?.state == .pending(due: h.wallNow + .seconds(seconds), waitingOn: []))
            #expect(h.core.nextDeadline == h.now + .seconds(seconds))
            h.advance(by: .seconds(seconds))
        }
        #expect(h.request("mail", "sync")?.failures == 9)
        let task = try #require(h.runningTask("mail", "sync"))
        try h.complete(mail, task, .success)
        #expect(h.core.scheduledRequestCount == 0)
    }

    @Test("a task that outlives its time, or whose app ends, sends the request back with backoff")
    func expiryAndAppEnd() throws {
        let h = scheduler()
        let mail = try h.register("mail")
        try h.submit(request("mail", "sync", at: h.wallNow))
        _ = h.takeEffects()
        h.advance(by: .seconds(25))
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring [1]"])
        h.advance(by: .seconds(5))
        #expect(h.takeEffects() == ["mail task#1 ended (expired)"])
        #expect(h.state(mail) == .active)
        #expect(h.request("mail", "sync")?.state == .pending(due: h.wallNow + .seconds(30), waitingOn: []))
        h.advance(by: .seconds(30))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [2](sync)"])
        h.processExited(mail, how: .crashed)
        #expect(h.takeEffects() == ["mail task#2 ended (app-ended)", "mail terminated (crashed)"])
        #expect(h.request("mail", "sync")?.failures == 2)
        #expect(h.request("mail", "sync")?.state == .pending(due: h.wallNow + .seconds(60), waitingOn: []))
    }

    // MARK: Cancel

    @Test("cancel removes a pending request; a running one's task is warned and ended, its replacement dropped")
    func cancel() throws {
        let h = scheduler()
        try h.submit(request("mail", "later", at: h.wallNow + .seconds(600)))
        try h.cancel(app: "mail", identifier: "later")
        #expect(h.core.scheduledRequestCount == 0)
        #expect(h.core.nextDeadline == nil)
        #expect(throws: SchedulingError.noSuchRequest(app: "mail", identifier: "later")) {
            try h.cancel(app: "mail", identifier: "later")
        }
        let mail = try h.register("mail")
        try h.submit(request("mail", "sync", at: h.wallNow))
        try h.submit(request("mail", "sync", at: h.wallNow + .seconds(60)))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](sync)"])
        try h.cancel(app: "mail", identifier: "sync")
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring [1]"])
        #expect(h.core.snapshot(of: mail, now: h.now)?.tasks.isEmpty == true)
        #expect(h.core.scheduledRequestCount == 0)
        let ended = h.actions.compactMap { action -> TaskEndCause? in
            guard case .audit(let entry) = action, entry.kind == .taskEnded else { return nil }
            return entry.taskEnd
        }
        #expect(ended == [.ended])
        #expect(warningReasons(h) == ["its request was cancelled"])
    }

    // MARK: Wall clock

    @Test("a change of the wall clock's offset plans the due times again")
    func wallClockChange() throws {
        let h = scheduler()
        try h.register("mail")
        try h.submit(request("mail", "sync", at: h.wallNow + .seconds(3600)))
        #expect(h.core.nextDeadline == h.now + .seconds(3600))
        // The wall clock was set 30 minutes ahead: the request is due 30 minutes sooner.
        h.setWallClockOffset(offset + .seconds(1800))
        #expect(h.core.nextDeadline == h.now + .seconds(1800))
        h.setWallClockOffset(offset + .seconds(7200))
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](sync)"])
    }

    @Test("nothing starts before the wall clock and the conditions are known")
    func waitsForInputs() throws {
        let h = PolicyHarness()
        try h.register("mail")
        #expect(throws: SchedulingError.missingSources([.network])) {
            try h.submit(request("mail", "sync", at: epoch, requires: [.network]))
        }
        try h.submit(request("mail", "sync", at: epoch))
        h.setConditions(Conditions())
        #expect(h.takeEffects() == [])
        #expect(h.core.nextDeadline == nil)
        h.setWallClockOffset(offset)
        #expect(h.takeEffects() == ["mail ← runScheduledTask [1](sync)"])
    }

    // MARK: Restarts

    @Test("a restart keeps requests and a running scheduled task like any lease")
    func restartKeepsRunningTask() throws {
        let h = scheduler()
        let mail = try h.register("mail")
        try h.submit(request("mail", "sync", at: h.wallNow))
        try h.submit(request("mail", "later", at: h.wallNow + .seconds(600)))
        _ = h.takeEffects()
        let requests = h.core.scheduledRequests()
        let deadline = h.core.nextDeadline
        try h.restart()
        #expect(h.takeEffects() == ["restart"])
        #expect(h.core.scheduledRequests() == requests)
        #expect(h.core.nextDeadline == deadline)
        h.advance(by: .seconds(25))
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring [1]"])
        try h.complete(mail, TaskID(rawValue: 1), .success)
        #expect(h.core.scheduledRequests().map(\.request.identifier) == ["later"])
    }

    @Test("after a reboot (a new monotonic origin) requests keep their wall-clock times, ledgers and order")
    func rebootKeepsRequests() throws {
        let h = scheduler { $0.scheduledTimePerDay = .seconds(600) }
        let mail = try h.register("mail")
        try h.submit(request("mail", "quick", at: h.wallNow))
        try h.submit(request("mail", "sync", at: h.wallNow))
        h.advance(by: .seconds(10))
        try h.complete(mail, try #require(h.runningTask("mail", "quick")), .success)
        let backupDue = h.wallNow + .seconds(3600)
        try h.submit(request("mail", "backup", .processing, at: backupDue))
        try h.submit(request("news", "fetch", at: h.wallNow + .seconds(7200)))
        // The host reboots with "sync" running; it is back five minutes later, its monotonic clock at 50 s.
        let bootWall = h.wallNow + .seconds(300)
        let bootOffset = Duration.nanoseconds(bootWall.nanoseconds) - .seconds(50)
        let saved = SavedLifecycle(afterReboot: h.core.saved.savedScheduling, wallClockNow: bootWall)
        let rebooted = try PolicyHarness(
            restoring: saved, policy: h.core.policy, start: .seconds(50), conditions: Conditions(),
            wallClockOffset: bootOffset)
        #expect(rebooted.core.scheduledRequests().map(\.request.identifier) == ["backup", "sync", "fetch"])
        #expect(rebooted.request("mail", "backup")?.state == .pending(due: backupDue, waitingOn: []))
        #expect(rebooted.request("mail", "sync")?.state == .pending(due: bootWall + .seconds(30), waitingOn: []))
        #expect(rebooted.request("mail", "sync")?.failures == 1)
        #expect(rebooted.core.scheduledTimeUsed(by: "mail", at: bootWall) == .seconds(10))
        // No app runs yet, and none is launchable: nothing to wake up for.
        #expect(rebooted.core.nextDeadline == nil)
        let rebootedMail = try rebooted.register("mail")
        #expect(rebooted.core.nextDeadline == .seconds(80))
        rebooted.advance(by: .seconds(30))
        #expect(rebooted.takeEffects() == ["mail ← runScheduledTask [1](sync)"])
        #expect(rebooted.core.nextDeadline == .seconds(80 + 25))
        try rebooted.complete(rebootedMail, TaskID(rawValue: 1), .success)
        #expect(rebooted.core.nextDeadline == MonotonicInstant.seconds(50) + (backupDue - bootWall))
    }

    // MARK: Wake-ups

    @Test("1,000 blocked requests add no wake-up: waiting on a constraint, on an app, or on a slot")
    func noWakeUpsForBlockedRequests() throws {
        let h = scheduler(conditions: Conditions(externalPower: false, network: true))
        for index in 0..<1000 {
            let due = h.wallNow + .seconds(Int64(index % 7) * 60)
            try h.submit(
                request("app\(index % 20)", "r\(index)", at: due, requires: [.externalPower]),
                isLaunchable: index.isMultiple(of: 2))
        }
        #expect(h.core.scheduledRequestCount == 1000)
        #expect(h.core.nextDeadline == nil)
        #expect(h.armedDeadline == nil)
        h.advance(by: .seconds(3600))
        #expect(h.takeEffects() == [])

        // Due, every constraint holding, but their app neither runs nor can be launched.
        let idle = scheduler { $0.scheduledRequestsPerAppMax = 200 }
        for index in 0..<100 {
            try idle.submit(request("offline", "r\(index)", at: idle.wallNow + .seconds(Int64(index))))
        }
        #expect(idle.core.nextDeadline == nil)

        // Runnable, but the one slot is taken: only the running task's own deadlines remain.
        let busy = scheduler {
            $0.scheduledTasksMax = 1
            $0.scheduledRequestsPerAppMax = 200
        }
        try busy.register("mail")
        try busy.submit(request("mail", "running", at: busy.wallNow))
        for index in 0..<100 {
            try busy.submit(request("mail", "r\(index)", at: busy.wallNow + .seconds(Int64(index))))
        }
        #expect(busy.core.nextDeadline == busy.now + .seconds(25))
    }
}

/// Why each scheduled task was warned, in order: the `trigger` of every `expirationWarning` audit entry so far.
private func warningReasons(_ h: PolicyHarness) -> [String] {
    h.actions.compactMap { action -> String? in
        guard case .audit(let entry) = action, entry.kind == .expirationWarning else { return nil }
        return entry.trigger
    }
}
