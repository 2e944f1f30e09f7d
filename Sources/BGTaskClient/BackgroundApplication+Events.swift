// How BackgroundApplication handles each event: observers, delegate, expiration handlers, then the acknowledgement.

import BGTaskJSON
import BGTaskPOSIX
import Dispatch
import FoundationEssentials
import Synchronization

extension BackgroundApplication {
    // MARK: Events

    var isRegistered: Bool { state.withLock { $0.link.isRegistered } }

    /// Hands an event read by the event thread to the callback queue.
    func receive(_ event: EventInfo) {
        queue.async { self.handle(event) }
    }

    /// Runs an event's callbacks on the callback queue, then acknowledges it.
    func handle(_ event: EventInfo) {
        let (delegate, observers, isOpen) = state.withLock {
            (state: inout State) -> ((any ApplicationDelegate)?, [@Sendable (EventInfo) -> Void], Bool) in
            (state.delegate, state.eventObservers.sorted { $0.key < $1.key }.map(\.value), state.link.isAlive)
        }
        guard isOpen else { return }
        // UIKit's timing: a did* callback sees the state entered, a will* callback the state being left.
        switch event.kind {
        case .didBecomeActive: setApplicationState(.active)
        case .didEnterBackground: setApplicationState(.background)
        default: break
        }
        for observer in observers { observer(event) }
        switch event.kind {
        case .willResignActive:
            delegate?.applicationWillResignActive(self)
            setApplicationState(.inactive)
        case .didBecomeActive:
            delegate?.applicationDidBecomeActive(self)
        case .didEnterBackground:
            delegate?.applicationDidEnterBackground(self)
        case .willEnterForeground:
            delegate?.applicationWillEnterForeground(self)
            setApplicationState(.inactive)
        case .backgroundTaskExpiring:
            runExpirationHandlers(taskIds: event.taskIds ?? [])
        case .memoryWarning:
            let warning = MemoryWarning(isLikelyVictim: event.likelyVictim ?? false, rank: event.rank)
            delegate?.applicationDidReceiveMemoryWarning(self, warning: warning)
        case .willTerminate:
            delegate?.applicationWillTerminate(self)
        case .notification:
            let notification = ApplicationNotification(
                name: event.name ?? "", payload: event.payload.map(JSONValue.object), count: event.count ?? 1)
            delegate?.application(self, didReceive: notification)
        case .runScheduledTask:
            startScheduledTask(identifier: event.name ?? "", taskId: event.taskIds?.first)
        }
        let shouldAcknowledge = state.withLock { $0.acknowledgesAutomatically && $0.link.isAlive }
        guard shouldAcknowledge else { return }
        do throws(ClientError) {
            try client.acknowledge(app: name, eventId: event.id)
        } catch {
            notify(.requestFailed(method: AcknowledgeParameters.methodName, error))
        }
    }

    func setApplicationState(_ applicationState: ApplicationState) {
        state.withLock { $0.applicationState = applicationState }
    }

    /// Runs, once each, the expiration handlers of the tasks the daemon listed as expiring.
    func runExpirationHandlers(taskIds: [Int]) {
        let handlers = state.withLock { (state: inout State) -> [@Sendable () -> Void] in
            var handlers: [@Sendable () -> Void] = []
            for taskId in taskIds {
                if let task = state.scheduledTasks.removeValue(forKey: taskId) {
                    // Its task ends now or within the warning: the app completes it or the daemon ends it.
                    if let handler = task.takeExpirationHandler() { handlers.append(handler) }
                    continue
                }
                // A scheduled task told to stop before, or completed: told again after a re-attach.
                if state.heardScheduledTasks.contains(taskId) { continue }
                guard let identifier = state.identifier(forTaskId: taskId) else {
                    // A lease whose BeginBackgroundTask reply is still on its way: its handler runs when it lands.
                    state.expiringUnclaimed.insert(taskId)
                    continue
                }
                if let handler = state.takeExpirationHandler(identifier) { handlers.append(handler) }
            }
            return handlers
        }
        for handler in handlers { handler() }
    }

    /// Records the daemon's id for a task whose lease just began; ends the lease if the task ended meanwhile.
    /// Called with `leaseOperations` held.
    func record(taskId: Int, for identifier: BackgroundTaskIdentifier) {
        enum Outcome { case recorded, expiring(@Sendable () -> Void), orphaned, closed }
        let outcome = state.withLock { (state: inout State) -> Outcome in
            guard state.link.isAlive else { return .closed }
            guard state.leases[identifier] != nil else { return .orphaned }
            state.leases[identifier]?.taskId = taskId
            if state.expiringUnclaimed.remove(taskId) != nil, let handler = state.takeExpirationHandler(identifier) {
                return .expiring(handler)
            }
            return .recorded
        }
        switch outcome {
        case .recorded, .closed: break
        case .expiring(let handler): queue.async { handler() }
        case .orphaned: endLease(taskId: taskId)
        }
    }

    func endLease(taskId: Int) {
        do throws(ClientError) {
            try client.endBackgroundTask(app: name, taskId: taskId)
        } catch .lifecycle(.noSuchTask) {
            // Already over on the daemon's side (it expired, or the registration that held it ended).
        } catch {
            notify(.requestFailed(method: EndBackgroundTaskParameters.methodName, error))
        }
    }

    func notify(_ event: ConnectionEvent) {
        let observers = state.withLock { $0.connectionObservers.sorted { $0.key < $1.key }.map(\.value) }
        guard !observers.isEmpty else { return }
        queue.async {
            for observer in observers { observer(event) }
        }
    }
}
