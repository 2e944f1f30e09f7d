// The manager's shell stepped through minutes of policy in milliseconds: a manual clock moves its timers, a fake
// /proc decides memory and locks, and real stand-in processes are stopped, continued and killed.

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Testing

@testable import BGTaskDaemon

@Suite("The manager on a manual clock")
struct ManagerTimelineTests {
    /// The default policy: the manual clock makes its real durations (ten minutes of background time) cheap.
    let policy = AppPolicy()

    @Test("a lease in background: the policy timer is armed at each deadline the core asks for, and fires there")
    func leaseTimeline() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let mail = try harness.register("mail")
            #expect(harness.manager.policyDeadline == nil, "an active app without leases has no deadline")
            #expect(try harness.call("BeginBackgroundTask", ["app": "mail", "name": "upload"]).errorName == nil)
            #expect(try harness.call("SetState", ["app": "mail", "state": "background"]).errorName == nil)
            let entered = harness.start + harness.elapsed
            let didEnter = try #require(try harness.events(of: mail).first { $0.kind == "didEnterBackground" })
            #expect(harness.manager.policyDeadline == entered + policy.enterBackgroundGrace)
            try harness.acknowledge(mail, didEnter.id)
            // Acknowledged with a lease open: the next deadline is the expiration warning.
            let warningAt = entered + policy.backgroundTime - policy.expirationWarning
            #expect(harness.manager.policyDeadline == warningAt)

            try harness.advance(toElapsed: warningAt - harness.start - .nanoseconds(1))
            #expect(try harness.events(of: mail).isEmpty, "warned before the deadline")
            try harness.advance(by: .nanoseconds(1))
            #expect(try harness.events(of: mail).map(\.kind) == ["backgroundTaskExpiring"])
            #expect(harness.manager.policyDeadline == entered + policy.backgroundTime)

            try harness.advance(by: policy.expirationWarning)
            #expect(try harness.events(of: mail).map(\.kind) == ["willTerminate"])
            #expect(harness.processState(mail) != nil, "killed before its willTerminate grace")
            #expect(harness.manager.policyDeadline == entered + policy.backgroundTime + policy.willTerminateGrace)

