// Inputs that create, attach and detach registrations.

/// The process behind a registration, as identified by the shell from the peer's credentials.
public struct ProcessIdentity: Hashable, Sendable {
    /// The app's process id (the shell holds a pidfd; the id is for display and PID-reuse checks).
    public var pid: Int32
    /// The app's user id; app calls are accepted from it or root.
    public var uid: UInt32

    /// Creates an identity.
    public init(pid: Int32, uid: UInt32) {
        self.pid = pid
        self.uid = uid
    }
}

/// The state a registration starts in.
public enum InitialState: Sendable {
    /// The usual start, in the foreground.
    case active
    /// Launched for background work: gets `didEnterBackground` and its grace at once.
    case background

    /// The state a registration asks to start in, by its name as an `AppState` (`Register`'s `state`; nil there
    /// means active); nil for the states a registration cannot start in.
    public init?(_ state: AppState) {
        switch state {
        case .active: self = .active
        case .background: self = .background
        case .notRunning, .inactive, .suspended, .terminated: return nil
        }
    }

    /// The same state as an `AppState`.
    public var appState: AppState {
        switch self {
        case .active: .active
        case .background: .background
        }
    }
}

/// The outcome of `Lifecycle.register`.
public struct RegistrationOutcome: Sendable {
    /// The registration's identity.
    public var app: AppID
    /// Whether an existing registration of the same process was re-attached instead of a new one created.
    public var isReattached: Bool
    /// What the shell must do.
    public var actions: [Action]
}

extension Lifecycle {
    /// An app's process asks to register under `name` (the `Register` call).
    ///
    /// A live name is refused with `appExists` unless the caller is that app's own process with the same uid, in
    /// which case the registration re-attaches (after a daemon restart, or a reconnecting client); a managed app
    /// launched under this name binds to its launch record. The shell vouches that `process.pid` is the live
    /// process it names (a pid alone could have been reused). A new registration past `appsPerUserMax` live apps
    /// of the uid is refused with `limitExceeded`.
    ///
    /// `backgroundTime` asks for a shorter budget than the policy's (never a longer one); the expiration warning
    /// then comes at most a quarter of it before the end, so a short budget still leaves time to work.
    public mutating func register(
        name: String, process: ProcessIdentity, exitsOnSuspend: Bool? = nil, initialState: InitialState = .active,
        backgroundTime: Duration? = nil, now: MonotonicInstant
    ) throws(LifecycleError) -> RegistrationOutcome {
        var actions: [Action] = []
        if let existing = liveNames[name] {
            let app = tracked(existing)
            // A launched app's process may register from any uid it runs as; a running app only from its own.
            guard app.pid == process.pid, app.state == .notRunning || app.uid == process.uid else {
                throw .appExists(name)
            }
            if app.state == .notRunning {
                // A launched app registering: it is now running.
                clearDeadline(.launch, of: existing)
                modify(existing) {
                    $0.isRegistered = true
                    $0.uid = process.uid
                }
                // It counts as a live app of the uid it runs as now.
                countLiveApp(of: app.uid, by: -1)
                countLiveApp(of: process.uid, by: 1)
                start(
                    existing, in: app.isLaunchedForScheduledWork == true ? .background : initialState, now: now,
                    into: &actions)
                noteAppChange(of: name)
            } else {
                modify(existing) { $0.isRegistered = true }
                audit(.reattached, existing, now: now, into: &actions) { $0.state = app.state }
                retellTasks(of: existing, now: now, into: &actions)
            }
            armTimerIfDeadlineMoved(&actions, now: now)
            return RegistrationOutcome(app: existing, isReattached: app.state != .notRunning, actions: actions)
        }
        guard liveAppCount(uid: process.uid) < policy.appsPerUserMax else {
            throw .limitExceeded(limit: "AppsPerUserMax", max: policy.appsPerUserMax)
        }
        let id = createRecord(
            name: name, process: process, isManaged: false, exitsOnSuspend: exitsOnSuspend,
            backgroundTime: backgroundTime, now: now)
        modify(id) { $0.isRegistered = true }
        audit(.registered, id, now: now, into: &actions)
        start(id, in: initialState, now: now, into: &actions)
        noteAppChange(of: name)
        armTimerIfDeadlineMoved(&actions, now: now)
        return RegistrationOutcome(app: id, isReattached: false, actions: actions)
    }

