// BackgroundApplication against a scripted daemon: callbacks, acknowledgements, leases, expiration, reconnection.
import BGTaskClient
import BGTaskJSON
import BGTaskPOSIX
import BGTaskTestSupport
import Dispatch
import Foundation
import Synchronization
import Testing

/// A callback queue that can tell whether code runs on it.
struct CallbackQueue: Sendable {
    let queue = DispatchQueue(label: "bgtask.client.test.callbacks")
    private let key = DispatchSpecificKey<Bool>()

    init() {
        queue.setSpecific(key: key, value: true)
    }

    var isCurrent: Bool { DispatchQueue.getSpecific(key: key) == true }
}

/// What a delegate saw: the callback, the application state during it, and whether it ran on the callback queue.
struct Callback: Sendable, Equatable, CustomStringConvertible {
    var name: String
    var state: ApplicationState
    var onCallbackQueue: Bool

    var description: String { "\(name)@\(state)\(onCallbackQueue ? "" : " OFF-QUEUE")" }
}

/// Records every delegate callback, and notes its end in the scripted daemon's log.
final class RecordingDelegate: ApplicationDelegate {
    let callbacks = Recorder<Callback>()
    let payloads = Recorder<JSONValue?>()
    let queue: CallbackQueue
    let daemon: ScriptedDaemon
    /// Asks the daemon for the remaining time inside each callback, so the handler's own call is ordered in the
    /// daemon's log with the acknowledgement that follows it.
    let callsDaemonInHandler: Bool

    init(queue: CallbackQueue, daemon: ScriptedDaemon, callsDaemonInHandler: Bool = false) {
        self.queue = queue
        self.daemon = daemon
        self.callsDaemonInHandler = callsDaemonInHandler
    }

    private func record(_ name: String, _ application: BackgroundApplication) {
        if callsDaemonInHandler { _ = application.backgroundTimeRemaining }
        callbacks.append(Callback(name: name, state: application.applicationState, onCallbackQueue: queue.isCurrent))
        daemon.note("returned \(name)")
    }

    func applicationWillResignActive(_ application: BackgroundApplication) { record("willResignActive", application) }
    func applicationDidBecomeActive(_ application: BackgroundApplication) { record("didBecomeActive", application) }
    func applicationDidEnterBackground(_ application: BackgroundApplication) {
        record("didEnterBackground", application)
    }
    func applicationWillEnterForeground(_ application: BackgroundApplication) {
        record("willEnterForeground", application)
    }
    func applicationDidReceiveMemoryWarning(_ application: BackgroundApplication, warning: MemoryWarning) {
        record("memoryWarning(\(warning.isLikelyVictim),\(warning.rank.map(String.init) ?? "-"))", application)
    }
    func applicationWillTerminate(_ application: BackgroundApplication) { record("willTerminate", application) }
    func application(_ application: BackgroundApplication, didReceive notification: ApplicationNotification) {
        payloads.append(notification.payload)
        record("notification(\(notification.name),\(notification.count))", application)
    }
}

/// Fast reconnection for tests: a restarted scripted daemon is there at once.
let testOptions = BackgroundApplication.Options(
    callTimeout: .seconds(10),
    reconnect: ReconnectPolicy(initialDelay: .milliseconds(10), maximumDelay: .milliseconds(200)))

