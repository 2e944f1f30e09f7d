// `constraint-respected`, `request-runs-once-at-a-time` and `request-never-lost`: scheduled work judged from the
// power flips the harness made, the requests it submitted, what the apps recorded and the daemon's entries.

import BGTaskProtocol

/// One scheduled task as the entries and the app's own receipts tell it.
struct ScheduledRunRecord {
    /// The request it ran.
    var key: RequestKey
    /// Its task id.
    var taskId: Int
    /// The earliest sign of its begin: the `taskBegan` entry received, or the app's `runScheduledTask`.
    var began: Duration
    /// When its `taskEnded` was received; nil when none was.
    var ended: Duration?
    /// How it ended, as the entry says.
    var endCause: TaskEndCause?
    /// Its `taskEnded` never came: it ended while no stream was followed, by `ended` at the latest (the first
    /// listing of the apps after its begin without it).
    var isEndInferred = false
}

extension SoakChecker {
    /// The scheduled tasks of the evidence, by app and task id: a `taskBegan` naming a submitted identifier, or a
    /// `runScheduledTask` an app recorded (the begin may have come while the `Watch()` stream was not followed),
    /// with the `taskEnded` of the same id.
    static func scheduledRuns(_ evidence: SoakEvidence) -> [TaskKey: ScheduledRunRecord] {
        let identifiers = evidence.scheduled.requirementsByIdentifier
        var runs: [TaskKey: ScheduledRunRecord] = [:]
        for receipt in evidence.scheduled.receipts {
            guard case .run(let identifier) = receipt.kind else { continue }
            let task = TaskKey(app: receipt.app, taskId: receipt.taskId)
            let key = RequestKey(app: receipt.app, identifier: identifier)
            if let known = runs[task] {
                runs[task]?.began = min(known.began, receipt.at)
            } else {
                runs[task] = ScheduledRunRecord(key: key, taskId: receipt.taskId, began: receipt.at)
            }
        }
        for observed in evidence.entries {
            let entry = observed.entry
            guard let id = entry.taskId else { continue }
            let task = TaskKey(app: entry.app, taskId: id)
            switch entry.kind {
            case .taskBegan:
                guard let name = entry.taskName, identifiers[name] != nil else { continue }
                if let known = runs[task] {
                    runs[task]?.began = min(known.began, observed.observedAt)
                } else {
                    runs[task] = ScheduledRunRecord(
                        key: RequestKey(app: entry.app, identifier: name), taskId: id, began: observed.observedAt)
                }
            case .taskEnded:
                guard runs[task] != nil, runs[task]?.ended == nil else { continue }
                runs[task]?.ended = observed.observedAt
                runs[task]?.endCause = entry.taskEnd
            default:
                continue
            }
        }
        // A task whose end came while no stream was followed, and which the kept history replayed at the next
        // subscription did not bring either, is over by the first listing after its begin that does not hold it.
        for (task, run) in runs where run.ended == nil {
            if let listing = evidence.watchListings.first(where: { $0.takenAt > run.began && !$0.holds(task) }) {
                runs[task]?.ended = listing.takenAt
                runs[task]?.isEndInferred = true
            }
        }
        return runs
    }

