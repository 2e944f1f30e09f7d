// BackgroundApplication's event thread: reading the Register stream, reconnecting, and carrying leases over.

import BGTaskPOSIX
import Dispatch
import FoundationEssentials
import Synchronization

extension BackgroundApplication {
    // MARK: Event thread

    /// The body of the event thread: reads events until the stream ends, then reconnects, until closed.
    ///
    /// It holds the application only while handling something, never while blocked, so dropping the last
    /// reference to an application that was not closed still closes it (in `deinit`) and ends this thread.
    static func readEvents(
        application: WeakReference<BackgroundApplication>,
        registration first: Registration,
        wakeUp: DispatchSemaphore,
        policy: ReconnectPolicy
    ) {
        var registration = first
        while true {
            var ending = ClientError.disconnected
            do throws(ClientError) {
                while let event = try registration.nextEvent() {
                    guard let app = application.value else {
                        registration.close()
                        return
                    }
                    app.receive(event)
                }
            } catch {
                ending = error
            }
            registration.close()
            guard let app = application.value, app.connectionLost(ending) else { return }
            var attempt = 0
            var delay = policy.initialDelay
            var lastError = ending
            while true {
                attempt += 1
                if attempt > 1 {
                    // A signal means close() was called; the attempt below then sees the closed link and stops.
                    _ = wakeUp.wait(timeout: .now() + .nanoseconds(Int(clamping: delay.nanosecondCount)))
                    delay = min(delay * 2, policy.maximumDelay)
                }
                guard let app = application.value else { return }
                switch app.reconnect(attempt: attempt) {
                case .stop:
                    return
                case .registered(let next):
                    registration = next
                case .failed(let error):
                    lastError = error
                    if let maximum = policy.maximumAttempts, attempt >= maximum {
                        app.giveUp(lastError)
                        return
                    }
                    continue
                }
                break
            }
        }
    }

    /// Marks the link lost; false when the application was closed, so nothing is to be done.
    func connectionLost(_ error: ClientError) -> Bool {
        let isOpen = state.withLock { (state: inout State) -> Bool in
            guard state.link.isAlive else { return false }
            state.link = .reconnecting
            return true
        }
        if isOpen { notify(.lost(error)) }
        return isOpen
    }

    enum ReconnectOutcome {
        case registered(Registration)
        case failed(ClientError)
        case stop
    }

    /// One attempt to register again and carry the open tasks over.
    func reconnect(attempt: Int) -> ReconnectOutcome {
        let (isOpen, wasInBackground) = state.withLock { ($0.link.isAlive, $0.applicationState == .background) }
        guard isOpen else { return .stop }
        let registration: Registration
        do throws(ClientError) {
            // A fresh registration starts where the app was: in background it gets didEnterBackground and the
            // grace period again, rather than being taken for a foreground app.
            registration = try client.register(
                name: name, exitsOnSuspend: exitsOnSuspend, state: wasInBackground ? .background : nil)
        } catch {
            notify(.reconnectFailed(error, attempt: attempt))
            return .failed(error)
        }
        let isRegistered: Bool
        do throws(ClientError) {
            isRegistered = try leaseOperations.withLock { _ throws(ClientError) -> Bool in
                try carryLeasesOver(to: registration)
            }
        } catch {
            registration.close()
            notify(.reconnectFailed(error, attempt: attempt))
            return .failed(error)
        }
        guard isRegistered else {
            registration.close()
            return .stop
        }
        notify(.reconnected(app: registration.app, attempt: attempt))
        return .registered(registration)
    }

