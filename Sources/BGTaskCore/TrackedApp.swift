// The policy's private bookkeeping for one registration, and the rolling ledger behind the daily budget.

/// The deadlines an app can have pending. When several fall due at once they are handled in this order.
package enum DeadlineKind: Int, CaseIterable, Codable {
    /// A launched managed app must register by now (`LaunchTimeoutSec`).
    case launch
    /// SIGKILL after `willTerminate` (`WillTerminateGraceSec`).
    case kill
    /// `didEnterBackground` or a wake-up event must be acknowledged by now (`EnterBackgroundGraceSec`).
    case acknowledgement
    /// A lock holder must have dropped its lock by now (`LockedSuspendGraceSec`).
    case lockGrace
    /// Send `backgroundTaskExpiring` (`ExpirationWarningSec` before the budget ends).
    case expirationWarning
    /// The background budget ends.
    case budget
}

/// The pending deadlines of one app, one slot per kind, stored inline (no allocation per app).
package struct PendingDeadlines: Sendable, Codable {
    private var launch: DeadlineOrder?
    private var kill: DeadlineOrder?
    private var acknowledgement: DeadlineOrder?
    private var lockGrace: DeadlineOrder?
    private var expirationWarning: DeadlineOrder?
    private var budget: DeadlineOrder?

    package subscript(kind: DeadlineKind) -> DeadlineOrder? {
        get {
            switch kind {
            case .launch: launch
            case .kill: kill
            case .acknowledgement: acknowledgement
            case .lockGrace: lockGrace
            case .expirationWarning: expirationWarning
            case .budget: budget
            }
        }
        set {
            switch kind {
            case .launch: launch = newValue
            case .kill: kill = newValue
            case .acknowledgement: acknowledgement = newValue
            case .lockGrace: lockGrace = newValue
            case .expirationWarning: expirationWarning = newValue
            case .budget: budget = newValue
            }
        }
    }

    /// The earliest pending deadline; among equal ones, the first scheduled.
    var earliest: (kind: DeadlineKind, order: DeadlineOrder)? {
        var best: (kind: DeadlineKind, order: DeadlineOrder)?
        for kind in DeadlineKind.allCases {
            if let order = self[kind], best.map({ order < $0.order }) ?? true {
                best = (kind, order)
            }
        }
        return best
    }

    /// Whether nothing is pending.
    var isEmpty: Bool { earliest == nil }
}

/// One open lease. Leases live in their tracked app: every request naming a lease also names its app, and
/// an app holds at most `TasksPerAppMax`, so no daemon-wide table (and no cache miss into one) is needed.
package struct OpenTask: Sendable, Codable {
    package internal(set) var id: TaskID
    package internal(set) var name: String?
    package internal(set) var began: MonotonicInstant
    /// It runs a scheduled request (named by `name`), on its own time rather than the app's shared budget. Absent
    /// (nil) for an ordinary lease, and in states saved before there were these.
    package internal(set) var isScheduled: Bool? = nil
}

