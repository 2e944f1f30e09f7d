// The methods of `io.bgtask.Lifecycle` as data: the method enum and one parameter and one reply struct per method.
//
// Plain Codable structs: the codec decodes them from the message's tree, naming a wrongly typed parameter
// (`org.varlink.service.InvalidParameter`), ignoring parameters they do not know, and writes every optional field
// of a reply, as `null` when absent.
import BGTaskJSON

/// A method call's parameters, tied to the method's fully qualified name and its reply type.
///
/// Clients encode a call from the parameters alone (`VarlinkCodec.encodeCall(_:more:oneway:)`) and decode the
/// reply as `Reply`; servers decode the parameters with `VarlinkCodec.decodeParameters(_:from:)`.
public protocol VarlinkMethodCall: Codable, Sendable {
    /// The reply's parameters.
    associatedtype Reply: Codable, Sendable
    /// The fully qualified method name, such as `io.bgtask.Lifecycle.Register`.
    static var methodName: String { get }
}

/// Who may make a call: the app side or the controller side, as `io.bgtask.Lifecycle.varlink` divides its methods.
public enum LifecycleCaller: String, Sendable, CaseIterable {
    /// An app about itself: accepted from the app's own uid and from root.
    case app
    /// A controller: accepted from root, from the app's own uid for its own apps, and from `ControllerGroup`.
    case controller
}

/// The methods of `io.bgtask.Lifecycle`; the raw value is the method's name within the interface.
public enum LifecycleMethod: String, CaseIterable, Sendable {
    /// Registers the calling process as an app and streams its events (`more` required).
    case register = "Register"
    /// Begins a background-task lease.
    case beginBackgroundTask = "BeginBackgroundTask"
    /// Ends a background-task lease.
    case endBackgroundTask = "EndBackgroundTask"
    /// Reads the app's remaining background time.
    case backgroundTimeRemaining = "BackgroundTimeRemaining"
    /// Acknowledges an event.
    case acknowledge = "Acknowledge"
    /// Lists every app the daemon knows.
    case listApps = "ListApps"
    /// Describes one app.
    case getApp = "GetApp"
    /// Moves an app to active, inactive or background.
    case setState = "SetState"
    /// Starts a managed app.
    case launch = "Launch"
    /// Terminates an app.
    case terminate = "Terminate"
    /// Posts a notification event to one app or all.
    case post = "Post"
    /// Reads the daemon's history.
    case history = "History"
    /// Streams history entries as they are recorded (`more` required).
    case watch = "Watch"
    /// Reports the daemon's version, backends and counts.
    case getStatus = "GetStatus"

    /// The method of a call whose interface is `io.bgtask.Lifecycle`; nil for other interfaces and unknown names.
    public init?(_ name: VarlinkMethodName) {
        guard name.interface == LifecycleInterface.name else { return nil }
        self.init(rawValue: name.member)
    }

    /// The fully qualified name, `io.bgtask.Lifecycle.<Method>`.
    public var qualifiedName: String { LifecycleInterface.name + "." + rawValue }

    /// Which side makes this call.
    public var caller: LifecycleCaller {
        switch self {
        case .register, .beginBackgroundTask, .endBackgroundTask, .backgroundTimeRemaining, .acknowledge: .app
        case .listApps, .getApp, .setState, .launch, .terminate, .post, .history, .watch, .getStatus: .controller
        }
    }

    /// Whether the method streams its replies and so must be called with `more: true` (else `ExpectedMore`).
    public var requiresMore: Bool {
        switch self {
        case .register, .watch: true
        default: false
        }
    }

    /// The parameter struct of the method.
    public var parametersType: any VarlinkMethodCall.Type {
        switch self {
        case .register: RegisterParameters.self
        case .beginBackgroundTask: BeginBackgroundTaskParameters.self
        case .endBackgroundTask: EndBackgroundTaskParameters.self
        case .backgroundTimeRemaining: BackgroundTimeRemainingParameters.self
        case .acknowledge: AcknowledgeParameters.self
        case .listApps: ListAppsParameters.self
        case .getApp: GetAppParameters.self
        case .setState: SetStateParameters.self
        case .launch: LaunchParameters.self
        case .terminate: TerminateParameters.self
        case .post: PostParameters.self
        case .history: HistoryParameters.self
        case .watch: WatchParameters.self
        case .getStatus: GetStatusParameters.self
        }
    }
}

/// The reply of a method that returns nothing (`-> ()`): encodes as `{}`.
public struct EmptyReply: Codable, Hashable, Sendable {
    /// The empty reply.
    public init() {}
}

// MARK: - App side

/// Parameters of `Register`: register the calling process as an app and open its event stream.
public struct RegisterParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = RegisterReply
    public static let methodName = LifecycleMethod.register.qualifiedName

    /// The app's name, unique among live apps.
    public var name: String
    /// True to be terminated instead of suspended; nil takes the configured `ExitsOnSuspend`.
    public var exitsOnSuspend: Bool?
    /// The state to start in, `active` or `background`; nil means `active`.
    public var state: AppState?
    /// A shorter background time budget for this registration, in seconds; nil takes `BackgroundTimeSec`.
    public var backgroundTimeSec: Double?

    /// Registration parameters.
    public init(
        name: String, exitsOnSuspend: Bool? = nil, state: AppState? = nil, backgroundTimeSec: Double? = nil
    ) {
        self.name = name
        self.exitsOnSuspend = exitsOnSuspend
        self.state = state
        self.backgroundTimeSec = backgroundTimeSec
    }

}

