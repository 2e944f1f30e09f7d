// The client library against the real bgtaskd: the example, the fixture app, and reconnection after a restart.
import BGTaskClient
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

/// A policy with room for a multi-second upload in background: 30 s of background time, warned 5 s before; what
/// an app must do in time (acknowledge, exit on willTerminate) has room for a machine the other tests keep busy.
private let roomyPolicy = """
    [Policy]
    BackgroundTimeSec=30s
    ExpirationWarningSec=5s
    EnterBackgroundGraceSec=20s
    WillTerminateGraceSec=3s
    LaunchTimeoutSec=30s
    LockedSuspendGraceSec=1s
    """

/// Waits on a `Watch` stream for an entry about `app` satisfying `matches`; throws after `timeout`.
@discardableResult
private func waitForEntry(
    _ watch: WatchStream, app: String, timeout: Duration = .seconds(15), seen: inout [HistoryEntry],
    where matches: (HistoryEntry) -> Bool
) throws -> HistoryEntry {
    if let found = seen.first(where: { $0.app == app && matches($0) }) { return found }
    let deadline = MonotonicClock.now() + Int64(timeout.components.seconds) * 1_000_000_000
    while true {
        let remaining = deadline - MonotonicClock.now()
        guard remaining > 0 else {
            throw HarnessError("no matching history entry for \(app); saw \(seen.suffix(15))")
        }
        guard let entry = try nextEntry(watch, timeout: .nanoseconds(remaining)) else { continue }
        seen.append(entry)
        if entry.app == app && matches(entry) { return entry }
    }
}

/// The next entry of `watch`, nil when none came within `timeout`; throws when the stream ended.
private func nextEntry(_ watch: WatchStream, timeout: Duration) throws -> HistoryEntry? {
    do {
        guard let entry = try watch.next(timeout: timeout) else { throw HarnessError("the watch stream ended") }
        return entry
    } catch ClientError.timedOut {
        return nil
    }
}

/// The state letter of the process once it satisfies `condition` (bounded 5 ms waits on its pidfd between reads).
private func waitForProcessState(
    _ pid: pid_t, timeout: Duration = .seconds(10), _ condition: (ProcessState) -> Bool
) throws -> ProcessState {
    let procFS = ProcFS()
    let pidFD = try PidFD.open(pid: pid)
    defer { try? pidFD.close() }
    let deadline = MonotonicClock.now() + Int64(timeout.components.seconds) * 1_000_000_000
    var state = try procFS.stat(pid).state
    while !condition(state) && MonotonicClock.now() < deadline {
        if try pidFD.waitForExit(timeout: .milliseconds(5)) { break }
        state = try procFS.stat(pid).state
    }
    return state
}