    /// Tells a re-attaching app again what its open tasks ask of it, which it may have missed while it had no
    /// stream: a restart takes with it the events held for an app that had not re-attached to that daemon yet, and a
    /// stream that broke loses what was in flight on it. `runScheduledTask` for each scheduled task it runs, then one
    /// `backgroundTaskExpiring` for every task already warned (a scheduled one, or a lease of a background stretch
    /// whose warning was sent). Not audited: nothing changes. The app handles each task id once (the client library
    /// does), so what it did hear is told again harmlessly.
    private mutating func retellTasks(of id: AppID, now: MonotonicInstant, into actions: inout [Action]) {
        let (tasks, isWarnedStretch) = read(id) { ($0.openTasks, $0.state == .background && $0.expirationWarned) }
        var warned: [TaskID] = []
        for task in tasks {
            guard task.isScheduled == true else {
                if isWarnedStretch { warned.append(task.id) }
                continue
            }
            guard
                let run = scheduling.requests.storage.values.lazy.compactMap(\.runningTask)
                    .first(where: { $0.app == id && $0.task == task.id })
            else { continue }
            var event = makeEvent(.runScheduledTask)
            event.name = task.name
            event.taskIDs = [task.id]
            deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
            if run.isWarned { warned.append(task.id) }
        }
        guard !warned.isEmpty else { return }
        var event = makeEvent(.backgroundTaskExpiring)
        event.taskIDs = warned.sorted()
        deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
    }

    /// The daemon launched a managed app's process under `name`; it must register within `LaunchTimeoutSec`.
    /// Counts against `appsPerUserMax` like a registration (the shell checks `canLaunch` before starting anything).
    /// `forScheduledWork`: launched because the policy asked (`.launch`) for its scheduled requests; it then starts
    /// in background when it registers, whatever it asks.
    public mutating func appLaunched(
        name: String, process: ProcessIdentity, exitsOnSuspend: Bool? = nil, forScheduledWork: Bool = false,
        now: MonotonicInstant
    ) throws(LifecycleError) -> (app: AppID, actions: [Action]) {
        guard liveNames[name] == nil else { throw .appExists(name) }
        guard liveAppCount(uid: process.uid) < policy.appsPerUserMax else {
            throw .limitExceeded(limit: "AppsPerUserMax", max: policy.appsPerUserMax)
        }
        var actions: [Action] = []
        let id = createRecord(name: name, process: process, isManaged: true, exitsOnSuspend: exitsOnSuspend, now: now)
        if forScheduledWork { modify(id) { $0.isLaunchedForScheduledWork = true } }
        setDeadline(.launch, of: id, at: now + tracked(id).policy.launchTimeout)
        audit(.registered, id, now: now, into: &actions) { $0.state = .notRunning }
        noteAppChange(of: name)
        armTimerIfDeadlineMoved(&actions, now: now)
        return (id, actions)
    }

    /// Whether `appLaunched` would accept `name` for `uid`: the name is free and the uid under `appsPerUserMax`.
    /// The shell asks before it starts a process, so a refusal starts nothing.
    public func canLaunch(name: String, uid: UInt32) throws(LifecycleError) {
        guard liveNames[name] == nil else { throw .appExists(name) }
        guard liveAppCount(uid: uid) < policy.appsPerUserMax else {
            throw .limitExceeded(limit: "AppsPerUserMax", max: policy.appsPerUserMax)
        }
    }

