// The types of `io.bgtask.Lifecycle` (`Task`, `App`, `Event`, `HistoryEntry`) and the words their strings take.
//
// Replies encode every optional field, as an explicit `null` when absent, so a consumer sees every field the
// interface declares; decoding accepts a missing field as null too.

/// An app's lifecycle state (`App.state`), as DESIGN §1 defines them.
public enum AppState: String, Codable, CaseIterable, Sendable {
    /// Launched by the daemon, its process has not registered yet.
    case notRunning
    /// In the foreground but not receiving input (between active and background).
    case inactive
    /// In the foreground and receiving input; background time is unlimited.
    case active
    /// Running in background, spending its background time budget.
    case background
    /// Frozen or stopped by the daemon; events for it are queued.
    case suspended
    /// Ended; the app stays visible with its exit reason until its name registers again.
    case terminated
}

/// What an event tells an app (`Event.kind`).
public enum EventKind: String, Codable, CaseIterable, Sendable {
    /// Leaving active for inactive (`applicationWillResignActive`).
    case willResignActive
    /// Became active (`applicationDidBecomeActive`).
    case didBecomeActive
    /// Entered background; acknowledge within the grace period (`applicationDidEnterBackground`).
    case didEnterBackground
    /// About to return to the foreground, after a resume if the app was suspended.
    case willEnterForeground
    /// The background time is about to run out; `taskIds` lists the tasks whose expiration handlers must run.
    case backgroundTaskExpiring
    /// Memory is short; `likelyVictim` and `rank` say how close the app is to being reclaimed.
    case memoryWarning
    /// The app is being terminated and has a grace period before SIGKILL (`applicationWillTerminate`).
    case willTerminate
    /// A notification posted with `Post`; `name`, `payload` and `count` describe it.
    case notification
}

/// Why an app ended (`App.exitReason`, `HistoryEntry.reason`), as DESIGN §1 lists them.
public enum ExitReason: String, Codable, CaseIterable, Sendable {
    /// `didEnterBackground` went unacknowledged for the grace period with no lease held.
    case enterBackgroundTimeout = "enter-background-timeout"
    /// The background time ran out with tasks still open.
    case taskExpired = "task-expired"
    /// A launched app did not register in time.
    case launchTimeout = "launch-timeout"
    /// The app kept a file lock past the grace period instead of letting itself be suspended.
    case suspendedHoldingLock = "suspended-holding-lock"
    /// Killed to reclaim memory.
    case memoryReclaim = "memory-reclaim"
    /// A controller called `Terminate`.
    case controller
    /// An `ExitsOnSuspend` app reached the point where it would have been suspended.
    case exitsOnSuspend = "exits-on-suspend"
    /// The app exited by itself, or its registration ended and its process is gone.
    case exited
    /// The app died of a signal the daemon did not send.
    case crashed
}

/// What `Post` does for a suspended app (`behavior`).
public enum PostBehavior: String, Codable, CaseIterable, Sendable {
    /// Discard the event.
    case drop
    /// Keep one pending event per name with the latest payload and a count of posts (the default).
    case coalesce
    /// Keep every event, up to a bound, dropping the oldest past it.
    case hold
    /// Wake the app into background to deliver the event.
    case wake

    /// The behaviour when a post names none.
    public static let `default` = PostBehavior.coalesce
}

/// What a history entry records (`HistoryEntry.kind`).
public enum HistoryKind: String, Codable, CaseIterable, Sendable {
    /// An app registered.
    case registered
    /// An app's own process registered again (a reconnect, or a daemon restart that kept it).
    case reattached
    /// The daemon started a managed app.
    case launched
    /// An app changed state; `state` is the new one.
    case stateChanged
    /// A lease began; `taskId`, `taskName`.
    case taskBegan
    /// A lease ended; `taskId`, `taskName`, `taskEnd`.
    case taskEnded
    /// `backgroundTaskExpiring` was sent; `taskIds`.
    case expirationWarning
    /// Suspension was put off because the app holds a file lock.
    case suspensionDeferred
    /// A memory warning was sent; `rank` for a likely victim.
    case memoryWarning
    /// The app ended; `reason` says why.
    case terminated
    /// SIGKILL was sent; `reason` says why.
    case killed
    /// The app's process is gone; `reason` is its final exit reason.
    case processExited
    /// The app's event stream closed while its process lives on.
    case unregistered
    /// A suspended app's event queue was full: its oldest events are being dropped (once per suspension).
    case eventsDropped
}

/// How a lease ended (`HistoryEntry.taskEnd`).
public enum TaskEnd: String, Codable, CaseIterable, Sendable {
    /// `EndBackgroundTask` was called.
    case ended
    /// The budget ran out while it was open.
    case expired
    /// Its app ended while it was open.
    case appEnded = "app-ended"
}

