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
        guard apps.contains(id) else { throw .noSuchApp(id.description) }
        // Read in place: copying the whole app is the dominant cost of this hot path.
        let (state, isRegistered, budgetEnd, openCount) = read(id) {
            ($0.state, $0.isRegistered, $0.budgetEnd, $0.openTasks.count)
        }
        guard isRegistered, state.isRunning || state == .suspended else {
            throw .invalidState(app: apps[id]?.name ?? "", state: state)
        }
        if state == .background || state == .suspended, let budgetEnd, budgetEnd <= now {
            throw .backgroundTimeExhausted(app: apps[id]?.name ?? "")
        }
        guard openCount < policy.tasksPerAppMax else {
            throw .limitExceeded(limit: "TasksPerAppMax", max: policy.tasksPerAppMax)
        }
        var actions: [Action] = []
        if state == .suspended {
            wake(id, now: now, into: &actions)
        }
        let task = TaskID(rawValue: nextTaskID)
        nextTaskID += 1
        // Recorded as the lease alone: in the foreground, that is all the call changes.
        apps.appendTask(OpenTask(id: task, name: name, began: now), to: id)
        openTaskCount += 1
        audit(.taskBegan, id, now: now, into: &actions) {
            $0.taskID = task
            $0.taskName = name
        }
        let (isBackground, lockGraceActive, expirationWarned) = read(id) {
            ($0.state == .background, $0.lockGraceActive, $0.expirationWarned)
        }
        if isBackground {
            if lockGraceActive {
                // Working again: the lock grace is moot; a later suspension gets a fresh one.
                clearDeadline(.lockGrace, of: id)
                modify(id) { $0.lockGraceActive = false }
            }
            if expirationWarned {
                var event = makeEvent(.backgroundTaskExpiring)
                event.taskIDs = [task]
                deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
                audit(.expirationWarning, id, now: now, into: &actions) { $0.taskIDs = [task] }
            }
            armBudgetDeadlines(of: id, now: now, into: &actions)
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return (task, actions)
    }

    /// `EndBackgroundTask`: ends a lease exactly once. An unknown, ended or foreign id fails and changes nothing.
    /// Ending the last lease of an app in background suspends it (once its `didEnterBackground` is acknowledged).
    public mutating func endBackgroundTask(
        _ id: AppID, task: TaskID, now: MonotonicInstant
    ) throws(LifecycleError) -> [Action] {
        guard apps.contains(id) else { throw .noSuchApp(id.description) }
        guard read(id, { $0.openTasks.contains { $0.id == task } }) else {
            throw .noSuchTask(app: apps[id]?.name ?? "", task: task)
        }
        var actions: [Action] = []
        endTask(task, of: id, cause: .ended, now: now, into: &actions)
        if !read(id, { $0.hasOrdinaryTasks }) {
            clearDeadlines([.expirationWarning, .budget], of: id)
            suspendIfIdle(id, now: now, into: &actions)
        }
        armTimerIfDeadlineMoved(&actions, now: now)
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
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// Ends one open lease of an app, recording how.
    mutating func endTask(
        _ task: TaskID, of id: AppID, cause: TaskEndCause, now: MonotonicInstant, into actions: inout [Action]
    ) {
        guard let lease = apps.removeTask(task, of: id) else { return }
        openTaskCount -= 1
        audit(.taskEnded, id, now: now, into: &actions) {
            $0.taskID = task
            $0.taskName = lease.name
            $0.taskEnd = cause
        }
        if lease.isScheduled == true { scheduledLeaseEnded(lease, of: id, cause: cause, now: now) }
    }

    /// Ends every open lease of an app (it expired or the app ended).
    mutating func endAllTasks(of id: AppID, cause: TaskEndCause, now: MonotonicInstant, into actions: inout [Action]) {
        for task in read(id, { $0.openTaskIDs }) {
            endTask(task, of: id, cause: cause, now: now, into: &actions)
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