@Suite("client against the real bgtaskd", .serialized)
struct EndToEndTests {
    @Test("PhotoUploader: sent to background mid-upload, it finishes inside its lease, then is suspended")
    func photoUploaderFinishesInsideItsLeaseInBackground() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: roomyPolicy)
            let control = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
            defer { control.close() }
            let watch = try control.watch()
            defer { watch.close() }
            var history: [HistoryEntry] = []
            let command = try photoUploaderCommand(socketPath: daemon.socketPath, photos: 12, chunkMilliseconds: 150)
            try withChild(command) { uploader in
                try uploader.waitForLine(startingWith: "registered as photo-uploader, state active")
                let started = try uploader.waitForLine(startingWith: "upload started")
                try uploader.waitForLine(
                    startingWith: "uploaded photo 1/12, state active, backgroundTimeRemaining unlimited")
                let begun = try waitForEntry(watch, app: "photo-uploader", seen: &history) { $0.kind == .taskBegan }
                #expect(started.hasSuffix("background task 1"), "the first client-side identifier")
                #expect(begun.taskName == "upload")

                // The user leaves the app mid-upload.
                let moved = try control.setState("photo-uploader", to: .background)
                #expect(moved.state == .background)
                #expect(moved.tasks.map(\.name) == ["upload"])
                let entered = try uploader.waitForLine(startingWith: "entered background")
                #expect(entered.hasSuffix("of background time left") && !entered.contains("unlimited"))
                let inBackground = try uploader.waitForLine { $0.contains("state background, backgroundTimeRemaining") }
                #expect(!inBackground.contains("unlimited"), "background time is counted in background")
                // Still running in background: the lease keeps the daemon from suspending it.
                #expect(try control.getApp("photo-uploader").state == .background)

                try uploader.waitForLine { $0 == "upload finished" }
                try uploader.waitForLine { $0 == "ended background task 1" }
                let ended = try waitForEntry(watch, app: "photo-uploader", seen: &history) { $0.kind == .taskEnded }
                #expect(ended.taskId == begun.taskId)
                #expect(ended.taskEnd == .ended, "ended by the app, not expired")
                let wentToBackground = history.firstIndex {
                    $0.app == "photo-uploader" && $0.kind == .stateChanged && $0.state == .background
                }
                let endedIndex = history.firstIndex { $0.app == "photo-uploader" && $0.kind == .taskEnded }
                if let wentToBackground, let endedIndex {
                    #expect(wentToBackground < endedIndex, "the upload finished after the app went to background")
                } else {
                    Issue.record("no move to background or no end of the lease in the history: \(history)")
                }
                #expect(!history.contains { $0.app == "photo-uploader" && $0.kind == .expirationWarning })

                // With its work done, the app is suspended at once, or it closed and exited first: both are fine.
                let after = try waitForEntry(watch, app: "photo-uploader", seen: &history) { entry in
                    (entry.kind == .stateChanged && entry.state == .suspended) || entry.kind == .unregistered
                        || entry.kind == .processExited
                }
                if after.kind == .stateChanged {
                    // Stopped by SIGSTOP, unless the signal found it already exiting: it closes and exits right after
                    // ending its task, so the two race.
                    let state = try waitForProcessState(uploader.pid) { $0 == .stopped }
                    let hasExited = try uploader.process.pidFD.hasExited
                    #expect(state == .stopped || hasExited, "suspended: \(state)")
                    if state == .stopped {
                        // Back to the foreground: resumed, it runs its pending close and exits.
                        _ = try control.setState("photo-uploader", to: .active)
                    }
                }
                try uploader.waitForLine { $0 == "done" }
                #expect(try uploader.waitForExit() == .exited(0))
                let final = try waitForEntry(watch, app: "photo-uploader", seen: &history) { $0.kind == .processExited }
                #expect(final.reason == .exited)
            }
            #expect(try daemon.stop() == .exited(0))
        }
    }

    @Test("fixture: events, a lease through background, expiration handled, suspension and resumption")
    func fixtureLifecycle() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let control = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
            defer { control.close() }
            let watch = try control.watch()
            defer { watch.close() }
            var history: [HistoryEntry] = []
            try withChild(try fixtureCommand(socketPath: daemon.socketPath)) { app in
                try app.waitForLine(startingWith: "ready")
                #expect(try app.run("register mail", expecting: "registered").hasPrefix("registered mail state=active"))
                #expect(try app.run("begin upload", expecting: "began") == "began 1")
                #expect(try app.run("remaining", expecting: "remaining") == "remaining unlimited")
                let registered = try control.getApp("mail")
                #expect(registered.pid == Int(app.pid))
                #expect(registered.tasks.map(\.name) == ["upload"])

                _ = try control.setState("mail", to: .background)
                try app.waitForLine(startingWith: "event willResignActive")
                try app.waitForLine(startingWith: "event didEnterBackground")
                let remaining = try app.run("remaining", expecting: "remaining")
                let seconds = Double(remaining.dropFirst("remaining ".count)) ?? -1
                #expect(seconds > 0 && seconds <= 5, "\(remaining)")
                #expect(try app.run("state", expecting: "state") == "state background")

                // The expiration warning runs the task's handler, which ends it; with nothing left the app is
                // suspended.
                let warning = try app.waitForLine(startingWith: "event backgroundTaskExpiring")
                let daemonTaskId = registered.tasks.first?.id ?? -1
                #expect(warning.contains("tasks=\(daemonTaskId)"))
                try app.waitForLine { $0 == "expired 1" }
                try app.waitForLine { $0 == "ended 1" }
                let ended = try waitForEntry(watch, app: "mail", seen: &history) { $0.kind == .taskEnded }
                #expect(ended.taskEnd == .ended)
                try waitForEntry(watch, app: "mail", seen: &history) {
                    $0.kind == .stateChanged && $0.state == .suspended
                }
                #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped)

                _ = try control.setState("mail", to: .active)
                try app.waitForLine(startingWith: "event willEnterForeground")
                try app.waitForLine(startingWith: "event didBecomeActive")
                #expect(try app.run("state", expecting: "state") == "state active")
                #expect(try app.run("remaining", expecting: "remaining") == "remaining unlimited")

                // Posted notifications reach the delegate's path with their payload.
                let posted = try control.post(name: "sync", payload: ["n": 1], app: "mail")
                #expect(posted.delivered == 1)
                try app.waitForLine { $0.hasPrefix("event notification") && $0.contains(#"payload={"n":1}"#) }
                try app.send("exit 0")
                #expect(try app.waitForExit() == .exited(0))
            }
            #expect(try daemon.stop() == .exited(0))
        }
    }

    @Test("fixture withholding acknowledgements is terminated enter-background-timeout")
    func withheldAcknowledgementTimesOut() async throws {
        try await offThePool {
            // The app never acknowledges: the grace is the daemon's countdown alone, and short.
            let daemon = try DaemonHarness(configuration: DaemonHarness.fastPolicy("EnterBackgroundGraceSec", "700ms"))
            let control = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
            defer { control.close() }
            try withChild(try fixtureCommand(socketPath: daemon.socketPath)) { app in
                try app.waitForLine(startingWith: "ready")
                try app.run("ack never", expecting: "ack")
                try app.run("on-terminate stay", expecting: "on-terminate")
                try app.run("register lazy", expecting: "registered")
                _ = try control.setState("lazy", to: .background)
                try app.waitForLine(startingWith: "event didEnterBackground")
                try app.waitForLine(startingWith: "event willTerminate")
                #expect(try app.waitForExit() == .signaled(.kill))
                #expect(try control.getApp("lazy").exitReason == .enterBackgroundTimeout)
            }
        }
    }

    @Test("the daemon restarts: the app re-attaches from the same process and keeps its lease and task id")
    func reconnectsToARestartedDaemon() async throws {
        try await offThePool {
            let scratch = try ScratchDirectory(prefix: "bgtask-client-restart")
            let socketPath = scratch.path + "/" + LifecycleInterface.name
            let first = try DaemonHarness(configuration: roomyPolicy, arguments: ["--socket", socketPath])
            try withChild(try fixtureCommand(socketPath: socketPath)) { app in
                try app.waitForLine(startingWith: "ready")
                try app.run("register mail", expecting: "registered")
                #expect(try app.run("begin sync", expecting: "began") == "began 1")
                let before = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
                let leaseBefore = try before.getApp("mail").tasks
                before.close()
                #expect(leaseBefore.map(\.name) == ["sync"])

                #expect(try first.stop() == .exited(0))
                try app.waitForLine(startingWith: "connection lost")
                let second = try DaemonHarness(configuration: roomyPolicy, arguments: ["--socket", socketPath])
                try app.waitForLine(startingWith: "connection reconnected")
                let control = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
                defer { control.close() }
                let after = try control.getApp("mail")
                #expect(after.pid == Int(app.pid))
                #expect(after.tasks.map(\.name) == ["sync"], "the open lease was lost")
                #expect(after.tasks.map(\.id) == leaseBefore.map(\.id), "the lease changed its task id")

                // The identifier from before the restart ends the lease it always named.
                #expect(try app.run("end 1", expecting: "ended") == "ended 1")
                #expect(try control.getApp("mail").tasks.isEmpty)
                try app.send("exit 0")
                #expect(try app.waitForExit() == .exited(0))
                #expect(try second.stop() == .exited(0))
            }
        }
    }
}