/// The reclamation band an app was chosen from (`HistoryEntry.band`), in the order DESIGN §4 reclaims them.
public enum ReclaimBand: String, Codable, CaseIterable, Sendable {
    /// Suspended apps go first.
    case suspended
    /// Then apps in background without a lease.
    case backgroundIdle
    /// Then apps in background holding leases.
    case backgroundWithTasks
    /// Foreground apps, only with `ReclaimForeground=yes`.
    case foreground
}

/// An open background-task lease (`Task` in the interface).
public struct TaskInfo: Codable, Hashable, Sendable {
    /// The task id: positive, never reused while the daemon runs.
    public var id: Int
    /// The name given when the task began; empty when none was given.
    public var name: String
    /// Seconds since the lease began.
    public var ageSec: Double

    /// A lease description.
    public init(id: Int, name: String, ageSec: Double) {
        self.id = id
        self.name = name
        self.ageSec = ageSec
    }
}

/// An app known to the daemon (`App` in the interface).
public struct AppInfo: Codable, Hashable, Sendable {
    /// The app's name, unique among live apps.
    public var name: String
    /// The lifecycle state.
    public var state: AppState
    /// The main process's id; kept after termination.
    public var pid: Int
    /// The user id the app runs as.
    public var uid: Int
    /// Whether the daemon launched the app and runs it in its own cgroup.
    public var managed: Bool
    /// The open leases, oldest first.
    public var tasks: [TaskInfo]
    /// Seconds of background time left; nil in the foreground (unlimited) and once terminated.
    public var backgroundTimeRemaining: Double?
    /// Memory charged to the app in bytes; nil when it could not be measured.
    public var memoryBytes: Int?
    /// Why the app ended; nil while it has not.
    public var exitReason: ExitReason?
    /// Events queued while the app is suspended.
    public var queuedEvents: Int
    /// Queued events dropped because the app's queue was full (`QueuedEventsPerAppMax`).
    public var droppedEvents: Int

    /// An app description; optional fields default to nil.
    public init(
        name: String, state: AppState, pid: Int, uid: Int, managed: Bool, tasks: [TaskInfo] = [],
        backgroundTimeRemaining: Double? = nil, memoryBytes: Int? = nil, exitReason: ExitReason? = nil,
        queuedEvents: Int = 0, droppedEvents: Int = 0
    ) {
        self.name = name
        self.state = state
        self.pid = pid
        self.uid = uid
        self.managed = managed
        self.tasks = tasks
        self.backgroundTimeRemaining = backgroundTimeRemaining
        self.memoryBytes = memoryBytes
        self.exitReason = exitReason
        self.queuedEvents = queuedEvents
        self.droppedEvents = droppedEvents
    }

    enum CodingKeys: String, CodingKey {
        case name, state, pid, uid, managed, tasks, backgroundTimeRemaining, memoryBytes, exitReason, queuedEvents,
            droppedEvents
    }

    /// Decodes an app; `droppedEvents`, added after the first release, reads as 0 when a daemon omits it.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        state = try container.decode(AppState.self, forKey: .state)
        pid = try container.decode(Int.self, forKey: .pid)
        uid = try container.decode(Int.self, forKey: .uid)
        managed = try container.decode(Bool.self, forKey: .managed)
        tasks = try container.decode([TaskInfo].self, forKey: .tasks)
        backgroundTimeRemaining = try container.decodeIfPresent(Double.self, forKey: .backgroundTimeRemaining)
        memoryBytes = try container.decodeIfPresent(Int.self, forKey: .memoryBytes)
        exitReason = try container.decodeIfPresent(ExitReason.self, forKey: .exitReason)
        queuedEvents = try container.decode(Int.self, forKey: .queuedEvents)
        droppedEvents = try container.decodeIfPresent(Int.self, forKey: .droppedEvents) ?? 0
    }

    /// Encodes every field, nil ones as explicit `null`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(name, forKey: .name)
        try container.encode(state, forKey: .state)
        try container.encode(pid, forKey: .pid)
        try container.encode(uid, forKey: .uid)
        try container.encode(managed, forKey: .managed)
        try container.encode(tasks, forKey: .tasks)
        try container.encode(backgroundTimeRemaining, forKey: .backgroundTimeRemaining)
        try container.encode(memoryBytes, forKey: .memoryBytes)
        try container.encode(exitReason, forKey: .exitReason)
        try container.encode(queuedEvents, forKey: .queuedEvents)
        try container.encode(droppedEvents, forKey: .droppedEvents)
    }
}

