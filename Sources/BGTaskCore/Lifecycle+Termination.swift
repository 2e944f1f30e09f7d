// Inputs and steps that end apps: policy and controller terminations, process exits, and forgetting ended apps.

extension Lifecycle {
    /// `Terminate` from a controller: `willTerminate`, then SIGKILL after `WillTerminateGraceSec`.
    public mutating func terminate(_ id: AppID, now: MonotonicInstant) throws(LifecycleError) -> [Action] {
        guard let app = apps[id] else { throw .noSuchApp(id.description) }
        guard app.state != .terminated else { throw .invalidState(app: app.name, state: app.state) }
        var actions: [Action] = []
        terminate(id, reason: .controller, now: now, into: &actions)
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// The shell saw the app's process end (pidfd readable). Ends whatever is left of the registration and
    /// records the final reason: the policy's, if the daemon was ending it, else `exited` or `crashed`; an
    /// ExitsOnSuspend app the policy ended for reaching suspension that exits cleanly before its kill `exited`.
    ///
    /// `exit` is how the process ended when the daemon launched it and reaped it (nil for a self-registered app,
    /// whose status only its parent sees); `sinceKill`, for an app the daemon killed, how long after the kill
    /// the exit was seen (recorded as the entry's latency: the time for its memory to come back).
    public mutating func processExited(
        _ id: AppID, how: ProcessEnd, exit: ProcessExit? = nil, sinceKill: Duration? = nil, now: MonotonicInstant
    ) -> [Action] {
        guard let app = apps[id], !app.isProcessGone else { return [] }
        var actions: [Action] = []
        if app.state != .terminated {
            let reason = how.reason
            terminate(id, reason: reason, now: now, into: &actions, processGone: true)
        } else if app.exitReason == .exitsOnSuspend, how == .exited, app.deadlines[.kill] != nil {
            // An ExitsOnSuspend app asked to be ended once its work is done, and its process then exited by
            // itself within its willTerminate grace: it exited, the way a job that finished does.
            modify(id) { $0.exitReason = .exited }
        }
        clearDeadlines(DeadlineKind.allCases, of: id)
        modify(id) {
            $0.isProcessGone = true
            $0.isRegistered = false
            $0.processExit = exit
        }
        let finalReason = tracked(id).exitReason
        audit(.processExited, id, now: now, into: &actions) {
            $0.reason = finalReason
            $0.latency = sinceKill
        }
        // A registration its name no longer leads to (the name registered again, or a later registration of it
        // ended, while this process was still ending) is forgotten once its process is gone; kept, it would
        // stay until `historySize` ended registrations came after it, reachable by nothing but its identity.
        if endedNames[app.name] != id { forgetEnded(id) }
        evictEnded()
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// Ends an app for `reason`: every lease ends, queued events are dropped, the name is released, and the
    /// process gets `willTerminate` and a grace before SIGKILL — except when it cannot run handlers (not
    /// registered, or reclaimed while suspended), which is killed at once with no notice.
    mutating func terminate(
        _ id: AppID, reason: TerminationReason, now: MonotonicInstant, into actions: inout [Action],
        processGone: Bool = false, annotate: (inout AuditEntry) -> Void = { _ in }
    ) {
        let app = tracked(id)
        guard app.state != .terminated else { return }
        endAllTasks(of: id, cause: reason == .taskExpired ? .expired : .appEnded, now: now, into: &actions)
        closeBackgroundStretch(of: id, now: now)
        clearDeadlines(DeadlineKind.allCases, of: id)
        modify(id) {
            $0.exitReason = reason
            $0.queue = EventQueue()
            $0.budgetEnd = nil
            $0.pendingAcknowledgement = nil
            $0.lockGraceActive = false
        }
        if liveNames[app.name] == id { setLiveName(app.name, to: nil) }
        if detachedNames[app.name] == id { detachedNames[app.name] = nil }
        // The name's ended registration is this one now; the one before it is forgotten (its process gone), or
        // when its process goes (`processExited`).
        if let previous = endedNames[app.name], previous != id { forgetEnded(previous) }
        endedNames[app.name] = id
        endedOrder.append(id)
        isHistoryOrderChanged = true
        changeState(id, to: .terminated, now: now, into: &actions)
        noteAppChange(of: app.name)
        audit(.terminated, id, now: now, into: &actions) {
            $0.reason = reason
            annotate(&$0)
        }
        guard !processGone else { return }
        let silent = !app.isRegistered || (reason == .memoryReclaim && app.state == .suspended)
        if silent {
            kill(id, reason: reason, now: now, into: &actions)
        } else {
            if app.state == .suspended { actions.append(.resume(id)) }
            actions.append(.send(makeEvent(.willTerminate), to: id))
            setDeadline(.kill, of: id, at: now + app.policy.willTerminateGrace)
        }
    }

    mutating func kill(_ id: AppID, reason: TerminationReason, now: MonotonicInstant, into actions: inout [Action]) {
        clearDeadline(.kill, of: id)
        actions.append(.kill(id, reason: reason))
        audit(.killed, id, now: now, into: &actions) { $0.reason = reason }
    }

    /// Forgets an ended registration its name no longer leads to (its process may still be dying: then the record
    /// stays, reachable by identity only, until `processExited` forgets it).
    mutating func forgetEnded(_ id: AppID) {
        if let app = apps[id], app.isProcessGone, app.deadlines.isEmpty {
            apps.remove(id)
        }
    }

    /// Keeps at most `historySize` ended registrations, oldest forgotten first; one whose process is still
    /// finishing its grace is kept until it is gone.
    mutating func evictEnded() {
        while endedOrder.count - endedOrderStart > policy.historySize {
            let oldest = endedOrder[endedOrderStart]
            if let app = apps[oldest], !app.isProcessGone { break }
            endedOrderStart += 1
            isHistoryOrderChanged = true
            if let app = apps[oldest] {
                if endedNames[app.name] == oldest { endedNames[app.name] = nil }
                apps.remove(oldest)
            }
        }
        if endedOrderStart > 64 && endedOrderStart * 2 > endedOrder.count {
            endedOrder.removeFirst(endedOrderStart)
            endedOrderStart = 0
        }
    }
}

extension Lifecycle {
    /// The shell's timer fired: handles every deadline due at or before `now`, earliest first (same-instant
    /// deadlines in the order they were scheduled).
    public mutating func deadlineReached(now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        while true {
            let due = deadlines.first.flatMap { $0.order.instant <= now ? $0 : nil }
            if let scheduled = scheduling.deadline, scheduled <= now,
                due.map({ scheduled < $0.order.instant }) ?? true
            {
                // Scheduled work is looked at as of its own instant; what that plans lies after it.
                evaluateScheduling(now: scheduled, into: &actions)
                continue
            }
            guard let (id, order) = due else { break }
            // Safe: the queue only holds apps with a pending deadline, whose earliest is this one.
            let kind = tracked(id).deadlines.earliest!.kind
            modify(id) { $0.deadlines[kind] = nil }
            refreshQueue(for: id)
            handleDeadline(kind, of: id, at: order.instant, into: &actions)
        }
        // The shell's timer is spent: re-arm whatever is next, even if it did not move.
        armedDeadline = nil
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    private mutating func handleDeadline(
        _ kind: DeadlineKind, of id: AppID, at deadline: MonotonicInstant, into actions: inout [Action]
    ) {
        let app = tracked(id)
        switch kind {
        case .launch:
            terminate(id, reason: .launchTimeout, now: deadline, into: &actions)
        case .kill:
            kill(id, reason: app.exitReason ?? .controller, now: deadline, into: &actions)
        case .acknowledgement:
            modify(id) { $0.pendingAcknowledgement = nil }
            if app.acknowledgementIsForWake || !app.openTasks.isEmpty {
                // A woken app is suspended again; an app holding a lease has claimed its time.
                suspendIfIdle(id, now: deadline, into: &actions)
            } else {
                terminate(id, reason: .enterBackgroundTimeout, now: deadline, into: &actions)
            }
        case .lockGrace:
            modify(id) {
                $0.lockGraceActive = false
                $0.suspensionIsFinalAttempt = true
            }
            suspendIfIdle(id, now: deadline, into: &actions)
            if tracked(id).state != .suspended {
                modify(id) { $0.suspensionIsFinalAttempt = false }
            }
        case .expirationWarning:
            if app.hasOrdinaryTasks, !app.expirationWarned {
                warnExpiration(of: id, now: deadline, into: &actions)
            }
        case .budget:
            if app.hasOrdinaryTasks {
                terminate(id, reason: .taskExpired, now: deadline, into: &actions)
            }
        }
    }
}