@Suite struct BackgroundApplicationTests {
    @Test func eventsRunInOrderOnTheCallbackQueueAndAreAcknowledgedInOrder() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let queue = CallbackQueue()
                let delegate = RecordingDelegate(queue: queue, daemon: daemon)
                let app = try BackgroundApplication(
                    name: "mail", socketPath: daemon.socketPath, delegate: delegate, callbackQueue: queue.queue,
                    options: testOptions)
                defer { app.close() }
                #expect(app.applicationState == .active)
                let events = [
                    EventInfo(id: daemon.nextEventId(), kind: .willResignActive),
                    EventInfo(id: daemon.nextEventId(), kind: .didEnterBackground),
                    EventInfo(id: daemon.nextEventId(), kind: .memoryWarning, likelyVictim: true, rank: 2),
                    EventInfo(id: daemon.nextEventId(), kind: .notification, name: "sync", payload: ["n": 1], count: 3),
                    EventInfo(id: daemon.nextEventId(), kind: .memoryWarning, likelyVictim: false),
                    EventInfo(id: daemon.nextEventId(), kind: .willEnterForeground),
                    EventInfo(id: daemon.nextEventId(), kind: .didBecomeActive),
                    EventInfo(id: daemon.nextEventId(), kind: .willTerminate),
                ]
                for event in events { #expect(daemon.push(event)) }
                let seen = delegate.callbacks.wait(forCount: events.count)
                // UIKit's timing: will* callbacks see the state being left, did* callbacks the state entered.
                #expect(
                    seen == [
                        Callback(name: "willResignActive", state: .active, onCallbackQueue: true),
                        Callback(name: "didEnterBackground", state: .background, onCallbackQueue: true),
                        Callback(name: "memoryWarning(true,2)", state: .background, onCallbackQueue: true),
                        Callback(name: "notification(sync,3)", state: .background, onCallbackQueue: true),
                        Callback(name: "memoryWarning(false,-)", state: .background, onCallbackQueue: true),
                        Callback(name: "willEnterForeground", state: .background, onCallbackQueue: true),
                        Callback(name: "didBecomeActive", state: .active, onCallbackQueue: true),
                        Callback(name: "willTerminate", state: .active, onCallbackQueue: true),
                    ])
                #expect(delegate.payloads.all == [.object(["n": 1])])
                daemon.waitForCall(AcknowledgeParameters.methodName, count: events.count)
                let acknowledged = daemon.calls(AcknowledgeParameters.methodName).compactMap {
                    $0.parameters["eventId"]?.intValue
                }
                #expect(acknowledged == events.map(\.id))
            }
        }
    }

    @Test func acknowledgementIsSentOnlyAfterTheHandlerReturned() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let queue = CallbackQueue()
                let delegate = RecordingDelegate(queue: queue, daemon: daemon, callsDaemonInHandler: true)
                let app = try BackgroundApplication(
                    name: "mail", socketPath: daemon.socketPath, delegate: delegate, callbackQueue: queue.queue,
                    options: testOptions)
                defer { app.close() }
                let kinds: [EventKind] = [
                    .willResignActive, .didEnterBackground, .willEnterForeground, .didBecomeActive,
                ]
                let events = kinds.map { EventInfo(id: daemon.nextEventId(), kind: $0) }
                for event in events { daemon.push(event) }
                daemon.waitForCall(AcknowledgeParameters.methodName, count: events.count)
                let log = daemon.log
                for event in events {
                    let returned = log.first { $0.isNote && $0.method == "returned \(event.kind.rawValue)" }
                    let acknowledged = log.first {
                        $0.isCall(AcknowledgeParameters.methodName, "eventId", .number(Double(event.id)))
                    }
                    guard let returned, let acknowledged else {
                        Issue.record("missing handler end or acknowledgement of \(event.kind): \(log)")
                        continue
                    }
                    #expect(
                        returned.sequence < acknowledged.sequence,
                        "\(event.kind) acknowledged before its handler returned")
                }
                // The handler's own call to the daemon comes before the acknowledgement on the same connection.
                let remainingCalls = log.filter { $0.method == BackgroundTimeRemainingParameters.methodName }
                let acknowledgements = log.filter { $0.method == AcknowledgeParameters.methodName }
                #expect(zip(remainingCalls, acknowledgements).allSatisfy { $0.sequence < $1.sequence })
            }
        }
    }

    @Test func manualAcknowledgementWithholdsUntilAsked() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let queue = CallbackQueue()
                let seen = Recorder<EventInfo>()
                var options = testOptions
                options.acknowledgesEventsAutomatically = false
                options.eventObserver = { seen.append($0) }
                let app = try BackgroundApplication(
                    name: "mail", socketPath: daemon.socketPath, callbackQueue: queue.queue, options: options)
                defer { app.close() }
                let first = EventInfo(id: daemon.nextEventId(), kind: .didEnterBackground)
                let second = EventInfo(id: daemon.nextEventId(), kind: .memoryWarning, likelyVictim: false)
                daemon.push(first)
                daemon.push(second)
                seen.wait(forCount: 2)
                // Both events are handled once a block queued after them on the callback queue has run.
                queue.queue.sync {}
                let acknowledged = {
                    daemon.calls(AcknowledgeParameters.methodName).compactMap { $0.parameters["eventId"]?.intValue }
                }
                #expect(acknowledged().isEmpty)
                try app.acknowledge(eventId: first.id)
                #expect(acknowledged() == [first.id])
                app.acknowledgesEventsAutomatically = true
                let third = EventInfo(id: daemon.nextEventId(), kind: .willEnterForeground)
                daemon.push(third)
                daemon.waitForAcknowledgement(of: third.id)
                #expect(acknowledged() == [first.id, third.id])
            }
        }
    }

    @Test func expirationHandlersRunOncePerListedTask() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let queue = CallbackQueue()
                let app = try BackgroundApplication(
                    name: "mail", socketPath: daemon.socketPath, callbackQueue: queue.queue, options: testOptions)
                defer { app.close() }
                let expirations = Recorder<String>()
                var identifiers: [BackgroundTaskIdentifier] = []
                for name in ["a", "b", "c", "d"] {
                    let identifier = app.beginBackgroundTask(withName: name) {
                        expirations.append(queue.isCurrent ? name : "\(name) off-queue")
                    }
                    #expect(identifier != .invalid)
                    identifiers.append(identifier)
                }
                #expect(Set(identifiers).count == 4)
                let names = daemon.calls(BeginBackgroundTaskParameters.methodName).compactMap {
                    $0.parameters["name"]?.stringValue
                }
                #expect(names == ["a", "b", "c", "d"])
                // The scripted daemon numbers tasks 1, 2, 3, 4 in order; "d" (4) is never listed.
                let warnings = [
                    EventInfo(id: daemon.nextEventId(), kind: .backgroundTaskExpiring, taskIds: [1, 2, 3]),
                    EventInfo(id: daemon.nextEventId(), kind: .backgroundTaskExpiring, taskIds: [3, 2, 1, 99]),
                ]
                for warning in warnings { daemon.push(warning) }
                for warning in warnings { daemon.waitForAcknowledgement(of: warning.id) }
                #expect(expirations.all.sorted() == ["a", "b", "c"])
                #expect(app.openBackgroundTasks == Set(identifiers), "expiry alone does not end a task")
            }
        }
    }

    @Test func expirationHandlerRunsOnceWhenTheWarningOvertakesTheBeginReply() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, daemon in
                guard call.method == BeginBackgroundTaskParameters.methodName else { return nil }
                // The expiring event goes out on the event stream before the reply that names the task.
                daemon.push(EventInfo(id: daemon.nextEventId(), kind: .backgroundTaskExpiring, taskIds: [77]))
                return .reply(BeginBackgroundTaskReply(taskId: 77))
            }) { daemon in
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: testOptions)
                defer { app.close() }
                let expirations = Recorder<Int>()
                let identifier = app.beginBackgroundTask(withName: "late") { expirations.append(1) }
                #expect(identifier != .invalid)
                expirations.wait(forCount: 1)
                daemon.waitForCall(AcknowledgeParameters.methodName)
                // A second warning for the same task finds its handler spent.
                let again = EventInfo(id: daemon.nextEventId(), kind: .backgroundTaskExpiring, taskIds: [77])
                daemon.push(again)
                daemon.waitForAcknowledgement(of: again.id)
                #expect(expirations.all == [1])
            }
        }
    }

    @Test(arguments: [
        VarlinkError.backgroundTimeExhausted(app: "mail"),
        .limitExceeded(limit: "TasksPerAppMax", max: 64),
        .invalidState(app: "mail", state: .terminated),
    ])
    func beginReturnsInvalidWhenTheDaemonRefuses(_ refusal: VarlinkError) async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, _ in
                call.method == BeginBackgroundTaskParameters.methodName ? .error(refusal) : nil
            }) { daemon in
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: testOptions)
                defer { app.close() }
                let identifier = app.beginBackgroundTask(withName: "upload") {}
                #expect(identifier == .invalid)
                #expect(app.openBackgroundTasks.isEmpty)
                app.endBackgroundTask(identifier)
                #expect(daemon.calls(BeginBackgroundTaskParameters.methodName).count == 1)
                #expect(daemon.calls(EndBackgroundTaskParameters.methodName).isEmpty)
            }
        }
    }

    @Test func endBackgroundTaskEndsTheDaemonLeaseOnce() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: testOptions)
                defer { app.close() }
                let identifier = app.beginBackgroundTask(expirationHandler: nil)
                #expect(identifier != .invalid)
                #expect(daemon.calls(BeginBackgroundTaskParameters.methodName).first?.parameters == ["app": "mail"])
                app.endBackgroundTask(identifier)
                app.endBackgroundTask(identifier)
                let ends = daemon.calls(EndBackgroundTaskParameters.methodName)
                #expect(ends.count == 1)
                #expect(ends.first?.parameters == ["app": "mail", "taskId": 1])
                #expect(app.openBackgroundTasks.isEmpty)
            }
        }
    }

    @Test func backgroundTimeRemainingIsUnlimitedInTheForeground() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: testOptions)
                defer { app.close() }
                daemon.setRemainingSeconds(nil)
                #expect(app.backgroundTimeRemaining == .greatestFiniteMagnitude)
                daemon.setRemainingSeconds(42.5)
                #expect(app.backgroundTimeRemaining == 42.5)
            }
        }
    }

    @Test func launchedInBackgroundRegistersInBackground() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let app = try BackgroundApplication(
                    name: "mail", socketPath: daemon.socketPath, exitsOnSuspend: true, launchedInBackground: true,
                    options: testOptions)
                defer { app.close() }
                #expect(app.applicationState == .background)
                let register = daemon.calls(RegisterParameters.methodName).first
                #expect(register?.parameters == ["name": "mail", "exitsOnSuspend": true, "state": "background"])
            }
        }
    }

    /// A daemon that lost its state (the scripted one keeps none) no longer has the leases: the tasks are not
    /// begun again, which would be a fresh budget, but expire; a task begun while the link was down is begun.
    @Test func reconnectsWithoutBeginningLostLeasesAgain() async throws {
        try await offThePool {
            let refuseRegister = Mutex(false)
            try withScriptedDaemon(respond: { call, _ in
                call.method == RegisterParameters.methodName && refuseRegister.withLock({ $0 }) ? .close : nil
            }) { daemon in
                let changes = Recorder<String>()
                let events = Recorder<EventInfo>()
                var options = testOptions
                options.connectionObserver = { change in
                    switch change {
                    case .lost: changes.append("lost")
                    case .reconnectFailed: changes.append("failed")
                    case .reconnected(_, let attempt): changes.append("reconnected \(attempt)")
                    case .gaveUp: changes.append("gave up")
                    case .requestFailed(let method, _): changes.append("request failed \(method)")
                    case .noLaunchHandler(let identifier): changes.append("no launch handler \(identifier)")
                    }
                }
                options.eventObserver = { events.append($0) }
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: options)
                defer { app.close() }
                let expired = Recorder<String>()
                let upload = app.beginBackgroundTask(withName: "upload") { expired.append("upload") }
                let save = app.beginBackgroundTask(withName: "save") { expired.append("save") }
                let entered = EventInfo(id: daemon.nextEventId(), kind: .didEnterBackground)
                daemon.push(entered)
                daemon.waitForAcknowledgement(of: entered.id)
                #expect(app.applicationState == .background)

                // The daemon restarts without its state, and is not accepting registrations at first.
                refuseRegister.withLock { $0 = true }
                daemon.dropConnections()
                changes.wait { $0.contains("failed") }
                // Begun while the link is down: recorded, begun once registered again.
                let report = app.beginBackgroundTask(withName: "report") {}
                #expect(report != .invalid)
                #expect(daemon.calls(BeginBackgroundTaskParameters.methodName).count == 2)
                refuseRegister.withLock { $0 = false }
                changes.wait { $0.contains { $0.hasPrefix("reconnected") } }
                #expect(app.reconnectCount == 1)

                let registers = daemon.calls(RegisterParameters.methodName)
                #expect(registers.last?.parameters["state"] == "background", "re-registers where it was")
                let begins = daemon.calls(BeginBackgroundTaskParameters.methodName)
                #expect(begins.count == 3, "a lost lease was begun again: \(begins)")
                #expect(begins.last?.parameters["name"] == "report")
                expired.wait { Set($0) == ["upload", "save"] }
                #expect(app.openBackgroundTasks == [upload, save, report], "identifiers survive the reconnect")

                // A lost task's end sends nothing (the daemon has no lease for it); the new lease ends as usual.
                let endsBefore = daemon.calls(EndBackgroundTaskParameters.methodName).count
                app.endBackgroundTask(upload)
                #expect(daemon.calls(EndBackgroundTaskParameters.methodName).count == endsBefore)
                app.endBackgroundTask(report)
                #expect(daemon.calls(EndBackgroundTaskParameters.methodName).last?.parameters["taskId"] == 3)

                // Events flow on the new stream.
                let event = EventInfo(id: daemon.nextEventId(), kind: .memoryWarning, likelyVictim: false)
                #expect(daemon.push(event))
                events.wait { $0.contains(event) }
            }
        }
    }

    @Test func reattachedRegistrationKeepsItsLeasesAndEndsUnclaimedOnes() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let reconnected = Recorder<AppInfo>()
                var options = testOptions
                options.connectionObserver = { change in
                    if case .reconnected(let app, _) = change { reconnected.append(app) }
                }
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: options)
                defer { app.close() }
                let first = app.beginBackgroundTask(withName: "first") {}
                let second = app.beginBackgroundTask(withName: "second") {}
                let third = app.beginBackgroundTask(withName: "third") {}
                app.endBackgroundTask(third)
                #expect(daemon.calls(EndBackgroundTaskParameters.methodName).count == 1)
                // The daemon kept its state: it re-attaches with leases 1 and 2, and also 3, as if the end of "third"
                // had not reached it.
                daemon.keepTasks([1, 2, 3].map { TaskInfo(id: $0, name: "", ageSec: 1) })
                daemon.dropConnections()
                reconnected.wait(forCount: 1)
                #expect(daemon.calls(BeginBackgroundTaskParameters.methodName).count == 3, "no lease begun again")
                let ends = daemon.calls(EndBackgroundTaskParameters.methodName)
                #expect(ends.count == 2)
                #expect(ends.last?.parameters["taskId"] == 3)
                #expect(app.openBackgroundTasks == [first, second])
                app.endBackgroundTask(second)
                #expect(daemon.calls(EndBackgroundTaskParameters.methodName).last?.parameters["taskId"] == 2)
            }
        }
    }

    @Test("a scheduled task the app never heard of is not ended on re-attaching: its request would be gone")
    func reattachLeavesUnknownScheduledTasks() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let reconnected = Recorder<AppInfo>()
                var options = testOptions
                options.connectionObserver = { change in
                    if case .reconnected(let app, _) = change { reconnected.append(app) }
                }
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: options)
                defer { app.close() }
                app.register(forTaskWithIdentifier: "sync") { _ in }
                // The daemon began scheduled task 7 and went down before its runScheduledTask reached the app; a lease
                // 8 the app does not hold either is ended as ever.
                daemon.keepTasks([TaskInfo(id: 7, name: "sync", ageSec: 1), TaskInfo(id: 8, name: "", ageSec: 1)])
                daemon.dropConnections()
                reconnected.wait(forCount: 1)
                #expect(daemon.calls(EndBackgroundTaskParameters.methodName).map { $0.parameters["taskId"] } == [8])
                #expect(daemon.calls(SetTaskCompletedParameters.methodName).isEmpty)
            }
        }
    }

    @Test func givesUpAfterTheConfiguredAttempts() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, daemon in
                call.method == RegisterParameters.methodName && daemon.calls(RegisterParameters.methodName).count > 1
                    ? .close : nil
            }) { daemon in
                let changes = Recorder<String>()
                var options = testOptions
                options.reconnect.maximumAttempts = 3
                options.connectionObserver = { changes.append("\($0)".components(separatedBy: ":")[0]) }
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: options)
                defer { app.close() }
                daemon.dropConnections()
                let seen = changes.wait { $0.contains { $0.hasPrefix("gave up") } }
                #expect(seen.filter { $0.hasPrefix("reconnect attempt") }.count == 3)
                #expect(daemon.calls(RegisterParameters.methodName).count == 4)
                #expect(app.beginBackgroundTask(withName: "late") {} == .invalid)
            }
        }
    }

    @Test func closeEndsTheRegistrationWithoutReconnecting() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let app = try BackgroundApplication(name: "mail", socketPath: daemon.socketPath, options: testOptions)
                let register = daemon.calls(RegisterParameters.methodName).first
                _ = app.beginBackgroundTask(withName: "t") {}
                app.close()
                daemon.waitUntil { log in
                    log.contains {
                        $0.method == ScriptedDaemon.connectionClosed && $0.connection == register?.connection
                    }
                }
                #expect(app.beginBackgroundTask(withName: "after") {} == .invalid)
                #expect(app.openBackgroundTasks.isEmpty)
                #expect(throws: ClientError.disconnected) { try app.acknowledge(eventId: 1) }
                app.close()
                #expect(daemon.calls(RegisterParameters.methodName).count == 1)
            }
        }
    }

    @Test func droppingTheLastReferenceEndsTheRegistration() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                do {
                    let app = try BackgroundApplication(
                        name: "mail", socketPath: daemon.socketPath, options: testOptions)
                    #expect(app.registeredApp.name == "mail")
                }
                let register = daemon.calls(RegisterParameters.methodName).first
                #expect(
                    daemon.waitUntil { log in
                        log.contains {
                            $0.method == ScriptedDaemon.connectionClosed && $0.connection == register?.connection
                        }
                    })
            }
        }
    }

    @Test func initReportsDaemonNotRunning() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "bgtask-client-noapp")
            defer { directory.remove() }
            let path = directory.path + "/" + LifecycleInterface.name
            #expect(throws: ClientError.daemonNotRunning(socketPath: path, .noSuchFileOrDirectory)) {
                _ = try BackgroundApplication(name: "mail", socketPath: path)
            }
        }
    }
}
