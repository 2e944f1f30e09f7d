// Inputs for scheduled work: requests submitted and cancelled, scheduled tasks completed, the host's conditions and
// the wall clock; and the one step that decides which requests run, which stop, and when to look again.

/// The scheduling part of the policy's state (see `Lifecycle+Scheduling.swift`).
struct SchedulingState: Sendable {
    /// Held requests by `app/identifier` (an identifier holds no `/`, so the key names one request).
    var requests = NameTable<ScheduledRecord>()
    /// How many requests each app name holds, for `ScheduledRequestsPerAppMax`.
    var countByName: [String: Int] = [:]
    /// Scheduled time used, by app name (`ScheduledTimePerDaySec`).
    var ledgers = NameTable<ScheduledLedger>()
    /// When each app name holding requests was last in the foreground: the fair order's tie-break.
    var lastForeground = NameTable<WallClockInstant>()
    /// What the host's sources say now.
    var conditions = Conditions()
    /// Whether the shell has reported the conditions yet: until it has, no constraint is judged lost and nothing
    /// starts.
    var isConditionsKnown = false
    /// The wall clock less the monotonic clock; nil until the shell reports it (nothing starts until then).
    var wallClockOffset: Duration?
    /// The earliest instant something scheduled needs looking at.
    var deadline: MonotonicInstant?
    /// Something changed that may start or stop a scheduled task: evaluate before the input returns.
    var needsEvaluation = false
    /// How the scheduled task being ended by the current input is settled, when not by its end cause alone.
    var settlement: (task: TaskID, settlement: Settlement)?

    /// What becomes of a request whose task ended.
    enum Settlement: Sendable {
        /// Done (success, or a failure not to retry): removed, or replaced by the submit that waited for it.
        case finished
        /// Failed, retry: pending again after the backoff.
        case retry
        /// Cancelled: removed, with any submit that waited for it.
        case cancelled
    }

    /// The first wait after a failed run; it doubles with each failure in a row. 30 s, as Android's WorkManager.
    static let backoffBase: Duration = .seconds(30)
    /// The longest wait after failures: an hour, so a request that keeps failing still runs hourly.
    static let backoffMax: Duration = .seconds(60 * 60)
    /// The least time a scheduled task starts with when the daily budget is nearly spent: a refresh task's
    /// default. Less would start work that is warned at once.
    static let grantMinimum: Duration = .seconds(30)

    /// The key of `identifier` of `app`.
    static func key(_ app: String, _ identifier: String) -> String {
        app + "/" + identifier
    }

    /// The wait after `failures` failed runs in a row.
    static func backoff(after failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        let doublings = min(failures - 1, 16)
        return min(backoffBase * (1 << doublings), backoffMax)
    }

    /// A request whose run ended badly (or was interrupted by a reboot): the submit that waited for it, or the
    /// request pending again after its backoff (counted from `now`; without a wall clock, from its due time).
    static func settled(_ record: ScheduledRecord, backoffFrom now: WallClockInstant?) -> ScheduledRecord {
        if let replacement = record.replacement {
            return ScheduledRecord(request: replacement.request, isLaunchable: replacement.isLaunchable)
        }
        var next = record
        next.phase = .pending
        next.failures += 1
        next.retryAfter = (now ?? record.due) + backoff(after: next.failures)
        return next
    }

    /// A request whose run was stopped through no fault of its own: pending again at once, or replaced.
    static func requeued(_ record: ScheduledRecord) -> ScheduledRecord {
        if let replacement = record.replacement {
            return ScheduledRecord(request: replacement.request, isLaunchable: replacement.isLaunchable)
        }
        var next = record
        next.phase = .pending
        return next
    }

    /// The wall-clock time at `instant`, with `offset`.
    static func wallClock(_ instant: MonotonicInstant, offset: Duration) -> WallClockInstant {
        WallClockInstant(nanoseconds: 0) + .nanoseconds(instant.nanoseconds) + offset
    }

    /// The monotonic instant at wall-clock time `wall`, with `offset`.
    static func monotonic(_ wall: WallClockInstant, offset: Duration) -> MonotonicInstant {
        MonotonicInstant.zero + .nanoseconds(wall.nanoseconds) - offset
    }
}

