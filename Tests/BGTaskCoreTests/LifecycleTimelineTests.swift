// Timelines for the lifecycle's transitions (docs/ARCHITECTURE.md, Transitions): do X, advance T, expect what the
// app and the shell see.

import BGTaskCore
import BGTaskTestSupport
import Testing

@Suite("Lifecycle transitions")
struct LifecycleTimelineTests {
    @Test("active → inactive sends willResignActive and arms nothing")
    func activeToInactive() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        #expect(h.takeEffects() == [])
        try h.setState(mail, .inactive)
        #expect(h.takeEffects() == ["mail ← willResignActive"])
        #expect(h.armedDeadline == nil)
        h.advance(by: .seconds(3600))
        #expect(h.takeEffects() == [])
        #expect(h.state(mail) == .inactive)
    }

    @Test("inactive → active sends didBecomeActive and arms nothing")
    func inactiveToActive() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .inactive)
        _ = h.takeEffects()
        try h.setState(mail, .active)
        #expect(h.takeEffects() == ["mail ← didBecomeActive"])
        #expect(h.armedDeadline == nil)
        #expect(h.state(mail) == .active)
    }

    @Test("active → background passes through inactive, sending both events in order")
    func activeToBackgroundPassesThroughInactive() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        #expect(h.takeEffects() == ["mail ← willResignActive", "mail ← didEnterBackground"])
        #expect(h.state(mail) == .background)
    }

    @Test("inactive → background: acknowledged with no lease, the app is suspended at once")
    func acknowledgedBackgroundSuspends() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .inactive)
        try h.setState(mail, .background)
        #expect(h.takeEffects() == ["mail ← willResignActive", "mail ← didEnterBackground"])
        #expect(h.armedDeadline == h.now + .seconds(5))
        h.advance(by: .seconds(1))
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        #expect(h.takeEffects() == ["suspend mail"])
        #expect(h.state(mail) == .suspended)
        #expect(h.armedDeadline == nil)
    }

    @Test("inactive → background: no acknowledgement in 5 s and no lease → enter-background-timeout")
    func unacknowledgedBackgroundTerminates() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        _ = h.takeEffects()
        h.advance(by: .milliseconds(4999))
        #expect(h.takeEffects() == [])
        h.advance(by: .milliseconds(1))
        #expect(h.takeEffects() == ["mail terminated (enter-background-timeout)", "mail ← willTerminate"])
        #expect(h.core.snapshot(of: mail, now: h.now)?.exitReason == .enterBackgroundTimeout)
        h.advance(by: .seconds(5))
        #expect(h.takeEffects() == ["kill mail (enter-background-timeout)"])
    }

    @Test("inactive → background: a lease held at the grace deadline keeps the app alive")
    func leaseCoversMissingAcknowledgement() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        let task = try h.begin(mail, "upload")
        _ = h.takeEffects()
        h.advance(by: .seconds(10))
        #expect(h.takeEffects() == [])
        #expect(h.state(mail) == .background)
        try h.end(mail, task)
        #expect(h.takeEffects() == ["suspend mail"])
    }

    @Test("a registration asking for background gets didEnterBackground and the grace at once")
    func registrationInBackground() throws {
        let h = PolicyHarness()
        let fetch = try h.register("fetch", initialState: .background)
        #expect(h.takeEffects() == ["fetch ← didEnterBackground"])
        #expect(h.state(fetch) == .background)
        #expect(try h.remaining(fetch) == .seconds(600))
        h.advance(by: .seconds(5))
        #expect(h.takeEffects() == ["fetch terminated (enter-background-timeout)", "fetch ← willTerminate"])
    }

    @Test("background → inactive sends willEnterForeground; the budget is gone")
    func backgroundToInactive() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        _ = try h.begin(mail)
        _ = h.takeEffects()
        h.advance(by: .seconds(30))
        try h.setState(mail, .inactive)
        #expect(h.takeEffects() == ["mail ← willEnterForeground"])
        #expect(try h.remaining(mail) == nil)
        #expect(h.armedDeadline == nil)
    }

    @Test("suspended → inactive resumes first, then sends willEnterForeground")
    func suspendedToInactive() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        _ = h.takeEffects()
        h.advance(by: .seconds(100))
        try h.setState(mail, .inactive)
        #expect(h.takeEffects() == ["resume mail", "mail ← willEnterForeground"])
        #expect(!h.frozen.contains(mail))
    }

    @Test("suspended → active resumes, sends willEnterForeground then didBecomeActive")
    func suspendedToActive() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        _ = h.takeEffects()
        try h.setState(mail, .active)
        #expect(h.takeEffects() == ["resume mail", "mail ← willEnterForeground", "mail ← didBecomeActive"])
    }

    @Test("terminated by a controller: willTerminate, then SIGKILL after 5 s")
    func controllerTermination() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.terminate(mail)
        #expect(h.takeEffects() == ["mail terminated (controller)", "mail ← willTerminate"])
        h.advance(by: .milliseconds(4999))
        #expect(h.takeEffects() == [])
        h.advance(by: .milliseconds(1))
        #expect(h.takeEffects() == ["kill mail (controller)"])
        h.processExited(mail)
        #expect(h.core.snapshot(of: mail, now: h.now)?.exitReason == .controller)
    }

    @Test("a terminated app that exits within its grace is not killed")
    func exitWithinGraceCancelsKill() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.terminate(mail)
        _ = h.takeEffects()
        h.advance(by: .seconds(1))
        h.processExited(mail)
        h.advance(by: .seconds(10))
        #expect(h.takeEffects() == [])
        #expect(!h.killed.contains(mail))
        #expect(h.armedDeadline == nil)
    }

    @Test("a suspended app terminated by a controller is resumed to get willTerminate")
    func controllerTerminationOfSuspendedApp() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        _ = h.takeEffects()
        try h.terminate(mail)
        #expect(h.takeEffects() == ["mail terminated (controller)", "resume mail", "mail ← willTerminate"])
    }

    @Test("an app reclaimed while suspended is removed with no notice")
    func reclaimedWhileSuspendedGetsNoNotice() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        _ = h.takeEffects()
        try h.reclaim(mail, memoryBytes: 1 << 20)
        #expect(h.takeEffects() == ["mail terminated (memory-reclaim)", "kill mail (memory-reclaim)"])
        #expect(!h.events(of: mail).contains { $0.kind == .willTerminate })
    }

    @Test("an app reclaimed while running in background gets willTerminate and the grace")
    func reclaimedInBackgroundGetsNotice() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        _ = try h.begin(mail)
        _ = h.takeEffects()
        try h.reclaim(mail, memoryBytes: 1 << 20)
        #expect(
            h.takeEffects() == [
                "mail task#1 ended (app-ended)", "mail terminated (memory-reclaim)", "mail ← willTerminate",
            ])
        h.advance(by: .seconds(5))
        #expect(h.takeEffects() == ["kill mail (memory-reclaim)"])
    }

    @Test("a launched app that does not register within 5 s is killed, launch-timeout, with no notice")
    func launchTimeout() throws {
        let h = PolicyHarness()
        _ = try h.launch("job")
        h.advance(by: .milliseconds(4999))
        #expect(h.takeEffects() == [])
        h.advance(by: .milliseconds(1))
        #expect(h.takeEffects() == ["job terminated (launch-timeout)", "kill job (launch-timeout)"])
    }

    @Test("a launched app registering in time binds to its launch record and is not killed")
    func launchedAppRegistersInTime() throws {
        let h = PolicyHarness()
        let job = try h.launch("job")
        h.advance(by: .seconds(4))
        let registered = try h.register("job")
        #expect(registered == job)
        h.advance(by: .seconds(60))
        #expect(h.takeEffects() == [])
        #expect(h.state(job) == .active)
    }

    @Test("a launched app's name cannot be taken by another process")
    func launchedNameIsHeld() throws {
        let h = PolicyHarness()
        try h.launch("job")
        #expect(throws: LifecycleError.appExists("job")) { try h.register("job", pid: 1) }
    }

    @Test("ExitsOnSuspend apps are terminated with willTerminate instead of suspended")
    func exitsOnSuspend() throws {
        let h = PolicyHarness()
        let tool = try h.register("tool", exitsOnSuspend: true)
        try h.setState(tool, .background)
        _ = h.takeEffects()
        try h.acknowledgeLast(.didEnterBackground, of: tool)
        #expect(h.takeEffects() == ["tool terminated (exits-on-suspend)", "tool ← willTerminate"])
        #expect(!h.frozen.contains(tool))
    }

    @Test("an ExitsOnSuspend app that exits by itself within its grace exited; one killed stays exits-on-suspend")
    func exitsOnSuspendThenExit() throws {
        let h = PolicyHarness()
        let job = try h.register("job", exitsOnSuspend: true, initialState: .background)
        let task = try h.begin(job, "work")
        try h.acknowledgeLast(.didEnterBackground, of: job)
        try h.end(job, task)
        #expect(h.core.snapshot(of: job, now: h.now)?.exitReason == .exitsOnSuspend)
        h.closeRegistration(job)
        h.processExited(job)
        #expect(h.core.snapshot(of: job, now: h.now)?.exitReason == .exited)

        let stuck = try h.register("stuck", exitsOnSuspend: true, initialState: .background)
        let stuckTask = try h.begin(stuck)
        try h.acknowledgeLast(.didEnterBackground, of: stuck)
        try h.end(stuck, stuckTask)
        h.advance(by: .seconds(60))
        h.processExited(stuck)
        #expect(h.core.snapshot(of: stuck, now: h.now)?.exitReason == .exitsOnSuspend)
    }

    @Test("a lock holder is not frozen: it gets 2 s, then is terminated suspended-holding-lock")
    func lockHolderTerminated() throws {
        let h = PolicyHarness()
        let db = try h.register("db")
        h.lockHolders.insert(db)
        try h.setState(db, .background)
        _ = h.takeEffects()
        try h.acknowledgeLast(.didEnterBackground, of: db)
        #expect(h.takeEffects() == ["suspend db refused: lock", "db suspension deferred"])
        #expect(h.state(db) == .background)
        h.advance(by: .milliseconds(1999))
        #expect(h.takeEffects() == [])
        h.advance(by: .milliseconds(1))
        #expect(
            h.takeEffects() == [
                "suspend db refused: lock", "db terminated (suspended-holding-lock)", "db ← willTerminate",
            ])
    }

    @Test("events queued while suspended go out when a suspension is refused for a lock: a running app holds no queue")
    func refusedSuspensionDeliversQueue() throws {
        let h = PolicyHarness()
        let news = try h.register("news")
        try h.setState(news, .background)
        try h.acknowledgeLast(.didEnterBackground, of: news)
        #expect(try h.post("sync", payload: #"{"n":1}"#) == (delivered: 0, queued: 1))
        _ = h.takeEffects()
        // The daemon restarts while the app took a lock: suspending it again is refused.
        h.lockHolders.insert(news)
        try h.restoreFromSavedState()
        h.resumeAfterRestart()
        let effects = h.takeEffects()
        #expect(effects.contains("suspend news refused: lock") && effects.contains("news suspension deferred"))
        #expect(effects.contains { $0.hasPrefix("news ← notification(sync)") }, "\(effects)")
        #expect(h.state(news) == .background)
        #expect(h.core.snapshot(of: news, now: h.now)?.queuedEvents == 0)
        // And the state saves and restores (a queue in a running app would be refused).
        try h.restoreFromSavedState()
    }

    @Test("a lock holder that drops its lock within the grace is suspended when the grace ends")
    func lockDroppedInTime() throws {
        let h = PolicyHarness()
        let db = try h.register("db")
        h.lockHolders.insert(db)
        try h.setState(db, .background)
        try h.acknowledgeLast(.didEnterBackground, of: db)
        _ = h.takeEffects()
        h.advance(by: .seconds(1))
        h.lockHolders.remove(db)
        h.advance(by: .seconds(1))
        #expect(h.takeEffects() == ["suspend db"])
        #expect(h.state(db) == .suspended)
    }

    @Test("suspended apps get notifications per behaviour: drop, coalesce, hold, delivered in order on resume")
    func queuedNotifications() throws {
        let h = PolicyHarness()
        let news = try h.register("news")
        try h.setState(news, .background)
        try h.acknowledgeLast(.didEnterBackground, of: news)
        _ = h.takeEffects()
        #expect(try h.post("sync", payload: #"{"n":1}"#) == (delivered: 0, queued: 1))
        #expect(try h.post("ping", behavior: .drop) == (delivered: 0, queued: 0))
        #expect(try h.post("mail", payload: "1", behavior: .hold) == (delivered: 0, queued: 1))
        #expect(try h.post("sync", payload: #"{"n":2}"#) == (delivered: 0, queued: 1))
        #expect(try h.post("mail", payload: "2", behavior: .hold) == (delivered: 0, queued: 1))
        #expect(try h.post("sync", payload: #"{"n":3}"#) == (delivered: 0, queued: 1))
        #expect(h.takeEffects() == [])
        #expect(h.core.snapshot(of: news, now: h.now)?.queuedEvents == 3)
        try h.setState(news, .inactive)
        #expect(
            h.takeEffects() == [
                "resume news", #"news ← notification(sync) {"n":3} ×3"#, "news ← notification(mail) 1",
                "news ← notification(mail) 2", "news ← willEnterForeground",
            ])
    }

    @Test("held events are bounded: the oldest are dropped first")
    func heldEventsAreBounded() throws {
        var policy = CorePolicy()
        policy.queuedEventsPerAppMax = 3
        let h = PolicyHarness(policy: policy)
        let news = try h.register("news")
        try h.setState(news, .background)
        try h.acknowledgeLast(.didEnterBackground, of: news)
        for index in 1...5 { try h.post("n", payload: "\(index)", behavior: .hold) }
        _ = h.takeEffects()
        try h.setState(news, .inactive)
        #expect(
            h.takeEffects() == [
                "resume news", "news ← notification(n) 3", "news ← notification(n) 4", "news ← notification(n) 5",
                "news ← willEnterForeground",
            ])
    }

    @Test("wake: the app is resumed into background, gets the event, and is suspended again after acknowledging")
    func wakeAndAcknowledge() throws {
        let h = PolicyHarness()
        let chat = try h.register("chat")
        try h.setState(chat, .background)
        try h.acknowledgeLast(.didEnterBackground, of: chat)
        try h.post("typing", behavior: .hold)
        _ = h.takeEffects()
        #expect(try h.post("message", payload: "\"hi\"", behavior: .wake) == (delivered: 1, queued: 0))
        #expect(
            h.takeEffects() == [
                "resume chat", "chat ← notification(typing)", #"chat ← notification(message) "hi""#,
            ])
        #expect(h.state(chat) == .background)
        h.advance(by: .seconds(2))
        try h.acknowledgeLast(.notification, of: chat)
        #expect(h.takeEffects() == ["suspend chat"])
    }

    @Test("wake: without an acknowledgement the app is suspended again after the grace")
    func wakeWithoutAcknowledgement() throws {
        let h = PolicyHarness()
        let chat = try h.register("chat")
        try h.setState(chat, .background)
        try h.acknowledgeLast(.didEnterBackground, of: chat)
        try h.post("message", behavior: .wake)
        _ = h.takeEffects()
        h.advance(by: .milliseconds(4999))
        #expect(h.takeEffects() == [])
        h.advance(by: .milliseconds(1))
        #expect(h.takeEffects() == ["suspend chat"])
    }

    @Test(
        "every way an app ends records its reason, visible in its snapshot",
        arguments: [
            ProcessEnd.exited, ProcessEnd.crashed,
        ])
    func processEndsRecordReasons(how: ProcessEnd) throws {
        let h = PolicyHarness()
        let app = try h.register("app")
        _ = try h.begin(app, "save")
        _ = h.takeEffects()
        h.processExited(app, how: how)
        let reason: TerminationReason = how == .crashed ? .crashed : .exited
        #expect(h.takeEffects() == ["app task#1 ended (app-ended)", "app terminated (\(reason.rawValue))"])
        #expect(h.core.snapshot(of: app, now: h.now)?.exitReason == reason)
        #expect(h.core.appID(named: "app") == app)
        #expect(h.core.liveAppID(named: "app") == nil)
    }

    @Test("a closed registration ends its leases and resumes a suspended app; the name is free again")
    func registrationClosed() throws {
        let h = PolicyHarness()
        let app = try h.register("app")
        try h.setState(app, .background)
        try h.acknowledgeLast(.didEnterBackground, of: app)
        _ = h.takeEffects()
        h.closeRegistration(app)
        #expect(h.takeEffects() == ["resume app"])
        #expect(h.state(app) == .notRunning)
        // Still found by name (GetApp) while its process lives and the name is not taken again.
        #expect(h.core.appID(named: "app") == app)
        #expect(h.core.liveAppID(named: "app") == nil)
        let again = try h.register("app", pid: 4242)
        #expect(h.core.appID(named: "app") == again)
        #expect(again != app)
        h.processExited(app)
        #expect(h.core.snapshot(of: app, now: h.now)?.exitReason == .exited)
        #expect(h.state(again) == .active)
    }

    @Test("a second registration of a live name is refused unless it comes from the app's own process")
    func appExistsAndReattach() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail", pid: 10)
        #expect(throws: LifecycleError.appExists("mail")) { try h.register("mail", pid: 11) }
        let again = try h.register("mail", pid: 10)
        #expect(again == mail)
    }

    @Test("states that cannot be requested are refused and change nothing")
    func invalidStates() throws {
        let h = PolicyHarness()
        let job = try h.launch("job")
        #expect(throws: LifecycleError.invalidState(app: "job", state: .notRunning)) {
            try h.setState(job, .active)
        }
        let mail = try h.register("mail")
        try h.terminate(mail)
        #expect(throws: LifecycleError.invalidState(app: "mail", state: .terminated)) {
            try h.setState(mail, .background)
        }
        #expect(throws: LifecycleError.invalidState(app: "mail", state: .terminated)) {
            try h.begin(mail)
        }
    }
    @Test("a suspended app whose unit is stopping is woken into background at once, and never suspended again")
    func unitStoppingWakesAndExempts() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        #expect(h.state(mail) == .suspended)
        _ = h.takeEffects()
        h.exempt(mail, .unitStopping(unit: "app-mail.service"))
        #expect(
            h.takeEffects() == [
                "resume mail", "mail never suspended: its unit app-mail.service is stopping",
            ])
        #expect(h.state(mail) == .background)
        #expect(h.core.snapshot(of: mail, now: h.now)?.suspensionExemption == .unitStopping(unit: "app-mail.service"))
        // Foreground and back: its work done, it stays in background, not suspended, and nothing is armed for it.
        try h.setState(mail, .active)
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        #expect(h.state(mail) == .background)
        #expect(!h.takeEffects().contains("suspend mail"))
        #expect(h.armedDeadline == nil)
        // A watchdog learned later does not replace the stop; the same stop again records nothing.
        h.exempt(mail, .unitWatchdog(unit: "app-mail.service", interval: .seconds(5)))
        h.exempt(mail, .unitStopping(unit: "app-mail.service"))
        #expect(h.takeEffects() == [])
    }

    @Test("an app whose unit has a watchdog is not suspended: a lease ends and it stays in background, budget and all")
    func watchdogUnitIsNeverSuspended() throws {
        let h = PolicyHarness()
        let backup = try h.register("backup")
        h.exempt(backup, .unitWatchdog(unit: "backup.service", interval: .seconds(5)))
        #expect(
            h.takeEffects() == [
                "backup never suspended: its unit backup.service has a watchdog (WatchdogSec=5s), which a suspended "
                    + "process cannot ping"
            ])
        try h.setState(backup, .background)
        let task = try h.begin(backup, "upload")
        try h.acknowledgeLast(.didEnterBackground, of: backup)
        h.advance(by: .seconds(10))
        try h.end(backup, task)
        #expect(h.state(backup) == .background)
        #expect(!h.takeEffects().contains("suspend backup"))
        // Its lease still ends with its budget: a watchdog buys no time.
        let late = try h.begin(backup, "late")
        h.advance(by: .seconds(600))
        #expect(h.core.snapshot(of: backup, now: h.now)?.exitReason == .taskExpired, "\(late)")
    }

    @Test("an app that exits on suspend and whose unit is stopping is left to that stop, not sent willTerminate")
    func stoppingUnitOutranksExitsOnSuspend() throws {
        let h = PolicyHarness()
        let job = try h.register("job", exitsOnSuspend: true)
        h.exempt(job, .unitStopping(unit: "job.service"))
        _ = h.takeEffects()
        try h.setState(job, .background)
        try h.acknowledgeLast(.didEnterBackground, of: job)
        #expect(h.state(job) == .background)
        #expect(!h.takeEffects().contains { $0.contains("terminated") })
    }

    @Test("an exemption survives a daemon restart: the restored app stays in background, unsuspended")
    func exemptionSurvivesRestart() throws {
        let h = PolicyHarness()
        let mail = try h.register("mail")
        try h.setState(mail, .background)
        try h.acknowledgeLast(.didEnterBackground, of: mail)
        h.exempt(mail, .unitWatchdog(unit: "mail.service", interval: .milliseconds(2500)))
        #expect(h.state(mail) == .background)
        _ = h.takeEffects()
        try h.restart()
        #expect(!h.takeEffects().contains("suspend mail"))
        #expect(h.state(mail) == .background)
        #expect(
            h.core.snapshot(of: mail, now: h.now)?.suspensionExemption
                == .unitWatchdog(unit: "mail.service", interval: .milliseconds(2500)))
    }
}