    /// Makes the daemon's leases match the open tasks after registering again, then marks the link registered;
    /// false when the application was closed meanwhile. Called with `leaseOperations` held.
    ///
    /// A re-attached registration keeps its leases (the daemon saves them across its restarts): tasks whose
    /// lease it lists keep it, with the same id, and listed leases no task claims (tasks ended while the link was
    /// down) are ended. A task whose lease the daemon no longer lists (it lost its state) is never begun again,
    /// which would hand the app a fresh budget: its expiration handler runs, as when time runs out. Scheduled tasks
    /// are claimed the same way, and one the daemon no longer lists is over: its expiration handler runs. Tasks begun
    /// while the link was down have their leases begun now; one the daemon refuses has its expiration handler
    /// run, since its work is not covered. A scheduled task completed while the daemon was away is completed again,
    /// with the same outcome, if the daemon still lists it; one the app does not know is left to the daemon, which
    /// tells it again after this reply (`runScheduledTask` once more for every scheduled task it runs).
    func carryLeasesOver(to registration: Registration) throws(ClientError) -> Bool {
        let kept = Set(registration.app.tasks.map(\.id))
        let completions = state.withLock { (state: inout State) in
            defer { state.pendingCompletions = [:] }
            return state.pendingCompletions
        }
        let (unclaimed, lostHandlers) = state.withLock { (state: inout State) -> ([Int], [@Sendable () -> Void]) in
            var claimed = Set<Int>()
            var lostHandlers: [@Sendable () -> Void] = []
            for (identifier, lease) in state.leases {
                guard let taskId = lease.taskId else { continue }
                if kept.contains(taskId) {
                    claimed.insert(taskId)
                } else {
                    state.leases[identifier]?.taskId = nil
                    state.leases[identifier]?.isLost = true
                    if let handler = state.takeExpirationHandler(identifier) { lostHandlers.append(handler) }
                }
            }
            for (taskId, task) in state.scheduledTasks {
                if kept.contains(taskId) {
                    claimed.insert(taskId)
                } else {
                    state.scheduledTasks[taskId] = nil
                    if let handler = task.takeExpirationHandler() { lostHandlers.append(handler) }
                }
            }
            state.expiringUnclaimed = []
            state.heardScheduledTasks.formIntersection(kept)
            // A scheduled task the app has not heard of (its runScheduledTask lost with the daemon that sent it, or
            // still to come) is left to the daemon: ended here it would be a failure not to retry, and its request
            // gone without ever running. The daemon tells a re-attaching app its running tasks again, after this
            // reply: it starts then, on what is left of its time. So is one heard and told to stop already.
            let unheard = registration.app.tasks.filter {
                state.launchHandlers[$0.name] != nil && completions[$0.id] == nil
            }
            claimed.formUnion(unheard.map(\.id))
            return (kept.subtracting(claimed).sorted(), lostHandlers)
        }
        for handler in lostHandlers { queue.async { handler() } }
        for taskId in unclaimed {
            do throws(ClientError) {
                if let completion = completions[taskId] {
                    try client.setTaskCompleted(
                        app: name, taskId: taskId, success: completion.success, retry: completion.retry)
                } else {
                    try client.endBackgroundTask(app: name, taskId: taskId)
                }
            } catch .lifecycle(.noSuchTask) {
                // Gone already: nothing to end.
            }
        }
        var attempted = Set<BackgroundTaskIdentifier>()
        while true {
            enum Step { case begin(BackgroundTaskIdentifier, String?), registered, closed }
            let step = state.withLock { (state: inout State) -> Step in
                guard state.link.isAlive else { return .closed }
                let pending = state.leases.filter {
                    $0.value.taskId == nil && !$0.value.isLost && !attempted.contains($0.key)
                }
                if let (identifier, lease) = pending.min(by: { $0.key.rawValue < $1.key.rawValue }) {
                    return .begin(identifier, lease.name)
                }
                // No task left without a lease: from here on, calls go to this registration.
                state.link = .registered(registration)
                state.app = registration.app
                state.applicationState = ApplicationState(registration.app.state)
                state.reconnectCount += 1
                return .registered
            }
            switch step {
            case .closed:
                return false
            case .registered:
                return true
            case .begin(let identifier, let taskName):
                attempted.insert(identifier)
                do throws(ClientError) {
                    let taskId = try client.beginBackgroundTask(app: name, name: taskName)
                    record(taskId: taskId, for: identifier)
                } catch  where !error.isTransportFailure {
                    let handler = state.withLock { $0.takeExpirationHandler(identifier) }
                    if let handler { queue.async { handler() } }
                }
            }
        }
    }

    func giveUp(_ error: ClientError) {
        let wasOpen = state.withLock { (state: inout State) -> Bool in
            guard state.link.isAlive else { return false }
            state.link = .gaveUp
            state.leases = [:]
            return true
        }
        if wasOpen { notify(.gaveUp(error)) }
    }
}

/// Identifies an observer added to a `BackgroundApplication`, for `removeObserver(_:)`.
public struct ObserverToken: Hashable, Comparable, Sendable {
    let number: Int

    public static func < (lhs: ObserverToken, rhs: ObserverToken) -> Bool { lhs.number < rhs.number }
}
