// The real daemon with real app processes: leases, expiration, suspension seen in /proc, resumption, kills.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

@Suite("bgtaskd end to end", .serialized)
struct LifecycleEndToEndTests {
    @Test("register → background → lease → warning → end → suspended (T in /proc) → foreground → running")
    func leaseWarningSuspensionAndResume() async throws {
        try await offThePool {
            // The test relays the warning to the app, which ends its task: 20 s for that round trip, which a busy
            // machine can stretch past the fast policy's 3 s; the warning still comes 5 s into the background.
            let daemon = try DaemonHarness(
                configuration: DaemonHarness.fastPolicy("BackgroundTimeSec", "25s").replacingOccurrences(
                    of: "ExpirationWarningSec=3s", with: "ExpirationWarningSec=20s"))
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "mail")
            try app.send("begin upload")
            let task = try number(after: "began", in: try app.waitForLine(startingWith: "began"))
            let control = try daemon.connect()
            let moved = try control.lifecycle("SetState", ["app": "mail", "state": "background"])
            #expect(moved.parameters["app"]?["state"] == "background")
            try app.waitForLine(startingWith: "event willResignActive")
            try app.waitForLine(startingWith: "event didEnterBackground")
            let remaining = try control.app("mail")["backgroundTimeRemaining"]?.doubleValue ?? 0
            #expect(remaining > 0 && remaining <= 25)
            let warning = try app.waitForLine(startingWith: "event backgroundTaskExpiring")
            #expect(warning.contains("tasks=\(task)"))
            try app.send("end \(task)")
            try app.waitForLine(startingWith: "ended \(task)")
            try watch.waitFor("stateChanged", app: "mail", ["state": "suspended"])
            #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped)
            #expect(try control.app("mail")["state"] == "suspended")
            #expect(try control.app("mail")["suspendedWith"] == "process")
            // The test runner shares the app's process group: only the app may have been stopped.
            #expect(try ProcFS().stat(getpid()).state != .stopped)

            try control.lifecycle("SetState", ["app": "mail", "state": "active"])
            #expect(try waitForProcessState(app.pid) { $0 != .stopped } != .stopped)
            try app.waitForLine(startingWith: "event willEnterForeground")
            try app.waitForLine(startingWith: "event didBecomeActive")
            #expect(try control.app("mail")["state"] == "active")
            #expect(try control.app("mail")["backgroundTimeRemaining"] == .null)
            try daemon.stop()
        }
    }

    @Test("an app leading its own process group is stopped as a group and resumed as one")
    func groupLeaderIsStoppedAsAGroup() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "leader", newGroup: true)
            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "leader", "state": "background"])
            try watch.waitFor("stateChanged", app: "leader", ["state": "suspended"])
            #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped)
            #expect(try control.app("leader")["suspendedWith"] == "group")
            try daemon.stop()
            // A final stop resumes every stopped app.
            #expect(try waitForProcessState(app.pid) { $0 != .stopped } != .stopped)
        }
    }

    @Test("a lease not ended by the deadline: willTerminate, then SIGKILL, reason task-expired")
    func unendedLeaseExpires() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "sync")
            try app.send("begin forever")
            try app.waitForLine(startingWith: "began")
            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "sync", "state": "background"])
            try app.waitForLine(startingWith: "event backgroundTaskExpiring")
            try app.waitForLine(startingWith: "event willTerminate")
            try watch.waitFor("killed", app: "sync", ["reason": "task-expired"])
            #expect(try app.waitForExit() == .signaled(.kill))
            try watch.waitFor("processExited", app: "sync")
            let final = try control.app("sync")
            #expect(final["state"] == "terminated")
            #expect(final["exitReason"] == "task-expired")
            #expect(final["tasks"] == .array([]))
            #expect(daemon.log.contains("the task expired (policy violation)"))
        }
    }

    @Test("no acknowledgement of didEnterBackground and no lease: enter-background-timeout")
    func missingAcknowledgementTerminates() async throws {
        try await offThePool {
            // The app never acknowledges: the grace is the daemon's countdown alone, and short.
            let daemon = try DaemonHarness(configuration: DaemonHarness.fastPolicy("EnterBackgroundGraceSec", "700ms"))
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "lazy", acknowledge: false)
            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "lazy", "state": "background"])
            try app.waitForLine(startingWith: "event didEnterBackground")
            try app.waitForLine(startingWith: "event willTerminate")
            try watch.waitFor("killed", app: "lazy", ["reason": "enter-background-timeout"])
            #expect(try app.waitForExit() == .signaled(.kill))
            #expect(try control.app("lazy")["exitReason"] == "enter-background-timeout")
        }
    }

    @Test("a suspended app gets coalesced notifications, in order, when it runs again")
    func coalescedNotificationsOnResume() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "news")
            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "news", "state": "background"])
            try watch.waitFor("stateChanged", app: "news", ["state": "suspended"])
            for index in 1...3 {
                let posted = try control.lifecycle(
                    "Post", ["name": "sync", "payload": .object(["n": .number(Double(index))]), "app": "news"])
                #expect(posted.parameters["queued"] == .number(1))
                #expect(posted.parameters["delivered"] == .number(0))
            }
            let held = try control.lifecycle("Post", ["name": "mail", "behavior": "hold", "app": "news"])
            #expect(held.parameters["queued"] == .number(1))
            #expect(try control.app("news")["queuedEvents"] == .number(2))
            try control.lifecycle("SetState", ["app": "news", "state": "active"])
            let coalesced = try app.waitForLine(startingWith: "event notification")
            #expect(
                coalesced.contains("name=sync") && coalesced.contains("count=3") && coalesced.contains("payload=n:3"))
            let second = try app.waitForLine(startingWith: "event")
            #expect(second.hasPrefix("event notification") && second.contains("name=mail"))
            try app.waitForLine(startingWith: "event willEnterForeground")
            try app.waitForLine(startingWith: "event didBecomeActive")
        }
    }

    @Test("a client killed with SIGKILL: its leases end and the app is marked exited")
    func killedClientEndsItsLeases() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "victim")
            try app.send("begin work")
            let task = try number(after: "began", in: try app.waitForLine(startingWith: "began"))
            try app.process.pidFD.sendSignal(.kill)
            try watch.waitFor("taskEnded", app: "victim", ["taskId": .number(Double(task)), "taskEnd": "app-ended"])
            try watch.waitFor("processExited", app: "victim")
            let control = try daemon.connect()
            let final = try control.app("victim")
            #expect(final["state"] == "terminated")
            #expect(final["exitReason"] == "exited" || final["exitReason"] == "crashed")
            #expect(final["tasks"] == .array([]))
            let status = try control.lifecycle("GetStatus")
            #expect(status.parameters["tasks"] == .number(0))
            #expect(status.parameters["apps"] == .number(0))
            // Still listed, as terminated, with its reason (ListApps lists the ended apps still remembered).
            let listed = try control.lifecycle("ListApps").parameters["apps"]?.arrayValue ?? []
            #expect(
                listed.contains { $0["name"] == "victim" && $0["state"] == "terminated" && $0["exitReason"] != .null })
        }
    }

    @Test("an app holding a file lock is not frozen, and is terminated suspended-holding-lock")
    func lockHolderIsNotFrozen() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let directory = try ScratchDirectory()
            // The app and its lock: python holding an flock on a file of ours while registered.
            let lockFile = try directory.write("db.lock", "")
            let app = try ChildProcess([
                "python3", "-c",
                """
                import fcntl, os, runpy, sys
                handle = open(sys.argv[1], "w"); fcntl.flock(handle, fcntl.LOCK_EX)
                sys.argv = [sys.argv[2]] + sys.argv[3:]
                runpy.run_path(sys.argv[0], run_name="__main__")
                """,
                lockFile, Products.packageRoot + "/Tests/Fixtures/python_app.py", "--socket", daemon.socketPath,
                "--name", "db", "--lifetime", "60",
            ])
            try app.waitForLine(startingWith: "registered")
            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "db", "state": "background"])
            try watch.waitFor("suspensionDeferred", app: "db")
            #expect(try ProcFS().stat(app.pid).state != .stopped)
            try watch.waitFor("terminated", app: "db", ["reason": "suspended-holding-lock"])
            try app.waitForLine(startingWith: "event willTerminate")
            #expect(try app.waitForExit() == .signaled(.kill))
        }
    }

    @Test("SIGTERM stops the daemon cleanly: STOPPING=1, socket removed, exit status 0")
    func cleanStop() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            #expect(FileManager.default.fileExists(atPath: daemon.socketPath))
            #expect(try daemon.stop() == .exited(0))
            try daemon.waitForNotification("STOPPING=1")
            #expect(!FileManager.default.fileExists(atPath: daemon.socketPath))
            #expect(daemon.notifications.contains { $0.contains("STATUS=") })
        }
    }
}
