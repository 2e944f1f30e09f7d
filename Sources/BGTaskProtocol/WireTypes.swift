// The types of `io.bgtask.Lifecycle` (`Task`, `App`, `Event`, `HistoryEntry`) and the words their strings take.
//
// Plain Codable structs: the codec's writer (`JSONTextEncoder`) puts every optional field in a reply, as `null` when
// absent, so a consumer sees every field the interface declares; decoding accepts a missing optional as null.

// The words (states, kinds, reasons, behaviours, bands) are BGTaskVocabulary's, shared with the policy core and
// re-exported here so that every user of the interface has them.
import BGTaskJSON
@_exported import BGTaskVocabulary

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
    public var exitReason: TerminationReason?
    /// Events queued while the app is suspended.
    public var queuedEvents: Int
    /// Queued events dropped because the app's queue was full (`QueuedEventsPerAppMax`).
    public var droppedEvents: Int
    /// How the daemon suspended the app the last time it did; nil until it first did.
    public var suspendedWith: SuspensionMethod?
    /// The cgroup the daemon handles the app through (freezes, measures and kills it with): the launched app's
    /// own, or the cgroup of its own a self-registered app was found in; nil when it uses signals and PSS.
    public var cgroup: String?
    /// How the app's memory is measured: `cgroup2` (`memory.current`), `cgroup1` (`memory.usage_in_bytes`) or
    /// `pss` (PSS summed over its processes); nil once it ended.
    public var memoryBackend: String?
    /// The status its process exited with, when the daemon launched it and it exited by itself; nil otherwise.
    public var exitStatus: Int?
    /// The signal that ended its process (`SIGSEGV`, `SIGKILL`, ...), when the daemon launched it; nil otherwise.
    public var exitSignal: String?
    /// The systemd unit it runs as, when the daemon launched it through the service manager; nil otherwise.
    public var unit: String?

    /// An app description; optional fields default to nil.
    public init(
        name: String, state: AppState, pid: Int, uid: Int, managed: Bool, tasks: [TaskInfo] = [],
        backgroundTimeRemaining: Double? = nil, memoryBytes: Int? = nil, exitReason: TerminationReason? = nil,
        queuedEvents: Int = 0, droppedEvents: Int = 0, suspendedWith: SuspensionMethod? = nil, cgroup: String? = nil,
        memoryBackend: String? = nil, exitStatus: Int? = nil, exitSignal: String? = nil, unit: String? = nil
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
        self.suspendedWith = suspendedWith
        self.cgroup = cgroup
        self.memoryBackend = memoryBackend
        self.exitStatus = exitStatus
        self.exitSignal = exitSignal
        self.unit = unit
    }
}

/// How the daemon suspends an app (`App.suspendedWith`).
public enum SuspensionMethod: String, Codable, Hashable, Sendable, CaseIterable {
    /// Frozen by the service manager through the unit it runs as (`FreezeUnit`).
    case unit
    /// Frozen through a cgroup2 cgroup of its own (`cgroup.freeze`).
    case cgroup2
    /// Frozen through a v1 freezer cgroup of its own (`freezer.state`).
    case cgroup1
    /// SIGSTOP to the process group it leads.
    case group
    /// SIGSTOP to its process alone.
    case process
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

}

/// One entry of the daemon's history (`HistoryEntry` in the interface).
public struct HistoryEntry: Codable, Hashable, Sendable {
    /// When it happened, in seconds since the Unix epoch (wall clock, for display).
    public var time: Double
    /// The app's name.
    public var app: String
    /// What happened.
    public var kind: AuditKind
    /// For `terminated`: why.
    public var reason: TerminationReason?
    /// For a memory reclaim: the band the app was chosen from.
    public var band: ReclamationBand?
    /// For a memory reclaim: the app's memory in bytes when chosen.
    public var memoryBytes: Int?
    /// For a memory reclaim: milliseconds from the pressure trigger to the kill; for `processExited` of an app the
    /// daemon killed: milliseconds from the kill to the exit (its memory freed).
    public var latencyMs: Double?
    /// For a memory reclaim: the reading that triggered it.
    public var trigger: String?
    /// For `stateChanged`: the new state.
    public var state: AppState?
    /// For `taskBegan` and `taskEnded`: the task id.
    public var taskId: Int?
    /// For `taskBegan` and `taskEnded`: the task's name, empty when none was given.
    public var taskName: String?
    /// For `taskEnded`: how the task ended.
    public var taskEnd: TaskEndCause?
    /// For `expirationWarning`: the tasks the warning listed.
    public var taskIds: [Int]?
    /// For `memoryWarning` to a likely victim: its rank in the reclamation order.
    public var rank: Int?

    /// A history entry; the fields that do not apply to `kind` default to nil.
    public init(
        time: Double, app: String, kind: AuditKind, reason: TerminationReason? = nil, band: ReclamationBand? = nil,
        memoryBytes: Int? = nil, latencyMs: Double? = nil, state: AppState? = nil, taskId: Int? = nil,
        taskName: String? = nil, taskEnd: TaskEndCause? = nil, taskIds: [Int]? = nil, rank: Int? = nil,
        trigger: String? = nil
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
        self.trigger = trigger
    }

}
