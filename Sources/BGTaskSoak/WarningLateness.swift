// How late each expiration warning came against when it was due, from the entries as the harness received them.
//
// Both ends are stamped the same way, on arrival of the daemon's `Watch()` entries: the app's background entry (or
// the scheduled task's begin) and the `expirationWarning` entry. The stream's own delay is in both and cancels out;
// what is left is how late the daemon's timer fired, plus the difference between the two entries' delays.

import BGTaskProtocol

/// One `expirationWarning` entry with the moment it was due.
public struct WarningLateness: Hashable, Sendable {
    /// What the warning was due by.
    public enum Kind: String, CaseIterable, Hashable, Sendable {
        /// An ordinary lease's budget: due `ExpirationWarningSec` before the app's background budget runs out,
        /// counted from its entry into background.
        case budget
        /// A lease begun after that moment (in the warning window, or on waking with little budget left): due at
        /// once, at its begin.
        case atBegin = "at-begin"
        /// A scheduled task's own time nearly up: due `ExpirationWarningSec` before its kind's time since it began.
        case scheduled
    }

    /// When the harness received the warning.
    public var receivedAt: Duration
    /// The app warned.
    public var app: String
    /// The tasks the warning listed.
    public var taskIds: [Int]
    /// When it was due, as received entries date it.
    public var due: Duration
    /// What it was due by.
    public var kind: Kind

    /// A measured warning.
    public init(receivedAt: Duration, app: String, taskIds: [Int], due: Duration, kind: Kind) {
        self.receivedAt = receivedAt
        self.app = app
        self.taskIds = taskIds
        self.due = due
        self.kind = kind
    }

    /// How late it came (negative: early, by the two entries' different delays).
    public var lateness: Duration { receivedAt - due }
}

/// The warnings measured, and how many were left out for each reason.
public struct WarningTimeliness: Hashable, Sendable {
    /// The warnings whose due moment the entries tell, in the order received.
    public var samples: [WarningLateness]
    /// Warnings not measured, by why: brought early on purpose (a constraint lost, a request cancelled), or with a
    /// Watch gap or a restart between the moment the due time is counted from and the warning, or whose start is
    /// not known.
    public var leftOut: [String: Int]

    /// A result.
    public init(samples: [WarningLateness] = [], leftOut: [String: Int] = [:]) {
        self.samples = samples
        self.leftOut = leftOut
    }
}

