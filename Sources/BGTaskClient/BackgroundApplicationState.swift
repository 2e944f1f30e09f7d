// The state BackgroundApplication keeps under its lock: leases, the connection link, and a weak reference type.

import BGTaskPOSIX
import Dispatch
import FoundationEssentials
import Synchronization

/// A background task as the client tracks it.
struct Lease {
    /// The name given when it began.
    var name: String?
    /// The daemon's task id; nil while the lease is not held (being begun, or begun while reconnecting).
    var taskId: Int?
    /// The daemon no longer has the lease it held (it lost its state across a restart): the task's work is no
    /// longer covered, and it is never begun again, which would grant a fresh budget the daemon never gave.
    var isLost = false
    /// Taken (set to nil) when it runs, so it runs at most once.
    var expirationHandler: (@Sendable () -> Void)?
}

/// The link between the application and the daemon.
enum Link {
    /// Registered; events arrive on this registration's stream.
    case registered(Registration)
    /// The stream ended unexpectedly; the event thread is registering again.
    case reconnecting
    /// Reconnection gave up.
    case gaveUp
    /// `close()` was called.
    case closed

    var isRegistered: Bool {
        if case .registered = self { return true }
        return false
    }

    /// Registered or on the way back to it.
    var isAlive: Bool {
        switch self {
        case .registered, .reconnecting: true
        case .gaveUp, .closed: false
        }
    }
}

/// Everything `BackgroundApplication` changes after `init`, behind one lock.
struct State {
    var app: AppInfo
    var applicationState: ApplicationState
    var link: Link
    var acknowledgesAutomatically: Bool
    weak var delegate: (any ApplicationDelegate)?
    var leases: [BackgroundTaskIdentifier: Lease] = [:]
    var nextTaskNumber = 1
    /// Daemon task ids listed by `backgroundTaskExpiring` before their `BeginBackgroundTask` reply was recorded.
    var expiringUnclaimed: Set<Int> = []
    var lastRemaining: (seconds: Double, measuredAt: Int64)?
    var reconnectCount = 0
    /// The launch handler of each scheduled request identifier (`register(forTaskWithIdentifier:launchHandler:)`).
    var launchHandlers: [String: @Sendable (ScheduledTask) -> Void] = [:]
    /// The scheduled tasks running in the app, by the daemon's task id, until completed or ended.
    var scheduledTasks: [Int: ScheduledTask] = [:]
    /// The task ids of every `runScheduledTask` heard that the daemon may still list: a re-attached registration is
    /// told its running tasks again, and one heard before is not started twice. Kept to the tasks the daemon lists
    /// at each re-attach (a completed one stays until then: the daemon may have told it again just before it heard
    /// the completion), and to the newest `heardScheduledTasksMax` besides.
    var heardScheduledTasks: Set<Int> = []
    /// Completions (`success`, `retry`) of scheduled tasks whose `SetTaskCompleted` found no daemon, by task id: sent
    /// again once the app re-attaches, if the daemon still holds the task.
    var pendingCompletions: [Int: (success: Bool, retry: Bool)] = [:]
    var eventObservers: [ObserverToken: @Sendable (EventInfo) -> Void] = [:]
    var connectionObservers: [ObserverToken: @Sendable (ConnectionEvent) -> Void] = [:]
    var nextObserverNumber = 1

    init(app: AppInfo, applicationState: ApplicationState, link: Link, acknowledgesAutomatically: Bool) {
        self.app = app
        self.applicationState = applicationState
        self.link = link
        self.acknowledgesAutomatically = acknowledgesAutomatically
    }

    mutating func addEventObserver(_ observer: @escaping @Sendable (EventInfo) -> Void) -> ObserverToken {
        let token = ObserverToken(number: nextObserverNumber)
        nextObserverNumber += 1
        eventObservers[token] = observer
        return token
    }

    mutating func addConnectionObserver(_ observer: @escaping @Sendable (ConnectionEvent) -> Void) -> ObserverToken {
        let token = ObserverToken(number: nextObserverNumber)
        nextObserverNumber += 1
        connectionObservers[token] = observer
        return token
    }

    /// At most this many heard task ids are kept: far more than can run at once (`ScheduledTasksMax`).
    static let heardScheduledTasksMax = 1_024

    /// Notes that `runScheduledTask` named `taskId`; false when it had been heard already. Task ids only grow, so
    /// past the bound the oldest is forgotten.
    mutating func noteHeard(scheduledTask taskId: Int) -> Bool {
        guard heardScheduledTasks.insert(taskId).inserted else { return false }
        if heardScheduledTasks.count > Self.heardScheduledTasksMax, let oldest = heardScheduledTasks.min() {
            heardScheduledTasks.remove(oldest)
        }
        return true
    }

    func identifier(forTaskId taskId: Int) -> BackgroundTaskIdentifier? {
        leases.first { $0.value.taskId == taskId }?.key
    }

    /// The task's expiration handler, removed so that it cannot run twice; nil when it ran or there is none.
    mutating func takeExpirationHandler(_ identifier: BackgroundTaskIdentifier) -> (@Sendable () -> Void)? {
        defer { leases[identifier]?.expirationHandler = nil }
        return leases[identifier]?.expirationHandler
    }
}

/// A weak reference that can cross threads; the referenced object is itself `Sendable`.
final class WeakReference<Object: AnyObject & Sendable>: Sendable {
    /// The object, or nil once it was deallocated.
    weak let value: Object?

    init(_ value: Object) {
        self.value = value
    }
}
