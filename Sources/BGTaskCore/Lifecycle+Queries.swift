// Read-only views of the policy state: app snapshots for `GetApp`/`ListApps`, lookups and counts.

/// A lease as shown to clients.
public struct TaskSnapshot: Hashable, Sendable {
    /// The task id.
    public var id: TaskID
    /// The name given at `BeginBackgroundTask`.
    public var name: String?
    /// When it began.
    public var began: MonotonicInstant
}

/// An app as shown to clients (the `App` type of the interface, less what the shell measures).
public struct AppSnapshot: Hashable, Sendable {
    /// The registration.
    public var id: AppID
    /// The app's name.
    public var name: String
    /// Its state.
    public var state: AppState
    /// Its process id.
    public var pid: Int32
    /// Its user id.
    public var uid: UInt32
    /// Whether the daemon launched it.
    public var isManaged: Bool
    /// Open leases, ascending.
    public var tasks: [TaskSnapshot]
    /// `nil` (unlimited) in the foreground; otherwise what is left of the shared budget.
    public var backgroundTimeRemaining: Duration?
    /// Why it ended, once terminated.
    public var exitReason: TerminationReason?
    /// How its process ended, when the daemon launched it (and reaped it).
    public var processExit: ProcessExit?
    /// Events waiting for it to run again.
    public var queuedEvents: Int
    /// Queued events dropped because its queue was full (`QueuedEventsPerAppMax`), over the registration's life.
    public var droppedEvents: Int
    /// Whether its event stream is attached.
    public var isRegistered: Bool
    /// The policy it registered with.
    public var policy: AppPolicy
    /// Why it is never suspended, when the shell said it may not be (`suspensionExempted`).
    public var suspensionExemption: SuspensionExemption?
}

extension Lifecycle {
    /// The app holding `name`; else its registration whose stream closed while its process lives on; else the
    /// latest ended registration of that name still remembered.
    public func appID(named name: String) -> AppID? {
        liveNames[name] ?? detachedNames[name] ?? endedNames[name]
    }

    /// The live registration holding `name`, if any.
    public func liveAppID(named name: String) -> AppID? {
        liveNames[name]
    }

    /// The user id of a registration, without building a snapshot (authorization on every call needs only this).
    public func uid(of id: AppID) -> UInt32? {
        apps.uid(of: id)
    }

    /// The registration `name` names (as `appID(named:)` finds it) and its user id: what authorizing a call needs.
    ///
    /// It changes nothing. It is `mutating` so that a caller holding the core in a class's property (the daemon,
    /// on every call) lends it in place: a non-mutating method of another module is given a copy of the whole
    /// core, every reference in it retained and released again.
    public mutating func owner(ofAppNamed name: String) -> (id: AppID, uid: UInt32)? {
        guard let id = appID(named: name), let uid = apps.uid(of: id) else { return nil }
        return (id, uid)
    }

    /// A snapshot of one registration (live, unregistered or ended but remembered).
    public func snapshot(of id: AppID, now: MonotonicInstant) -> AppSnapshot? {
        guard let app = apps[id] else { return nil }
        let taskSnapshots = app.openTasks.map { TaskSnapshot(id: $0.id, name: $0.name, began: $0.began) }
        return AppSnapshot(
            id: id, name: app.name, state: app.state, pid: app.pid, uid: app.uid, isManaged: app.isManaged,
            tasks: taskSnapshots, backgroundTimeRemaining: remaining(of: app, now: now), exitReason: app.exitReason,
            processExit: app.processExit, queuedEvents: app.queue.count, droppedEvents: app.droppedEventCount,
            isRegistered: app.isRegistered,
            policy: app.policy, suspensionExemption: app.suspensionExemption)
    }

    /// Snapshots of every app still tracked (holding a name, or whose process is not yet gone), by identity;
    /// with `includeEnded`, also the ended registrations still remembered.
    public func snapshots(now: MonotonicInstant, includeEnded: Bool = false) -> [AppSnapshot] {
        apps.values
            .filter { includeEnded || ($0.state != .terminated && !$0.isProcessGone) }
            .map(\.id)
            .sorted()
            .compactMap { snapshot(of: $0, now: now) }
    }

    /// Identities of registrations whose process the shell must keep watching (not yet reported gone).
    public var trackedApps: [AppID] {
        apps.values.filter { !$0.isProcessGone }.map(\.id).sorted()
    }

    /// Number of apps holding a name.
    public var liveAppCount: Int { liveNames.count }

    /// Number of apps holding a name that run as `uid`.
    public func liveAppCount(uid: UInt32) -> Int {
        liveCountByUID[uid] ?? 0
    }

    /// The state of a registration still in the table (live, detached, or ended and remembered).
    public func state(of id: AppID) -> AppState? {
        apps[id]?.state
    }

    /// Whether the shell must keep watching the registration's process: the policy still tracks it and has not
    /// heard that the process is gone.
    public func isWatchingProcess(of id: AppID) -> Bool {
        guard let app = apps[id] else { return false }
        return !app.isProcessGone
    }

    /// The registrations whose process the policy still watches (it has not been reported gone), in identity
    /// order.
    public var appsWatchingProcesses: [AppID] {
        apps.values.filter { !$0.isProcessGone }.map(\.id)
    }

    /// Number of suspended apps.
    public var suspendedAppCount: Int { apps.count { $0.state == .suspended } }

}
