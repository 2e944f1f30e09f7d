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
        /// When its background budget began: entering background from the foreground or at registration; kept
        /// across suspension and waking, cleared in the foreground and once ended.
        var budgetStart: Duration?

        /// The reclamation band the daemon would choose it from (DESIGN §4), or nil when it cannot be reclaimed.
        var band: ReclamationBand? {
            guard isRegistered, let state else { return nil }
            switch state {
            case .suspended: return .suspended
            case .background: return openTasks.isEmpty ? .backgroundIdle : .backgroundWithTasks
            case .active, .inactive: return .foreground
            case .notRunning, .terminated: return nil
            }
        }

        /// Whether it is running in background with a task open: the budget is what ends that.
        var isInBackgroundWithTasks: Bool { state == .background && !openTasks.isEmpty }
    }

    private(set) var apps: [String: Record] = [:]

    /// Applies one entry.
    mutating func apply(_ observed: ObservedEntry) {
        let entry = observed.entry
        var record = apps[entry.app] ?? Record()
        switch entry.kind {
        case .registered:
            // A new registration of the name: nothing of an earlier one carries over.
            record = Record(state: entry.state, isRegistered: entry.state != .notRunning)
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
            case .active, .inactive:
                record.isRegistered = true
                record.budgetStart = nil
            case .notRunning, .terminated:
                record.isRegistered = false
                record.budgetStart = nil
            }
        case .taskBegan:
            if let id = entry.taskId { record.openTasks.insert(id) }
        case .taskEnded:
            if let id = entry.taskId { record.openTasks.remove(id) }
        case .terminated, .processExited:
            record.state = .terminated
            record.isRegistered = false
            record.budgetStart = nil
        case .unregistered:
            record.isRegistered = false
        case .expirationWarning, .suspensionDeferred, .memoryWarning, .killed, .eventsDropped:
            break
        }
        apps[entry.app] = record
    }

    /// The record of `app`, empty when no entry named it.
    subscript(app: String) -> Record { apps[app] ?? Record() }
}
