// The words of the lifecycle: app states, event kinds, delivery behaviours and termination reasons.

/// Where an app is in its lifecycle (DESIGN §1). The raw values are the wire spelling.
public enum AppState: String, Sendable, CaseIterable {
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
    /// `willTerminate` grace, after which it is killed.
    case terminated

    /// Whether the app is in the foreground (active or inactive): no budget applies.
    public var isForeground: Bool { self == .active || self == .inactive }

    /// Whether the app's process is running app code (not frozen, not ended).
    public var isRunning: Bool { isForeground || self == .background }
}

/// The kind of an event sent on an app's event stream (DESIGN §6).
public enum EventKind: String, Sendable, CaseIterable {
    /// Leaving `active` for `inactive`.
    case willResignActive
    /// Entering `active` from `inactive`.
    case didBecomeActive
    /// Entered background; must be acknowledged within `EnterBackgroundGraceSec` unless a lease is held.
    case didEnterBackground
    /// About to return to the foreground (after being resumed, if it was suspended).
    case willEnterForeground
    /// The shared background budget ends in `ExpirationWarningSec`; lists every open task.
    case backgroundTaskExpiring
    /// Memory is short; `likelyVictim` and `rank` say whether this app would be reclaimed first.
    case memoryWarning
    /// The daemon is terminating the app; SIGKILL follows after `WillTerminateGraceSec`.
    case willTerminate
    /// A notification posted by a controller (`Post`).
    case notification
}

/// What happens to a notification posted to a suspended app (DESIGN §1).
public enum DeliveryBehavior: String, Sendable, CaseIterable {
    /// Discard it.
    case drop
    /// Keep one pending entry per event name with the latest payload and a count of merged posts (default);
    /// distinct names are bounded by `queuedEventsPerAppMax` (oldest dropped first).
    case coalesce
    /// Keep every post, bounded by `queuedEventsPerAppMax` (oldest dropped first).
    case hold
    /// Resume the app into background to deliver it; it has `EnterBackgroundGraceSec` to acknowledge.
    case wake
}

/// Why an app ended (DESIGN §1). The raw values are the wire and journal spelling.
public enum TerminationReason: String, Sendable, CaseIterable {
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
    /// An `ExitsOnSuspend=yes` app reached the point where it would have been suspended. (Added to DESIGN's
    /// list: folding it into `exited` would hide that the daemon ended the app.)
    case exitsOnSuspend = "exits-on-suspend"
    /// The app's process ended on its own, or its registration closed and then its process ended.
    case exited
    /// The app's process died from a signal or a failing exit status the daemon did not cause.
    case crashed

    /// Whether the daemon chose to end the app (as opposed to the app ending by itself).
    public var isDaemonInitiated: Bool {
        switch self {
        case .exited, .crashed: false
        default: true
        }
    }
}

/// How a task (lease) ended; every task ends exactly once, in one of these ways.
public enum TaskEndCause: String, Sendable, CaseIterable {
    /// `EndBackgroundTask` was called.
    case ended
    /// The budget ran out while it was open (the app was terminated `task-expired`).
    case expired
    /// The app ended (terminated, exited, crashed, or its registration closed) while it was open.
    case appEnded = "app-ended"
}

/// How a process that the daemon tracked went away, as seen by the shell.
public enum ProcessEnd: Sendable, Equatable {
    /// Exited normally, or gone with no status available (an app the daemon did not start).
    case exited
    /// Killed by a signal or exited with a failure status, not at the daemon's request.
    case crashed
}

/// The reclamation bands of DESIGN §4, in the order they are reclaimed.
public enum ReclamationBand: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// Suspended apps: cheapest to lose, and removed with no notice.
    case suspended
    /// Running in background with no lease: nothing in flight.
    case backgroundIdle
    /// Running in background with leases open: work in flight is lost.
    case backgroundWithTasks
    /// Active or inactive; only with `ReclaimForeground=yes`.
    case foreground

    /// The wire and journal spelling.
    public var name: String {
        switch self {
        case .suspended: "suspended"
        case .backgroundIdle: "backgroundIdle"
        case .backgroundWithTasks: "backgroundWithTasks"
        case .foreground: "foreground"
        }
    }

    public var description: String { name }

    public static func < (lhs: ReclamationBand, rhs: ReclamationBand) -> Bool { lhs.rawValue < rhs.rawValue }
}
