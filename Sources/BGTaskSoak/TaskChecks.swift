// `task-ends-once` and `budget-respected`: the leases as the daemon's entries tell them, judged against its rules.

import BGTaskProtocol

/// A task as the entries name it: ids are unique per daemon, the app keeps two apps' mistakes apart.
struct TaskKey: Hashable {
    var app: String
    var taskId: Int
}

extension SoakChecker {
    /// Every `taskBegan` is followed by exactly one `taskEnded` for its id, carrying how it ended; a task still
    /// open when the evidence closes never ended (the harness ends every app first).
    static func checkTaskEndsOnce(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.taskEndsOnce, limit: criteria.counterExampleLimit)
        var began: [TaskKey: Duration] = [:]
        var ended: [TaskKey: Duration] = [:]
        var order: [TaskKey] = []
        var appEnded: [String: Duration] = [:]
        var endedWithoutBegin: [(TaskKey, Duration)] = []
        for observed in evidence.entries {
            let entry = observed.entry
            let time = observed.observedAt
            switch entry.kind {
            case .taskBegan:
                guard let id = entry.taskId else {
                    log.violated(at: time, app: entry.app, "a taskBegan entry without a task id")
                    continue
                }
                let key = TaskKey(app: entry.app, taskId: id)
                if let first = began[key], ended[key] == nil {
                    log.violated(
                        at: time, app: entry.app,
                        "task \(id) began again at \(moment(time)), open since \(moment(first))")
                    continue
                }
                if began[key] == nil { order.append(key) }
                began[key] = time
                ended[key] = nil
            case .taskEnded:
                guard let id = entry.taskId else {
                    log.violated(at: time, app: entry.app, "a taskEnded entry without a task id")
                    continue
                }
                let key = TaskKey(app: entry.app, taskId: id)
                if entry.taskEnd == nil {
                    log.violated(at: time, app: entry.app, "task \(id) ended at \(moment(time)) with no cause")
                }
                if let first = ended[key] {
                    log.violated(
                        at: time, app: entry.app,
                        "task \(id) ended twice: at \(moment(first)) and again at \(moment(time))")
                } else if began[key] == nil {
                    endedWithoutBegin.append((key, time))
                    ended[key] = time
                } else {
                    ended[key] = time
                }
            case .terminated, .processExited:
                if appEnded[entry.app] == nil { appEnded[entry.app] = time }
            case .registered:
                appEnded[entry.app] = nil
            case .reattached, .stateChanged, .expirationWarning, .suspensionDeferred, .suspensionExempted,
                .memoryWarning, .killed, .unregistered, .eventsDropped, .requestCancelled:
                break
            }
        }
        log.checked(order.count)
        // What a Watch gap may hide: per gap, the highest task id received before it and the lowest begun after it
        // (ids only grow), so a task whose begin is missing with an id between the two began inside it.
        let gaps = evidence.watchGaps.map { gap in
            (
                gap: gap,
                highestBefore: evidence.entries.filter { $0.observedAt < gap.lowerBound }.compactMap(\.entry.taskId)
                    .max() ?? 0,
                lowestAfter: evidence.entries.filter {
                    $0.observedAt > gap.upperBound && $0.entry.kind == .taskBegan
                }.compactMap(\.entry.taskId).min() ?? Int.max
            )
        }
        var unverifiable = 0
        for (key, time) in endedWithoutBegin {
            if gaps.contains(where: {
                $0.highestBefore < key.taskId && key.taskId < $0.lowestAfter && time >= $0.gap.lowerBound
            }) {
                unverifiable += 1
            } else {
                log.violated(at: time, app: key.app, "task \(key.taskId) ended at \(moment(time)) but never began")
            }
        }
        for key in order where ended[key] == nil {
            guard let start = began[key] else { continue }
            if gaps.contains(where: { $0.gap.upperBound >= start }) {
                // Its end (by the app, which History() does not keep) may have been lost in a gap after it began.
                unverifiable += 1
                continue
            }
            let fate =
                appEnded[key.app].map { "its app ended at \(moment($0))" }
                ?? "the evidence closed at \(moment(evidence.end))"
            log.violated(
                at: start, app: key.app, "task \(key.taskId) began at \(moment(start)) and never ended; \(fate)")
        }
        if !evidence.watchGaps.isEmpty {
            log.measurements.append(
                Measurement(name: "tasks with a begin or end in a Watch gap (not judged)", value: Double(unverifiable)))
        }
        return log.result
    }

    /// No app runs in background with a task open (one it began itself: a scheduled task has its own time, which
    /// `constraint-respected` and the daemon's own ends bound) past the start of its budget plus the budget and the grace:
    /// each stretch of "in background with tasks open" is judged when it ends (or when the evidence closes). A
    /// budget that runs out while the daemon is down (from the fault until the new daemon is ready: a hang lasts
    /// until the watchdog fires) can only be enforced once it is back, so such a stretch may last until the
    /// restart's readiness plus the grace.
    static func checkBudgetRespected(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.budgetRespected, limit: criteria.counterExampleLimit)
        var tracker = AppTracker(
            watchGaps: evidence.watchGaps, scheduledIdentifiers: Set(evidence.scheduled.requirementsByIdentifier.keys))
        var stretches: [String: (since: Duration, budgetStart: Duration, tasks: Set<Int>)] = [:]

        func judge(_ app: String, until end: Duration) {
            guard let stretch = stretches.removeValue(forKey: app) else { return }
            log.checked()
            let budget = criteria.backgroundTime(of: app)
            let deadline = stretch.budgetStart + budget
            var latest = deadline + criteria.budgetGrace
            if let restart = evidence.restarts.first(where: { ($0.stoppedAt...$0.readyAt).contains(deadline) }) {
                latest = max(latest, restart.readyAt + criteria.budgetGrace)
            }
            guard end > latest else { return }
            let ids = stretch.tasks.sorted().map(String.init).joined(separator: ", ")
            log.violated(
                at: latest, app: app,
                "in background with task(s) \(ids) open from \(moment(stretch.since)) to \(moment(end)); its budget of "
                    + "\(seconds(budget)) began at \(moment(stretch.budgetStart)), so with the grace of "
                    + "\(seconds(criteria.budgetGrace)) it should have been over by \(moment(latest))")
        }

        // A listing after a gap may show an app out of the stretch the entries left it in, or in one with a later
        // budget (it was in the foreground inside the gap): the stretch is judged until the gap began, the last
        // moment it was seen, and one begins anew from the listing.
        func resync(with listing: AppSnapshot) {
            let before = tracker.apps
            tracker.refresh(from: listing, backgroundTime: criteria.backgroundTime(of:))
            let lastSeen = evidence.watchGaps.last { $0.lowerBound <= listing.takenAt }?.lowerBound ?? listing.takenAt
            for app in listing.apps.map(\.name) {
                let record = tracker[app]
                if let stretch = stretches[app],
                    !record.isInBackgroundWithTasks || record.budgetStart != before[app]?.budgetStart
                {
                    judge(app, until: max(stretch.since, lastSeen))
                }
                if record.isInBackgroundWithTasks && stretches[app] == nil {
                    stretches[app] = (listing.takenAt, record.budgetStart ?? listing.takenAt, record.ordinaryTasks)
                }
            }
        }

        var listings = evidence.listingsAfterGaps[...]
        for observed in evidence.entries {
            while let listing = listings.first, listing.takenAt <= observed.observedAt {
                resync(with: listing)
                listings.removeFirst()
            }
            let app = observed.entry.app
            tracker.apply(observed)
            let record = tracker[app]
            if record.isInBackgroundWithTasks {
                if stretches[app] == nil {
                    stretches[app] = (
                        observed.observedAt, record.budgetStart ?? observed.observedAt, record.ordinaryTasks
                    )
                } else {
                    stretches[app]?.tasks.formUnion(record.ordinaryTasks)
                }
            } else {
                judge(app, until: observed.observedAt)
            }
        }
        for listing in listings { resync(with: listing) }
        for app in stretches.keys.sorted() { judge(app, until: evidence.end) }
        if !evidence.watchGaps.isEmpty {
            log.measurements.append(
                Measurement(
                    name: "open tasks taken as ended in a Watch gap (their app suspended after it)",
                    value: Double(tracker.tasksEndedInGaps)))
        }
        return log.result
    }
}
