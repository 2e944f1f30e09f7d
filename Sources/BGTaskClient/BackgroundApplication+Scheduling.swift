// Scheduled work in the shape of iOS's BackgroundTasks framework: a launch handler per identifier, requests
// submitted and cancelled, and the task each run hands the app, with its expiration handler and
// `setTaskCompleted(success:)`.

import FoundationEssentials
import Synchronization

/// Work to run later, when it is due and the conditions it requires hold, like iOS's `BGTaskRequest`
/// (`BGAppRefreshTaskRequest` and `BGProcessingTaskRequest` are its two kinds).
public struct BackgroundTaskRequest: Hashable, Sendable {
    /// Names the request within the app, and picks the launch handler its task goes to.
    public var identifier: String
    /// Short work (`refresh`, 30 s by default) or longer work (`processing`, 10 min by default).
    public var kind: ScheduledTaskKind
    /// It runs no earlier than this; nil: as soon as its conditions hold (`earliestBeginDate`).
    public var earliestBeginDate: Date?
    /// The conditions that must hold for it to start and while it runs.
    public var requirements: Set<Constraint>

    /// A request of `kind`, due at `earliestBeginDate`, requiring `requirements`.
    public init(
        identifier: String, kind: ScheduledTaskKind, earliestBeginDate: Date? = nil, requirements: Set<Constraint> = []
    ) {
        self.identifier = identifier
        self.kind = kind
        self.earliestBeginDate = earliestBeginDate
        self.requirements = requirements
    }

    /// A refresh request, as `BGAppRefreshTaskRequest(identifier:)`.
    public static func appRefresh(identifier: String) -> BackgroundTaskRequest {
        BackgroundTaskRequest(identifier: identifier, kind: .refresh)
    }

    /// A processing request, as `BGProcessingTaskRequest(identifier:)`.
    public static func processing(identifier: String) -> BackgroundTaskRequest {
        BackgroundTaskRequest(identifier: identifier, kind: .processing)
    }

    /// `requiresExternalPower`: runs only on external power.
    public var requiresExternalPower: Bool {
        get { requirements.contains(.externalPower) }
        set { set(.externalPower, newValue) }
    }

    /// `requiresNetworkConnectivity`: runs only while online.
    public var requiresNetworkConnectivity: Bool {
        get { requirements.contains(.network) }
        set { set(.network, newValue) }
    }

    private mutating func set(_ condition: Constraint, _ isRequired: Bool) {
        if isRequired { requirements.insert(condition) } else { requirements.remove(condition) }
    }
}

/// A scheduled request's run in this app, like iOS's `BGTask`: set `expirationHandler` to stop the work when the
/// daemon asks (its time ends, or a condition it requires stopped holding), and call `setTaskCompleted(success:)`
/// when done. A task not completed before its expiration handler's grace ends is ended by the daemon.
public final class ScheduledTask: Sendable {
    /// The request's identifier.
    public let identifier: String
    /// The daemon's id of the task's lease.
    public let taskId: Int
    private weak let application: BackgroundApplication?
    private let handlers = Mutex<Handlers>(Handlers())

    private struct Handlers {
        var expiration: (@Sendable () -> Void)?
        /// The daemon asked for it to stop before a handler was set: a handler set later runs at once.
        var isExpired = false
        var isCompleted = false
    }

    init(identifier: String, taskId: Int, application: BackgroundApplication) {
        self.identifier = identifier
        self.taskId = taskId
        self.application = application
    }

    /// Runs on the callback queue, at most once, when the task must stop; set one before starting the work. One set
    /// after the daemon asked runs at once.
    public var expirationHandler: (@Sendable () -> Void)? {
        get { handlers.withLock { $0.expiration } }
        set {
            let runNow = handlers.withLock { (state: inout Handlers) -> (@Sendable () -> Void)? in
                guard state.isExpired, !state.isCompleted else {
                    state.expiration = newValue
                    return nil
                }
                return newValue
            }
            if let runNow, let application { application.queue.async { runNow() } }
        }
    }

    /// Reports how the work went and ends the task, like `BGTask.setTaskCompleted(success:)`: the request is done
    /// unless it failed with `retry`, which runs it again after a backoff. Only the first call counts.
    public func setTaskCompleted(success: Bool, retry: Bool = false) {
        let isFirst = handlers.withLock { (state: inout Handlers) -> Bool in
            defer { state.isCompleted = true }
            state.expiration = nil
            return !state.isCompleted
        }
        guard isFirst, let application else { return }
        application.completeScheduledTask(self, success: success, retry: retry)
    }