/// Whether a request's app can take its task now.
private enum AppAvailability: Equatable {
    /// Registered with a process of the request's owner (foreground, background or suspended).
    case running(AppID)
    /// Being launched for the request's owner (asked for with `.launch`, or launched and not yet registered).
    case awaitingLaunch
    /// Not running; the shell can launch it.
    case launchable
    /// Not running and not launchable: the request waits for the app to register.
    case unavailable
    /// The name is another user's for now: a live registration of another uid, or a launch for another owner's
    /// requests. The request waits until the name is free; it neither runs there nor launches a second copy.
    case busy

    /// Whether the request can start, now or once its launch registers.
    var isReachable: Bool {
        switch self {
        case .running, .awaitingLaunch, .launchable: true
        case .unavailable, .busy: false
        }
    }
}

extension Lifecycle {
    // MARK: Inputs

    /// What the host's sources said last (`nil` members: no source); nil until they were first reported.
    public var conditions: Conditions? { scheduling.isConditionsKnown ? scheduling.conditions : nil }

    /// The wall clock's offset from the monotonic clock, as last reported.
    public var wallClockOffset: Duration? { scheduling.wallClockOffset }

    /// The earliest instant scheduled work needs the timer, included in `nextDeadline`.
    public var nextSchedulingDeadline: MonotonicInstant? { scheduling.deadline }