    /// The app's event stream closed: its registration and every lease end; a suspended app is resumed
    /// so nothing stays stopped. The process may live on; `processExited` marks it ended.
    public mutating func registrationClosed(_ id: AppID, now: MonotonicInstant) -> [Action] {
        guard let app = apps[id], app.isRegistered else { return [] }
        var actions: [Action] = []
        modify(id) { $0.isRegistered = false }
        guard app.state != .terminated else {
            armTimerIfDeadlineMoved(&actions, now: now)
            return actions
        }
        endAllTasks(of: id, cause: .appEnded, now: now, into: &actions)
        if app.state == .suspended {
            actions.append(.resume(id))
        }
        closeBackgroundStretch(of: id, now: now)
        clearDeadlines(DeadlineKind.allCases, of: id)
        modify(id) {
            $0.queue = EventQueue()
            $0.budgetEnd = nil
            $0.pendingAcknowledgement = nil
            $0.lockGraceActive = false
        }
        if liveNames[app.name] == id { setLiveName(app.name, to: nil) }
        detachedNames[app.name] = id
        detachedOrder.append(id)
        isHistoryOrderChanged = true
        changeState(id, to: .notRunning, now: now, into: &actions)
        audit(.unregistered, id, now: now, into: &actions)
        noteAppChange(of: app.name)
        evictDetached(into: &actions)
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// Forgets the oldest registrations still detached past `historySize` of them: they would only have been
    /// marked `exited` when their processes end. Entries that are no longer detached are skipped.
    mutating func evictDetached(into actions: inout [Action]) {
        var detachedCount = detachedOrder.count - detachedOrderStart
        while detachedCount > policy.historySize {
            let oldest = detachedOrder[detachedOrderStart]
            detachedOrderStart += 1
            isHistoryOrderChanged = true
            detachedCount -= 1
            guard let app = apps[oldest], app.state == .notRunning, !app.isRegistered, !app.isProcessGone,
                app.deadlines.isEmpty
            else { continue }
            if detachedNames[app.name] == oldest { detachedNames[app.name] = nil }
            apps.remove(oldest)
            actions.append(.forget(oldest))
        }
        if detachedOrderStart > 64 && detachedOrderStart * 2 > detachedOrder.count {
            detachedOrder.removeFirst(detachedOrderStart)
            detachedOrderStart = 0
        }
    }

    func resolvedPolicy(for name: String, exitsOnSuspend: Bool?, backgroundTime: Duration? = nil) -> AppPolicy {
        var resolved = policy.appPolicy(for: name)
        if let exitsOnSuspend { resolved.exitsOnSuspend = exitsOnSuspend }
        if let backgroundTime, backgroundTime > .zero, backgroundTime < resolved.backgroundTime {
            resolved.backgroundTime = backgroundTime
            resolved.expirationWarning = min(resolved.expirationWarning, backgroundTime / 4)
        }
        return resolved
    }

    mutating func createRecord(
        name: String, process: ProcessIdentity, isManaged: Bool, exitsOnSuspend: Bool?,
        backgroundTime: Duration? = nil, now: MonotonicInstant
    ) -> AppID {
        let id = apps.makeID()
        if let ended = endedNames.removeValue(forKey: name) {
            forgetEnded(ended)
        }
        detachedNames[name] = nil
        apps.insert(
            TrackedApp(
                id: id, name: name, pid: process.pid, uid: process.uid, isManaged: isManaged,
                policy: resolvedPolicy(for: name, exitsOnSuspend: exitsOnSuspend, backgroundTime: backgroundTime),
                state: .notRunning,
                isRegistered: false, lastForeground: now))
        setLiveName(name, to: id)
        noteForeground(of: id, at: now)
        return id
    }

    /// Puts a just-registered app in its first running state.
    mutating func start(_ id: AppID, in initialState: InitialState, now: MonotonicInstant, into actions: inout [Action])
    {
        switch initialState {
        case .active:
            changeState(id, to: .active, now: now, into: &actions)
        case .background:
            modify(id) { $0.state = .inactive }
            enterBackground(id, now: now, into: &actions)
        }
    }
}
