// The lifecycle and lease policy as a struct state machine: one method per input, each returning actions.

/// The lifecycle policy: apps, states, leases, budgets, deadlines, event queues and the reclamation order, as
/// docs/ARCHITECTURE.md's state diagram and transition table describe them.
///
/// Every input is a mutating method that carries `now` and returns the `Action`s the shell must carry out,
/// in order. Nothing here reads a clock, touches the system or keeps global state, so a test can drive it
/// through any timeline and the daemon can replay it. Requests the policy refuses throw `LifecycleError`
/// and change nothing.
///
/// Deadlines live in one priority queue keyed by app (each app's earliest pending deadline), so the shell
/// keeps a single timer: `.armTimer(at:)` is emitted whenever the earliest deadline changes, and the shell
/// calls `deadlineReached(now:)` when it fires.
public struct Lifecycle: Sendable {
    /// The policy in force; see `updatePolicy(_:)`.
    public private(set) var policy: CorePolicy

    var apps = AppTable()
    /// Apps holding their name (see `TrackedApp.holdsName`). Changed only through `setLiveName(_:to:)`, which
    /// keeps `liveCountByUID` with it.
    var liveNames = NameTable<AppID>()
    /// How many apps of each uid hold a name: `AppsPerUserMax` is checked on every registration, and counting
    /// `liveNames` there cost O(apps).
    var liveCountByUID: [UInt32: Int] = [:]
    /// Registrations whose event stream closed while their process lives on, by name, until the process is
    /// gone or the name registers again.
    var detachedNames = NameTable<AppID>()
    /// The latest ended registration of each name still remembered, for `GetApp`.
    var endedNames = NameTable<AppID>()
    /// Ended registrations in the order they ended; the oldest are forgotten past `historySize`.
    var endedOrder: [AppID] = []
    var endedOrderStart = 0
    /// Registrations detached (stream closed, process alive) in the order they detached; past `historySize` still
    /// detached, the oldest are forgotten, so a process cycling through names cannot grow the table.
    var detachedOrder: [AppID] = []
    var detachedOrderStart = 0
    /// Whether either order changed since the last `takeChanges()`.
    var isHistoryOrderChanged = false
    /// Open leases across all apps.
    public internal(set) var openTaskCount = 0
    var deadlines = DeadlineQueue()
    var armedDeadline: MonotonicInstant?
    var ledgers = NameTable<UsageLedger>()
    var nextTaskID: Int64 = 1
    var nextEventID: Int64 = 1
    var nextSequence: UInt64 = 0
    /// Scheduled requests, the conditions and wall clock they are judged by, and their own deadline.
    var scheduling = SchedulingState()

    /// Creates an empty policy state.
    public init(policy: CorePolicy = CorePolicy()) {
        self.policy = policy
    }

    /// Replaces the policy (configuration reload). Apps keep the per-app policy they registered with;
    /// limits apply to the next request.
    public mutating func updatePolicy(_ policy: CorePolicy) {
        self.policy = policy
    }

    /// The earliest pending deadline: the instant the shell's timer must be armed at.
    public var nextDeadline: MonotonicInstant? {
        let appDeadline = deadlines.first?.order.instant
        guard let scheduled = scheduling.deadline else { return appDeadline }
        return appDeadline.map { min($0, scheduled) } ?? scheduled
    }
}

// MARK: - Internal helpers shared by the input methods

extension Lifecycle {
    /// Runs `body` on the tracked app `id`, which the caller has checked exists.
    @inline(__always)
    mutating func modify<Result>(_ id: AppID, _ body: (inout TrackedApp) -> Result) -> Result {
        guard apps.contains(id) else {
            preconditionFailure("policy bookkeeping lost \(id)")
        }
        // Safe: checked just above, and nothing in between removes it.
        return body(&apps[id]!)
    }

    /// Gives `name` to `id` (nil: to nobody), counting the live apps of each uid as it goes.
    mutating func setLiveName(_ name: String, to id: AppID?) {
        if let holder = liveNames[name] {
            guard let uid = apps[holder]?.uid else {
                // Its holder's record is gone already: count again rather than guess.
                liveNames[name] = id
                recountLiveApps()
                return
            }
            countLiveApp(of: uid, by: -1)
        }
        liveNames[name] = id
        if let id, let uid = apps[id]?.uid { countLiveApp(of: uid, by: 1) }
    }

    /// Counts a live app of `uid` in or out (an app's uid changes only when a launched app registers).
    mutating func countLiveApp(of uid: UInt32, by change: Int) {
        let count = liveCountByUID[uid, default: 0] + change
        liveCountByUID[uid] = count > 0 ? count : nil
    }

    /// Counts the live apps of each uid from `liveNames` (a restored state).
    mutating func recountLiveApps() {
        liveCountByUID = [:]
        for id in liveNames.values {
            if let uid = apps[id]?.uid { liveCountByUID[uid, default: 0] += 1 }
        }
    }

    /// Reads the app `id`, which the caller has checked exists, in place; unlike `modify`, not a change of it.
    func read<Result>(_ id: AppID, _ body: (TrackedApp) -> Result) -> Result {
        apps.read(id, body)
    }

    /// The tracked app `id`, which the caller has checked exists.
    func tracked(_ id: AppID) -> TrackedApp {
        guard let app = apps[id] else { preconditionFailure("policy bookkeeping lost \(id)") }
        return app
    }