    /// The expiration handler, taken so it runs once; marks the task expired.
    func takeExpirationHandler() -> (@Sendable () -> Void)? {
        handlers.withLock { state in
            state.isExpired = true
            defer { state.expiration = nil }
            return state.isCompleted ? nil : state.expiration
        }
    }
}

extension BackgroundApplication {
    // MARK: BGTaskScheduler

    /// Registers the handler the task of each run of the request `identifier` is given, on the callback queue, like
    /// `BGTaskScheduler.register(forTaskWithIdentifier:using:launchHandler:)`. Register before submitting, and
    /// before an app launched for its scheduled work gets its first event. False when `identifier` has one already.
    @discardableResult
    public func register(
        forTaskWithIdentifier identifier: String, launchHandler: @escaping @Sendable (ScheduledTask) -> Void
    ) -> Bool {
        state.withLock { state in
            guard state.launchHandlers[identifier] == nil else { return false }
            state.launchHandlers[identifier] = launchHandler
            return true
        }
    }

    /// Submits `request` for this app, like `BGTaskScheduler.submit(_:)`; replaces a request with its identifier.
    /// Throws `LifecycleError.conditionUnavailable` when this host has no source for a condition it requires.
    @discardableResult
    public func submit(_ request: BackgroundTaskRequest) throws(ClientError) -> RequestInfo {
        try client.submitRequest(
            app: name, identifier: request.identifier, kind: request.kind,
            earliestBegin: request.earliestBeginDate?.timeIntervalSince1970,
            requires: request.requirements.sorted())
    }

    /// Cancels the request `identifier`, like `BGTaskScheduler.cancel(taskRequestWithIdentifier:)`; nothing when
    /// there is none.
    public func cancel(taskRequestWithIdentifier identifier: String) throws(ClientError) {
        do throws(ClientError) {
            try client.cancelRequest(app: name, identifier: identifier)
        } catch .lifecycle(.noSuchRequest) {
            // Nothing to cancel, as on iOS.
        }
    }

    /// The app's requests not yet run to completion, like `BGTaskScheduler.getPendingTaskRequests`.
    public func pendingTaskRequests() throws(ClientError) -> [RequestInfo] {
        try client.listRequests(app: name)
    }

    // MARK: Running

    /// `runScheduledTask`: hands the task to its launch handler. With none registered, the task cannot be done:
    /// it is completed as failed, not to be retried, and the connection observers are told.
    func startScheduledTask(identifier: String, taskId: Int?) {
        guard let taskId else { return }
        let task = ScheduledTask(identifier: identifier, taskId: taskId, application: self)
        enum Start { case heardBefore, run(@Sendable (ScheduledTask) -> Void), noHandler }
        let start = state.withLock { (state: inout State) -> Start in
            // Told again after a re-attach: it started (and may have ended) when first heard.
            guard state.noteHeard(scheduledTask: taskId) else { return .heardBefore }
            guard let handler = state.launchHandlers[identifier] else { return .noHandler }
            state.scheduledTasks[taskId] = task
            return .run(handler)
        }
        switch start {
        case .heardBefore:
            return
        case .run(let handler):
            handler(task)
        case .noHandler:
            notify(.noLaunchHandler(identifier: identifier))
            do throws(ClientError) {
                try client.setTaskCompleted(app: name, taskId: taskId, success: false, retry: false)
            } catch {
                notify(.requestFailed(method: SetTaskCompletedParameters.methodName, error))
            }
        }
    }

    /// Ends a scheduled task with its outcome; a task the daemon already ended (expired, or its request
    /// cancelled) is left as it is.
    func completeScheduledTask(_ task: ScheduledTask, success: Bool, retry: Bool) {
        state.withLock { _ = $0.scheduledTasks.removeValue(forKey: task.taskId) }
        do throws(ClientError) {
            try client.setTaskCompleted(app: name, taskId: task.taskId, success: success, retry: retry)
        } catch .lifecycle(.noSuchTask) {
            // Over on the daemon's side already.
        } catch {
            if error.isTransportFailure {
                // The daemon is going or gone: a restarted one keeps the task, and must hear how it went (ending it
                // instead would be a failure not to retry).
                state.withLock { $0.pendingCompletions[task.taskId] = (success, retry) }
            }
            notify(.requestFailed(method: SetTaskCompletedParameters.methodName, error))
        }
    }
}