/// A reply of `Register`: the app in the first reply, then one event per reply.
public struct RegisterReply: Codable, Hashable, Sendable {
    /// The app as registered; only in the first reply.
    public var app: AppInfo?
    /// One event; in every reply after the first.
    public var event: EventInfo?

    /// A reply carrying the app or an event.
    public init(app: AppInfo? = nil, event: EventInfo? = nil) {
        self.app = app
        self.event = event
    }

}

/// Parameters of `BeginBackgroundTask`: begin a background-task lease.
public struct BeginBackgroundTaskParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = BeginBackgroundTaskReply
    public static let methodName = LifecycleMethod.beginBackgroundTask.qualifiedName

    /// The app's name.
    public var app: String
    /// A name for the task, for status and logs.
    public var name: String?

    /// Lease request parameters.
    public init(app: String, name: String? = nil) {
        self.app = app
        self.name = name
    }

}

/// The reply of `BeginBackgroundTask`.
public struct BeginBackgroundTaskReply: Codable, Hashable, Sendable {
    /// The new task's id.
    public var taskId: Int

    /// The reply for a new lease.
    public init(taskId: Int) {
        self.taskId = taskId
    }
}

/// Parameters of `EndBackgroundTask`: end a background-task lease.
public struct EndBackgroundTaskParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = EndBackgroundTaskReply
    public static let methodName = LifecycleMethod.endBackgroundTask.qualifiedName

    /// The app's name.
    public var app: String
    /// The id `BeginBackgroundTask` returned.
    public var taskId: Int

    /// Lease end parameters.
    public init(app: String, taskId: Int) {
        self.app = app
        self.taskId = taskId
    }

}

/// The reply of `EndBackgroundTask`: nothing.
public typealias EndBackgroundTaskReply = EmptyReply

/// Parameters of `BackgroundTimeRemaining`: read the app's remaining background time.
public struct BackgroundTimeRemainingParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = BackgroundTimeRemainingReply
    public static let methodName = LifecycleMethod.backgroundTimeRemaining.qualifiedName

    /// The app's name.
    public var app: String

    /// Parameters naming the app.
    public init(app: String) {
        self.app = app
    }

}

/// The reply of `BackgroundTimeRemaining`.
public struct BackgroundTimeRemainingReply: Codable, Hashable, Sendable {
    /// Seconds left; nil in the foreground, where time is unlimited.
    public var seconds: Double?

    /// The remaining time.
    public init(seconds: Double?) {
        self.seconds = seconds
    }

}

/// Parameters of `Acknowledge`: acknowledge an event.
public struct AcknowledgeParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = AcknowledgeReply
    public static let methodName = LifecycleMethod.acknowledge.qualifiedName

    /// The app's name.
    public var app: String
    /// The event's id.
    public var eventId: Int

    /// Acknowledgement parameters.
    public init(app: String, eventId: Int) {
        self.app = app
        self.eventId = eventId
    }

}

/// The reply of `Acknowledge`: nothing.
public typealias AcknowledgeReply = EmptyReply

// MARK: - Controller side

/// Parameters of `ListApps`: none.
public struct ListAppsParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = ListAppsReply
    public static let methodName = LifecycleMethod.listApps.qualifiedName

    /// The call has no parameters.
    public init() {}
}

/// The reply of `ListApps`.
public struct ListAppsReply: Codable, Hashable, Sendable {
    /// Every app the daemon knows, in the order they registered or were launched.
    public var apps: [AppInfo]

    /// The app list.
    public init(apps: [AppInfo]) {
        self.apps = apps
    }
}

/// Parameters of `GetApp`: describe one app.
public struct GetAppParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = GetAppReply
    public static let methodName = LifecycleMethod.getApp.qualifiedName

    /// The app's name.
    public var app: String

    /// Parameters naming the app.
    public init(app: String) {
        self.app = app
    }

}

/// The reply of `GetApp`.
public struct GetAppReply: Codable, Hashable, Sendable {
    /// The app.
    public var app: AppInfo

    /// The app's description.
    public init(app: AppInfo) {
        self.app = app
    }
}

/// Parameters of `SetState`: move an app to active, inactive or background.
public struct SetStateParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = SetStateReply
    public static let methodName = LifecycleMethod.setState.qualifiedName

    /// The app's name.
    public var app: String
    /// The target state: `active`, `inactive` or `background`; the daemon refuses others with `InvalidState`.
    public var state: AppState

    /// State change parameters.
    public init(app: String, state: AppState) {
        self.app = app
        self.state = state
    }

}

/// The reply of `SetState`.
public struct SetStateReply: Codable, Hashable, Sendable {
    /// The app after the move.
    public var app: AppInfo