    /// The shell read the wall clock: `offset` is `CLOCK_REALTIME` less `CLOCK_MONOTONIC` (at start, and whenever
    /// the wall clock is set). Every request's due time is planned again with it.
    public mutating func wallClockChanged(offset: Duration, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        if scheduling.wallClockOffset != offset {
            scheduling.wallClockOffset = offset
            scheduling.needsEvaluation = true
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// The host's conditions changed (or were probed for the first time). Requests waiting on them may start; a
    /// running task whose constraint stopped holding gets `backgroundTaskExpiring` at once and ends
    /// `constraints-lost` `ExpirationWarningSec` later unless its app ends it first.
    public mutating func conditionsChanged(_ conditions: Conditions, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        if !scheduling.isConditionsKnown || scheduling.conditions != conditions {
            scheduling.conditions = conditions
            scheduling.isConditionsKnown = true
            scheduling.needsEvaluation = true
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// Holds `request` until it is due and its constraints hold (`BGTaskScheduler.submit`). A request with the
    /// same identifier is replaced, unless it is running: then this one waits for it to end. `isLaunchable`: the
    /// shell can launch the app when it is not running (its `apps.d` entry says how, with `ExecStart=`).
    ///
    /// Refused, changing nothing: an invalid identifier; a constraint with no source on this host; a new request
    /// past `ScheduledRequestsPerAppMax` for its app or `ScheduledRequestsMax` in all.
    public mutating func submit(
        _ request: ScheduledRequest, isLaunchable: Bool, now: MonotonicInstant
    ) throws(SchedulingError) -> [Action] {
        guard !request.appName.isEmpty, ScheduledRequest.isValidIdentifier(request.identifier) else {
            throw .invalidIdentifier(request.identifier)
        }
        let missing = scheduling.conditions.missingSources(for: request.constraints)
        guard missing.isEmpty else { throw .missingSources(missing) }
        let key = SchedulingState.key(request.appName, request.identifier)
        var actions: [Action] = []
        if var existing = scheduling.requests[key] {
            if existing.runningTask != nil {
                existing.replacement = ScheduledReplacement(request: request, isLaunchable: isLaunchable)
                scheduling.requests[key] = existing
            } else {
                scheduling.requests[key] = ScheduledRecord(request: request, isLaunchable: isLaunchable)
            }
        } else {
            let ofApp = scheduling.countByName[request.appName, default: 0]
            guard ofApp < policy.scheduledRequestsPerAppMax else {
                throw .limitExceeded(limit: "ScheduledRequestsPerAppMax", max: policy.scheduledRequestsPerAppMax)
            }
            if let owner = request.ownerUID {
                let ofUser = scheduling.requests.values.lazy.filter { $0.request.ownerUID == owner }.count
                guard ofUser < policy.scheduledRequestsPerUserMax else {
                    throw .limitExceeded(
                        limit: "ScheduledRequestsPerUserMax", max: policy.scheduledRequestsPerUserMax)
                }
            }
            guard scheduling.requests.count < policy.scheduledRequestsMax else {
                throw .limitExceeded(limit: "ScheduledRequestsMax", max: policy.scheduledRequestsMax)
            }
            scheduling.requests[key] = ScheduledRecord(request: request, isLaunchable: isLaunchable)
            scheduling.countByName[request.appName] = ofApp + 1
            if ofApp == 0, let id = liveNames[request.appName] {
                noteForeground(of: id, at: read(id) { $0.state.isForeground ? now : $0.lastForeground })
            }
        }
        scheduling.needsEvaluation = true
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// Removes a request (`BGTaskScheduler.cancel`), and any submit waiting to replace it. A running one's task
    /// ends at once, as `ended` (the cancel is the app's own request to stop it), its app first told with
    /// `backgroundTaskExpiring` so its expiration handler stops the work.
    public mutating func cancelScheduledRequest(
        app name: String, identifier: String, now: MonotonicInstant
    ) throws(SchedulingError) -> [Action] {
        let key = SchedulingState.key(name, identifier)
        guard let record = scheduling.requests[key] else { throw .noSuchRequest(app: name, identifier: identifier) }
        var actions: [Action] = []
        if let run = record.runningTask {
            if !run.isWarned {
                warnScheduledTask(run.task, of: run.app, because: "its request was cancelled", now: now, into: &actions)
            }
            scheduling.settlement = (run.task, .cancelled)
            endScheduledTask(run, cause: .ended, now: now, into: &actions)
        } else {
            removeRequest(key, now: now)
        }
        scheduling.needsEvaluation = true
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// `setTaskCompleted(success:)` for a scheduled task: its lease ends. Success, or failure without `retry`,
    /// removes the request (one run per submit, as on iOS); failure with `retry` makes it wait again with
    /// exponential backoff (30 s doubling, at most an hour).
    public mutating func setTaskCompleted(
        _ id: AppID, task: TaskID, outcome: ScheduledTaskOutcome, now: MonotonicInstant
    ) throws(SchedulingError) -> [Action] {
        let name = apps[id]?.name ?? id.description
        guard apps.contains(id), let lease = read(id, { $0.openTasks.first { $0.id == task } }),
            lease.isScheduled == true,
            let run = scheduling.requests[SchedulingState.key(name, lease.name ?? "")]?.runningTask, run.task == task
        else { throw .noSuchTask(app: name, task: task) }
        var actions: [Action] = []
        let settlement: SchedulingState.Settlement =
            switch outcome {
            case .success, .failure(retry: false): .finished
            case .failure(retry: true): .retry
            }
        scheduling.settlement = (task, settlement)
        endScheduledTask(run, cause: .ended, now: now, into: &actions)
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// The shell could not launch `name` for the scheduled requests of `owner` (`.launch(app:owner:)`): those
    /// launching wait again with backoff. Another owner's requests of the name are not touched.
    public mutating func scheduledLaunchFailed(app name: String, owner: UInt32?, now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        let wall = wallClockNow(now)
        for (key, record) in scheduling.requests.storage.sorted(by: { $0.key < $1.key })
        where record.request.appName == name && record.request.ownerUID == owner {
            if case .launching = record.phase {
                scheduling.requests[key] = SchedulingState.settled(record, backoffFrom: wall)
                scheduling.needsEvaluation = true
            }
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// The app names `User=` pins to a user, as the shell resolved them (a nil uid: a user that cannot be resolved,
    /// which pins the name to nobody): at start, once the saved requests are restored, and on every reload. A held
    /// request of a pinned name owned by anyone but the pinned uid no longer fits and is cancelled, as its owner's
    /// cancel would (a running one's app warned with `backgroundTaskExpiring`, its task ended at once), with a
    /// `requestCancelled` audit entry saying why; so is a submit waiting to replace a running request that fits.
    /// Requests of names no pin names are not touched: an unpinned name runs each request as its owner.
    public mutating func pinsChanged(_ pins: [String: UInt32?], now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        for key in scheduling.requests.storage.keys.sorted() {
            guard var record = scheduling.requests[key], let pin = pins[record.request.appName] else { continue }
            let name = record.request.appName
            func reason(_ owner: UInt32?) -> String {
                let was = owner.map { "its owner uid \($0)" } ?? "no owner"
                return pin.map { "\(name) is now pinned to uid \($0) (User=), not to \(was)" }
                    ?? "\(name) is now pinned to a user that cannot be resolved (User=)"
            }
            if let replacement = record.replacement, pin == nil || replacement.request.ownerUID != pin {
                let why = reason(replacement.request.ownerUID)
                auditCancelledRequest(replacement.request, because: why, now: now, into: &actions)
                record.replacement = nil
                scheduling.requests[key] = record
            }
            guard pin == nil || record.request.ownerUID != pin else { continue }
            let why = reason(record.request.ownerUID)
            if let run = record.runningTask {
                if !run.isWarned { warnScheduledTask(run.task, of: run.app, because: why, now: now, into: &actions) }
                scheduling.settlement = (run.task, .cancelled)
                endScheduledTask(run, cause: .ended, now: now, into: &actions)
            } else {
                removeRequest(key, now: now)
            }
            auditCancelledRequest(record.request, because: why, now: now, into: &actions)
            scheduling.needsEvaluation = true
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// Records that the daemon cancelled `request` (`requestCancelled`): an entry about the request and its owner,
    /// not a registration.
    private func auditCancelledRequest(
        _ request: ScheduledRequest, because reason: String, now: MonotonicInstant, into actions: inout [Action]
    ) {
        actions.append(
            .audit(
                AuditEntry(
                    time: now, app: nil, appName: request.appName, kind: .requestCancelled, trigger: reason,
                    requestIdentifier: request.identifier, ownerUID: request.ownerUID)))
    }

    // MARK: Queries

    /// The requests of `app` (nil: of every app), by app name and identifier, each with where it stands.
    public func scheduledRequests(app name: String? = nil) -> [ScheduledRequestSnapshot] {
        scheduling.requests.storage.values
            .filter { name == nil || $0.request.appName == name }
            .sorted { ($0.request.appName, $0.request.identifier) < ($1.request.appName, $1.request.identifier) }
            .map(snapshot(of:))
    }

    /// The request `identifier` of `app`, with where it stands; nil when it holds none.
    public func scheduledRequest(app name: String, identifier: String) -> ScheduledRequestSnapshot? {
        scheduling.requests[SchedulingState.key(name, identifier)].map(snapshot(of:))
    }

    /// A held request as clients see it.
    private func snapshot(of record: ScheduledRecord) -> ScheduledRequestSnapshot {
        let state: ScheduledRequestState =
            switch record.phase {
            case .pending:
                .pending(
                    due: record.due,
                    waitingOn: record.request.constraints.filter { scheduling.conditions[$0] != true }.sorted())
            case .launching: .launching
            case .running(let run): .running(app: run.app, task: run.task)
            }
        return ScheduledRequestSnapshot(
            request: record.request, state: state, failures: record.failures,
            hasReplacement: record.replacement != nil)
    }

    /// Number of requests held.
    public var scheduledRequestCount: Int { scheduling.requests.count }

    /// Changes whenever a request, a ledger or a last-foreground time changes (never back to a value it had within
    /// one `Lifecycle`): a store keeping `savedScheduling` elsewhere writes it again only when this moved.
    public var schedulingRevision: UInt64 {
        scheduling.requests.revision &+ scheduling.ledgers.revision &+ scheduling.lastForeground.revision
    }

    /// The requests, ledgers and last-foreground times alone: what must outlive a reboot (`saved` holds them too,
    /// with every registration).
    public var savedScheduling: SavedScheduling {
        SavedScheduling(
            requests: scheduling.requests.storage, ledgers: scheduling.ledgers.storage,
            lastForeground: scheduling.lastForeground.storage)
    }

    /// Scheduled time `name` used over the 24 hours before wall-clock time `now`.
    public func scheduledTimeUsed(by name: String, at now: WallClockInstant) -> Duration {
        scheduling.ledgers[name]?.used(at: now) ?? .zero
    }

    // MARK: Hooks from the rest of the policy

    /// A lease ended; if it ran a scheduled request, settles the request by how it ended.
    mutating func scheduledLeaseEnded(
        _ lease: OpenTask, of id: AppID, cause: TaskEndCause, now: MonotonicInstant
    ) {
        let name = read(id) { $0.name }
        let key = SchedulingState.key(name, lease.name ?? "")
        var settlement: SchedulingState.Settlement?
        if let pending = scheduling.settlement, pending.task == lease.id {
            settlement = pending.settlement
            scheduling.settlement = nil
        }
        guard let record = scheduling.requests[key], let run = record.runningTask, run.task == lease.id else { return }
        let wall = wallClockNow(now)
        if policy.scheduledTimePerDay > .zero, let offset = scheduling.wallClockOffset {
            scheduling.ledgers[name, default: ScheduledLedger()].add(
                from: SchedulingState.wallClock(run.began, offset: offset),
                to: SchedulingState.wallClock(now, offset: offset))
        }
        let wasTold = run.lostGraceEnds != nil
        switch (cause, settlement) {
        case (_, .cancelled):
            removeRequest(key, now: now)
        case (.ended, nil) where wasTold, (.ended, .retry) where wasTold:
            // Told to stop because a constraint stopped holding, the app stopped: it runs when they hold again.
            scheduling.requests[key] = SchedulingState.requeued(record)
        case (.ended, .finished), (.ended, nil):
            // Ended without a completion: a failure not to retry.
            if let replacement = record.replacement {
                scheduling.requests[key] = ScheduledRecord(
                    request: replacement.request, isLaunchable: replacement.isLaunchable)
            } else {
                removeRequest(key, now: now)
            }
        case (.constraintsLost, _):
            scheduling.requests[key] = SchedulingState.requeued(record)
        case (.ended, .retry), (.expired, _), (.appEnded, _):
            scheduling.requests[key] = SchedulingState.settled(record, backoffFrom: wall)
        }
        scheduling.needsEvaluation = true
    }

    /// An app holding requests was in the foreground at `instant`: recorded for the fair order.
    mutating func noteForeground(of id: AppID, at instant: MonotonicInstant) {
        guard !scheduling.countByName.isEmpty, let offset = scheduling.wallClockOffset else { return }
        let name = read(id) { $0.name }
        guard scheduling.countByName[name] != nil else { return }
        scheduling.lastForeground[name] = SchedulingState.wallClock(instant, offset: offset)
    }

    /// An app registered, was launched, or stopped running: its requests may run now, or plan no wake-up.
    mutating func noteAppChange(of name: String) {
        if scheduling.countByName[name] != nil { scheduling.needsEvaluation = true }
    }

    // MARK: The decision

    /// Looks at every held request: ends or warns running tasks whose time, warning or constraints call for it,
    /// times out launches, starts the runnable ones in fair order up to `ScheduledTasksMax`, and plans the next
    /// instant anything scheduled can change without another input.
    mutating func evaluateScheduling(now: MonotonicInstant, into actions: inout [Action]) {
        scheduling.needsEvaluation = false
        for key in scheduling.requests.storage.keys.sorted() {
            guard let record = scheduling.requests[key] else { continue }
            switch record.phase {
            case .pending:
                break
            case .running(let run):
                advance(run, of: record, key: key, now: now, into: &actions)
            case .launching(let until):
                if scheduling.isConditionsKnown, !scheduling.conditions.satisfy(record.request.constraints) {
                    // Its constraints stopped holding while its app started: it waits for them again.
                    scheduling.requests[key] = SchedulingState.requeued(record)
                } else if case .running(let id) = availability(of: record, launching: launchingOwners()),
                    let time = grant(for: record, granted: runningGrants(), now: now)
                {
                    beginScheduledTask(record, key: key, in: id, time: time, now: now, into: &actions)
                } else if until <= now {
                    scheduling.requests[key] = SchedulingState.settled(record, backoffFrom: wallClockNow(now))
                }
            }
        }
        startRunnable(now: now, into: &actions)
        pruneLedgers(now: now)
        scheduling.needsEvaluation = false
        scheduling.deadline = plannedSchedulingDeadline(after: now)
    }

    /// One running task: its warning, a lost constraint, the end of its time or of its grace.
    private mutating func advance(
        _ original: ScheduledRun, of record: ScheduledRecord, key: String, now: MonotonicInstant,
        into actions: inout [Action]
    ) {
        guard apps[original.app].map({ app in app.openTasks.contains { $0.id == original.task } }) == true else {
            // Its lease is gone without the hook seeing it (cannot happen; fail safe: it ran, and is settled).
            scheduling.requests[key] = SchedulingState.settled(record, backoffFrom: wallClockNow(now))
            return
        }
        var run = original
        let warning = read(run.app) { $0.policy.expirationWarning }
        if scheduling.isConditionsKnown, run.lostGraceEnds == nil,
            !scheduling.conditions.satisfy(record.request.constraints)
        {
            if !run.isWarned {
                let lost = record.request.constraints.filter { scheduling.conditions[$0] != true }.sorted()
                let names = lost.map(\.rawValue).joined(separator: ", ")
                warnScheduledTask(
                    run.task, of: run.app, because: "\(names) stopped holding", now: now, into: &actions)
            }
            run.isWarned = true
            run.lostGraceEnds = now + warning
        }
        if !run.isWarned, run.warnAt <= now {
            warnScheduledTask(run.task, of: run.app, because: Self.scheduledTimeUp, now: now, into: &actions)
            run.isWarned = true
        }
        if run != original {
            var updated = record
            updated.phase = .running(run)
            scheduling.requests[key] = updated
        }
        if let lost = run.lostGraceEnds, lost <= now, lost < run.ends {
            endScheduledTask(run, cause: .constraintsLost, now: now, into: &actions)
        } else if run.ends <= now {
            endScheduledTask(run, cause: .expired, now: now, into: &actions)
        }
    }

    /// Starts what is runnable now, in fair order, while `ScheduledTasksMax` allows.
    private mutating func startRunnable(now: MonotonicInstant, into actions: inout [Action]) {
        guard scheduling.isConditionsKnown, let offset = scheduling.wallClockOffset else { return }
        var active = scheduling.requests.values.count { !$0.isPending }
        guard active < policy.scheduledTasksMax else { return }
        let wall = SchedulingState.wallClock(now, offset: offset)
        var candidates: [(key: String, due: WallClockInstant, foreground: WallClockInstant, record: ScheduledRecord)] =
            []
        for (key, record) in scheduling.requests.storage
        where record.isPending && record.due <= wall && scheduling.conditions.satisfy(record.request.constraints) {
            candidates.append((key, record.due, foregroundRank(of: record.request.appName, now: wall), record))
        }
        candidates.sort {
            if $0.due != $1.due { return $0.due < $1.due }
            if $0.foreground != $1.foreground { return $0.foreground > $1.foreground }
            return ($0.record.request.appName, $0.record.request.identifier)
                < ($1.record.request.appName, $1.record.request.identifier)
        }
        var launching = launchingOwners()
        var granted = runningGrants()
        for candidate in candidates where active < policy.scheduledTasksMax {
            let record = candidate.record
            let name = record.request.appName
            guard let time = grant(for: record, granted: granted[name] ?? .zero, now: now) else { continue }
            // Thrice LaunchTimeoutSec: the wait for a launch slot, the program's start, then its registration.
            let launchUntil = now + policy.appPolicy(for: name).launchTimeout * 3
            switch availability(of: record, launching: launching) {
            case .running(let id):
                beginScheduledTask(record, key: candidate.key, in: id, time: time, now: now, into: &actions)
            case .awaitingLaunch:
                setPhase(.launching(until: launchUntil), of: candidate.key)
            case .launchable:
                // For this owner only: another owner's requests of the name wait until the name is free.
                actions.append(.launch(app: name, owner: record.request.ownerUID))
                launching[name] = .some(record.request.ownerUID)
                setPhase(.launching(until: launchUntil), of: candidate.key)
            case .unavailable, .busy:
                continue
            }
            granted[name, default: .zero] += time
            active += 1
        }
    }

    /// The earliest instant after `now` (any, when nil) at which something scheduled changes with no other input:
    /// a running task's warning, end or grace; a launch's timeout; a pending request's due time, or the time its
    /// app's daily budget allows it, counted only when it could run then given the conditions now.
    func plannedSchedulingDeadline(after now: MonotonicInstant?) -> MonotonicInstant? {
        var next: MonotonicInstant?
        func consider(_ instant: MonotonicInstant) {
            if let now, instant <= now { return }
            if next.map({ instant < $0 }) ?? true { next = instant }
        }
        var active = 0
        var runningNames: Set<String> = []
        for record in scheduling.requests.values {
            switch record.phase {
            case .pending:
                continue
            case .running(let run):
                active += 1
                runningNames.insert(record.request.appName)
                consider(run.ends)
                if !run.isWarned { consider(run.warnAt) }
                if let lost = run.lostGraceEnds { consider(lost) }
            case .launching(let until):
                active += 1
                consider(until)
            }
        }
        guard scheduling.isConditionsKnown, let offset = scheduling.wallClockOffset,
            active < policy.scheduledTasksMax
        else { return next }
        let cap = policy.scheduledTimePerDay
        let wallNow = now.map { SchedulingState.wallClock($0, offset: offset) }
        // Used time only falls after the last run ended, so the first instant an app's budget leaves enough,
        // found once per app and size, serves all its requests: at or after their due time, it is the later one.
        var firstFree: [String: WallClockInstant?] = [:]
        let launching = launchingOwners()
        for record in scheduling.requests.values
        where record.isPending && scheduling.conditions.satisfy(record.request.constraints)
            && availability(of: record, launching: launching).isReachable
        {
            var at = record.due
            let name = record.request.appName
            if cap > .zero {
                // While the app runs a scheduled task, the end of that task plans again.
                if runningNames.contains(name) && wallNow.map({ at <= $0 }) ?? false { continue }
                let needed = min(policy.scheduledTaskTime(for: record.request.kind), SchedulingState.grantMinimum, cap)
                // Without a `now` (a state just restored), each request's search starts at its own due time.
                let memo = "\(needed.nanosecondCount) \(wallNow == nil ? at.nanoseconds : 0) \(name)"
                if firstFree[memo] == nil {
                    let ledger = scheduling.ledgers[name] ?? ScheduledLedger()
                    firstFree[memo] = .some(ledger.firstInstant(withAtLeast: needed, of: cap, from: wallNow ?? at))
                }
                guard let free = firstFree[memo] ?? nil else { continue }
                at = max(at, free)
            }
            consider(SchedulingState.monotonic(at, offset: offset))
        }
        return next
    }

    // MARK: Steps

    /// Begins the lease that runs `record` in app `id` (waking it if suspended) and sends `runScheduledTask`.
    private mutating func beginScheduledTask(
        _ record: ScheduledRecord, key: String, in id: AppID, time: Duration, now: MonotonicInstant,
        into actions: inout [Action]
    ) {
        if read(id, { $0.state == .suspended }) { wake(id, now: now, into: &actions) }
        let task = TaskID(rawValue: nextTaskID)
        nextTaskID += 1
        let identifier = record.request.identifier
        apps.appendTask(OpenTask(id: task, name: identifier, began: now, isScheduled: true), to: id)
        openTaskCount += 1
        audit(.taskBegan, id, now: now, into: &actions) {
            $0.taskID = task
            $0.taskName = identifier
        }
        if read(id, { $0.state == .background && $0.lockGraceActive }) {
            // Working again: the lock grace is moot, as when a lease begins.
            clearDeadline(.lockGrace, of: id)
            modify(id) { $0.lockGraceActive = false }
        }
        let ends = now + time
        let warnAt = max(now, ends - read(id) { $0.policy.expirationWarning })
        var event = makeEvent(.runScheduledTask)
        event.name = identifier
        event.taskIDs = [task]
        deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
        var run = ScheduledRun(app: id, task: task, began: now, ends: ends, warnAt: warnAt, isWarned: false)
        if warnAt <= now {
            warnScheduledTask(task, of: id, because: Self.scheduledTimeUp, now: now, into: &actions)
            run.isWarned = true
        }
        var running = record
        running.phase = .running(run)
        scheduling.requests[key] = running
    }

    /// Ends a scheduled task's lease (the hook settles its request) and lets its app be suspended if idle.
    private mutating func endScheduledTask(
        _ run: ScheduledRun, cause: TaskEndCause, now: MonotonicInstant, into actions: inout [Action]
    ) {
        endTask(run.task, of: run.app, cause: cause, now: now, into: &actions)
        if !read(run.app, { $0.hasOrdinaryTasks }) {
            clearDeadlines([.expirationWarning, .budget], of: run.app)
        }
        suspendIfIdle(run.app, now: now, into: &actions)
    }

    /// Sends `backgroundTaskExpiring` for one scheduled task, recording why (the audit entry's `trigger`).
    private mutating func warnScheduledTask(
        _ task: TaskID, of id: AppID, because reason: String, now: MonotonicInstant, into actions: inout [Action]
    ) {
        var event = makeEvent(.backgroundTaskExpiring)
        event.taskIDs = [task]
        deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
        audit(.expirationWarning, id, now: now, into: &actions) {
            $0.taskIDs = [task]
            $0.trigger = reason
        }
    }

    /// Why a scheduled task is warned when its own time is nearly up.
    static var scheduledTimeUp: String { "its scheduled task's time is nearly up" }

    private mutating func setPhase(_ phase: ScheduledPhase, of key: String) {
        guard var record = scheduling.requests[key] else { return }
        record.phase = phase
        scheduling.requests[key] = record
    }

    /// Forgets a request; its app's last-foreground record goes with its last request (the ledger stays a day).
    private mutating func removeRequest(_ key: String, now: MonotonicInstant) {
        guard let record = scheduling.requests.removeValue(forKey: key) else { return }
        let name = record.request.appName
        let left = scheduling.countByName[name, default: 1] - 1
        scheduling.countByName[name] = left > 0 ? left : nil
        guard left <= 0 else { return }
        if scheduling.lastForeground[name] != nil { scheduling.lastForeground[name] = nil }
        if let ledger = scheduling.ledgers[name], let wall = wallClockNow(now), ledger.used(at: wall) == .zero {
            scheduling.ledgers[name] = nil
        }
    }

    /// Forgets the ledgers of app names holding no request once their day is over, and, past
    /// `ScheduledRequestsMax` ledgers, those of names holding no request, least used first: a peer cycling
    /// through names cannot grow the table (a name that submits again after losing its ledger starts a fresh
    /// day, which the bound on requests limits).
    private mutating func pruneLedgers(now: MonotonicInstant) {
        guard scheduling.ledgers.count > scheduling.countByName.count, let wall = wallClockNow(now) else { return }
        var idle: [(name: String, used: Duration)] = []
        for (name, ledger) in scheduling.ledgers.storage where scheduling.countByName[name] == nil {
            idle.append((name, ledger.used(at: wall)))
        }
        idle.sort { ($0.used, $0.name) < ($1.used, $1.name) }
        var excess = scheduling.ledgers.count - policy.scheduledRequestsMax
        for entry in idle where entry.used == .zero || excess > 0 {
            scheduling.ledgers[entry.name] = nil
            excess -= 1
        }
    }

    /// Where `record`'s app stands, given the owner each name is being launched for (`launchingOwners()`). A
    /// registration of the name by another user than the request's owner is not its app, nor is a launch for
    /// another owner's requests: the request waits (it neither runs there nor launches a second copy).
    private func availability(of record: ScheduledRecord, launching: [String: UInt32?]) -> AppAvailability {
        let name = record.request.appName
        let owner = record.request.ownerUID
        if let id = liveNames[name], let app = apps[id] {
            if let owner, app.uid != owner { return .busy }
            if app.isRegistered, app.state.isRunning || app.state == .suspended { return .running(id) }
            if app.state == .notRunning { return .awaitingLaunch }
        }
        if let launchingFor = launching[name] { return launchingFor == owner ? .awaitingLaunch : .busy }
        return record.isLaunchable ? .launchable : .unavailable
    }

    /// The owner each app name is being launched for: that of its requests waiting for their launch (one owner a
    /// name, since a launch is asked for only while no other owner's is under way).
    private func launchingOwners() -> [String: UInt32?] {
        var owners: [String: UInt32?] = [:]
        for record in scheduling.requests.values {
            // `.some`: a nil owner is an owner too (a test's request), not the absence of a launch.
            if case .launching = record.phase { owners[record.request.appName] = .some(record.request.ownerUID) }
        }
        return owners
    }

    /// The time a task for `record` gets now: its kind's, less what its app's daily budget does not leave once
    /// its running tasks' time (`granted`) is set aside; nil when that is under the least of the kind's time,
    /// `grantMinimum` and the daily budget itself.
    private func grant(for record: ScheduledRecord, granted: Duration, now: MonotonicInstant) -> Duration? {
        let time = policy.scheduledTaskTime(for: record.request.kind)
        let cap = policy.scheduledTimePerDay
        guard cap > .zero else { return time }
        guard let wall = wallClockNow(now) else { return nil }
        let left = cap - (scheduling.ledgers[record.request.appName]?.used(at: wall) ?? .zero) - granted
        guard left >= min(time, SchedulingState.grantMinimum, cap) else { return nil }
        return min(time, left)
    }

    private func grant(for record: ScheduledRecord, granted: [String: Duration], now: MonotonicInstant) -> Duration? {
        grant(for: record, granted: granted[record.request.appName] ?? .zero, now: now)
    }

    /// The time granted to the running scheduled tasks of each app name.
    private func runningGrants() -> [String: Duration] {
        var granted: [String: Duration] = [:]
        for record in scheduling.requests.values {
            if let run = record.runningTask { granted[record.request.appName, default: .zero] += run.ends - run.began }
        }
        return granted
    }

    /// How recently the app `name` was in the foreground: now if it is, else its record.
    private func foregroundRank(of name: String, now: WallClockInstant) -> WallClockInstant {
        if let id = liveNames[name], apps[id]?.state.isForeground == true { return now }
        return scheduling.lastForeground[name] ?? WallClockInstant(nanoseconds: .min)
    }

    private func wallClockNow(_ now: MonotonicInstant) -> WallClockInstant? {
        scheduling.wallClockOffset.map { SchedulingState.wallClock(now, offset: $0) }
    }
}