extension SoakChecker {
    /// Each `expirationWarning` the daemon sent, with the moment it was due: for an ordinary lease, the app's entry
    /// into background (kept across suspension and waking, as the budget is) plus its budget less
    /// `ExpirationWarningSec`, or the begin of a listed lease if that came later (the daemon warns such a lease at
    /// once); for a scheduled task whose time is nearly up, its begin plus its kind's time less
    /// `ExpirationWarningSec` (its kind that of the last submit of its request the daemon had answered by then). A
    /// warning brought early (a constraint stopped holding, the request was cancelled) is no measure of lateness
    /// and is left out, as is one with a Watch gap or a restart between its start and its arrival (the entries in
    /// between are stamped late or missing, and a budget due while the daemon was down is served on its return).
    public static func warningLateness(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> WarningTimeliness {
        let scheduled = evidence.scheduled
        let identifiers = Set(scheduled.requirementsByIdentifier.keys)
        var tracker = AppTracker(watchGaps: evidence.watchGaps, scheduledIdentifiers: identifiers)
        var scheduledBegins: [TaskKey: (identifier: String, began: Duration)] = [:]
        var result = WarningTimeliness()

        func isInterrupted(_ range: ClosedRange<Duration>) -> Bool {
            evidence.watchGaps.contains { $0.overlaps(range) }
                || evidence.restarts.contains { ($0.stoppedAt...max($0.stoppedAt, $0.readyAt)).overlaps(range) }
        }

        var listings = evidence.listingsAfterGaps[...]
        for observed in evidence.entries {
            while let listing = listings.first, listing.takenAt <= observed.observedAt {
                tracker.refresh(from: listing, backgroundTime: criteria.backgroundTime(of:))
                listings.removeFirst()
            }
            let entry = observed.entry
            let received = observed.observedAt
            if entry.kind == .taskBegan, let id = entry.taskId, let name = entry.taskName, identifiers.contains(name) {
                scheduledBegins[TaskKey(app: entry.app, taskId: id)] = (name, received)
            }
            tracker.apply(observed)
            guard entry.kind == .expirationWarning else { continue }
            let taskIds = entry.taskIds ?? []
            if let trigger = entry.trigger {
                guard trigger == scheduledTimeUp else {
                    result.leftOut[LeftOut.early + trigger, default: 0] += 1
                    continue
                }
                guard let id = taskIds.first, let run = scheduledBegins[TaskKey(app: entry.app, taskId: id)],
                    let kind = taskKind(
                        of: RequestKey(app: entry.app, identifier: run.identifier), at: run.began,
                        in: scheduled.operations),
                    let time = criteria.scheduledTaskTimes[kind]
                else {
                    result.leftOut[LeftOut.unknownTask, default: 0] += 1
                    continue
                }
                guard !isInterrupted(run.began...max(run.began, received)) else {
                    result.leftOut[LeftOut.interruptedTask, default: 0] += 1
                    continue
                }
                result.samples.append(
                    WarningLateness(
                        receivedAt: received, app: entry.app, taskIds: taskIds,
                        due: run.began + max(.zero, time - criteria.expirationWarning), kind: .scheduled))
                continue
            }
            let record = tracker[entry.app]
            guard let budgetStart = record.budgetStart else {
                result.leftOut[LeftOut.noBackgroundEntry, default: 0] += 1
                continue
            }
            guard !isInterrupted(budgetStart...max(budgetStart, received)) else {
                result.leftOut[LeftOut.interruptedBudget, default: 0] += 1
                continue
            }
            let budgetDue = budgetStart + criteria.backgroundTime(of: entry.app) - criteria.expirationWarning
            let latestBegin = taskIds.compactMap { record.taskBegins[$0] }.max()
            if let latestBegin, latestBegin > budgetDue {
                result.samples.append(
                    WarningLateness(
                        receivedAt: received, app: entry.app, taskIds: taskIds, due: latestBegin, kind: .atBegin))
            } else {
                result.samples.append(
                    WarningLateness(
                        receivedAt: received, app: entry.app, taskIds: taskIds, due: budgetDue, kind: .budget))
            }
        }
        return result
    }

    /// Why a warning is not measured, as `WarningTimeliness.leftOut` says it.
    enum LeftOut {
        static let early = "brought early: "
        static let unknownTask = "a scheduled task whose begin or kind is not known"
        static let interruptedTask = "a Watch gap or a restart between the task's begin and the warning"
        static let noBackgroundEntry = "no entry into background seen before it"
        static let interruptedBudget = "a Watch gap or a restart between the entry into background and the warning"
    }

    /// The `trigger` of the warning the daemon sends when a scheduled task's own time is nearly up.
    static let scheduledTimeUp = "its scheduled task's time is nearly up"

    /// The kind of the task of `key` begun at `began`: that of the last submit the daemon accepted and answered by
    /// then; nil when there is none, or when a submit asked before the begin and answered after it (or never)
    /// asked for another kind (which of the two ran is not known).
    static func taskKind(of key: RequestKey, at began: Duration, in operations: [RequestOperation]) -> String? {
        let submits = operations.filter { $0.key == key && $0.kind == .submit && $0.at <= began }
        guard
            let last = submits.last(where: { $0.outcome == .accepted && ($0.answeredAt ?? $0.at) <= began }),
            let kind = last.taskKind
        else { return nil }
        let undecided = submits.filter { operation in
            guard operation.at > last.at else { return false }
            if case .refused = operation.outcome { return false }
            return true
        }
        return undecided.allSatisfy { $0.taskKind == kind } ? kind : nil
    }
}
