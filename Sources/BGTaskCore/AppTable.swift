// The policy's apps by identity: slots indexed straight from the identity, reused once an app is forgotten.

/// A table of tracked apps addressed by `AppID` without hashing.
///
/// Why slots: every lease call looks its app up, and `bgtask-bench core` showed hashing the identity (SipHash)
/// and copying whole records dominating a begin+end pair; an `AppID` packs the index of its slot with a serial,
/// so a lookup is one array index and a comparison. Each identity names its slot; the app in the slot must carry
/// the same identity, so an identity of a forgotten app (whose slot was reused) misses instead of reaching the
/// new app: the serial part differs.
struct AppTable: Sendable {
    private var slots: [TrackedApp?] = []
    /// The identity stored in each slot (0 when empty): `contains` must not touch the apps themselves.
    private var identities: [Int64] = []
    private var freeSlots: [Int] = []
    private var nextSerial: Int64 = 1
    /// Each slot's revision: a number no other change of any slot had, given at every insert and in-place change,
    /// so an app with an unchanged identity and revision is unchanged (the state writer reuses its encoding).
    private var revisions: [UInt64] = []
    private var lastRevision: UInt64 = 0
    /// While tracking: the slots changed since the last `takeChanges()` (beyond their leases), and the identities
    /// removed since.
    private var changedSlots: [Int] = []
    private var removedIDs: [AppID] = []
    /// While tracking, what changed in each slot since the last `takeChanges()`: nothing, only its leases
    /// (`appendTask`, `removeTask`: the record carries just those, in `taskChanges`), or anything else (the
    /// record carries the whole app).
    private var pending: [PendingChange] = []
    private var taskChanges: [Int: AppTaskChanges] = [:]

    private enum PendingChange: UInt8 {
        case none, tasks, whole
    }
    /// Whether changes are recorded for `takeChanges()`.
    var isTracking = false {
        didSet { _ = takeChanges() }
    }

    /// Number of apps.
    private(set) var count = 0

    /// An empty table.
    init() {}

    /// A table holding `apps` in the slots their identities name (restoring a saved state), the next identity
    /// made with serial `nextSerial`. Nil when two apps name one slot or an identity is out of range.
    init?(restoring apps: [TrackedApp], nextSerial: Int64) {
        let slotCount = (apps.map(\.id.slot).max() ?? -1) + 1
        guard slotCount < 1 << AppID.slotBits else { return nil }
        slots = Array(repeating: nil, count: slotCount)
        identities = Array(repeating: 0, count: slotCount)
        revisions = Array(repeating: 0, count: slotCount)
        pending = Array(repeating: .none, count: slotCount)
        for app in apps {
            guard app.id.rawValue > 0, app.id.serial < nextSerial, slots[app.id.slot] == nil else { return nil }
            slots[app.id.slot] = app
            identities[app.id.slot] = app.id.rawValue
            lastRevision += 1
            revisions[app.id.slot] = lastRevision
        }
        count = apps.count
        freeSlots = slots.indices.filter { slots[$0] == nil }.reversed()
        self.nextSerial = nextSerial
    }

    /// The serial the next identity gets.
    var upcomingSerial: Int64 { nextSerial }

    /// A fresh identity, with a slot reserved for it.
    mutating func makeID() -> AppID {
        defer { nextSerial += 1 }
        if let slot = freeSlots.popLast() {
            return AppID(serial: nextSerial, slot: slot)
        }
        slots.append(nil)
        identities.append(0)
        revisions.append(0)
        pending.append(.none)
        precondition(slots.count < 1 << AppID.slotBits, "more than 16 million apps at once")
        return AppID(serial: nextSerial, slot: slots.count - 1)
    }

    /// Stores the app of an identity made by `makeID()`.
    mutating func insert(_ record: TrackedApp) {
        precondition(slots[record.id.slot] == nil, "slot of \(record.id) is taken")
        slots[record.id.slot] = record
        identities[record.id.slot] = record.id.rawValue
        noteChange(of: record.id.slot)
        count += 1
    }

    /// Forgets an app and frees its slot.
    mutating func remove(_ id: AppID) {
        guard contains(id) else { return }
        slots[id.slot] = nil
        identities[id.slot] = 0
        freeSlots.append(id.slot)
        if isTracking { removedIDs.append(id) }
        if pending[id.slot] == .tasks {
            // Its leases' changes go with it.
            pending[id.slot] = .none
            taskChanges[id.slot] = nil
        }
        count -= 1
    }

    /// Whether `id` names an app in the table.
    func contains(_ id: AppID) -> Bool {
        id.slot < identities.count && identities[id.slot] == id.rawValue
    }

    /// The user id of the app of `id`, read in place.
    func uid(of id: AppID) -> UInt32? {
        guard contains(id) else { return nil }
        return slots[id.slot]?.uid
    }

