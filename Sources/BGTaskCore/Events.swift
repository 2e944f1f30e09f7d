// Events sent to apps, actions for the shell to carry out, and audit records of what the policy decided.

/// An event on an app's event stream (the `Event` type of the interface).
public struct AppEvent: Hashable, Sendable, Codable {
    /// Acknowledged by this id; increasing in creation order across the daemon.
    public var id: EventID
    /// What happened.
    public var kind: EventKind
    /// For `backgroundTaskExpiring`: the open tasks whose expiration handlers must run, ascending.
    public var taskIDs: [TaskID]?
    /// For `notification`: the posted name.
    public var name: String?
    /// For `notification`: the payload as JSON text. The core never looks inside it.
    public var payloadJSON: String?
    /// For a coalesced notification: how many posts were merged into it.
    public var count: Int?
    /// For `memoryWarning`: whether this app is among the likeliest victims.
    public var likelyVictim: Bool?
    /// For `memoryWarning` to a likely victim: its place in the reclamation order, from 1.
    public var rank: Int?

    /// Creates an event; the optional details default to absent.
    public init(
        id: EventID, kind: EventKind, taskIDs: [TaskID]? = nil, name: String? = nil, payloadJSON: String? = nil,
        count: Int? = nil, likelyVictim: Bool? = nil, rank: Int? = nil
    ) {
        self.id = id
        self.kind = kind
        self.taskIDs = taskIDs
        self.name = name
        self.payloadJSON = payloadJSON
        self.count = count
        self.likelyVictim = likelyVictim
        self.rank = rank
    }
}

/// Something the shell must do. The core decides; the shell only switches on these.
public enum Action: Hashable, Sendable {
    /// Deliver `event` on the app's event stream now.
    case send(AppEvent, to: AppID)
    /// Freeze (or stop) the app. Before freezing, the shell checks whether the app holds a file lock and,
    /// if it does, does not freeze it and reports `suspensionRefused(_:now:)` instead.
    case suspend(AppID)
    /// Thaw (or continue) a suspended app. Always comes before any event sent to it.
    case resume(AppID)
    /// SIGKILL the app's processes now and release their memory.
    case kill(AppID, reason: TerminationReason)
    /// Arm the single timer at this instant (`nil`: disarm). Emitted only when the earliest deadline changes.
    case armTimer(at: MonotonicInstant?)
    /// Publish this audit entry: the history, the watch stream and the journal.
    case audit(AuditEntry)
    /// The policy forgot a registration whose process may still run (a detached one, past `historySize` of
    /// them): let go of whatever is held for it, such as the handle watching its process.
    case forget(AppID)
    /// Launch the app `app` in the background for the scheduled requests of `owner`, as its `apps.d` entry says, as
    /// that user and no other (nil: requests of no owner, which only a test of the core makes; the daemon launches
    /// nothing for them). The launched process is reported with `appLaunched`, a launch that cannot happen with
    /// `scheduledLaunchFailed(app:owner:now:)`. Requests of another owner of the name wait meanwhile.
    case launch(app: String, owner: UInt32?)
}

