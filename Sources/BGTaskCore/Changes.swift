// What changed in the policy's state since the daemon last saved it: the record its state journal appends, so a
// lease call saves the one app it touched instead of every app.

/// A name table (or the ledgers) that remembers which names changed while tracking is on.
///
/// The policy's name tables change in a handful of places; recording every change here, rather than at each of
/// them, means a new place cannot forget to.
struct NameTable<Value: Sendable & Codable>: Sendable {
    private(set) var storage: [String: Value] = [:]
    /// The names changed since `takeChangedNames()`, while `isTracking`.
    private var changedNames: Set<String> = []
    /// Whether changes are recorded: only a daemon saving its state takes them, so without one nothing is kept.
    var isTracking = false
    /// Counts every change, tracked or not: a store keeping the table elsewhere compares it with what it wrote.
    private(set) var revision: UInt64 = 0

    init(_ storage: [String: Value] = [:]) {
        self.storage = storage
    }

    subscript(name: String) -> Value? {
        get { storage[name] }
        set {
            storage[name] = newValue
            noteChange(of: name)
        }
    }

    subscript(name: String, default value: @autoclosure () -> Value) -> Value {
        get { storage[name] ?? value() }
        _modify {
            noteChange(of: name)
            yield &storage[name, default: value()]
        }
    }

    @discardableResult
    mutating func removeValue(forKey name: String) -> Value? {
        noteChange(of: name)
        return storage.removeValue(forKey: name)
    }

    var values: Dictionary<String, Value>.Values { storage.values }
    var count: Int { storage.count }

    private mutating func noteChange(of name: String) {
        revision &+= 1
        if isTracking { changedNames.insert(name) }
    }

    /// The names changed since the last call, each with its value now (nil: removed), sorted by name.
    mutating func takeChanges() -> [NamedChange<Value>] {
        guard !changedNames.isEmpty else { return [] }
        defer { changedNames.removeAll(keepingCapacity: true) }
        return changedNames.sorted().map { NamedChange(name: $0, value: storage[$0]) }
    }
}

/// One name's entry in a table after a change: its value, or nil when the name left the table.
public struct NamedChange<Value: Sendable & Codable>: Sendable, Codable {
    public var name: String
    public var value: Value?
}

extension NamedChange: Equatable where Value: Equatable {}

/// The leases an app began and ended since the last record, when nothing else of it changed: a lease call's
/// record carries these few bytes instead of the whole app.
public struct AppTaskChanges: Sendable, Codable {
    package internal(set) var app: AppID
    /// Leases begun, in order.
    package internal(set) var began: [OpenTask] = []
    /// Leases ended that were open at the last record, in order.
    package internal(set) var ended: [TaskID] = []

    var isEmpty: Bool { began.isEmpty && ended.isEmpty }
}

/// Everything that changed in a `Lifecycle` since the last `takeChanges()`: each changed registration whole, the
/// identities forgotten, the name-table and ledger entries that changed, the history orders when they changed,
/// and the counters. Applied in order to the state saved before them (`SavedLifecycle.apply(_:)`), the records
/// give the state as it is now.
public struct LifecycleChanges: Sendable, Codable {
    /// Registrations made or changed, as they are now.
    package internal(set) var apps: [TrackedApp] = []
    /// Registrations forgotten (their slots may hold one of `apps` already).
    package internal(set) var forgotten: [AppID] = []
    /// Leases begun and ended by registrations not in `apps` (absent in records written before there were these).
    package internal(set) var tasks: [AppTaskChanges]?
    package internal(set) var liveNames: [NamedChange<AppID>] = []
    package internal(set) var detachedNames: [NamedChange<AppID>] = []
    package internal(set) var endedNames: [NamedChange<AppID>] = []
    package internal(set) var ledgers: [NamedChange<UsageLedger>] = []
    /// Scheduled requests, scheduled-time ledgers and last-foreground times that changed (absent when none did, and
    /// in records written before there were these).
    package internal(set) var scheduledRequests: [NamedChange<ScheduledRecord>]?
    package internal(set) var scheduledLedgers: [NamedChange<ScheduledLedger>]?
    package internal(set) var lastForeground: [NamedChange<WallClockInstant>]?
    /// The orders whole, when they changed.
    package internal(set) var endedOrder: [AppID]?
    package internal(set) var detachedOrder: [AppID]?
    package internal(set) var nextSerial: Int64
    package internal(set) var nextTaskID: Int64
    package internal(set) var nextEventID: Int64
    package internal(set) var nextSequence: UInt64

    /// How many registrations it carries.
    public var appCount: Int { apps.count }

    /// Whether it changes nothing but, perhaps, the counters.
    public var isEmpty: Bool {
        apps.isEmpty && forgotten.isEmpty && (tasks ?? []).isEmpty && liveNames.isEmpty && detachedNames.isEmpty
            && endedNames.isEmpty
            && ledgers.isEmpty && endedOrder == nil && detachedOrder == nil && scheduledRequests == nil
            && scheduledLedgers == nil && lastForeground == nil
    }

    /// The record without its registrations, for an encoder that writes those itself (`savedApps`).
    public var withoutApps: LifecycleChanges {
        var copy = self
        copy.apps = []
        return copy
    }