            try harness.advance(by: policy.willTerminateGrace)
            // SIGKILL through the pidfd; the pidfd becoming readable is how the manager learns the process is gone.
            try harness.step(until: "mail's stream to close after the kill") { try harness.isStreamClosed(mail) }
            #expect(harness.processState(mail) == nil)
            let app = try harness.app("mail")
            #expect(app["state"] == "terminated")
            #expect(app["exitReason"] == "task-expired")
            #expect(harness.manager.policyDeadline == nil, "a deadline left armed after the app ended")
            #expect(harness.log.contains("killed mail with SIGKILL (task-expired)"))
            #expect(harness.log.contains("mail's process is gone (task-expired)"))
        }
    }

    @Test("the earliest deadline of several apps is the one armed, and it moves as apps come and go")
    func earliestDeadlineArmed() async throws {
        try await offThePool {
            let harness = try ManagerHarness(files: ["apps.d/short.conf": "[Policy]\nBackgroundTimeSec=1min\n"])
            defer { harness.close() }
            let long = try harness.register("long")
            let short = try harness.register("short")
            for app in [long, short] {
                #expect(try harness.call("BeginBackgroundTask", ["app": .string(app.name)]).errorName == nil)
                #expect(
                    try harness.call("SetState", ["app": .string(app.name), "state": "background"]).errorName == nil)
                let didEnter = try #require(try harness.events(of: app).first { $0.kind == "didEnterBackground" })
                try harness.acknowledge(app, didEnter.id)
            }
            let now = harness.start + harness.elapsed
            #expect(harness.manager.policyDeadline == now + .seconds(60) - policy.expirationWarning)
            // The short app ends its lease and is suspended: the long app's warning is next.
            #expect(try harness.call("EndBackgroundTask", ["app": "short", "taskId": 2]).errorName == nil)
            try harness.step(until: "short to be stopped") { harness.processState(short) == .stopped }
            #expect(harness.manager.policyDeadline == now + .seconds(600) - policy.expirationWarning)
            #expect(try harness.app("short")["state"] == "suspended")
        }
    }

    @Test(
        "suspension waits for the lock check on the worker: stopped when the fake /proc shows no lock, deferred when it shows one"
    )
    func suspensionAndLocks() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let free = try harness.register("free")
            let locked = try harness.register("locked")
            try harness.tree.setLocks("1: POSIX  ADVISORY  WRITE \(locked.pid) 08:01:4200 0 EOF\n")
            for app in [free, locked] {
                #expect(
                    try harness.call("SetState", ["app": .string(app.name), "state": "background"]).errorName == nil)
                let didEnter = try #require(try harness.events(of: app).first { $0.kind == "didEnterBackground" })
                try harness.acknowledge(app, didEnter.id)
            }
            try harness.step(until: "free to be stopped") { harness.processState(free) == .stopped }
            try harness.step(until: "locked's suspension to be deferred") {
                try harness.app("locked")["state"] == "background"
                    && harness.log.contains("locked holds a file lock: not suspending it yet")
            }
            #expect(harness.processState(locked) != .stopped)
            #expect(try harness.app("free")["state"] == "suspended")
            let deferredAt = harness.start + harness.elapsed
            #expect(harness.manager.policyDeadline == deferredAt + policy.lockedSuspendGrace)

            // The lock is gone when the grace ends: the final attempt suspends it.
            try harness.tree.setLocks("")
            try harness.advance(by: policy.lockedSuspendGrace)
            try harness.step(until: "locked to be stopped") { harness.processState(locked) == .stopped }
            #expect(try harness.app("locked")["state"] == "suspended")

            // Back to the foreground: continued at once.
            #expect(try harness.call("SetState", ["app": "free", "state": "active"]).errorName == nil)
            try harness.step(until: "free to be continued") { harness.processState(free) != .stopped }
            #expect(try harness.app("free")["state"] == "active")
        }
    }

    @Test("a lock still held when the grace ends terminates the app (suspended-holding-lock)")
    func lockHeldPastGrace() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let stubborn = try harness.register("stubborn")
            try harness.tree.setLocks("1: FLOCK  ADVISORY  WRITE \(stubborn.pid) 08:01:4200 0 EOF\n")
            #expect(try harness.call("SetState", ["app": "stubborn", "state": "background"]).errorName == nil)
            let didEnter = try #require(try harness.events(of: stubborn).first { $0.kind == "didEnterBackground" })
            try harness.acknowledge(stubborn, didEnter.id)
            try harness.step(until: "the deferral") { harness.log.contains("stubborn holds a file lock") }
            try harness.advance(by: policy.lockedSuspendGrace)
            try harness.step(until: "the final lock check") {
                try harness.app("stubborn")["state"] == "terminated"
            }
            #expect(try harness.app("stubborn")["exitReason"] == "suspended-holding-lock")
            #expect(harness.processState(stubborn) != .stopped, "stopped while holding a lock")
            try harness.advance(by: policy.willTerminateGrace)
            try harness.step(until: "the kill") { harness.processState(stubborn) == nil }
        }
    }

    @Test("an app's process dies on its own: the pidfd turns readable and its registration ends, stream closed")
    func processExitEndsRegistration() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let doomed = try harness.register("doomed")
            let survivor = try harness.register("survivor")
            #expect(try harness.call("BeginBackgroundTask", ["app": "doomed"]).errorName == nil)
            try doomed.standIn.process.sendSignal(.kill)
            try harness.step(until: "doomed's stream to close") { try harness.isStreamClosed(doomed) }
            let app = try harness.app("doomed")
            #expect(app["state"] == "terminated")
            #expect(app["exitReason"] == "exited")
            #expect(app["tasks"] == .array([]))
            #expect(try harness.app("survivor")["state"] == "active")
            #expect(!(try harness.isStreamClosed(survivor)))
            // The name is free again, for a new process.
            let again = try harness.register("doomed")
            #expect(try harness.app("doomed")["pid"] == .number(Double(again.pid)))
        }
    }

    @Test("memory over AppsMemoryMax: a warning, then the suspended apps killed heaviest first until it is covered")
    func heaviestFirst() async throws {
        try await offThePool {
            // 600 MiB of apps against 250 MiB: the episode aims at 90% of it (225 MiB), so 375 MiB must go: the
            // 300 MiB app, then the 200 MiB one; the 100 MiB app is spared.
            let harness = try ManagerHarness(configuration: "[Memory]\nAppsMemoryMax=250M\n")
            defer { harness.close() }
            var apps: [ManagerHarness.App] = []
            for (name, pssMiB) in [("light", 100), ("heavy", 300), ("middle", 200)] {
                let app = try harness.register(name, pssMiB: Int64(pssMiB))
                #expect(try harness.call("SetState", ["app": .string(name), "state": "background"]).errorName == nil)
                apps.append(app)
            }
            for app in apps {
                let didEnter = try #require(try harness.events(of: app).first { $0.kind == "didEnterBackground" })
                try harness.acknowledge(app, didEnter.id)
                try harness.step(until: "\(app.name) to be stopped") { harness.processState(app) == .stopped }
            }
            // Samples come every 100 ms of the manual clock while memory is over; each goes to the worker.
            try harness.step(until: "the reclamation") {
                harness.manager.advanceTime(by: .milliseconds(100))
                return harness.processState(apps[1]) == nil && harness.processState(apps[2]) == nil
            }
            let log = harness.log
            let warned = try #require(log.range(of: "memory warning: apps use"))
            let heavy = try #require(
                log.range(of: "terminating heavy to reclaim memory (band suspended using 314572800"))
            let middle = try #require(log.range(of: "terminating middle to reclaim memory"))
            #expect(warned.lowerBound < heavy.lowerBound && heavy.lowerBound < middle.lowerBound)
            #expect(!log.contains("terminating light"))
            #expect(harness.processState(apps[0]) == .stopped, "the light app was disturbed")
            #expect(try harness.app("heavy")["exitReason"] == "memory-reclaim")
            #expect(try harness.app("light")["state"] == "suspended")
        }
    }

    @Test(
        "a victim that will not die: reclamation waits for it 10 s, logs it, and goes on with the next victim",
        .requires(.cgroup(.freezer)))
    func victimThatWillNotDie() async throws {
        try await offThePool {
            // 600 MiB of apps against 550 MiB: 105 MiB must go, so the 300 MiB app alone is the victim. It cannot
            // die (frozen by a v1 freezer the test owns, a killed task stays in D state until thawed): once the
            // wait for it is over, its 300 MiB still count, and the 200 MiB app must go too; the 100 MiB one stays.
            let harness = try ManagerHarness(configuration: "[Memory]\nAppsMemoryMax=550M\n")
            defer { harness.close() }
            var apps: [ManagerHarness.App] = []
            for (name, pssMiB) in [("stuck", 300), ("next", 200), ("light", 100)] {
                apps.append(try harness.register(name, pssMiB: Int64(pssMiB)))
                #expect(try harness.call("SetState", ["app": .string(name), "state": "background"]).errorName == nil)
            }
            for app in apps {
                let didEnter = try #require(try harness.events(of: app).first { $0.kind == "didEnterBackground" })
                try harness.acknowledge(app, didEnter.id)
                try harness.step(until: "\(app.name) to be stopped") { harness.processState(app) == .stopped }
            }
            let freezer = try ScratchCgroup(.freezer)
            defer { freezer.close() }
            try freezer.move(apps[0].pid)
            try freezer.cgroup.requestFreezer(true)
            #expect(try freezer.cgroup.waitUntilFreezer(frozen: true, timeout: .seconds(30)))
            // Samples every 100 ms of the manual clock: the warning, its grace, then the kill of the heaviest.
            try harness.step(until: "stuck to be killed") {
                harness.manager.advanceTime(by: .milliseconds(100))
                return harness.log.contains("terminating stuck to reclaim memory")
            }
            let killedAt = harness.elapsed
            // Within the wait, reclamation waits: the next app is left alone however long the sampling goes on.
            try harness.step(until: "9 s of waiting for stuck") {
                harness.manager.advanceTime(by: .milliseconds(100))
                return harness.elapsed - killedAt >= .seconds(9)
            }
            #expect(harness.processState(apps[0]) != nil, "the frozen victim died")
            #expect(!harness.log.contains("terminating next"), "a second victim chosen while waiting for the first")
            #expect(harness.processState(apps[1]) == .stopped)
            // Past the wait: logged, and the next victim goes; the lightest is spared.
            try harness.step(until: "next to be killed") {
                harness.manager.advanceTime(by: .milliseconds(100))
                return harness.processState(apps[1]) == nil
            }
            let log = harness.log
            let gaveUp = try #require(log.range(of: "stuck's process (pid \(apps[0].pid)) has not exited"), "\(log)")
            let next = try #require(log.range(of: "terminating next to reclaim memory"), "\(log)")
            #expect(gaveUp.lowerBound < next.lowerBound)
            #expect(harness.elapsed - killedAt >= MemoryMonitor.victimExitTimeout)
            #expect(!log.contains("terminating light"))
            #expect(harness.processState(apps[2]) == .stopped, "the light app was disturbed")
            #expect(try harness.app("next")["exitReason"] == "memory-reclaim")
            // Thawed, the stuck victim dies at last, and the daemon says so.
            try freezer.cgroup.requestFreezer(false)
            try harness.step(until: "stuck to exit once thawed", timeout: .seconds(30)) {
                harness.log.contains("stuck's process exited at last")
            }
            #expect(harness.processState(apps[0]) == nil)
        }
    }
}