    /// The moved app.
    public init(app: AppInfo) {
        self.app = app
    }
}

/// Parameters of `Launch`: start a managed app.
public struct LaunchParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = LaunchReply
    public static let methodName = LifecycleMethod.launch.qualifiedName

    /// The name the app will register with.
    public var name: String
    /// The program and its arguments.
    public var argv: [String]
    /// True to terminate instead of suspending; nil takes the configured `ExitsOnSuspend`.
    public var exitsOnSuspend: Bool?

    /// Launch parameters.
    public init(name: String, argv: [String], exitsOnSuspend: Bool? = nil) {
        self.name = name
        self.argv = argv
        self.exitsOnSuspend = exitsOnSuspend
    }

}

/// The reply of `Launch`.
public struct LaunchReply: Codable, Hashable, Sendable {
    /// The app as launched, `notRunning` until it registers.
    public var app: AppInfo

    /// The launched app.
    public init(app: AppInfo) {
        self.app = app
    }
}

/// Parameters of `Terminate`: terminate an app.
public struct TerminateParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = TerminateReply
    public static let methodName = LifecycleMethod.terminate.qualifiedName

    /// The app's name.
    public var app: String

    /// Parameters naming the app.
    public init(app: String) {
        self.app = app
    }

}

/// The reply of `Terminate`: nothing.
public typealias TerminateReply = EmptyReply

/// Parameters of `Post`: post a notification event.
public struct PostParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = PostReply
    public static let methodName = LifecycleMethod.post.qualifiedName

    /// The notification's name.
    public var name: String
    /// Free-form data for the app.
    public var payload: [String: JSONValue]?
    /// What to do for a suspended app; nil means `DeliveryBehavior.default`.
    public var behavior: DeliveryBehavior?
    /// The app to post to; nil posts to every registered app.
    public var app: String?

    /// Post parameters.
    public init(
        name: String, payload: [String: JSONValue]? = nil, behavior: DeliveryBehavior? = nil, app: String? = nil
    ) {
        self.name = name
        self.payload = payload
        self.behavior = behavior
        self.app = app
    }

}

/// The reply of `Post`.
public struct PostReply: Codable, Hashable, Sendable {
    /// Apps that got the event at once, woken ones included.
    public var delivered: Int
    /// Suspended apps that have it queued.
    public var queued: Int

    /// The delivery counts.
    public init(delivered: Int, queued: Int) {
        self.delivered = delivered
        self.queued = queued
    }
}

/// Parameters of `History`: read the history.
public struct HistoryParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = HistoryReply
    public static let methodName = LifecycleMethod.history.qualifiedName

    /// The most recent entries to return at most; nil for every entry kept.
    public var limit: Int?

    /// History parameters.
    public init(limit: Int? = nil) {
        self.limit = limit
    }

}

/// The reply of `History`.
public struct HistoryReply: Codable, Hashable, Sendable {
    /// The entries, oldest first.
    public var entries: [HistoryEntry]

    /// The history.
    public init(entries: [HistoryEntry]) {
        self.entries = entries
    }
}

/// Parameters of `Watch`: none; the call must use `more: true`.
public struct WatchParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = WatchReply
    public static let methodName = LifecycleMethod.watch.qualifiedName

    /// The call has no parameters.
    public init() {}
}

/// A reply of `Watch`: one history entry.
public struct WatchReply: Codable, Hashable, Sendable {
    /// The entry just recorded.
    public var entry: HistoryEntry

    /// A streamed entry.
    public init(entry: HistoryEntry) {
        self.entry = entry
    }
}

/// Parameters of `GetStatus`: none.
public struct GetStatusParameters: VarlinkMethodCall, Hashable {
    public typealias Reply = GetStatusReply
    public static let methodName = LifecycleMethod.getStatus.qualifiedName

    /// The call has no parameters.
    public init() {}
}

/// The reply of `GetStatus`.
public struct GetStatusReply: Codable, Hashable, Sendable {
    /// The daemon's version.
    public var version: String
    /// Seconds since the daemon started.
    public var uptimeSec: Double
    /// The backend chosen per capability (`freeze`, `memory`, `kill`).
    public var backends: [String: JSONValue]
    /// Live apps, suspended ones included.
    public var apps: Int
    /// Suspended apps.
    public var suspended: Int
    /// Open leases over all apps.
    public var tasks: Int
    /// The memory readings behind reclamation, and the pressure level.
    public var memory: [String: JSONValue]
    /// The event loop's health: iterations, the longest single dispatch with its source, and a histogram of
    /// dispatch durations.
    public var loop: [String: JSONValue]

    /// A status report.
    public init(
        version: String, uptimeSec: Double, backends: [String: JSONValue], apps: Int, suspended: Int, tasks: Int,
        memory: [String: JSONValue], loop: [String: JSONValue] = [:]
    ) {
        self.version = version
        self.uptimeSec = uptimeSec
        self.backends = backends
        self.apps = apps
        self.suspended = suspended
        self.tasks = tasks
        self.memory = memory
        self.loop = loop
    }
}
