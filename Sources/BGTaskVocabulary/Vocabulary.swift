// The words bgtaskd speaks, from the policy core to the wire: states, event kinds, behaviours, reasons, bands, and
// the kinds, constraints and states of scheduled requests.
//
// One definition each, shared by the policy core (BGTaskCore) and the interface (BGTaskProtocol): a raw value is
// the word on the wire, in the journal and in the history, so adding a case here is the one change, and every
// `switch` over it (none has a `default`) shows what else must learn of it. Standard library only.

/// Where an app is in its lifecycle (`App.state`; the state diagram is in docs/ARCHITECTURE.md).
public enum AppState: String, Codable, CaseIterable, Sendable {
    /// Known but without a running registration: launched and not yet registered, or its event stream closed
    /// while its process lives on. Holds no leases; never stopped or frozen.
    case notRunning
    /// Registered and in the foreground but not receiving input (a transition, a system alert). Unlimited
    /// time; leases may be held and carry into the background.
    case inactive
    /// Registered and in the foreground receiving input. Unlimited time.
    case active
    /// Running in the background: its shared budget is counting down; it is suspended as soon as it holds no
    /// lease and has acknowledged its last `didEnterBackground` (or wake-up) event.
    case background
    /// Frozen (or stopped). Holds no lease; events posted to it are queued per the poster's behaviour. Its
    /// budget keeps counting down.
    case suspended
    /// Ended, with a recorded reason. Holds no lease. Its process may still be finishing its
    /// `willTerminate` grace, after which it is killed. It stays visible with its exit reason until its name
    /// registers again or the history size pushes it out.
    case terminated

    /// Whether the app is in the foreground (active or inactive): no budget applies.
    public var isForeground: Bool { self == .active || self == .inactive }

    /// Whether the app's process is running app code (not frozen, not ended).
    public var isRunning: Bool { isForeground || self == .background }
}

/// The kind of an event sent on an app's event stream (`Event.kind`).
public enum EventKind: String, Codable, CaseIterable, Sendable {
    /// Leaving `active` for `inactive` (`applicationWillResignActive`).
    case willResignActive
    /// Entering `active` from `inactive` (`applicationDidBecomeActive`).
    case didBecomeActive
    /// Entered background; must be acknowledged within `EnterBackgroundGraceSec` unless a lease is held
    /// (`applicationDidEnterBackground`).
    case didEnterBackground
    /// About to return to the foreground (after being resumed, if it was suspended).
    case willEnterForeground
    /// The shared background budget ends in `ExpirationWarningSec`; lists every open task, whose expiration
    /// handlers must run now.
    case backgroundTaskExpiring
    /// Memory is short; `likelyVictim` and `rank` say whether this app would be reclaimed first.
    case memoryWarning
    /// The daemon is terminating the app; SIGKILL follows after `WillTerminateGraceSec`
    /// (`applicationWillTerminate`).
    case willTerminate
    /// A notification posted by a controller (`Post`); `name`, `payload` and `count` describe it.
    case notification
    /// A scheduled request is runnable and its task began: `name` is the request's identifier and `taskIds` holds
    /// the task's id, which the app completes (`setTaskCompleted`) or ends; its expiration warning comes as
    /// `backgroundTaskExpiring` like any task's.
    case runScheduledTask
}

/// The two kinds of scheduled request, as iOS has them; each kind's time is a policy setting.
public enum ScheduledTaskKind: String, Codable, CaseIterable, Sendable {
    /// Short work, such as fetching new content (`BGAppRefreshTaskRequest`; `RefreshTaskSec`).
    case refresh
    /// Longer work, such as a backup or an index (`BGProcessingTaskRequest`; `ProcessingTaskSec`).
    case processing
}

/// A condition a scheduled request can require before it runs, by its name on the wire and on the command line.
public enum Constraint: String, CaseIterable, Codable, Sendable, Comparable {
    /// On external power: an AC adapter or another supply is online (UPower's `OnBattery` false).
    case externalPower = "ac"
    /// The battery is not low, or there is no battery.
    case batteryNotLow = "battery"
    /// Online: a default route through an interface that is up.
    case network
    /// Online through a connection that is not metered (NetworkManager's `Metered`).
    case unmeteredNetwork = "unmetered"
    /// The user is idle (logind's `IdleHint`).
    case idle