/// Everything the policy tracks about one registration.
package struct TrackedApp: Sendable, Codable {
    package let id: AppID
    package let name: String
    package internal(set) var pid: Int32
    package internal(set) var uid: UInt32
    package let isManaged: Bool
    /// Launched by the daemon for its scheduled requests: it starts in background when it registers, whatever its
    /// registration asks, as iOS launches an app into the background for its task. Absent (nil) otherwise, and in
    /// states saved before there were these.
    package internal(set) var isLaunchedForScheduledWork: Bool? = nil
    /// Resolved once at registration: defaults, the app's override file, then the registration's own request.
    package let policy: AppPolicy
    package internal(set) var state: AppState
    /// An event stream is attached (false while a launched app has not registered, and after it closed).
    package internal(set) var isRegistered: Bool
    /// The shell reported the process gone.
    package internal(set) var isProcessGone = false
    /// Open leases, ascending by id (ids only grow, so appending keeps the order).
    package internal(set) var openTasks: [OpenTask] = []
    /// When the shared background budget ends; set while in background or suspended.
    package internal(set) var budgetEnd: MonotonicInstant?
    /// Start of the current stretch of running in background, for the daily ledger.
    package internal(set) var runningInBackgroundSince: MonotonicInstant?
    /// The event whose acknowledgement is awaited (`didEnterBackground` or a wake-up).
    package internal(set) var pendingAcknowledgement: EventID?
    /// Whether the awaited acknowledgement is for a wake-up (a timeout then suspends again, not terminates).
    package internal(set) var acknowledgementIsForWake = false
    /// `backgroundTaskExpiring` was sent in this background stretch.
    package internal(set) var expirationWarned = false
    /// Suspension was refused because of a file lock and the grace is running.
    package internal(set) var lockGraceActive = false
    /// The last `.suspend` was the one after the lock grace: another refusal terminates.
    package internal(set) var suspensionIsFinalAttempt = false
    /// Events waiting while suspended, oldest first, bounded by `QueuedEventsPerAppMax`.
    package internal(set) var queue = EventQueue()
    /// Queued events dropped (oldest first) because the queue was full, over the registration's life.
    package internal(set) var droppedEventCount = 0
    /// Whether a drop was already recorded in the current suspension (one audit record per suspension).
    package internal(set) var hasRecordedDropThisSuspension = false
    package internal(set) var deadlines = PendingDeadlines()
    package internal(set) var exitReason: TerminationReason?
    /// How its process ended, when the daemon launched it and reaped it.
    package internal(set) var processExit: ProcessExit?
    /// When it was last in the foreground (registration counts): the reclamation tie-break, oldest first.
    package internal(set) var lastForeground: MonotonicInstant
    /// Why it is never suspended, once the shell said (its unit stops, or has a watchdog); nil while it may be.
    /// Absent in states saved before there were these.
    package internal(set) var suspensionExemption: SuspensionExemption? = nil

    /// The ids of the open leases, ascending.
    var openTaskIDs: [TaskID] { openTasks.map(\.id) }

    /// Whether an ordinary lease (not a scheduled task) is open: those share the background budget.
    var hasOrdinaryTasks: Bool { openTasks.contains { $0.isScheduled != true } }

    /// The ids of the open ordinary leases, ascending.
    var ordinaryTaskIDs: [TaskID] { openTasks.filter { $0.isScheduled != true }.map(\.id) }

    /// Whether this registration holds its name: it is registered and running or suspended, or it is a
    /// launched app still within its launch timeout.
    var holdsName: Bool {
        switch state {
        case .active, .inactive, .background, .suspended: true
        case .notRunning: deadlines[.launch] != nil
        case .terminated: false
        }
    }
}

/// Background time an app has used over the last 24 hours, by app name (a relaunch must not reset it).
package struct UsageLedger: Sendable, Codable {
    /// The rolling window of `BackgroundBudgetPerDaySec`.
    static let window: Duration = .seconds(24 * 60 * 60)
    /// Stretches kept: past it the two oldest merge into one spanning both, which can only overcount (fail
    /// closed), so an app moved in and out of background all day cannot grow it.
    static let stretchesMax = 64

    /// One closed stretch of running in background.
    struct Stretch: Sendable, Codable {
        var start: MonotonicInstant
        var end: MonotonicInstant
    }

    /// Closed stretches of running in background, oldest first, none ending before the window.
    private(set) var stretches: [Stretch] = []

    /// Adds a closed stretch and forgets those that left the window.
    mutating func add(from start: MonotonicInstant, to end: MonotonicInstant) {
        guard end > start else { return }
        stretches.append(Stretch(start: start, end: end))
        let horizon = end - Self.window
        if let first = stretches.firstIndex(where: { $0.end > horizon }), first > 0 {
            stretches.removeFirst(first)
        }
        while stretches.count > Self.stretchesMax {
            let merged = Stretch(start: min(stretches[0].start, stretches[1].start), end: stretches[1].end)
            stretches.replaceSubrange(0...1, with: [merged])
        }
    }

    /// Time used within the window ending at `now`.
    func used(at now: MonotonicInstant) -> Duration {
        let horizon = now - Self.window
        var total: Int64 = 0
        for stretch in stretches where stretch.end > horizon {
            total += (stretch.end - max(stretch.start, horizon)).nanosecondCount
        }
        return .nanoseconds(total)
    }
}
