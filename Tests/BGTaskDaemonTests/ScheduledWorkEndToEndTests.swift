// Scheduled requests on the real daemon with a real app (the Python varlink client): submitted over the interface,
// run when the power_supply tree the test writes says the adapter is online or when a default route appears in the
// daemon's own network namespace, expired when the condition goes, completed by the app. The reaction latencies
// (from just before the change to the app printing the event) are printed, not asserted.

import BGTaskConfig
import BGTaskJSON
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

private func milliseconds(since start: Int64) -> String {
    String(format: "%.1f ms", Double(MonotonicClock.now() - start) / 1e6)
}

/// The request `identifier` as `ListRequests` shows it, or nil when it is not held.
private func request(_ identifier: String, of app: String, _ control: RawVarlinkClient) throws -> [String: JSONValue]? {
    let reply = try control.lifecycle("ListRequests", ["app": .string(app)])
    let requests = reply.parameters["requests"]?.arrayValue ?? []
    return requests.compactMap(\.objectValue).first { $0["identifier"] == .string(identifier) }
}

/// The task id in an event line: `event runScheduledTask id=7 tasks=3 name=nightly` → 3.
private func taskID(in line: String) throws -> Int {
    guard let word = line.split(separator: " ").first(where: { $0.hasPrefix("tasks=") }),
        let id = Int(word.dropFirst("tasks=".count))
    else { throw HarnessError("no single task id in \(line)") }
    return id
}

