// The BackgroundTasks-shaped API against the real daemon: a launch handler, a request submitted, its task run when
// the test's power_supply tree says the adapter is online, its expiration handler when it goes offline, and
// setTaskCompleted.
import BGTaskClient
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Synchronization
import Testing

/// Asks `probe` every 20 ms until it gives a value, for at most 20 s.
@discardableResult
private func poll<Value>(_ what: String, _ probe: () throws -> Value?) throws -> Value {
    let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
    while true {
        if let value = try probe() { return value }
        guard MonotonicClock.now() < deadline else { throw HarnessError("no sign of \(what) within 20 s") }
        usleep(20_000)
    }
}

@Suite struct ScheduledTaskTests {
    @Test("register a launch handler, submit, run on external power, expire on battery, complete")
    func launchHandlerExpirationAndCompletion() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "client-scheduled")
            let daemon = try DaemonHarness(
                configuration: DaemonHarness.fastPolicy + "\n[Conditions]\nPowerSupplyPath=\(tree.path)\n",
                environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"])
            let app = try BackgroundApplication(name: "backup", socketPath: daemon.socketPath, options: testOptions)
            defer { app.close() }
            let steps = Recorder<String>()
            let tasks = Mutex<[ScheduledTask]>([])
            #expect(
                app.register(forTaskWithIdentifier: "nightly") { task in
                    steps.append("launched \(task.identifier)")
                    tasks.withLock { $0.append(task) }
                    task.expirationHandler = { steps.append("expired \(task.taskId)") }
                })
            #expect(!app.register(forTaskWithIdentifier: "nightly") { _ in })

            var request = BackgroundTaskRequest.processing(identifier: "nightly")
            request.requiresExternalPower = true
            let held = try app.submit(request)
            #expect(held.state == .pending && held.waitingOn == [.externalPower], "\(held)")
            #expect(try app.pendingTaskRequests().map(\.identifier) == ["nightly"])

            try tree.set("AC", ["online": "1"])
            steps.wait { $0.contains("launched nightly") }
            try tree.set("AC", ["online": "0"])
            let first = try #require(tasks.withLock { $0.first })
            steps.wait { $0.contains("expired \(first.taskId)") }
            // Stopped because its condition went, the task ends as a failure to retry: the request waits for the
            // condition again, with no backoff (the failure was not its own).
            first.setTaskCompleted(success: false, retry: true)
            let retried = try #require(try app.pendingTaskRequests().first)
            #expect(retried.state == .pending && retried.failures == 0, "\(retried)")
            #expect(retried.waitingOn == [.externalPower], "\(retried)")

            // Cancelled, it is gone; cancelling again is no error, as on iOS.
            try app.cancel(taskRequestWithIdentifier: "nightly")
            try app.cancel(taskRequestWithIdentifier: "nightly")
            #expect(try app.pendingTaskRequests().isEmpty)
            #expect(steps.all.filter { $0.hasPrefix("launched") }.count == 1, "\(steps.all)")
            _ = try daemon.stop()
        }
    }

    @Test("a task completed with retry while the daemon restarts is completed so once it is back: the request waits")
    func completionDuringRestart() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "1"])
            let scratch = try ScratchDirectory(prefix: "client-scheduled-restart")
            let socketPath = scratch.path + "/io.bgtask.Lifecycle"
            let configuration = DaemonHarness.fastPolicy + "\n[Conditions]\nPowerSupplyPath=\(tree.path)\n"
            let environment = ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"]
            let first = try DaemonHarness(
                configuration: configuration, arguments: ["--socket", socketPath], environment: environment)
            let links = Recorder<String>()
            var options = testOptions
            options.connectionObserver = { links.append("\($0)") }
            let app = try BackgroundApplication(name: "backup", socketPath: socketPath, options: options)
            defer { app.close() }
            let tasks = Recorder<ScheduledTask>()
            app.register(forTaskWithIdentifier: "sync") { task in tasks.append(task) }
            try app.submit(.appRefresh(identifier: "sync"))
            let task = try #require(tasks.wait(forCount: 1).first)
            #expect(try first.stop() == .exited(0))
            // The daemon is gone: the completion cannot reach it now.
            task.setTaskCompleted(success: false, retry: true)
            let second = try DaemonHarness(
                configuration: configuration, arguments: ["--socket", socketPath], environment: environment)
            // Re-attached (the leases carried over, the completion sent again, before this is told), the task ended
            // as the app said: a failure to retry, the request held with backoff. (Ended as a lease instead, it was a
            // failure not to retry, and the request was gone.)
            links.wait { $0.contains { $0.hasPrefix("reconnected") } }
            let control = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
            defer { control.close() }
            #expect(try control.getApp("backup").tasks.isEmpty)
            let requests = try control.listRequests(app: "backup")
            #expect(requests.map(\.identifier) == ["sync"], "\(requests)")
            #expect(requests.first?.failures == 1 && requests.first?.state == .pending, "\(requests)")
            _ = try second.stop()
        }
    }

    /// Found by a soak seed on a busy machine: a daemon restarted by its watchdog began a scheduled task for an app
    /// that had not re-attached yet (its `runScheduledTask` held for it), and was restarted again before the app
    /// came back. The held event went with it: the app never started the task, never heard it was to stop, and the
    /// daemon ran down its time for nothing.
    @Test(
        "a scheduled task begun and warned while its app had not re-attached reaches it from the next daemon; told again, it starts once"
    )
    func taskToldAgainAfterRestart() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "client-scheduled-retold")
            let socketPath = scratch.path + "/io.bgtask.Lifecycle"
            // The task outlives the test: 10 minutes of time (ProcessingTaskSec), and 60 s after its warning.
            let configuration = """
                [Policy]
                BackgroundTimeSec=120s
                ExpirationWarningSec=60s

                [Conditions]
                PowerSupplyPath=\(tree.path)
                """
            let environment = ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"]
            func start() throws -> DaemonHarness {
                try DaemonHarness(
                    configuration: configuration, arguments: ["--socket", socketPath], environment: environment)
            }
            var daemon = try start()
            defer { _ = try? daemon.stop() }
            try withChild(try fixtureCommand(socketPath: socketPath, lifetime: 120)) { app in
                try app.run("register backup", expecting: "registered")
                try app.run("handle nightly", expecting: "handling")
                let submitter = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
                try submitter.submitRequest(
                    app: "backup", identifier: "nightly", kind: .processing, requires: [.externalPower])
                submitter.close()

                // The app stops reading: the next daemon restores its registration, which it cannot re-attach.
                try app.process.pidFD.sendSignal(.stop)
                #expect(try daemon.stop() == .exited(0))
                daemon = try start()
                let control = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
                // Plugged, then unplugged: the task begins and is warned, both events held for the app...
                try tree.set("AC", ["online": "1"])
                let begun = try #require(
                    try poll("the task's begin") { try control.getApp("backup").tasks.first?.id })
                try tree.set("AC", ["online": "0"])
                try poll("its warning") {
                    try control.history().contains { $0.kind == .expirationWarning && $0.taskIds == [begun] }
                        ? true : nil
                }
                control.close()
                // ...and gone with the daemon that held them.
                #expect(try daemon.stop() == .exited(0))
                daemon = try start()
                try app.process.pidFD.sendSignal(.continue)
                // Re-attached, the app is told the task again: it starts it, then runs its expiration handler.
                #expect(try app.waitForLine(startingWith: "launched nightly") == "launched nightly task=\(begun)")
                try app.waitForLine(startingWith: "scheduled-expired \(begun)")

                // Told again by the daemon after, the app starts nothing twice and stops nothing twice.
                #expect(try daemon.stop() == .exited(0))
                daemon = try start()
                try app.waitForLine(startingWith: "connection reconnected")
                try app.waitForLine { $0.hasPrefix("event backgroundTaskExpiring") && $0.hasSuffix("tasks=\(begun)") }
                let transcript = app.transcript
                #expect(transcript.count { $0.hasPrefix("event runScheduledTask") } == 2, "\(transcript)")
                #expect(transcript.count { $0.hasPrefix("launched") } == 1, "\(transcript)")
                #expect(transcript.count { $0.hasPrefix("scheduled-expired") } == 1, "\(transcript)")
                // The task is still the daemon's: it runs on to the end of its warning.
                let control2 = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
                defer { control2.close() }
                #expect(try control2.getApp("backup").tasks.map(\.id) == [begun])
            }
        }
    }
}