    /// The app of `id`, if present. Reads and in-place changes go straight to the slot without copying
    /// the app; a change must not add or remove the app (use `insert` and `remove`).
    subscript(id: AppID) -> TrackedApp? {
        _read {
            if contains(id) { yield slots[id.slot] } else { yield nil }
        }
        _modify {
            precondition(contains(id), "no app for \(id)")
            noteChange(of: id.slot)
            yield &slots[id.slot]
            precondition(slots[id.slot] != nil, "the app of \(id) was removed in place")
        }
    }

    /// How many apps satisfy `predicate`, reading them in place.
    func count(where predicate: (TrackedApp) -> Bool) -> Int {
        var total = 0
        for index in slots.indices where slots[index].map(predicate) == true { total += 1 }
        return total
    }

    /// Reads the app of `id` in place, without counting as a change.
    func read<Result>(_ id: AppID, _ body: (TrackedApp) -> Result) -> Result {
        precondition(contains(id), "no app for \(id)")
        // Through the buffer: the app is lent to `body` where it lies, with no copy of it (and its references).
        return slots.withUnsafeBufferPointer { body($0[id.slot].unsafelyUnwrapped) }
    }

    /// Opens a lease of `id`: the one change a record may carry as a lease rather than as the whole app.
    mutating func appendTask(_ task: OpenTask, to id: AppID) {
        precondition(contains(id), "no app for \(id)")
        slots[id.slot]!.openTasks.append(task)
        noteTaskChange(of: id) { $0.began.append(task) }
    }

    /// Ends the lease `task` of `id`, returning it; nil (and nothing changed) when it is not open.
    mutating func removeTask(_ task: TaskID, of id: AppID) -> OpenTask? {
        precondition(contains(id), "no app for \(id)")
        guard let index = slots[id.slot]!.openTasks.firstIndex(where: { $0.id == task }) else { return nil }
        let removed = slots[id.slot]!.openTasks.remove(at: index)
        noteTaskChange(of: id) { changes in
            // A lease begun since the last record just never appears in the records.
            if let begun = changes.began.firstIndex(where: { $0.id == task }) {
                changes.began.remove(at: begun)
            } else {
                changes.ended.append(task)
            }
        }
        return removed
    }

    /// Gives the slot a new revision, and remembers it changed.
    private mutating func noteChange(of slot: Int) {
        if isTracking {
            switch pending[slot] {
            case .none:
                changedSlots.append(slot)
            case .tasks:
                // The whole app goes in the record: its leases with it.
                changedSlots.append(slot)
                taskChanges[slot] = nil
            case .whole:
                break
            }
            pending[slot] = .whole
        }
        lastRevision += 1
        revisions[slot] = lastRevision
    }

    /// Gives the slot a new revision, and records a change of its leases (`update`) unless the whole app is in
    /// the next record already.
    private mutating func noteTaskChange(of id: AppID, _ update: (inout AppTaskChanges) -> Void) {
        lastRevision += 1
        revisions[id.slot] = lastRevision
        guard isTracking, pending[id.slot] != .whole else { return }
        pending[id.slot] = .tasks
        update(&taskChanges[id.slot, default: AppTaskChanges(app: id)])
    }

    /// The apps inserted or changed since the last call, as they are now; the identities removed since (an
    /// identity may be in both: changed, then removed and its slot reused); and the leases begun and ended of
    /// apps with no other change since, in slot order.
    mutating func takeChanges() -> (changed: [TrackedApp], removed: [AppID], tasks: [AppTaskChanges]) {
        defer {
            for slot in changedSlots { pending[slot] = .none }
            for slot in taskChanges.keys { pending[slot] = .none }
            // The two tables keep their storage: a record is taken after every loop turn that changed anything,
            // a lease call's included.
            changedSlots.removeAll(keepingCapacity: true)
            removedIDs = []
            taskChanges.removeAll(keepingCapacity: true)
        }
        guard isTracking else { return ([], [], []) }
        let tasks: [AppTaskChanges]
        if taskChanges.count == 1, let only = taskChanges.first?.value {
            // One app's leases, as after one lease call: no sorting.
            tasks = only.isEmpty ? [] : [only]
        } else {
            tasks = taskChanges.sorted { $0.key < $1.key }.map(\.value).filter { !$0.isEmpty }
        }
        let changed = changedSlots.isEmpty ? [] : changedSlots.sorted().compactMap { slots[$0] }
        return (changed, removedIDs, tasks)
    }

    /// Every app, in slot order.
    var values: [TrackedApp] {
        slots.compactMap { $0 }
    }

    /// Every app with its revision, in slot order.
    var valuesWithRevisions: (apps: [TrackedApp], revisions: [UInt64]) {
        var apps: [TrackedApp] = []
        var appRevisions: [UInt64] = []
        apps.reserveCapacity(count)
        appRevisions.reserveCapacity(count)
        for index in slots.indices {
            guard let app = slots[index] else { continue }
            apps.append(app)
            appRevisions.append(revisions[index])
        }
        return (apps, appRevisions)
    }
}
