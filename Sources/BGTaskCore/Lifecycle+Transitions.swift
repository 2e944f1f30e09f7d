// Inputs that move an app between the foreground and the background, and the suspension step.

/// A state a controller may ask for (`SetState`).
public enum RequestedState: String, Sendable, CaseIterable {
    /// Foreground, receiving input.
    case active
    /// Foreground, not receiving input.
    case inactive
    /// Background (a suspended app stays suspended).
    case background

    /// The state asked for by its name as an `AppState` (`SetState`'s `state`); nil for the states that can only
    /// be reached, never asked for.
    public init?(_ state: AppState) {
        switch state {
        case .active: self = .active
        case .inactive: self = .inactive
        case .background: self = .background
        case .notRunning, .suspended, .terminated: return nil
        }
    }

    /// The same state as an `AppState`.
    public var appState: AppState {
        switch self {
        case .active: .active
        case .inactive: .inactive
        case .background: .background
        }
    }
}

extension Lifecycle {
    /// A controller moves an app (the `SetState` call). Moving from `active` to `background` passes through
    /// `inactive`, and from the background to `active` through `inactive`, sending both events in order.
    /// Asking for the state the app is in changes nothing.
    public mutating func setState(
        _ id: AppID, to requested: RequestedState, now: MonotonicInstant
    ) throws(LifecycleError) -> [Action] {
        guard let app = apps[id] else { throw .noSuchApp(id.description) }
        var actions: [Action] = []
        switch (app.state, requested) {
        case (.notRunning, _), (.terminated, _):
            throw .invalidState(app: app.name, state: app.state)
        case (.active, .active), (.inactive, .inactive), (.background, .background), (.suspended, .background):
            return []
        case (.active, .inactive):
            resignActive(id, now: now, into: &actions)
        case (.active, .background):
            resignActive(id, now: now, into: &actions)
            enterBackground(id, now: now, into: &actions)
        case (.inactive, .active):
            becomeActive(id, now: now, into: &actions)
        case (.inactive, .background):
            enterBackground(id, now: now, into: &actions)
        case (.background, .inactive), (.suspended, .inactive):
            enterForeground(id, now: now, into: &actions)
        case (.background, .active), (.suspended, .active):
            enterForeground(id, now: now, into: &actions)
            becomeActive(id, now: now, into: &actions)
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    mutating func resignActive(_ id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        changeState(id, to: .inactive, now: now, into: &actions)
        let event = makeEvent(.willResignActive)
        deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
    }

    mutating func becomeActive(_ id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        changeState(id, to: .active, now: now, into: &actions)
        modify(id) { $0.lastForeground = now }
        noteForeground(of: id, at: now)
        let event = makeEvent(.didBecomeActive)
        deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
    }

    /// inactive → background: a fresh budget, `didEnterBackground`, and its acknowledgement deadline.
    mutating func enterBackground(_ id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        let app = tracked(id)
        var budgetEnd = now + app.policy.backgroundTime
        let dailyCap = app.policy.backgroundBudgetPerDay
        if dailyCap > .zero {
            let used = ledgers[app.name]?.used(at: now) ?? .zero
            let available = used < dailyCap ? dailyCap - used : .zero
            budgetEnd = min(budgetEnd, now + available)
        }
        let event = makeEvent(.didEnterBackground)
        modify(id) {
            $0.lastForeground = now
            $0.budgetEnd = budgetEnd
            $0.runningInBackgroundSince = now
            $0.expirationWarned = false
            $0.lockGraceActive = false
            $0.pendingAcknowledgement = event.id
            $0.acknowledgementIsForWake = false
        }
        noteForeground(of: id, at: now)
        changeState(id, to: .background, now: now, into: &actions)
        deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
        setDeadline(.acknowledgement, of: id, at: now + app.policy.enterBackgroundGrace)
        armBudgetDeadlines(of: id, now: now, into: &actions)
    }

    /// background or suspended → inactive, resuming first if suspended; the budget resets.
    mutating func enterForeground(_ id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        if tracked(id).state == .suspended {
            resume(id, now: now, into: &actions)
        }
        closeBackgroundStretch(of: id, now: now)
        clearDeadlines([.acknowledgement, .lockGrace, .expirationWarning, .budget], of: id)
        modify(id) {
            $0.budgetEnd = nil
            $0.pendingAcknowledgement = nil
            $0.expirationWarned = false
            $0.lockGraceActive = false
            $0.suspensionIsFinalAttempt = false
            $0.lastForeground = now
        }
        noteForeground(of: id, at: now)
        changeState(id, to: .inactive, now: now, into: &actions)
        let event = makeEvent(.willEnterForeground)
        deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
    }

    /// Arms the expiration warning and budget deadlines when the app runs in background with leases open;
    /// acts at once on those already due.
    mutating func armBudgetDeadlines(of id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        let (isEligible, budgetEnd, warned, warning, warningArmed, budgetArmed) = read(id) {
            (
                $0.state == .background && $0.hasOrdinaryTasks, $0.budgetEnd, $0.expirationWarned,
                $0.policy.expirationWarning, $0.deadlines[.expirationWarning] != nil, $0.deadlines[.budget] != nil
            )
        }
        guard isEligible, let budgetEnd else { return }
        if budgetEnd <= now {
            if !warned { warnExpiration(of: id, now: now, into: &actions) }
            terminate(id, reason: .taskExpired, now: now, into: &actions)
            return
        }
        if !warned {
            let warnAt = budgetEnd - warning
            if warnAt <= now {
                warnExpiration(of: id, now: now, into: &actions)
            } else if !warningArmed {
                setDeadline(.expirationWarning, of: id, at: warnAt)
            }
        }
        if !budgetArmed {
            setDeadline(.budget, of: id, at: budgetEnd)
        }
    }

    /// Sends `backgroundTaskExpiring` listing every open task.
    mutating func warnExpiration(of id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        clearDeadline(.expirationWarning, of: id)
        modify(id) { $0.expirationWarned = true }
        let taskIDs = read(id) { $0.ordinaryTaskIDs }
        var event = makeEvent(.backgroundTaskExpiring)
        event.taskIDs = taskIDs
        deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
        audit(.expirationWarning, id, now: now, into: &actions) { $0.taskIDs = taskIDs }
    }

    /// Suspends an app in background whose work is done: no lease, nothing left to acknowledge.
    /// `ExitsOnSuspend` apps are terminated instead. An app exempted from suspension (`suspensionExempted`) stays in
    /// background: one whose unit has a watchdog is still ended if it exits on suspend (that is its own choice, and
    /// no watchdog kill), one whose unit is stopping is left to that stop.
    mutating func suspendIfIdle(_ id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        let (isIdle, exitsOnSuspend, exemption) = read(id) {
            (
                $0.state == .background && $0.openTasks.isEmpty && $0.pendingAcknowledgement == nil
                    && !$0.lockGraceActive, $0.policy.exitsOnSuspend, $0.suspensionExemption
            )
        }
        guard isIdle, exemption?.isStopping != true else { return }
        if exitsOnSuspend {
            terminate(id, reason: .exitsOnSuspend, now: now, into: &actions)
            return
        }
        guard exemption == nil else { return }
        closeBackgroundStretch(of: id, now: now)
        clearDeadlines([.acknowledgement, .expirationWarning, .budget], of: id)
        changeState(id, to: .suspended, now: now, into: &actions)
        actions.append(.suspend(id))
    }

    /// The shell learned that the app must never be suspended (`exemption`: its unit is stopping, or has a
    /// watchdog). Recorded once per reason, in the audit trail with the reason as its `trigger`; a suspended app is
    /// woken into background at once (its process continued, its queued events delivered), and from then on it
    /// stays in background when its work is done. A stop outranks a watchdog; nothing replaces a stop.
    public mutating func suspensionExempted(
        _ id: AppID, because exemption: SuspensionExemption, now: MonotonicInstant
    ) -> [Action] {
        guard let app = apps[id], app.state != .terminated, app.suspensionExemption != exemption,
            app.suspensionExemption?.isStopping != true
        else { return [] }
        var actions: [Action] = []
        modify(id) { $0.suspensionExemption = exemption }
        // Thawed first: a frozen app whose unit is stopping holds its manager up until it runs.
        if app.state == .suspended {
            wake(id, now: now, into: &actions)
            armBudgetDeadlines(of: id, now: now, into: &actions)
        }
        audit(.suspensionExempted, id, now: now, into: &actions) { $0.trigger = exemption.description }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// The shell did not freeze the app because it holds a file lock. The first refusal starts
    /// `LockedSuspendGraceSec`; a refusal after the grace terminates the app `suspended-holding-lock`.
    public mutating func suspensionRefused(_ id: AppID, now: MonotonicInstant) -> [Action] {
        guard let app = apps[id], app.state == .suspended else { return [] }
        var actions: [Action] = []
        if app.suspensionIsFinalAttempt {
            modify(id) { $0.state = .background }
            terminate(id, reason: .suspendedHoldingLock, now: now, into: &actions)
        } else {
            modify(id) {
                $0.lockGraceActive = true
                $0.runningInBackgroundSince = now
            }
            changeState(id, to: .background, now: now, into: &actions)
            // It was never stopped, and runs now: what was queued for it while the suspension waited on the
            // lock check goes out (a running app holds no queue; a saved state with one is refused).
            let queued = modify(id) { app -> [AppEvent] in
                app.hasRecordedDropThisSuspension = false
                return app.queue.removeAll()
            }
            for event in queued { actions.append(.send(event, to: id)) }
            audit(.suspensionDeferred, id, now: now, into: &actions)
            setDeadline(.lockGrace, of: id, at: now + app.policy.lockedSuspendGrace)
            armBudgetDeadlines(of: id, now: now, into: &actions)
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }
}