/// One entry of the audit trail: history, `Watch`, journal.
public struct AuditEntry: Hashable, Sendable, Codable {
    /// When it happened (monotonic; the shell adds wall-clock time).
    public var time: MonotonicInstant
    /// Which registration; nil for an entry about a scheduled request rather than a registration
    /// (`requestCancelled`), which `ownerUID` and `requestIdentifier` name.
    public var app: AppID?
    /// The app's name.
    public var appName: String
    /// What happened.
    public var kind: AuditKind
    /// The new state, for `stateChanged`.
    public var state: AppState?
    /// Why the app ended, for `terminated`, `killed`, `processExited`.
    public var reason: TerminationReason?
    /// The lease concerned, for `taskBegan` and `taskEnded`.
    public var taskID: TaskID?
    /// The lease's name, for `taskBegan` and `taskEnded`.
    public var taskName: String?
    /// How the lease ended, for `taskEnded`.
    public var taskEnd: TaskEndCause?
    /// The tasks listed in an expiration warning.
    public var taskIDs: [TaskID]?
    /// The app's reclamation band and memory, for memory-related entries.
    public var band: ReclamationBand?
    /// The memory reading behind a reclamation or warning.
    public var memoryBytes: UInt64?
    /// The reclamation rank of a memory warning.
    public var rank: Int?
    /// For a reclamation: the time from the pressure trigger to the kill decision; for the exit of a reclaimed
    /// app's process: the time from the kill to the exit (its memory freed).
    public var latency: Duration?
    /// For a reclamation: the reading that triggered it ("apps use N bytes, AppsMemoryMax is M"); for the
    /// expiration warning of a scheduled task: why it must end ("ac stopped holding"); for a cancelled request: why
    /// the daemon cancelled it.
    public var trigger: String?
    /// For `requestCancelled`: the request's identifier.
    public var requestIdentifier: String? {
        get { request?.value.identifier }
        set { request = Boxed(RequestReference(identifier: newValue, ownerUID: ownerUID)) }
    }
    /// For `requestCancelled`: the user the request belonged to, the one the entry is shown to besides root and
    /// `ControllerGroup`.
    public var ownerUID: UInt32? {
        get { request?.value.ownerUID }
        set { request = Boxed(RequestReference(identifier: requestIdentifier, ownerUID: newValue)) }
    }
    /// The two above, out of line: every action the policy returns is as large as an entry, and these are set only
    /// on the rare `requestCancelled`.
    private var request: Boxed<RequestReference>?

    /// Creates an entry; the details default to absent.
    public init(
        time: MonotonicInstant, app: AppID?, appName: String, kind: AuditKind, state: AppState? = nil,
        reason: TerminationReason? = nil, taskID: TaskID? = nil, taskName: String? = nil,
        taskEnd: TaskEndCause? = nil, taskIDs: [TaskID]? = nil, band: ReclamationBand? = nil,
        memoryBytes: UInt64? = nil, rank: Int? = nil, latency: Duration? = nil, trigger: String? = nil,
        requestIdentifier: String? = nil, ownerUID: UInt32? = nil
    ) {
        self.time = time
        self.app = app
        self.appName = appName
        self.kind = kind
        self.state = state
        self.reason = reason
        self.taskID = taskID
        self.taskName = taskName
        self.taskEnd = taskEnd
        self.taskIDs = taskIDs
        self.band = band
        self.memoryBytes = memoryBytes
        self.rank = rank
        self.latency = latency
        self.trigger = trigger
        if requestIdentifier != nil || ownerUID != nil {
            request = Boxed(RequestReference(identifier: requestIdentifier, ownerUID: ownerUID))
        }
    }
}

/// The scheduled request an audit entry is about.
struct RequestReference: Hashable, Sendable, Codable {
    var identifier: String?
    var ownerUID: UInt32?
}

/// A value kept out of line (one pointer wherever it is stored), for fields that are rarely set in types that are
/// copied often.
indirect enum Boxed<Value: Hashable & Sendable & Codable>: Hashable, Sendable, Codable {
    case value(Value)

    init(_ value: Value) { self = .value(value) }

    /// Encoded as the value itself.
    init(from decoder: any Decoder) throws {
        self = .value(try decoder.singleValueContainer().decode(Value.self))
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(value)
    }

    var value: Value {
        switch self {
        case .value(let value): value
        }
    }
}

/// Why a request to the policy was refused. Each case maps to a typed Varlink error.
public enum LifecycleError: Error, Hashable, Sendable {
    /// No app by that name (or identity) is known.
    case noSuchApp(String)
    /// A live app already holds that name and the caller is not its process.
    case appExists(String)
    /// The task id is unknown, already ended, or belongs to another app.
    case noSuchTask(app: String, task: TaskID)
    /// The app is in background with no time left (`UIBackgroundTaskInvalid`).
    case backgroundTimeExhausted(app: String)
    /// The request does not fit the app's state (or asks for a state that cannot be requested).
    case invalidState(app: String, state: AppState)
    /// A bound was hit: `limit` is the configuration key, `max` its value.
    case limitExceeded(limit: String, max: Int)
    /// The event id was never issued.
    case noSuchEvent(app: String, event: EventID)
}
