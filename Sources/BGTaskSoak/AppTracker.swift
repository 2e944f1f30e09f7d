// The apps as the daemon's own entries describe them, replayed in the order received: state, open tasks, budget.

import BGTaskProtocol

/// Replays history entries into what each app was at each point: the context several checks judge against.
struct AppTracker {
    /// One app as the entries so far describe it.
    struct Record {
        /// The last state recorded; nil before any.
        var state: AppState?
        /// Whether its registration is live (registered or re-attached, not unregistered or ended).
        var isRegistered = false
        /// The tasks begun and not yet ended.
        var openTasks: Set<Int> = []
        /// When each open task began (as received).
        var taskBegins: [Int: Duration] = [:]
        /// The open tasks that run scheduled requests: the background budget does not bound them (their own time
        /// does), but they count for the reclamation band like any task.
        var scheduledTasks: Set<Int> = []
        /// When its registration began (as received); nil before any.
        var registeredAt: Duration?
        /// When its background budget began: entering background from the foreground or at registration; kept
        /// across suspension and waking, cleared in the foreground and once ended.
        var budgetStart: Duration?

        /// The reclamation band the daemon would choose it from, or nil when it cannot be reclaimed.
        var band: ReclamationBand? {
            guard isRegistered, let state else { return nil }
            switch state {
            case .suspended: return .suspended
            case .background: return openTasks.isEmpty ? .backgroundIdle : .backgroundWithTasks
            case .active, .inactive: return .foreground
            case .notRunning, .terminated: return nil
            }
        }

        /// Whether it is running in background with an ordinary task open: the budget is what ends that.
        var isInBackgroundWithTasks: Bool { state == .background && !ordinaryTasks.isEmpty }

        /// The open tasks the app began itself (not scheduled ones).
        var ordinaryTasks: Set<Int> { openTasks.subtracting(scheduledTasks) }
    }

    private(set) var apps: [String: Record] = [:]
    /// When the `Watch()` stream was not followed (`SoakEvidence.watchGaps`).
    let watchGaps: [ClosedRange<Duration>]
    /// Open tasks taken as ended when their app was suspended after a Watch gap (see `apply`).
    private(set) var tasksEndedInGaps = 0

    /// The identifiers of the scheduled requests submitted: a task of that name runs one of them.
    let scheduledIdentifiers: Set<String>

    /// A tracker knowing the Watch gaps of the evidence it will be fed, and the identifiers of its scheduled
    /// requests.
    init(watchGaps: [ClosedRange<Duration>] = [], scheduledIdentifiers: Set<String> = []) {
        self.watchGaps = watchGaps
        self.scheduledIdentifiers = scheduledIdentifiers
    }

    /// Applies one entry.
    mutating func apply(_ observed: ObservedEntry) {
        let entry = observed.entry
        var record = apps[entry.app] ?? Record()
        switch entry.kind {
        case .registered:
            // A new registration of the name: nothing of an earlier one carries over.
            record = Record(
                state: entry.state, isRegistered: entry.state != .notRunning, registeredAt: observed.observedAt)
        case .reattached:
            record.isRegistered = true
            if let state = entry.state { record.state = state }
        case .stateChanged:
            guard let state = entry.state else { break }
            let previous = record.state
            record.state = state
            switch state {
            case .background:
                // A launched app registering in background also starts here; a woken app keeps its budget.
                record.isRegistered = true
                if (previous != .suspended && previous != .background) || record.budgetStart == nil {
                    record.budgetStart = observed.observedAt
                }
            case .suspended:
                record.isRegistered = true
                // The daemon suspends an app once its last task ended. A task begun before a Watch gap that is
                // over by now may have been ended by the app inside it (History() does not keep such ends): it
                // counts as ended, as task-ends-once leaves it unjudged. Without a gap in between, an open task
                // stays open whatever the state says.
                let time = observed.observedAt
                for (id, began) in record.taskBegins
                where watchGaps.contains(where: { began < $0.lowerBound && $0.upperBound <= time }) {
                    record.openTasks.remove(id)
                    record.scheduledTasks.remove(id)
                    record.taskBegins[id] = nil
                    tasksEndedInGaps += 1
                }
            case .active, .inactive:
                record.isRegistered = true
                record.budgetStart = nil
            case .notRunning, .terminated:
                record.isRegistered = false
                record.budgetStart = nil
            }
        case .taskBegan:
            if let id = entry.taskId {
                record.openTasks.insert(id)
                record.taskBegins[id] = observed.observedAt
                if let name = entry.taskName, scheduledIdentifiers.contains(name) { record.scheduledTasks.insert(id) }
            }
        case .taskEnded:
            if let id = entry.taskId {
                record.openTasks.remove(id)
                record.scheduledTasks.remove(id)
                record.taskBegins[id] = nil
            }
        case .terminated, .processExited:
            record.state = .terminated
            record.isRegistered = false
            record.budgetStart = nil
        case .unregistered:
            record.isRegistered = false
        case .expirationWarning, .suspensionDeferred, .suspensionExempted, .memoryWarning, .killed, .eventsDropped:
            break
        case .requestCancelled:
            // About a scheduled request, not a registration: no app's record changes.
            return
        }
        apps[entry.app] = record
    }

    /// Takes the daemon's listing after a gap in the `Watch()` stream as the apps' state and open tasks: what
    /// changed in the gap is known again from it (`History()` keeps no state changes). An app listed in
    /// background or suspended keeps the budget start the entries gave it, unless the listing's remaining time
    /// says its budget began later: it went to the foreground and back inside the gap. One the entries had in the
    /// foreground takes its start from the remaining time (`backgroundTime` gives each app's budget): none left
    /// puts it a whole budget before the listing, and none listed at the listing.
    mutating func refresh(from snapshot: AppSnapshot, backgroundTime: (String) -> Duration) {
        for app in snapshot.apps {
            var record = apps[app.name] ?? Record()
            record.state = app.state
            record.isRegistered = app.state != .terminated && app.state != .notRunning
            let listed = Set(app.tasks.map(\.id))
            for id in record.openTasks.subtracting(listed) { record.taskBegins[id] = nil }
            for id in listed.subtracting(record.openTasks) { record.taskBegins[id] = snapshot.takenAt }
            record.openTasks = listed
            record.scheduledTasks = Set(app.tasks.filter { scheduledIdentifiers.contains($0.name) }.map(\.id))
            if !record.isRegistered || app.state == .active || app.state == .inactive {
                record.budgetStart = nil
            } else {
                // Time left dates the budget's start; none left only bounds it.
                let budget = backgroundTime(app.name)
                let remaining = app.backgroundTimeRemaining.map { Duration.milliseconds(Int64(($0 * 1000).rounded())) }
                let listedStart = remaining.flatMap { $0 > .zero ? snapshot.takenAt - (budget - $0) : nil }
                if let start = record.budgetStart {
                    record.budgetStart = max(start, listedStart ?? start)
                } else {
                    record.budgetStart =
                        listedStart ?? (remaining == .zero ? snapshot.takenAt - budget : snapshot.takenAt)
                }
            }
            apps[app.name] = record
        }
    }

    /// The record of `app`, empty when no entry named it.
    subscript(app: String) -> Record { apps[app] ?? Record() }
}
