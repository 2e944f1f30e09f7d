// Timelines for the lease rules: leases, the shared budget, remaining time, expiry and the daily cap
// (docs/ARCHITECTURE.md, Transitions and Remaining time).

import BGTaskCore
import BGTaskTestSupport
import Testing

@Suite("Leases and remaining time")
struct LeaseTimelineTests {
    @Test("task ids are positive and never reused, across apps and after ending")
    func taskIDsNeverReused() throws {
        let h = PolicyHarness()
        let a = try h.register("a")
        let b = try h.register("b")
        var seen: Set<TaskID> = []
        for round in 0..<20 {
            let app = round.isMultiple(of: 2) ? a : b
            let task = try h.begin(app)
            #expect(task.rawValue > 0)
            #expect(seen.insert(task).inserted)
            try h.end(app, task)
        }
    }

    @Test("any running state may begin; leases begun in the foreground carry into the background")
    func foregroundLeaseCarriesIntoBackground() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        let early = try h.begin(mail, "while active")
        try h.setState(mail, .inactive)
        let middle = try h.begin(mail, "while inactive")
        try h.setState(mail, .background)
        let late = try h.begin(mail, "while background")
        _ = h.takeEffects()
        #expect(h.core.snapshot(of: mail, now: h.now)?.tasks.map(\.id) == [early, middle, late])
        h.advance(by: .seconds(595))
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring \([early, middle, late].map(\.rawValue))"])
    }

    @Test("at most TasksPerAppMax open leases per app: LimitExceeded, and nothing changes")
    func tasksPerAppMax() throws {
        var policy = CorePolicy()
        policy.tasksPerAppMax = 3
        let h = PolicyHarness(policy: policy)
        let app = try h.register("app")
        let first = try h.begin(app)
        try h.begin(app)
        try h.begin(app)
        #expect(throws: LifecycleError.limitExceeded(limit: "TasksPerAppMax", max: 3)) { try h.begin(app) }
        #expect(h.core.openTaskCount == 3)
        try h.end(app, first)
        #expect(throws: Never.self) { try h.begin(app) }
    }

    @Test("the budget is per app, shared by its leases, counted from entering background")
    func sharedBudgetFromEnteringBackground() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        let keeper = try h.begin(mail)
        try h.setState(mail, .background)
        _ = h.takeEffects()
        h.advance(by: .seconds(100))
        let first = try h.begin(mail)
        h.advance(by: .seconds(200))
        let second = try h.begin(mail)
        try h.end(mail, keeper)
        #expect(try h.remaining(mail) == .seconds(300))
        h.advance(by: .seconds(295))
        #expect(h.takeEffects() == ["mail ← backgroundTaskExpiring \([first, second].map(\.rawValue))"])
        h.advance(by: .seconds(5))
        #expect(
            h.takeEffects() == [
                "mail \(first) ended (expired)", "mail \(second) ended (expired)", "mail terminated (task-expired)",
                "mail ← willTerminate",
            ])
    }

    @Test("BackgroundTimeRemaining: nil in the foreground, counting down in background with or without a lease")
    func remainingTime() throws {
        let h = PolicyHarness()
        let app = try h.register("app")
        #expect(try h.remaining(app) == nil)
        try h.setState(app, .inactive)
        #expect(try h.remaining(app) == nil)
        try h.setState(app, .background)
        #expect(try h.remaining(app) == .seconds(600))
        h.advance(by: .seconds(2))
        #expect(try h.remaining(app) == .seconds(598))
        let task = try h.begin(app)
        h.advance(by: .seconds(10))
        #expect(try h.remaining(app) == .seconds(588))
        try h.end(app, task)
        h.advance(by: .seconds(10))
        #expect(try h.remaining(app) == .seconds(578))
        try h.acknowledgeLast(.didEnterBackground, of: app)
        #expect(h.state(app) == .suspended)
        h.advance(by: .seconds(8))
        #expect(try h.remaining(app) == .seconds(570))
    }

    @Test("the budget resets when the app returns to the foreground")
    func budgetResetsInForeground() throws {
        let h = PolicyHarness()
        let app = try h.register("app")
        try h.setState(app, .background)
        _ = try h.begin(app)
        h.advance(by: .seconds(300))
        #expect(try h.remaining(app) == .seconds(300))
        try h.setState(app, .active)
        #expect(try h.remaining(app) == nil)
        h.advance(by: .seconds(60))
        try h.setState(app, .background)
        #expect(try h.remaining(app) == .seconds(600))
    }

    @Test("begin in background with no time left fails with BackgroundTimeExhausted and changes nothing")
    func exhaustedBudget() throws {
        var policy = CorePolicy()
        policy.defaultAppPolicy.backgroundTime = .seconds(3)
        let h = PolicyHarness(policy: policy)
        let app = try h.register("app")
        try h.setState(app, .background)
        h.advance(by: .seconds(3))
        #expect(try h.remaining(app) == .zero)
        #expect(throws: LifecycleError.backgroundTimeExhausted(app: "app")) { try h.begin(app) }
        #expect(h.core.openTaskCount == 0)
        #expect(h.state(app) == .background)
    }

    @Test("all tasks ended before the deadline: the app is suspended and nothing fires later")
    func tasksEndedInTime() throws {
        let h = PolicyHarness()
        let app = try h.register("app")
        try h.setState(app, .background)
        try h.acknowledgeLast(.didEnterBackground, of: app)
        _ = h.takeEffects()
        #expect(h.state(app) == .suspended)
        try h.setState(app, .active)
        let task = try h.begin(app)
        try h.setState(app, .background)
        try h.acknowledgeLast(.didEnterBackground, of: app)
        h.advance(by: .seconds(596))
        _ = h.takeEffects()
        try h.end(app, task)
        #expect(h.takeEffects() == ["suspend app"])
        h.advance(by: .seconds(60))
        #expect(h.takeEffects() == [])
        #expect(h.state(app) == .suspended)
    }

    @Test("a task begun inside the warning window gets its expiration warning at once")
    func lateTaskWarnedAtOnce() throws {
        let h = PolicyHarness()
        let app = try h.register("app")
        try h.setState(app, .background)
        let first = try h.begin(app)
        h.advance(by: .seconds(596))
        _ = h.takeEffects()
        let late = try h.begin(app)
        #expect(h.takeEffects() == ["app ← backgroundTaskExpiring [\(late.rawValue)]"])
        try h.end(app, first)
        #expect(h.takeEffects() == [])
        // The lease held at the acknowledgement deadline stood in for the acknowledgement.
        try h.end(app, late)
        #expect(h.takeEffects() == ["suspend app"])
    }

    @Test("EndBackgroundTask on an unknown, ended or foreign id fails and changes nothing")
    func endUnknownEndedForeign() throws {
        let h = PolicyHarness()
        let a = try h.register("a")
        let b = try h.register("b")
        let mine = try h.begin(a)
        let theirs = try h.begin(b)
        let before = h.core.snapshots(now: h.now)
        #expect(throws: LifecycleError.noSuchTask(app: "a", task: TaskID(rawValue: 999))) {
            try h.end(a, TaskID(rawValue: 999))
        }
        #expect(throws: LifecycleError.noSuchTask(app: "a", task: theirs)) { try h.end(a, theirs) }
        #expect(h.core.snapshots(now: h.now) == before)
        try h.end(a, mine)
        #expect(throws: LifecycleError.noSuchTask(app: "a", task: mine)) { try h.end(a, mine) }
    }

    @Test("a task ends exactly once: explicitly, by expiry, or with its app")
    func taskEndsExactlyOnce() throws {
        var policy = CorePolicy()
        policy.defaultAppPolicy.backgroundTime = .seconds(10)
        let h = PolicyHarness(policy: policy)
        let explicit = try h.register("explicit")
        let expiring = try h.register("expiring")
        let exiting = try h.register("exiting")
        let t1 = try h.begin(explicit)
        let t2 = try h.begin(expiring)
        let t3 = try h.begin(exiting)
        try h.end(explicit, t1)
        try h.setState(expiring, .background)
        h.advance(by: .seconds(10))
        h.closeRegistration(exiting)
        h.processExited(exiting)
        var endings: [TaskID: [TaskEndCause]] = [:]
        for case .audit(let entry) in h.actions where entry.kind == .taskEnded {
            endings[entry.taskID!, default: []].append(entry.taskEnd!)
        }
        #expect(endings == [t1: [.ended], t2: [.expired], t3: [.appEnded]])
        #expect(throws: LifecycleError.noSuchTask(app: "expiring", task: t2)) { try h.end(expiring, t2) }
    }

    @Test("the daily budget caps background time over a rolling 24 h, across relaunches")
    func dailyBudget() throws {
        var policy = CorePolicy()
        policy.defaultAppPolicy.backgroundBudgetPerDay = .seconds(900)
        let h = PolicyHarness(policy: policy)
        let app = try h.register("sync")
        let task = try h.begin(app)
        try h.setState(app, .background)
        #expect(try h.remaining(app) == .seconds(600))
        h.advance(by: .seconds(500))
        try h.end(app, task)
        try h.acknowledgeLast(.didEnterBackground, of: app)
        #expect(h.state(app) == .suspended)
        h.advance(by: .seconds(1000))
        try h.setState(app, .active)
        try h.setState(app, .background)
        #expect(try h.remaining(app) == .seconds(400))
        _ = try h.begin(app)
        h.advance(by: .seconds(100))
        // A relaunch under the same name does not get a fresh daily budget.
        h.closeRegistration(app)
        h.processExited(app)
        let relaunched = try h.register("sync", pid: 77)
        h.advance(by: .seconds(100))
        try h.setState(relaunched, .background)
        #expect(try h.remaining(relaunched) == .seconds(300))
        // Once the first stretch leaves the 24 h window, the full budget is back.
        try h.setState(relaunched, .active)
        h.advance(by: .seconds(24 * 3600))
        try h.setState(relaunched, .background)
        #expect(try h.remaining(relaunched) == .seconds(600))
    }

    @Test("an app moved in and out of background all day keeps a bounded ledger that never undercounts")
    func dailyLedgerIsBounded() throws {
        var policy = CorePolicy()
        policy.defaultAppPolicy.backgroundBudgetPerDay = .seconds(3600)
        let h = PolicyHarness(policy: policy)
        let app = try h.register("flapper")
        // 5,000 stretches of 100 ms in background, 1 s apart: 500 s used, well inside the day.
        for _ in 0..<5_000 {
            try h.setState(app, .background)
            h.advance(by: .milliseconds(100))
            try h.setState(app, .active)
            h.advance(by: .milliseconds(900))
        }
        // What the policy holds stays small: the saved state (the ledger with it) is a few kilobytes, where 5,000
        // stretches kept one by one took about 400 KiB.
        let saved = try h.restart()
        #expect(saved.count < 32 << 10, "\(saved.count) bytes saved")
        // Merged stretches can only count more, never less: the app gets no time it did not have.
        try h.setState(app, .background)
        let remaining = try #require(try h.remaining(app))
        #expect(remaining <= Duration.seconds(3600 - 500), "\(remaining)")
    }

    @Test("an exhausted daily budget leaves no time: carried leases expire at once")
    func dailyBudgetExhausted() throws {
        var policy = CorePolicy()
        policy.defaultAppPolicy.backgroundBudgetPerDay = .seconds(60)
        let h = PolicyHarness(policy: policy)
        let app = try h.register("sync")
        _ = try h.begin(app)
        try h.setState(app, .background)
        #expect(try h.remaining(app) == .seconds(60))
        h.advance(by: .seconds(60))
        #expect(h.state(app) == .terminated)
        h.processExited(app)
        let relaunched = try h.register("sync", pid: 78)
        let task = try h.begin(relaunched)
        _ = h.takeEffects()
        try h.setState(relaunched, .background)
        #expect(
            h.takeEffects() == [
                "sync ← willResignActive", "sync ← didEnterBackground",
                "sync ← backgroundTaskExpiring [\(task.rawValue)]",
                "sync \(task) ended (expired)", "sync terminated (task-expired)", "sync ← willTerminate",
            ])
    }

    @Test("one timer: the armed deadline is always the earliest pending one")
    func singleTimerTracksEarliestDeadline() throws {
        let h = PolicyHarness()
        let a = try h.register("a")
        let b = try h.register("b")
        try h.setState(a, .background)
        #expect(h.armedDeadline == h.now + .seconds(5))
        h.advance(by: .seconds(1))
        try h.setState(b, .background)
        #expect(h.armedDeadline == h.now + .seconds(4))
        try h.acknowledgeLast(.didEnterBackground, of: a)
        #expect(h.armedDeadline == h.now + .seconds(5))
        try h.acknowledgeLast(.didEnterBackground, of: b)
        #expect(h.armedDeadline == nil)
        #expect(h.core.nextDeadline == nil)
    }
}