    /// A scheduled task begins only while every condition its request requires holds (power on at some moment
    /// within the reaction bound before the begin: the daemon may begin just before it sees a flip); and a task
    /// running when external power goes off (and stays off past the reaction bound, so the daemon must have seen
    /// it) is told to stop, its app's expiration handler running, within the reaction bound, and ends within the
    /// bound plus `ExpirationWarningSec`. A daemon down at the flip (a restart under way) is judged from when it is
    /// ready again, and an app that had not re-attached to the daemon after a restart from when it did: the daemon
    /// tells an app nothing before it has (and everything it must know once it has). A begin first seen while the
    /// harness had the daemon hang (between the injection and the next daemon's readiness) is judged from the
    /// hang's start: a stopped daemon delivers late what it decided before. A task whose `taskEnded` never came is
    /// over by the first listing of the apps after its begin that does not hold it.
    static func checkConstraintRespected(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.constraintRespected, limit: criteria.counterExampleLimit)
        let scheduled = evidence.scheduled
        let requirements = scheduled.requirementsByIdentifier
        let bound = criteria.reactionBound
        let runs = scheduledRuns(evidence).values
            .filter { requirements[$0.key.identifier]?.contains("ac") == true }
            .sorted { ($0.began, $0.key, $0.taskId) < ($1.began, $1.key, $1.taskId) }
        for run in runs {
            log.checked()
            // A daemon made to hang delivers late what it decided before: a begin first seen between a hang's
            // injection and the next daemon's readiness may have been decided when the hang began.
            let decided =
                evidence.restarts.last {
                    $0.wasHangInjected && $0.stoppedAt <= run.began && run.began <= $0.readyAt
                }?.stoppedAt ?? run.began
            let window = max(.zero, decided - bound)...run.began
            guard !scheduled.wasOnline(during: window) else { continue }
            let since = scheduled.powerChanges.last { $0.at <= run.began }.map { moment($0.at) } ?? "the start"
            log.violated(
                at: run.began, app: run.key.app,
                "task \(run.taskId) of \(run.key) (requires ac) began at \(moment(run.began)) with external power "
                    + "off since \(since)")
        }
        var expiring: [TaskKey: [Duration]] = [:]
        for receipt in scheduled.receipts where receipt.kind == .expiring {
            expiring[TaskKey(app: receipt.app, taskId: receipt.taskId), default: []].append(receipt.at)
        }
        // When each app re-attached (its `reattached` entries): after a restart, the daemon can tell an app
        // nothing until it has.
        var reattachedAt: [String: [Duration]] = [:]
        for observed in evidence.entries where observed.entry.kind == .reattached {
            reattachedAt[observed.entry.app, default: []].append(observed.observedAt)
        }
        let changes = scheduled.powerChanges
        for (index, change) in changes.enumerated() where !change.isOnline {
            // Power back on within the bound: the daemon may have read the adapter only once it was.
            if index + 1 < changes.count, changes[index + 1].at <= change.at + bound { continue }
            var base = change.at
            for restart in evidence.restarts
            where restart.stoppedAt <= change.at + bound + criteria.expirationWarning && restart.readyAt >= change.at {
                base = max(base, restart.readyAt)
            }
            // The daemon serving the app at the flip, or coming up within the bound: the app is told from its
            // re-attach to it (from its readiness above, when the Watch stream missed the re-attach).
            let serving = evidence.restarts.last { $0.stoppedAt <= change.at + bound }
            for run in runs where run.began < change.at && (run.ended.map { $0 > change.at } ?? true) {
                log.checked()
                var from = base
                if let serving, let reattached = reattachedAt[run.key.app]?.first(where: { $0 >= serving.stoppedAt }) {
                    from = max(from, reattached)
                }
                let told = from + bound
                let wasTold =
                    (run.ended.map { $0 <= told } ?? false)
                    || expiring[TaskKey(app: run.key.app, taskId: run.taskId), default: []].contains { $0 <= told }
                if !wasTold {
                    log.violated(
                        at: told, app: run.key.app,
                        "external power went off at \(moment(change.at)); task \(run.taskId) of \(run.key) (requires "
                            + "ac), running since \(moment(run.began)), had no backgroundTaskExpiring by \(moment(told))"
                    )
                    continue
                }
                let endBy = told + criteria.expirationWarning
                guard run.ended.map({ $0 > endBy }) ?? true else { continue }
                let end = run.ended.map { "ended at \(moment($0))" } ?? "never ended"
                log.violated(
                    at: endBy, app: run.key.app,
                    "external power went off at \(moment(change.at)); task \(run.taskId) of \(run.key) (requires ac) "
                        + "\(end), past \(moment(endBy)) (the reaction bound plus ExpirationWarningSec)")
            }
        }
        log.measurements.append(
            Measurement(name: "power flips", value: Double(max(0, scheduled.powerChanges.count - 1))))
        return log.result
    }

    /// No request (app and identifier) has two scheduled tasks open at once: at every `taskBegan` of a request, the
    /// task begun before it for the same request has ended (the entries come in the order the daemon recorded
    /// them, on one stream), or a listing of the apps taken since no longer held it (it ended while no stream was
    /// followed; counted).
    static func checkRequestRunsOnceAtATime(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.requestRunsOnceAtATime, limit: criteria.counterExampleLimit)
        let identifiers = evidence.scheduled.requirementsByIdentifier
        var open: [RequestKey: (taskId: Int, since: Duration)] = [:]
        var openKey: [TaskKey: RequestKey] = [:]
        var causes: [TaskEndCause: Int] = [:]
        var endedUnseen = 0
        var listings = evidence.watchListings.sorted { $0.takenAt < $1.takenAt }[...]
        for observed in evidence.entries {
            // A listing of the apps shows which tasks ended while no stream was followed.
            while let listing = listings.first, listing.takenAt <= observed.observedAt {
                listings.removeFirst()
                for (task, key) in openKey where !listing.holds(task) {
                    openKey[task] = nil
                    if open[key]?.taskId == task.taskId { open[key] = nil }
                    endedUnseen += 1
                }
            }
            let entry = observed.entry
            guard let id = entry.taskId else { continue }
            let task = TaskKey(app: entry.app, taskId: id)
            switch entry.kind {
            case .taskBegan:
                guard let name = entry.taskName, identifiers[name] != nil else { continue }
                let key = RequestKey(app: entry.app, identifier: name)
                log.checked()
                if let other = open[key] {
                    log.violated(
                        at: observed.observedAt, app: entry.app,
                        "task \(id) of \(key) began at \(moment(observed.observedAt)) while its task \(other.taskId), "
                            + "begun at \(moment(other.since)), was still running")
                }
                open[key] = (id, observed.observedAt)
                openKey[task] = key
            case .taskEnded:
                guard let key = openKey.removeValue(forKey: task) else { continue }
                if let cause = entry.taskEnd { causes[cause, default: 0] += 1 }
                if open[key]?.taskId == id { open[key] = nil }
            default:
                continue
            }
        }
        for cause in TaskEndCause.allCases {
            log.measurements.append(
                Measurement(name: "scheduled tasks ended \(cause.rawValue)", value: Double(causes[cause] ?? 0)))
        }
        log.measurements.append(
            Measurement(name: "scheduled tasks ended unseen (gone from a listing)", value: Double(endedUnseen)))
        return log.result
    }

    /// Every request the daemon accepted is, at the end, run to completion (a task of it begun after the submit
    /// ended `ended` with the app's `SetTaskCompleted` of success or of a failure not to retry), cancelled (a
    /// `CancelRequest` accepted), or still held (`ListRequests` at the end). A submit while a task of the request
    /// runs replaces it once that task ends, so a task begun before the latest submit completes nothing of it; a
    /// task that expired, lost its constraints, failed to be retried or whose app ended leaves it held. A call the
    /// daemon did not answer may or may not have been done: the request is not judged until the next accepted
    /// submit.
    static func checkRequestNeverLost(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.requestNeverLost, limit: criteria.counterExampleLimit)
        let scheduled = evidence.scheduled
        // What may settle a request, in the order it happened.
        enum Step {
            case operation(RequestOperation)
            case completed(ScheduledRunRecord, at: Duration)
        }
        var steps: [(at: Duration, step: Step)] = scheduled.operations.map { ($0.at, .operation($0)) }
        var completions: [TaskKey: (at: Duration, isFinal: Bool)] = [:]
        for receipt in scheduled.receipts {
            guard case .completing(let success, let retry) = receipt.kind else { continue }
            completions[TaskKey(app: receipt.app, taskId: receipt.taskId)] = (receipt.at, success || !retry)
        }
        for (task, run) in scheduledRuns(evidence) where run.endCause == .ended {
            guard let completion = completions[task], completion.isFinal, let ended = run.ended else { continue }
            steps.append((min(completion.at, ended), .completed(run, at: min(completion.at, ended))))
        }
        steps.sort { $0.at < $1.at }
        // Per request: whether it must be held (nil: not known), and its latest accepted submit.
        var expected: [RequestKey: (isHeld: Bool?, submittedAt: Duration?)] = [:]
        var counts: [String: Int] = [:]
        for (_, step) in steps {
            switch step {
            case .operation(let operation):
                var state = expected[operation.key] ?? (nil, nil)
                switch (operation.kind, operation.outcome) {
                case (.submit, .accepted):
                    state = (true, operation.at)
                    counts["submits accepted", default: 0] += 1
                case (.submit, .refused):
                    counts["submits refused", default: 0] += 1
                case (.submit, .unanswered):
                    // Held before, it is held still (replaced or not); else it may or may not be.
                    if state.isHeld != true { state.isHeld = nil }
                    counts["submits unanswered", default: 0] += 1
                case (.cancel, .accepted):
                    state.isHeld = false
                    counts["cancels accepted", default: 0] += 1
                case (.cancel, .refused):
                    // No such request: right if it completed, which a later step may show; else its loss shows at
                    // the end.
                    counts["cancels refused", default: 0] += 1
                case (.cancel, .unanswered):
                    state.isHeld = nil
                    counts["cancels unanswered", default: 0] += 1
                }
                expected[operation.key] = state
            case .completed(let run, _):
                counts["runs completed", default: 0] += 1
                guard let state = expected[run.key], let submittedAt = state.submittedAt else { continue }
                // A task begun before the latest submit ran the request that submit replaced.
                if run.began > submittedAt { expected[run.key]?.isHeld = false }
            }
        }
        if let held = scheduled.heldAtEnd {
            for key in expected.keys.sorted() {
                guard let state = expected[key], let submittedAt = state.submittedAt else { continue }
                log.checked()
                guard state.isHeld == true, !held.contains(key) else { continue }
                log.violated(
                    at: evidence.end, app: key.app,
                    "\(key), submitted at \(moment(submittedAt)) and accepted, was not held at the end, yet no task "
                        + "of it begun since completed and no cancel of it was accepted")
            }
        }
        for name in counts.keys.sorted() {
            log.measurements.append(Measurement(name: name, value: Double(counts[name] ?? 0)))
        }
        return log.result
    }
}

extension AppSnapshot {
    /// Whether an app of the listing holds `task` open.
    func holds(_ task: TaskKey) -> Bool {
        apps.contains { $0.name == task.app && $0.tasks.contains { $0.id == task.taskId } }
    }
}
