// The tunable numbers of the lifecycle policy, with their defaults and where each comes from.

/// The per-app policy: the `[Policy]` section of `bgtaskd.conf`, overridable per app in `apps.d/NAME.conf`.
///
/// A registration resolves its policy once, when it registers; a reload affects registrations made after it.
public struct AppPolicy: Hashable, Sendable, Codable {
    /// `BackgroundTimeSec`: the background time budget shared by all of an app's leases, counted from
    /// entering background and reset on return to the foreground. 600 s is the original iOS
    /// (iOS 4–6) `backgroundTimeRemaining` allowance; modern iOS grants about 30 s.
    public var backgroundTime: Duration = .seconds(600)

    /// `ExpirationWarningSec`: how long before the budget ends the app gets `backgroundTaskExpiring`.
    /// iOS calls expiration handlers "shortly before" the end; 5 s leaves room for a save to disk.
    public var expirationWarning: Duration = .seconds(5)

    /// `EnterBackgroundGraceSec`: the time to acknowledge `didEnterBackground` (or a wake-up event).
    /// iOS gives `applicationDidEnterBackground(_:)` "approximately five seconds".
    public var enterBackgroundGrace: Duration = .seconds(5)

    /// `WillTerminateGraceSec`: from `willTerminate` to SIGKILL. iOS also allows about 5 s for
    /// `applicationWillTerminate(_:)`; systemd's stop timeout is longer because services flush more.
    public var willTerminateGrace: Duration = .seconds(5)

    /// `LaunchTimeoutSec`: a managed app must register this soon after launch. 5 s is far above a
    /// healthy start (tens of ms) yet short enough that a hung launch does not hold memory for long.
    public var launchTimeout: Duration = .seconds(5)

    /// `LockedSuspendGraceSec`: how long an app holding a file lock may keep it before it is
    /// terminated instead of frozen. 2 s: a lock held across a suspension is a bug; iOS kills at once
    /// (`0xdead10cc`), we allow a short window for a write in flight to finish.
    public var lockedSuspendGrace: Duration = .seconds(2)

    /// `BackgroundBudgetPerDaySec`: cap on time spent running in background over a rolling 24 h;
    /// zero turns it off, the default: the daily cap is for operators who want one.
    public var backgroundBudgetPerDay: Duration = .zero

    /// `ExitsOnSuspend`: terminate (with `willTerminate`) instead of suspending, like iOS's
    /// `UIApplicationExitsOnSuspend`. Off by default, as on iOS.
    public var exitsOnSuspend: Bool = false

    /// The shipped defaults, as bgtaskd(8) lists them.
    public init() {}
}

/// Daemon-wide limits and switches the core needs. The rest of the configuration (sockets, memory
/// thresholds, access) belongs to the shell.
public struct CorePolicy: Hashable, Sendable {
    /// Policy for apps without an override.
    public var defaultAppPolicy = AppPolicy()

    /// Per-app overrides by app name (`apps.d/NAME.conf`), already merged over the defaults.
    public var appPolicies: [String: AppPolicy] = [:]

    /// `TasksPerAppMax`: open leases per app, past which `BeginBackgroundTask` fails with `LimitExceeded`. 64:
    /// a real app rarely holds more than a handful, so hitting it means a leak.
    public var tasksPerAppMax: Int = 64

    /// `QueuedEventsPerAppMax`: events kept for one suspended app, every behaviour together (one entry per
    /// distinct coalesced name, one per held post); the oldest are dropped past it, and counted. 64 covers a
    /// burst of distinct notifications while bounding what a poster can make the daemon hold per app (with
    /// `PostPayloadSizeMax` of 4 KiB, 256 KiB at most).
    public var queuedEventsPerAppMax: Int = 64

    /// `AppsPerUserMax`: live registrations per uid, root included. 128 is half of `ConnectionsPerUserMax`'s
    /// default (each app holds two connections); it bounds the leases, queues and process handles one user can
    /// make the daemon keep. Re-attaching an existing registration does not count as a new one.
    public var appsPerUserMax: Int = 128

    /// `HistorySize`: audit entries kept, and also how many ended apps stay visible to `GetApp`; as many
    /// registrations closed while their processes live on are remembered (the oldest are forgotten first).
    public var historySize: Int = 1000

    /// `ReclaimForeground`: whether memory reclamation may choose active or inactive apps as a last
    /// band. Off by default: killing what the user is looking at is worse than the OOM killer.
    public var reclaimForeground: Bool = false

    /// `ScheduledRequestsPerAppMax`: scheduled requests one app name may hold. 64, like `TasksPerAppMax`: an app
    /// has a handful of kinds of deferred work, so reaching it means a leak.
    public var scheduledRequestsPerAppMax: Int = 64

    /// `ScheduledRequestsPerUserMax`: scheduled requests one uid may own, root included. 256: four apps' worth at
    /// `ScheduledRequestsPerAppMax`, so one user cycling through app names cannot take `ScheduledRequestsMax` from
    /// the others.
    public var scheduledRequestsPerUserMax: Int = 256

    /// `ScheduledRequestsMax`: scheduled requests held host-wide. 4096 bounds what every peer together can make
    /// the daemon keep (and save) to a few hundred KiB, and keeps each re-plan of the requests cheap.
    public var scheduledRequestsMax: Int = 4096

    /// `ScheduledTasksMax`: scheduled tasks running (or launching to run) at once, host-wide. 2: deferred work
    /// runs beside the user's, and Android's JobScheduler likewise runs few jobs at once on a small device.
    public var scheduledTasksMax: Int = 2

    /// `ScheduledTimePerDaySec`: the scheduled time one app name may use over a rolling 24 h; zero turns it off.
    /// 30 min: three full processing tasks a day, about what iOS grants an app used daily.
    public var scheduledTimePerDay: Duration = .seconds(30 * 60)

    /// `RefreshTaskSec`: the time a `refresh` task gets. 30 s, as iOS gives a `BGAppRefreshTask`.
    public var refreshTaskTime: Duration = .seconds(30)

    /// `ProcessingTaskSec`: the time a `processing` task gets. 10 min: iOS gives a `BGProcessingTask` "several
    /// minutes"; Android's JobScheduler stops a job after 10.
    public var processingTaskTime: Duration = .seconds(10 * 60)

    /// The shipped defaults, as bgtaskd(8) lists them.
    public init() {}

    /// The time a scheduled task of `kind` gets.
    public func scheduledTaskTime(for kind: ScheduledTaskKind) -> Duration {
        switch kind {
        case .refresh: refreshTaskTime
        case .processing: processingTaskTime
        }
    }

    /// The policy that applies to the app registering under `name`.
    public func appPolicy(for name: String) -> AppPolicy {
        appPolicies[name] ?? defaultAppPolicy
    }
}