/// A lifecycle event for an app (`Event` in the interface).
public struct EventInfo: Codable, Hashable, Sendable {
    /// The event id, for `Acknowledge`.
    public var id: Int
    /// What happened.
    public var kind: EventKind
    /// For `backgroundTaskExpiring`: every open task id.
    public var taskIds: [Int]?
    /// For `notification`: the posted name.
    public var name: String?
    /// For `notification`: the posted payload, the latest when coalesced.
    public var payload: [String: JSONValue]?
    /// For `notification`: how many posts the event stands for.
    public var count: Int?
    /// For `memoryWarning`: whether the app is among the likeliest to be reclaimed.
    public var likelyVictim: Bool?
    /// For `memoryWarning` of a likely victim: its place in the reclamation order, 1 first.
    public var rank: Int?

    /// An event; the fields that do not apply to `kind` default to nil.
    public init(
        id: Int, kind: EventKind, taskIds: [Int]? = nil, name: String? = nil, payload: [String: JSONValue]? = nil,
        count: Int? = nil, likelyVictim: Bool? = nil, rank: Int? = nil
    ) {
        self.id = id
        self.kind = kind
        self.taskIds = taskIds
        self.name = name
        self.payload = payload
        self.count = count
        self.likelyVictim = likelyVictim
        self.rank = rank
    }

    enum CodingKeys: String, CodingKey {
        case id, kind, taskIds, name, payload, count, likelyVictim, rank
    }

    /// Encodes every field, nil ones as explicit `null`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(kind, forKey: .kind)
        try container.encode(taskIds, forKey: .taskIds)
        try container.encode(name, forKey: .name)
        try container.encode(payload, forKey: .payload)
        try container.encode(count, forKey: .count)
        try container.encode(likelyVictim, forKey: .likelyVictim)
        try container.encode(rank, forKey: .rank)
    }
}

/// One entry of the daemon's history (`HistoryEntry` in the interface).
public struct HistoryEntry: Codable, Hashable, Sendable {
    /// When it happened, in seconds since the Unix epoch (wall clock, for display).
    public var time: Double
    /// The app's name.
    public var app: String
    /// What happened.
    public var kind: HistoryKind
    /// For `terminated`: why.
    public var reason: ExitReason?
    /// For a memory reclaim: the band the app was chosen from.
    public var band: ReclaimBand?
    /// For a memory reclaim: the app's memory in bytes when chosen.
    public var memoryBytes: Int?
    /// For a memory reclaim: milliseconds from the pressure trigger to the kill.
    public var latencyMs: Double?
    /// For `stateChanged`: the new state.
    public var state: AppState?
    /// For `taskBegan` and `taskEnded`: the task id.
    public var taskId: Int?
    /// For `taskBegan` and `taskEnded`: the task's name, empty when none was given.
    public var taskName: String?
    /// For `taskEnded`: how the task ended.
    public var taskEnd: TaskEnd?
    /// For `expirationWarning`: the tasks the warning listed.
    public var taskIds: [Int]?
    /// For `memoryWarning` to a likely victim: its rank in the reclamation order.
    public var rank: Int?

    /// A history entry; the fields that do not apply to `kind` default to nil.
    public init(
        time: Double, app: String, kind: HistoryKind, reason: ExitReason? = nil, band: ReclaimBand? = nil,
        memoryBytes: Int? = nil, latencyMs: Double? = nil, state: AppState? = nil, taskId: Int? = nil,
        taskName: String? = nil, taskEnd: TaskEnd? = nil, taskIds: [Int]? = nil, rank: Int? = nil
    ) {
        self.time = time
        self.app = app
        self.kind = kind
        self.reason = reason
        self.band = band
        self.memoryBytes = memoryBytes
        self.latencyMs = latencyMs
        self.state = state
        self.taskId = taskId
        self.taskName = taskName
        self.taskEnd = taskEnd
        self.taskIds = taskIds
        self.rank = rank
    }

    enum CodingKeys: String, CodingKey {
        case time, app, kind, reason, band, memoryBytes, latencyMs, state, taskId, taskName, taskEnd, taskIds, rank
    }

    /// Encodes every field, nil ones as explicit `null`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(time, forKey: .time)
        try container.encode(app, forKey: .app)
        try container.encode(kind, forKey: .kind)
        try container.encode(reason, forKey: .reason)
        try container.encode(band, forKey: .band)
        try container.encode(memoryBytes, forKey: .memoryBytes)
        try container.encode(latencyMs, forKey: .latencyMs)
        try container.encode(state, forKey: .state)
        try container.encode(taskId, forKey: .taskId)
        try container.encode(taskName, forKey: .taskName)
        try container.encode(taskEnd, forKey: .taskEnd)
        try container.encode(taskIds, forKey: .taskIds)
        try container.encode(rank, forKey: .rank)
    }
}