    mutating func makeEvent(_ kind: EventKind) -> AppEvent {
        defer { nextEventID += 1 }
        return AppEvent(id: EventID(rawValue: nextEventID), kind: kind)
    }

    mutating func audit(
        _ kind: AuditKind, _ id: AppID, now: MonotonicInstant, into actions: inout [Action],
        _ fill: (inout AuditEntry) -> Void = { _ in }
    ) {
        var entry = AuditEntry(time: now, app: id, appName: read(id) { $0.name }, kind: kind)
        fill(&entry)
        actions.append(.audit(entry))
    }

    /// Schedules (or replaces) one deadline of an app and refreshes the app's place in the queue.
    mutating func setDeadline(_ kind: DeadlineKind, of id: AppID, at instant: MonotonicInstant) {
        let order = DeadlineOrder(instant: instant, sequence: nextSequence)
        nextSequence += 1
        modify(id) { $0.deadlines[kind] = order }
        refreshQueue(for: id)
    }

    /// Cancels one deadline of an app.
    mutating func clearDeadline(_ kind: DeadlineKind, of id: AppID) {
        guard apps[id]?.deadlines[kind] != nil else { return }
        modify(id) { $0.deadlines[kind] = nil }
        refreshQueue(for: id)
    }

    /// Cancels several deadlines of an app at once.
    mutating func clearDeadlines(_ kinds: [DeadlineKind], of id: AppID) {
        // Checked by reading first: clearing nothing must not count as a change of the app.
        guard read(id, { app in kinds.contains { app.deadlines[$0] != nil } }) else { return }
        modify(id) { app in
            for kind in kinds { app.deadlines[kind] = nil }
        }
        refreshQueue(for: id)
    }

    mutating func refreshQueue(for id: AppID) {
        if let earliest = apps[id]?.deadlines.earliest {
            deadlines.set(id, to: earliest.order)
        } else {
            deadlines.remove(id)
        }
    }

    /// Appends `.armTimer` when the earliest deadline moved since the shell last armed its timer; first, when the
    /// input changed something scheduled work depends on, decides what runs (`evaluateScheduling`).
    mutating func armTimerIfDeadlineMoved(_ actions: inout [Action], now: MonotonicInstant) {
        if scheduling.needsEvaluation { evaluateScheduling(now: now, into: &actions) }
        let next = nextDeadline
        if next != armedDeadline {
            armedDeadline = next
            actions.append(.armTimer(at: next))
        }
    }

    /// Sends an event to a running app, or queues it (coalescing by kind and name) for a suspended one.
    mutating func deliver(
        _ event: AppEvent, to id: AppID, behavior: DeliveryBehavior, now: MonotonicInstant,
        into actions: inout [Action]
    ) {
        let (isRegistered, state) = read(id) { ($0.isRegistered, $0.state) }
        guard isRegistered else { return }
        switch state {
        case .active, .inactive, .background:
            actions.append(.send(event, to: id))
        case .suspended:
            enqueue(event, for: id, behavior: behavior, now: now, into: &actions)
        case .notRunning, .terminated:
            break
        }
    }

    /// Queues an event for a suspended app per its behaviour; returns whether it was kept. When the queue is
    /// full the oldest entries are dropped and counted; the first drop of a suspension is recorded.
    @discardableResult
    mutating func enqueue(
        _ event: AppEvent, for id: AppID, behavior: DeliveryBehavior, now: MonotonicInstant,
        into actions: inout [Action]
    ) -> Bool {
        let limit = policy.queuedEventsPerAppMax
        let (isKept, isFirstDrop) = modify(id) { app -> (Bool, Bool) in
            let (isKept, dropped) = app.queue.enqueue(event, behavior: behavior, limit: limit)
            guard dropped > 0 else { return (isKept, false) }
            app.droppedEventCount += dropped
            defer { app.hasRecordedDropThisSuspension = true }
            return (isKept, !app.hasRecordedDropThisSuspension)
        }
        if isFirstDrop {
            audit(.eventsDropped, id, now: now, into: &actions)
        }
        return isKept
    }

    /// Resumes a suspended app and delivers what it missed, oldest first.
    mutating func resume(_ id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        actions.append(.resume(id))
        let queued = modify(id) { app -> [AppEvent] in
            app.hasRecordedDropThisSuspension = false
            return app.queue.removeAll()
        }
        for event in queued {
            actions.append(.send(event, to: id))
        }
    }

    /// Closes the current stretch of running in background in the daily ledger.
    mutating func closeBackgroundStretch(of id: AppID, now: MonotonicInstant) {
        guard let since = tracked(id).runningInBackgroundSince else { return }
        modify(id) { $0.runningInBackgroundSince = nil }
        let app = tracked(id)
        guard app.policy.backgroundBudgetPerDay > .zero else { return }
        ledgers[app.name, default: UsageLedger()].add(from: since, to: now)
    }

    mutating func changeState(_ id: AppID, to state: AppState, now: MonotonicInstant, into actions: inout [Action]) {
        modify(id) { $0.state = state }
        audit(.stateChanged, id, now: now, into: &actions) { $0.state = state }
    }

    func remaining(of app: TrackedApp, now: MonotonicInstant) -> Duration? {
        guard let end = app.budgetEnd, app.state == .background || app.state == .suspended else { return nil }
        return end > now ? end - now : .zero
    }
}
