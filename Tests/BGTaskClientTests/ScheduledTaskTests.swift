// The BackgroundTasks-shaped API against the real daemon: a launch handler, a request submitted, its task run when
// the test's power_supply tree says the adapter is online, its expiration handler when it goes offline, and
// setTaskCompleted.
import BGTaskClient
import BGTaskTestSupport
import Foundation
import Synchronization
import Testing

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
}