    /// The order of declaration, which is the order constraints are listed in everywhere.
    public static func < (lhs: Constraint, rhs: Constraint) -> Bool {
        // Both are cases, so `allCases` holds both: the unwraps cannot fail.
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// Where a scheduled request stands (`Request.state`).
public enum RequestState: String, Codable, CaseIterable, Sendable {
    /// Waiting for its time, its constraints, a free slot, its daily budget or its app.
    case pending
    /// Its app is being launched to run it.
    case launching
    /// Its task runs, a lease of its app.
    case running
}

/// What happens to a notification posted to a suspended app (`Post.behavior`).
public enum DeliveryBehavior: String, Codable, CaseIterable, Sendable {
    /// Discard it.
    case drop
    /// Keep one pending entry per event name with the latest payload and a count of merged posts (the default);
    /// distinct names are bounded by `QueuedEventsPerAppMax` (oldest dropped first).
    case coalesce
    /// Keep every post, bounded by `QueuedEventsPerAppMax` (oldest dropped first).
    case hold
    /// Resume the app into background to deliver it; it has `EnterBackgroundGraceSec` to acknowledge.
    case wake

    /// The behaviour when a post names none.
    public static let `default` = DeliveryBehavior.coalesce
}

/// Why an app ended (`App.exitReason`, `HistoryEntry.reason`, the journal's `BGTASK_REASON=`).
public enum TerminationReason: String, Codable, CaseIterable, Sendable {
    /// `didEnterBackground` was not acknowledged in time and no lease was held.
    case enterBackgroundTimeout = "enter-background-timeout"
    /// The background budget ran out with leases still open.
    case taskExpired = "task-expired"
    /// A managed app did not register within `LaunchTimeoutSec`.
    case launchTimeout = "launch-timeout"
    /// It kept a file lock past `LockedSuspendGraceSec` when it should have been suspended.
    case suspendedHoldingLock = "suspended-holding-lock"
    /// Terminated to free memory.
    case memoryReclaim = "memory-reclaim"
    /// A controller asked (`Terminate`).
    case controller
    /// An `ExitsOnSuspend=yes` app reached the point where it would have been suspended. (A reason of its
    /// own: folding it into `exited` would hide that the daemon ended the app.)
    case exitsOnSuspend = "exits-on-suspend"
    /// The app's process ended on its own, or its registration closed and then its process ended.
    case exited
    /// The app's process died from a signal or a failing exit status the daemon did not cause.
    case crashed

    /// Whether the daemon chose to end the app (as opposed to the app ending by itself).
    public var isDaemonInitiated: Bool {
        switch self {
        case .enterBackgroundTimeout, .taskExpired, .launchTimeout, .suspendedHoldingLock, .memoryReclaim,
            .controller, .exitsOnSuspend:
            true
        case .exited, .crashed:
            false
        }
    }
}

/// How a task (lease) ended; every task ends exactly once, in one of these ways (`HistoryEntry.taskEnd`).
public enum TaskEndCause: String, Codable, CaseIterable, Sendable {
    /// `EndBackgroundTask` was called.
    case ended
    /// The budget ran out while it was open (the app was terminated `task-expired`).
    case expired
    /// The app ended (terminated, exited, crashed, or its registration closed) while it was open.
    case appEnded = "app-ended"
    /// A scheduled task whose constraints stopped holding was not ended within `ExpirationWarningSec` of its
    /// warning; its request waits for the conditions again.
    case constraintsLost = "constraints-lost"
}

/// The reclamation bands, in the order they are reclaimed (`HistoryEntry.band`).
public enum ReclamationBand: String, Codable, CaseIterable, Sendable, Comparable, CustomStringConvertible {
    /// Suspended apps: cheapest to lose, and removed with no notice.
    case suspended
    /// Running in background with no lease: nothing in flight.
    case backgroundIdle
    /// Running in background with leases open: work in flight is lost.
    case backgroundWithTasks
    /// Active or inactive; only with `ReclaimForeground=yes`.
    case foreground

    /// The band's place in the reclamation order, from 0 (reclaimed first).
    public var order: Int {
        switch self {
        case .suspended: 0
        case .backgroundIdle: 1
        case .backgroundWithTasks: 2
        case .foreground: 3
        }
    }

    /// The wire and journal spelling.
    public var name: String { rawValue }

    public var description: String { rawValue }

    public static func < (lhs: ReclamationBand, rhs: ReclamationBand) -> Bool { lhs.order < rhs.order }
}

/// What an audit entry reports (`HistoryEntry.kind`).
public enum AuditKind: String, Codable, CaseIterable, Sendable {
    /// An app registered (or was launched, for a managed app: its state is then `notRunning`).
    case registered
    /// An app's own process registered again (a reconnect, or a daemon restart that kept it).
    case reattached
    /// An app changed state; `state` is the new state.
    case stateChanged
    /// A lease began; `taskId` and `taskName` say which.
    case taskBegan
    /// A lease ended; `taskId`, `taskName` and `taskEnd` say which and how.
    case taskEnded
    /// `backgroundTaskExpiring` was sent; `taskIds` lists the tasks.
    case expirationWarning
    /// Suspension was put off because the app holds a file lock.
    case suspensionDeferred
    /// The app will not be suspended, though its work is done; `trigger` says why (its unit is stopping, or its
    /// unit has a watchdog a suspended process could not ping).
    case suspensionExempted
    /// A memory warning was sent; `rank` is set for likely victims.
    case memoryWarning
    /// The policy ended the app (or saw it end); `reason` says why.
    case terminated
    /// The app's processes were sent SIGKILL; `reason` says why.
    case killed
    /// The app's process is gone; `reason` is its final exit reason.
    case processExited
    /// An app's registration closed while its process may live on; it no longer holds its name.
    case unregistered
    /// A suspended app's event queue was full (`QueuedEventsPerAppMax`): its oldest events are being dropped.
    /// Recorded once per suspension; the app's `droppedEvents` counts every drop.
    case eventsDropped
    /// The daemon cancelled a held scheduled request that no longer fits the configuration (its name is now pinned
    /// to another user than its owner by `User=`): `identifier` and `uid` say which request and whose, `trigger`
    /// why. A running one's task was warned and ended first, as a cancel by its owner does. About the request, not
    /// a registration: it is recorded whether or not its app runs.
    case requestCancelled
}
