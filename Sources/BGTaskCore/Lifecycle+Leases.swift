// Inputs for background-task leases, remaining time and acknowledgements.

extension Lifecycle {
    /// `BeginBackgroundTask`: opens a lease on the app's shared budget.
    ///
    /// Any running state may begin; leases begun in the foreground carry into the background. In background
    /// with no time left it fails with `backgroundTimeExhausted`. A begin from a suspended app (a call sent just
    /// before it was frozen) wakes it into background rather than failing. A lease begun inside the warning
    /// window gets its own `backgroundTaskExpiring` at once.
    public mutating func beginBackgroundTask(
        _ id: AppID, name: String?, now: MonotonicInstant
    ) throws(LifecycleError) -> (task: TaskID, actions: [Action]) {
        guard let app = apps[id] else { throw .noSuchApp(id.description) }
        guard app.isRegistered, app.state.isRunning || app.state == .suspended else {
            throw .invalidState(app: app.name, state: app.state.rawValue)
        }
        if app.state == .background || app.state == .suspended, let remaining = remaining(of: app, now: now),
            remaining <= .zero
        {
            throw .backgroundTimeExhausted(app: app.name)
        }
        guard app.openTasks.count < policy.tasksPerAppMax else {
            throw .limitExceeded(limit: "TasksPerAppMax", max: policy.tasksPerAppMax)
        }
        var actions: [Action] = []
        if app.state == .suspended {
            wake(id, now: now, into: &actions)
        }
        let task = TaskID(rawValue: nextTaskID)
        nextTaskID += 1
        tasks[task] = TaskRecord(app: id, name: name, began: now)
        modify(id) { $0.openTasks.append(task) }
        audit(.taskBegan, id, now: now, into: &actions) {
            $0.taskID = task
            $0.taskName = name
        }
        if record(id).state == .background {
            if record(id).lockGraceActive {
                // Working again: the lock grace is moot; a later suspension gets a fresh one.
                clearDeadline(.lockGrace, of: id)
                modify(id) { $0.lockGraceActive = false }
            }
            if record(id).expirationWarned {
                var event = makeEvent(.backgroundTaskExpiring)
                event.taskIDs = [task]
                deliver(event, to: id, behavior: .coalesce, into: &actions)
                audit(.expirationWarning, id, now: now, into: &actions) { $0.taskIDs = [task] }
            }
            armBudgetDeadlines(of: id, now: now, into: &actions)
        }
        finish(&actions)
        return (task, actions)
    }

    /// `EndBackgroundTask`: ends a lease exactly once. An unknown, ended or foreign id fails and changes nothing.
    /// Ending the last lease of an app in background suspends it (once its `didEnterBackground` is acknowledged).
    public mutating func endBackgroundTask(
        _ id: AppID, task: TaskID, now: MonotonicInstant
    ) throws(LifecycleError) -> [Action] {
        guard let app = apps[id] else { throw .noSuchApp(id.description) }
        guard let lease = tasks[task], lease.app == id else { throw .noSuchTask(app: app.name, task: task) }
        var actions: [Action] = []
        endTask(task, cause: .ended, now: now, into: &actions)
        if record(id).openTasks.isEmpty {
            clearDeadlines([.expirationWarning, .budget], of: id)
            suspendIfIdle(id, now: now, into: &actions)
        }
        finish(&actions)
        return actions
    }

    /// `BackgroundTimeRemaining`: `nil` (unlimited) in the foreground; in background or suspended, the time
    /// left of the shared budget, counting down whether or not a lease is held.
    public func backgroundTimeRemaining(_ id: AppID, now: MonotonicInstant) throws(LifecycleError) -> Duration? {
        guard let app = apps[id] else { throw .noSuchApp(id.description) }
        return remaining(of: app, now: now)
    }

    /// `Acknowledge`: the app finished handling an event. Acknowledging the awaited `didEnterBackground` or
    /// wake-up lets an app with no lease be suspended; other acknowledgements are accepted and change nothing.
    public mutating func acknowledge(
        _ id: AppID, event: EventID, now: MonotonicInstant
    ) throws(LifecycleError) -> [Action] {
        guard let app = apps[id] else { throw .noSuchApp(id.description) }
        guard event.rawValue > 0, event.rawValue < nextEventID else {
            throw .noSuchEvent(app: app.name, event: event)
        }
        guard app.pendingAcknowledgement == event else { return [] }
        var actions: [Action] = []
        modify(id) { $0.pendingAcknowledgement = nil }
        clearDeadline(.acknowledgement, of: id)
        suspendIfIdle(id, now: now, into: &actions)
        finish(&actions)
        return actions
    }

    /// Ends one lease, recording how.
    mutating func endTask(_ task: TaskID, cause: TaskEndCause, now: MonotonicInstant, into actions: inout [Action]) {
        guard let lease = tasks.removeValue(forKey: task) else { return }
        modify(lease.app) { app in
            if let index = app.openTasks.firstIndex(of: task) { app.openTasks.remove(at: index) }
        }
        audit(.taskEnded, lease.app, now: now, into: &actions) {
            $0.taskID = task
            $0.taskName = lease.name
            $0.taskEnd = cause
        }
    }

    /// Ends every open lease of an app (it expired or the app ended).
    mutating func endAllTasks(of id: AppID, cause: TaskEndCause, now: MonotonicInstant, into actions: inout [Action]) {
        for task in record(id).openTasks {
            endTask(task, cause: cause, now: now, into: &actions)
        }
    }

    /// suspended → background to handle something, with `EnterBackgroundGraceSec` to acknowledge.
    mutating func wake(_ id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        resume(id, now: now, into: &actions)
        modify(id) {
            $0.runningInBackgroundSince = now
            $0.suspensionIsFinalAttempt = false
        }
        changeState(id, to: .background, now: now, into: &actions)
    }
}