@Suite("scheduled work end to end", .serialized)
struct ScheduledWorkEndToEndTests {
    @Test(
        "a processing request needing ac: waits on battery, runs when plugged, warned and constraints-lost when unplugged, completed"
    )
    func externalPower() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "scheduled-power")
            let daemon = try DaemonHarness(
                configuration: DaemonHarness.fastPolicy + "\n[Conditions]\nPowerSupplyPath=\(tree.path)\n",
                environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"])
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "backup")
            let control = try daemon.connect()
            // In background with nothing to do, the app is suspended: the task must wake it.
            try control.lifecycle("SetState", ["app": "backup", "state": "background"])
            try watch.waitFor("stateChanged", app: "backup", ["state": "suspended"])

            let submitted = try control.lifecycle(
                "SubmitRequest",
                ["app": "backup", "identifier": "nightly", "kind": "processing", "requires": ["ac"]])
            let held = submitted.parameters["request"]?.objectValue ?? [:]
            // The submit itself decides: on battery the request waits on ac, and nothing else changes until an input.
            #expect(held["state"] == "pending", "\(submitted)")
            #expect(held["waitingOn"] == ["ac"], "\(submitted)")
            #expect(held["requires"] == ["ac"] && held["kind"] == "processing", "\(submitted)")
            #expect(held["uid"] == .number(Double(getuid())), "\(submitted)")
            #expect(!app.transcript.contains { $0.hasPrefix("event runScheduledTask") })

            var changedAt = MonotonicClock.now()
            try tree.set("AC", ["online": "1"])
            let run = try app.waitForLine(startingWith: "event runScheduledTask", timeout: .seconds(20))
            let plugged = milliseconds(since: changedAt)
            #expect(run.contains("name=nightly"), "\(run)")
            let task = try taskID(in: run)
            #expect(try request("nightly", of: "backup", control)?["taskId"] == .number(Double(task)))
            #expect(try control.app("backup")["state"] == "background")

            changedAt = MonotonicClock.now()
            try tree.set("AC", ["online": "0"])
            let warning = try app.waitForLine(startingWith: "event backgroundTaskExpiring", timeout: .seconds(20))
            let unplugged = milliseconds(since: changedAt)
            #expect(warning.contains("tasks=\(task)"), "\(warning)")
            // The app does not end it: after its warning (ExpirationWarningSec) the task ends constraints-lost, and
            // the request waits on ac again, with no backoff (the failure was not the app's).
            try watch.waitFor(
                "taskEnded", app: "backup", ["taskId": .number(Double(task)), "taskEnd": "constraints-lost"])
            let requeued = try request("nightly", of: "backup", control)
            #expect(
                requeued?["state"] == "pending" && requeued?["waitingOn"] == ["ac"], "\(String(describing: requeued))")
            #expect(requeued?["failures"] == 0, "\(String(describing: requeued))")

            // Plugged again, it runs again; completed, the request is gone (one run per submit).
            try tree.set("AC", ["online": "1"])
            let again = try app.waitForLine(startingWith: "event runScheduledTask", timeout: .seconds(20))
            let second = try taskID(in: again)
            #expect(second != task)
            // Its last task done, the app is suspended at once: the daemon's record of the end is what is waited
            // for, not the app's line, which a suspension can hold back.
            try app.send("complete \(second) success")
            try watch.waitFor("taskEnded", app: "backup", ["taskId": .number(Double(second)), "taskEnd": "ended"])
            #expect(try request("nightly", of: "backup", control) == nil)
            print(
                "scheduled task reaction: adapter plugged \(plugged) to runScheduledTask, unplugged \(unplugged) to its warning"
            )
            try daemon.stop()
        }
    }

    @Test(
        "a request needing network runs when a default route appears in the daemon's namespace and is warned when it goes",
        .requires(.root(for: "a network namespace of the test's own"), .programs("unshare", "nsenter", "ip")))
    func network() async throws {
        try await offThePool {
            let scratch = try ScratchDirectory(prefix: "scheduled-network")
            let daemon = try DaemonHarness(
                configuration: DaemonHarness.fastPolicy,
                environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"],
                launchPrefix: ["unshare", "--net"])
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "mail")
            let control = try daemon.connect()
            try runInNetworkNamespace(of: daemon.pid, ["link", "set", "lo", "up"])
            let submitted = try control.lifecycle(
                "SubmitRequest", ["app": "mail", "identifier": "fetch", "requires": ["network"]])
            #expect(submitted.parameters["request"]?["waitingOn"] == ["network"], "\(submitted)")

            var changedAt = MonotonicClock.now()
            try runInNetworkNamespace(of: daemon.pid, ["route", "add", "default", "dev", "lo"])
            let run = try app.waitForLine(startingWith: "event runScheduledTask", timeout: .seconds(20))
            let online = milliseconds(since: changedAt)
            let task = try taskID(in: run)

            changedAt = MonotonicClock.now()
            try runInNetworkNamespace(of: daemon.pid, ["route", "del", "default"])
            let warning = try app.waitForLine(startingWith: "event backgroundTaskExpiring", timeout: .seconds(20))
            let offline = milliseconds(since: changedAt)
            #expect(warning.contains("tasks=\(task)"), "\(warning)")
            // This app ends its task when warned, as an expiration handler does: the request waits for the network
            // again, with no backoff.
            try app.send("end \(task)")
            try app.waitForLine(startingWith: "ended \(task)")
            try watch.waitFor("taskEnded", app: "mail", ["taskId": .number(Double(task)), "taskEnd": "ended"])
            let requeued = try request("fetch", of: "mail", control)
            #expect(
                requeued?["state"] == "pending" && requeued?["waitingOn"] == ["network"],
                "\(String(describing: requeued))")
            print(
                "scheduled task reaction: default route added \(online) to runScheduledTask, removed \(offline) to its warning"
            )
            try daemon.stop()
        }
    }

    @Test(
        "refusals: a condition with no source, a bad identifier, another user's name, a task that is no scheduled task")
    func refusals() async throws {
        try await offThePool {
            let scratch = try ScratchDirectory(prefix: "scheduled-refusals")
            let empty = try FakePowerSupplies()
            let daemon = try DaemonHarness(
                configuration: DaemonHarness.fastPolicy + "\n[Conditions]\nPowerSupplyPath=\(empty.path)\n",
                environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"])
            let app = try pythonApp(daemon, name: "photos")
            let control = try daemon.connect()
            // No bus: no logind for idle, no NetworkManager for unmetered; nothing is held.
            let noSource = try control.lifecycle(
                "SubmitRequest", ["app": "photos", "identifier": "upload", "requires": ["unmetered", "idle"]])
            #expect(noSource.errorName == "io.bgtask.Lifecycle.ConditionUnavailable", "\(noSource)")
            #expect(noSource.parameters["conditions"] == ["unmetered", "idle"], "\(noSource)")
            for identifier in ["", "a/b", "line\nbreak", String(repeating: "x", count: 256)] {
                let refused = try control.lifecycle(
                    "SubmitRequest", ["app": "photos", "identifier": .string(identifier)])
                #expect(refused.errorName == "org.varlink.service.InvalidParameter", "\(identifier): \(refused)")
                #expect(refused.parameters["parameter"] == "identifier", "\(refused)")
            }
            let badCondition = try control.lifecycle(
                "SubmitRequest", ["app": "photos", "identifier": "upload", "requires": ["charging"]])
            #expect(badCondition.errorName == "org.varlink.service.InvalidParameter", "\(badCondition)")
            let cancelled = try control.lifecycle("CancelRequest", ["app": "photos", "identifier": "upload"])
            #expect(cancelled.errorName == "io.bgtask.Lifecycle.NoSuchRequest", "\(cancelled)")
            #expect(try control.lifecycle("ListRequests").parameters["requests"] == [])

            // An ordinary lease is no scheduled task: completing it is refused, and it stays open.
            try app.send("begin plain")
            let lease = try number(after: "began", in: try app.waitForLine(startingWith: "began"))
            let completed = try control.lifecycle(
                "SetTaskCompleted", ["app": "photos", "taskId": .number(Double(lease)), "success": true])
            #expect(completed.errorName == "io.bgtask.Lifecycle.NoSuchTask", "\(completed)")
            #expect(try control.app("photos")["tasks"]?.arrayValue?.count == 1)

            // Held with no constraint and its app running: it runs at once.
            let now = try control.lifecycle("SubmitRequest", ["app": "photos", "identifier": "thumbnails"])
            #expect(now.parameters["request"]?["state"] == "running", "\(now)")
            let run = try app.waitForLine(startingWith: "event runScheduledTask")
            #expect(run.contains("name=thumbnails"), "\(run)")
            try daemon.stop()
        }
    }

    @Test(
        "a request for an app that is not running launches it (apps.d ExecStart=) into background when due, and its task follows the registration"
    )
    func launchesTheApp() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "scheduled-launch")
            let script = Products.packageRoot + "/Tests/Fixtures/launched_app.py"
            // The app asks for nothing about its state: launched for its task, it starts in background anyway.
            let command = CommandLineWords.join(["python3", script, "--lifetime", "90", "--complete-scheduled"])
            let fixture = try LaunchFixture(
                nil, withMemory: false, configuration: "[Conditions]\nPowerSupplyPath=\(tree.path)\n",
                files: [
                    "apps.d/backup.conf": "[Launch]\nExecStart=\(command)\n",
                    "apps.d/broken.conf": "[Launch]\nExecStart=\(scratch.path)/no-such-program\n",
                ],
                environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"])
            defer { fixture.close() }
            let watch = try WatchStream(fixture.daemon)
            let control = fixture.client

            let submitted = try control.lifecycle(
                "SubmitRequest",
                ["app": "backup", "identifier": "nightly", "kind": "processing", "requires": ["ac"]])
            #expect(submitted.parameters["request"]?["waitingOn"] == ["ac"], "\(submitted)")
            // Not due to run (on battery), the app is not started.
            #expect(throws: (any Error).self) { try control.app("backup") }

            let changedAt = MonotonicClock.now()
            try tree.set("AC", ["online": "1"])
            let run = try fixture.waitForOutput("backup", "event runScheduledTask", timeout: .seconds(30))
            let started = milliseconds(since: changedAt)
            #expect(run.contains("name=nightly"), "\(run)")
            let task = try taskID(in: run)
            // Registered in background (its own registration asked for active), told so, then given its task.
            let lines = fixture.output(of: "backup").split(separator: "\n").map(String.init)
            let registered = lines.firstIndex { $0.hasPrefix("registered background") }
            let entered = lines.firstIndex { $0.hasPrefix("event didEnterBackground") }
            let ran = lines.firstIndex { $0.hasPrefix("event runScheduledTask") }
            #expect(registered != nil && entered != nil && registered! < entered! && entered! < ran!, "\(lines)")
            #expect(try control.app("backup")["managed"] == true)
            #expect(fixture.daemon.log.contains("launched backup for its scheduled requests as pid"))

            // The app completes it: the request is gone (one run per submit) and the app, done, is suspended.
            try fixture.waitForOutput("backup", "completed \(task)")
            try watch.waitFor("taskEnded", app: "backup", ["taskId": .number(Double(task)), "taskEnd": "ended"])
            #expect(try request("nightly", of: "backup", control) == nil)
            try watch.waitFor("stateChanged", app: "backup", ["state": "suspended"])

            // A command that cannot start: the request waits again, with backoff, and nothing is left running.
            try control.lifecycle("SubmitRequest", ["app": "broken", "identifier": "sync"])
            let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
            var held = try request("sync", of: "broken", control)
            while held?["failures"] != .number(1), MonotonicClock.now() < deadline {
                usleep(50_000)
                held = try request("sync", of: "broken", control)
            }
            #expect(held?["failures"] == 1 && held?["state"] == "pending", "\(String(describing: held))")
            #expect(fixture.daemon.log.contains("cannot launch broken for its scheduled requests"))
            print("scheduled launch: adapter plugged \(started) to runScheduledTask in the launched app")

            // The launched app has no cgroup for the fixture to empty: it is ended through the daemon, which resumes
            // it for its willTerminate, and the daemon stopped cleanly, so nothing stays stopped behind the test.
            try control.lifecycle("Terminate", ["app": "backup"])
            try watch.waitFor("stateChanged", app: "backup", ["state": "terminated"])
            _ = try fixture.daemon.stop()
        }
    }

    @Test(
        "a pinned name's scheduled launch runs as the pinned user only; another user's submit is refused, root's held for the pinned user; a pin change cancels what no longer fits, the reason in History",
        .requires(.root(for: "launching an app as another user"))
    )
    func pinnedScheduledLaunch() async throws {
        try await offThePool {
            let scratch = try ScratchDirectory(prefix: "scheduled-pinned")
            // The app is the Swift fixture, copied where the pinned user may run it; it registers by itself, and,
            // having no handler for the task, completes it as failed.
            let nobody = try OtherUser(uid: 65534, gid: 65534)
            let stranger = try OtherUser(uid: 4246, gid: 4246)
            let command = CommandLineWords.join([
                nobody.tools.path + "/BGTaskFixtureApp", "--lifetime", "90", "--run", "register backup", "--stay",
            ])
            let fixture = try LaunchFixture(
                nil, withMemory: false,
                files: ["apps.d/backup.conf": "[Access]\nUser=nobody\n[Launch]\nExecStart=\(command)\n"],
                environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"])
            defer { fixture.close() }
            let watch = try WatchStream(fixture.daemon)
            let control = fixture.client
            let denied = "io.bgtask.Lifecycle.PermissionDenied"

            // Another user may not submit for the name; root's request, like the pinned user's own, is the pinned
            // user's.
            let refused = try stranger.call(fixture.daemon, "SubmitRequest", ["app": "backup", "identifier": "mine"])
            #expect(refused.errorName == denied, "\(refused)")
            #expect(fixture.daemon.log.contains("denied SubmitRequest on backup to uid 4246"), "\(fixture.daemon.log)")
            let tomorrow = JSONValue.number(Date().timeIntervalSince1970 + 86_400)
            let later = try control.lifecycle(
                "SubmitRequest", ["app": "backup", "identifier": "later", "earliestBegin": tomorrow])
            #expect(later.parameters["request"]?["uid"] == 65534, "\(later)")
            let nightly = try control.lifecycle("SubmitRequest", ["app": "backup", "identifier": "nightly"])
            #expect(nightly.parameters["request"]?["uid"] == 65534, "\(nightly)")

            // Due now: launched for it, as the pinned user, and the task runs in that app.
            try fixture.waitForOutput("backup", "event runScheduledTask", timeout: .seconds(30))
            let app = try control.app("backup")
            #expect(app["uid"] == 65534 && app["managed"] == true, "\(app)")
            let pid = try #require(app["pid"]?.intValue)
            let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
            #expect(status.contains("Uid:\t65534\t65534\t65534\t65534"), "\(status)")
            #expect(fixture.daemon.log.contains("launched backup for its scheduled requests as pid \(pid) (uid 65534)"))

            // The pin moves to another user: the request held for the old one no longer fits, and is cancelled, its
            // reason in the history (for its owner to read too) and the journal.
            try fixture.daemon.directory.write(
                "apps.d/backup.conf", "[Access]\nUser=4246\n[Launch]\nExecStart=\(command)\n")
            #expect(kill(fixture.daemon.pid, SIGHUP) == 0)
            let reason = "backup is now pinned to uid 4246 (User=), not to its owner uid 65534"
            let cancelled = try watch.waitFor("requestCancelled", app: "backup", ["identifier": "later"])
            #expect(cancelled["trigger"] == .string(reason) && cancelled["uid"] == 65534, "\(cancelled)")
            #expect(try request("later", of: "backup", control) == nil)
            let history = try nobody.call(fixture.daemon, "History").parameters["entries"]?.arrayValue ?? []
            #expect(
                history.contains { $0["kind"] == "requestCancelled" && $0["identifier"] == "later" },
                "not in the owner's history: \(history)")
            let logged = "cancelled the scheduled request \"later\" of backup (uid 65534): \(reason)"
            #expect(fixture.daemon.log.contains(logged), "\(fixture.daemon.log)")

            // The new pinned user's request waits while the name is the old user's live app: it never runs there.
            let theirs = try stranger.call(fixture.daemon, "SubmitRequest", ["app": "backup", "identifier": "theirs"])
            #expect(theirs.parameters["request"]?["uid"] == 4246, "\(theirs)")
            #expect(try request("theirs", of: "backup", control)?["state"] == "pending")
            #expect(
                fixture.output(of: "backup").split(separator: "\n").filter { $0.hasPrefix("event runScheduledTask") }
                    .count == 1, "\(fixture.output(of: "backup"))")
            // Cancelled before the old user's app ends, so that nothing is launched for it behind the test.
            #expect(
                try stranger.call(fixture.daemon, "CancelRequest", ["app": "backup", "identifier": "theirs"]).errorName
                    == nil)
            try control.lifecycle("Terminate", ["app": "backup"])
            try watch.waitFor("stateChanged", app: "backup", ["state": "terminated"])
            _ = try fixture.daemon.stop()
        }
    }

    @Test("a daemon starting on saved requests that a pin no longer fits cancels them, the reason in History")
    func restartMeetsAChangedPin() async throws {
        try await offThePool {
            let files = try ScratchDirectory(prefix: "scheduled-pin-restart")
            let arguments = [
                "--state-file", files.path + "/state.json", "--schedule-file", files.path + "/scheduled.json",
            ]
            let noBus = ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(files.path)/no-bus"]
            let first = try DaemonHarness(arguments: arguments, environment: noBus)
            let tomorrow = JSONValue.number(Date().timeIntervalSince1970 + 86_400)
            for (app, identifier) in [("photos", "later"), ("notes", "kept")] {
                let held = try first.connect().lifecycle(
                    "SubmitRequest",
                    ["app": .string(app), "identifier": .string(identifier), "earliestBegin": tomorrow])
                #expect(held.parameters["request"]?["uid"] == 0, "\(held)")
            }
            try first.stop()

            // The next daemon finds photos pinned to another user than the owner of its request.
            let second = try DaemonHarness(
                files: ["apps.d/photos.conf": "[Access]\nUser=nobody\n"], arguments: arguments, environment: noBus)
            let control = try second.connect()
            let requests = try control.lifecycle("ListRequests").parameters["requests"]?.arrayValue ?? []
            #expect(requests.map { $0["identifier"] } == ["kept"], "\(requests)")
            let entries = try control.lifecycle("History").parameters["entries"]?.arrayValue ?? []
            let cancelled = entries.filter { $0["kind"] == "requestCancelled" }
            #expect(cancelled.count == 1, "\(entries)")
            #expect(cancelled.first?["app"] == "photos" && cancelled.first?["identifier"] == "later", "\(cancelled)")
            #expect(cancelled.first?["uid"] == 0, "\(cancelled)")
            #expect(
                cancelled.first?["trigger"] == "photos is now pinned to uid 65534 (User=), not to its owner uid 0",
                "\(cancelled)")
            try second.stop()
        }
    }

    @Test("requests outlive kill -9 and a restart whose saved state is of another boot, keeping their wall-clock times")
    func survivesARebootAfterKill() async throws {
        try await offThePool {
            let files = try ScratchDirectory(prefix: "scheduled-reboot")
            let statePath = files.path + "/state.json"
            let scheduledPath = files.path + "/scheduled.json"
            let arguments = ["--state-file", statePath, "--schedule-file", scheduledPath]
            let noBus = ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(files.path)/no-bus"]
            let first = try DaemonHarness(arguments: arguments, environment: noBus)
            let control = try first.connect()
            let tomorrow = (Date().timeIntervalSince1970 + 86_400).rounded()
            let later = try control.lifecycle(
                "SubmitRequest",
                ["app": "photos", "identifier": "later", "kind": "processing", "earliestBegin": .number(tomorrow)])
            #expect(later.errorName == nil, "\(later)")
            // A request that runs at once in a running app: the reboot ends its app, so it waits again with backoff.
            let app = try pythonApp(first, name: "mail")
            defer { app.terminate() }
            let running = try control.lifecycle("SubmitRequest", ["app": "mail", "identifier": "now"])
            #expect(running.parameters["request"]?["state"] == "running", "\(running)")
            // Written within a second of the change (ScheduledStore.writeInterval).
            let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
            var written = ""
            while MonotonicClock.now() < deadline {
                written = (try? String(contentsOfFile: scheduledPath, encoding: .utf8)) ?? ""
                if written.contains("later") && written.contains("running") { break }
                usleep(20_000)
            }
            #expect(written.contains("later") && written.contains("running"), "\(written)")
            guard kill(first.pid, SIGKILL) == 0 else { throw Errno(rawValue: errno, operation: "kill(SIGKILL)") }
            first.terminate()
            // The next daemon finds the state of another boot, as after a reboot.
            let state = try String(contentsOfFile: statePath, encoding: .utf8)
            let rebooted = state.replacingOccurrences(
                of: #""bootID":"[^"]*""#, with: #""bootID":"another-boot""#, options: .regularExpression)
            #expect(rebooted != state)
            try rebooted.write(toFile: statePath, atomically: true, encoding: .utf8)
            let second = try DaemonHarness(arguments: arguments, environment: noBus)
            #expect(second.log.contains("saved before the machine last booted"), "\(second.log)")
            #expect(second.log.contains("restored 2 scheduled requests from \(scheduledPath)"), "\(second.log)")
            let requests = try second.connect().lifecycle("ListRequests").parameters["requests"]?.arrayValue ?? []
            let byIdentifier = Dictionary(
                uniqueKeysWithValues: requests.compactMap(\.objectValue).map {
                    ($0["identifier"]?.stringValue ?? "", $0)
                })
            #expect(byIdentifier["later"]?["earliestBegin"] == .number(tomorrow), "\(requests)")
            #expect(byIdentifier["later"]?["due"] == .number(tomorrow), "\(requests)")
            #expect(byIdentifier["later"]?["kind"] == "processing" && byIdentifier["later"]?["uid"] == 0)
            #expect(byIdentifier["now"]?["state"] == "pending" && byIdentifier["now"]?["failures"] == 1, "\(requests)")
            try second.stop()
        }
    }
}
