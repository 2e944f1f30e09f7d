// What a peer can make the policy hold is bounded: queued events, registrations per user, detached registrations;
// and a name is only ever re-attached by its own process and uid.

import BGTaskCore
import BGTaskTestSupport
import Testing

@Suite("Bounds on what a peer can make the policy hold")
struct BoundsTests {
    /// A harness with `app` suspended.
    private func suspended(_ name: String, policy: CorePolicy) throws -> (PolicyHarness, AppID) {
        let h = PolicyHarness(policy: policy)
        let app = try h.register(name)
        try h.setState(app, .background)
        try h.acknowledgeLast(.didEnterBackground, of: app)
        #expect(h.state(app) == .suspended)
        _ = h.takeEffects()
        return (h, app)
    }

    private func policy(queued: Int) -> CorePolicy {
        var policy = CorePolicy()
        policy.queuedEventsPerAppMax = queued
        return policy
    }

    @Test("distinct coalesced names are bounded: the oldest are dropped, counted, and recorded once per suspension")
    func distinctCoalescedNamesAreBounded() throws {
        let (h, news) = try suspended("news", policy: policy(queued: 4))
        for index in 1...10 {
            #expect(try h.post("n\(index)") == (delivered: 0, queued: 1))
        }
        #expect(h.takeEffects() == ["news events dropped"])
        let snapshot = try #require(h.core.snapshot(of: news, now: h.now))
        #expect(snapshot.queuedEvents == 4)
        #expect(snapshot.droppedEvents == 6)
        try h.setState(news, .inactive)
        #expect(
            h.takeEffects() == [
                "resume news", "news ← notification(n7)", "news ← notification(n8)", "news ← notification(n9)",
                "news ← notification(n10)", "news ← willEnterForeground",
            ])
        // A new suspension records its first drop again; the count goes on over the registration's life.
        try h.setState(news, .background)
        try h.acknowledgeLast(.didEnterBackground, of: news)
        _ = h.takeEffects()
        for index in 1...5 { try h.post("m\(index)") }
        #expect(h.takeEffects() == ["news events dropped"])
        #expect(h.core.snapshot(of: news, now: h.now)?.droppedEvents == 7)
    }

    @Test("a repeated name coalesces in place and does not grow the queue, however full it is")
    func repeatedNameCoalescesInPlace() throws {
        let (h, news) = try suspended("news", policy: policy(queued: 3))
        try h.post("a", payload: "1")
        try h.post("b", payload: "1")
        try h.post("c", payload: "1")
        for index in 2...50 { try h.post("b", payload: "\(index)") }
        #expect(h.core.snapshot(of: news, now: h.now)?.queuedEvents == 3)
        #expect(h.core.snapshot(of: news, now: h.now)?.droppedEvents == 0)
        // "a" is the oldest: a new name drops it; posting "a" again starts a fresh entry at the end.
        try h.post("d", payload: "1")
        try h.post("a", payload: "9")
        try h.setState(news, .inactive)
        #expect(
            h.takeEffects() == [
                "news events dropped", "resume news", "news ← notification(c) 1", "news ← notification(d) 1",
                "news ← notification(a) 9", "news ← willEnterForeground",
            ])
        // The merged entry of "b" was dropped with its 50 posts as one entry.
        #expect(h.core.snapshot(of: news, now: h.now)?.droppedEvents == 2)
    }

    @Test("held and coalesced events share one bound")
    func heldAndCoalescedShareTheBound() throws {
        let (h, news) = try suspended("news", policy: policy(queued: 3))
        try h.post("a", payload: "1", behavior: .hold)
        try h.post("s", payload: "1")
        try h.post("a", payload: "2", behavior: .hold)
        try h.post("a", payload: "3", behavior: .hold)
        try h.post("s", payload: "2")
        #expect(h.core.snapshot(of: news, now: h.now)?.queuedEvents == 3)
        try h.setState(news, .inactive)
        #expect(
            h.takeEffects() == [
                "news events dropped", "resume news", "news ← notification(s) 2 ×2", "news ← notification(a) 2",
                "news ← notification(a) 3", "news ← willEnterForeground",
            ])
    }

    @Test("lifecycle events queued for a suspended app count against the bound too")
    func lifecycleEventsCount() throws {
        let (h, news) = try suspended("news", policy: policy(queued: 2))
        h.memoryWarning(readings: [:], bytesToFree: 0)
        for index in 1...3 { try h.post("n\(index)") }
        let snapshot = try #require(h.core.snapshot(of: news, now: h.now))
        #expect(snapshot.queuedEvents == 2)
        #expect(snapshot.droppedEvents == 2)
    }

    @Test("AppsPerUserMax bounds new registrations per uid; re-attaching and other uids are unaffected")
    func appsPerUser() throws {
        var policy = CorePolicy()
        policy.appsPerUserMax = 2
        let h = PolicyHarness(policy: policy)
        let first = try h.register("a", pid: 10, uid: 1000)
        try h.register("b", pid: 11, uid: 1000)
        #expect(throws: LifecycleError.limitExceeded(limit: "AppsPerUserMax", max: 2)) {
            try h.register("c", pid: 12, uid: 1000)
        }
        #expect(h.core.appID(named: "c") == nil)
        try h.register("c", pid: 13, uid: 2000)
        // The same process re-attaching its own registration is not a new app.
        #expect(try h.register("a", pid: 10, uid: 1000) == first)
        h.closeRegistration(first)
        try h.register("d", pid: 14, uid: 1000)
    }

    @Test("re-attaching needs the same process and the same uid")
    func reattachNeedsSameProcessAndUID() throws {
        let h = PolicyHarness()
        let app = try h.register("mail", pid: 42, uid: 1000)
        #expect(throws: LifecycleError.appExists("mail")) { try h.register("mail", pid: 43, uid: 1000) }
        #expect(throws: LifecycleError.appExists("mail")) { try h.register("mail", pid: 42, uid: 1001) }
        #expect(throws: LifecycleError.appExists("mail")) { try h.register("mail", pid: 42, uid: 0) }
        #expect(try h.register("mail", pid: 42, uid: 1000) == app)
    }

    @Test("registrations detached while their process lives are bounded by HistorySize, oldest forgotten first")
    func detachedRegistrationsAreBounded() throws {
        var policy = CorePolicy()
        policy.historySize = 3
        let h = PolicyHarness(policy: policy)
        var apps: [AppID] = []
        for index in 0..<10 {
            let app = try h.register("name-\(index)", pid: 77)
            h.closeRegistration(app)
            apps.append(app)
        }
        // The three newest are remembered (not running); the older ones are forgotten.
        for app in apps.suffix(3) { #expect(h.state(app) == .notRunning) }
        for app in apps.prefix(7) { #expect(h.state(app) == nil) }
        // The shell hears of each forgotten one, to let go of its process handle.
        #expect(h.forgotten == Set(apps.prefix(7)))
        #expect(h.core.appID(named: "name-0") == nil)
        // The process's exit still ends the remembered ones, and is harmless for the forgotten.
        for app in apps { h.processExited(app) }
        for app in apps.suffix(3) { #expect(h.state(app) == .terminated) }
        #expect(h.core.snapshot(of: apps[9], now: h.now)?.exitReason == .exited)
    }

    @Test("an ended registration its name no longer leads to is forgotten once its process is gone")
    func supersededEndedRegistrationsAreForgotten() throws {
        // The default HistorySize (1000) is far above the rounds: only the rule under test can forget them.
        let h = PolicyHarness()
        var previous: AppID?
        for round in 0..<50 {
            let pid = Int32(1000 + round)
            if let old = previous {
                // The name registers again from a new process while the old one still runs its willTerminate
                // grace; the old registration stays (its process may still need killing) until it is gone.
                let app = try h.register("cycler", pid: pid)
                #expect(h.state(old) == .terminated)
                h.processExited(old)
                #expect(h.state(old) == nil)
                #expect(h.core.appID(named: "cycler") == app)
                previous = app
            } else {
                previous = try h.register("cycler", pid: pid)
            }
            try h.terminate(previous!)
        }
        // The last one ended and its name has not registered again: it stays, as the name's ended registration.
        h.processExited(previous!)
        #expect(h.state(previous!) == .terminated)
        #expect(h.core.snapshots(now: h.now, includeEnded: true).map(\.id) == [previous!])
    }

    @Test("a registration that ends after a newer one of its name leaves one ended registration for the name")
    func olderRegistrationEndingLastReplacesTheNewer() throws {
        let h = PolicyHarness()
        // A process keeps running after its stream closed (detached); another registers the name and ends.
        let detached = try h.register("mail", pid: 10)
        h.closeRegistration(detached)
        let newer = try h.register("mail", pid: 11)
        try h.terminate(newer)
        h.processExited(newer)
        #expect(h.state(newer) == .terminated)
        // The detached one's process ends last: it is the name's ended registration, and the newer is forgotten.
        h.processExited(detached)
        #expect(h.state(detached) == .terminated)
        #expect(h.state(newer) == nil)
        #expect(h.core.appID(named: "mail") == detached)
        #expect(h.core.snapshots(now: h.now, includeEnded: true).map(\.id) == [detached])
    }

    @Test("one name registered and closed again and again by one process keeps a bounded table")
    func sameNameCyclingIsBounded() throws {
        var policy = CorePolicy()
        policy.historySize = 2
        let h = PolicyHarness(policy: policy)
        var apps: [AppID] = []
        for _ in 0..<20 {
            let app = try h.register("cycler", pid: 5)
            h.closeRegistration(app)
            apps.append(app)
        }
        #expect(apps.filter { h.state($0) != nil }.count <= 2)
    }
}