    /// The changed registrations, for an encoder: each encodes as it does within the state.
    public var savedApps: [SavedApp] {
        apps.map { SavedApp(app: $0, revision: nil) }
    }
}

extension Lifecycle {
    /// Whether changes are recorded for `takeChanges()`. Turn on before the first change to be saved (a daemon
    /// with a state file does, right after it saved the whole state); off, nothing is kept.
    public var tracksChanges: Bool {
        get { apps.isTracking }
        set {
            apps.isTracking = newValue
            liveNames.isTracking = newValue
            detachedNames.isTracking = newValue
            endedNames.isTracking = newValue
            ledgers.isTracking = newValue
            scheduling.requests.isTracking = newValue
            scheduling.ledgers.isTracking = newValue
            scheduling.lastForeground.isTracking = newValue
            isHistoryOrderChanged = false
            _ = takeChanges()
        }
    }

    /// What changed since the last call (or since tracking began), and starts recording afresh.
    public mutating func takeChanges() -> LifecycleChanges {
        let (changedApps, forgotten, tasks) = apps.takeChanges()
        var changes = LifecycleChanges(
            apps: changedApps, forgotten: forgotten, tasks: tasks.isEmpty ? nil : tasks,
            liveNames: liveNames.takeChanges(),
            detachedNames: detachedNames.takeChanges(), endedNames: endedNames.takeChanges(),
            ledgers: ledgers.takeChanges(), nextSerial: apps.upcomingSerial, nextTaskID: nextTaskID,
            nextEventID: nextEventID, nextSequence: nextSequence)
        let requests = scheduling.requests.takeChanges()
        let scheduledLedgers = scheduling.ledgers.takeChanges()
        let lastForeground = scheduling.lastForeground.takeChanges()
        changes.scheduledRequests = requests.isEmpty ? nil : requests
        changes.scheduledLedgers = scheduledLedgers.isEmpty ? nil : scheduledLedgers
        changes.lastForeground = lastForeground.isEmpty ? nil : lastForeground
        if isHistoryOrderChanged {
            isHistoryOrderChanged = false
            changes.endedOrder = Array(endedOrder[endedOrderStart...])
            changes.detachedOrder = Array(detachedOrder[detachedOrderStart...])
        }
        return changes
    }
}

extension SavedLifecycle {
    /// Applies a record of changes taken after this state was saved: the state as it was after them.
    public mutating func apply(_ changes: LifecycleChanges) throws(ReplayError) {
        var replay = Replay(self)
        try replay.apply(changes)
        self = replay.state
    }

    /// A record that does not follow the state it is applied to.
    public struct ReplayError: Error, CustomStringConvertible {
        /// The registration it names and the state does not hold.
        public var app: AppID

        public var description: String { "it changes the leases of \(app), which the state does not hold" }
    }

    /// Applies many records in a row without rebuilding the registrations' array for each (a journal's replay).
    public struct Replay: Sendable {
        private var base: SavedLifecycle
        private var apps: [AppID: TrackedApp]

        /// Starts from `state`.
        public init(_ state: SavedLifecycle) {
            base = state
            apps = Dictionary(state.apps.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        }

        /// Applies the next record; fails when it changes the leases of a registration the state does not hold
        /// (a record is applied only to the state it follows).
        public mutating func apply(_ changes: LifecycleChanges) throws(ReplayError) {
            for id in changes.forgotten { apps[id] = nil }
            for app in changes.apps { apps[app.id] = app }
            for change in changes.tasks ?? [] {
                guard apps[change.app] != nil else { throw ReplayError(app: change.app) }
                if !change.ended.isEmpty {
                    let ended = Set(change.ended)
                    apps[change.app]!.openTasks.removeAll { ended.contains($0.id) }
                }
                apps[change.app]!.openTasks += change.began
            }
            for change in changes.liveNames { base.liveNames[change.name] = change.value }
            for change in changes.detachedNames { base.detachedNames[change.name] = change.value }
            for change in changes.endedNames { base.endedNames[change.name] = change.value }
            for change in changes.ledgers { base.ledgers[change.name] = change.value }
            if changes.scheduledRequests != nil || changes.scheduledLedgers != nil || changes.lastForeground != nil {
                var scheduling = base.scheduling ?? SavedScheduling()
                for change in changes.scheduledRequests ?? [] { scheduling.requests[change.name] = change.value }
                for change in changes.scheduledLedgers ?? [] { scheduling.ledgers[change.name] = change.value }
                for change in changes.lastForeground ?? [] { scheduling.lastForeground[change.name] = change.value }
                base.scheduling = scheduling
            }
            if let order = changes.endedOrder { base.endedOrder = order }
            if let order = changes.detachedOrder { base.detachedOrder = order }
            base.nextSerial = changes.nextSerial
            base.nextTaskID = changes.nextTaskID
            base.nextEventID = changes.nextEventID
            base.nextSequence = changes.nextSequence
        }

        /// The state after every record applied, its registrations in slot order (as a running policy saves
        /// them).
        public var state: SavedLifecycle {
            var result = base
            result.apps = apps.values.sorted { $0.id.slot < $1.id.slot }
            result.revisions = []
            return result
        }
    }
}
