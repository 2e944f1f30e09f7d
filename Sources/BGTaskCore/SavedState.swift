// The policy's state as a value to save and restore, so that a daemon restart loses no lease and grants no budget.

/// Everything a `Lifecycle` knows, as plain `Codable` data: every registration with its leases, budget, queued
/// events and pending deadlines (absolute `CLOCK_MONOTONIC` instants, which a daemon restart within one boot
/// leaves meaningful), the daily ledgers, the name tables and the counters that keep ids unique.
///
/// The policy itself is not part of it: each app keeps the policy it registered with, and the limits come from
/// the configuration in force when the state is restored.
public struct SavedLifecycle: Codable, Sendable {
    var apps: [TrackedApp]
    var nextSerial: Int64
    var liveNames: [String: AppID]
    var detachedNames: [String: AppID]
    var endedNames: [String: AppID]
    var endedOrder: [AppID]
    var detachedOrder: [AppID]
    var ledgers: [String: UsageLedger]
    var nextTaskID: Int64
    var nextEventID: Int64
    var nextSequence: UInt64
    /// Scheduled requests, the scheduled-time ledgers and each app name's last time in the foreground, in
    /// wall-clock time (absent in states saved before there were these: none held).
    var scheduling: SavedScheduling?
    /// Each app's revision (see `SavedApp`), not saved: only meaningful within the `Lifecycle` it came from.
    var revisions: [UInt64] = []

    private enum CodingKeys: String, CodingKey {
        case apps, nextSerial, liveNames, detachedNames, endedNames, endedOrder, detachedOrder, ledgers, nextTaskID
        case nextEventID, nextSequence, scheduling
    }

    /// The scheduled requests, ledgers and last-foreground times alone, as a store that must outlive a reboot
    /// keeps them (see `SavedScheduling.afterReboot(wallClockNow:)`).
    public var savedScheduling: SavedScheduling { scheduling ?? SavedScheduling() }

    /// How many registrations it holds.
    public var appCount: Int { apps.count }

    /// The registrations one by one, each with what identifies its content, for an encoder that keeps each app's
    /// encoding until the app changes: encoding `withoutApps` and these (as the array `apps`) is encoding the
    /// whole.
    public var savedApps: [SavedApp] {
        apps.indices.map { SavedApp(app: apps[$0], revision: $0 < revisions.count ? revisions[$0] : nil) }
    }

    /// The same state with no registrations: everything but `apps`.
    public var withoutApps: SavedLifecycle {
        var copy = self
        copy.apps = []
        copy.revisions = []
        return copy
    }
}

extension SavedLifecycle {
    /// The state to start from after a reboot: no registration, lease or monotonic deadline of the old boot means
    /// anything now, so only the scheduled requests, ledgers and last-foreground times are kept, as
    /// `SavedScheduling.afterReboot(wallClockNow:)` leaves them.
    public init(afterReboot scheduling: SavedScheduling, wallClockNow: WallClockInstant) {
        self.init(
            apps: [], nextSerial: 1, liveNames: [:], detachedNames: [:], endedNames: [:], endedOrder: [],
            detachedOrder: [], ledgers: [:], nextTaskID: 1, nextEventID: 1, nextSequence: 0,
            scheduling: scheduling.afterReboot(wallClockNow: wallClockNow))
    }
}

/// One registration of a saved state (`SavedLifecycle.savedApps`): encodes as the app does within the state.
public struct SavedApp: Encodable, Sendable {
    let app: TrackedApp
    /// Its content's revision: the same identity with the same revision, from one `Lifecycle`, is the same app
    /// unchanged; nil when unknown (a state that was not taken from a running `Lifecycle`).
    public let revision: UInt64?
    /// The registration's identity.
    public var id: AppID { app.id }

    public func encode(to encoder: any Encoder) throws {
        try app.encode(to: encoder)
    }
}

/// Why a saved state cannot be restored: it contradicts itself, so nothing in it can be trusted.
public struct SavedStateError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What is inconsistent.
    public var reason: String

    public var description: String { reason }
}

extension Lifecycle {
    /// Room above the registrations and remembered ones for the slots of a restored table: live registrations
    /// that ended and were forgotten since their slots were taken.
    static let restoredSlotSlack = 16_384

    /// The state to save.
    public var saved: SavedLifecycle {
        let (values, revisions) = apps.valuesWithRevisions
        return SavedLifecycle(
            apps: values, nextSerial: apps.upcomingSerial, liveNames: liveNames.storage,
            detachedNames: detachedNames.storage, endedNames: endedNames.storage,
            endedOrder: Array(endedOrder[endedOrderStart...]),
            detachedOrder: Array(detachedOrder[detachedOrderStart...]),
            ledgers: ledgers.storage, nextTaskID: nextTaskID, nextEventID: nextEventID, nextSequence: nextSequence,
            scheduling: SavedScheduling(
                requests: scheduling.requests.storage, ledgers: scheduling.ledgers.storage,
                lastForeground: scheduling.lastForeground.storage),
            revisions: revisions)
    }

    /// The policy state `saved` describes, under `policy`. Every cross-reference is checked (identities,
    /// names, ids below their counters), and a state that contradicts itself is refused whole: adopting part of
    /// it could hand one app's leases or process to another.
    ///
    /// Call `restarted(now:)` next: it re-suspends what was suspended and arms the timer.
    /// `isValidPayload` checks the JSON text of every queued notification's payload: the shell sends it to the app
    /// as it is, so a state holding one that is not a JSON object is refused.
    ///
    /// `conditions` and `wallClockOffset`, when the shell has them already, are what scheduled requests are judged
    /// by from the start (else nothing scheduled starts, and no constraint is judged lost, until they are
    /// reported). `now`, when given, is when scheduled work is planned from. `restarted(now:)` then starts what is
    /// runnable.
    public init(
        restoring saved: SavedLifecycle, policy: CorePolicy, isValidPayload: (String) -> Bool = { _ in true },
        conditions: Conditions? = nil, wallClockOffset: Duration? = nil, now: MonotonicInstant? = nil
    ) throws(SavedStateError) {
        self.init(policy: policy)
        func fail(_ reason: String) -> SavedStateError { SavedStateError(reason: reason) }
        // Slots are reused, so a running policy's highest slot stays near the most registrations it held at
        // once: the live ones (bounded by the daemon's connections) and the remembered ended and detached ones
        // (`historySize` each). A state whose identities spread far past that would have the table allocate
        // millions of empty slots; it is refused.
        let remembered = min(policy.historySize, 1 << AppID.slotBits)
        let slotLimit = saved.apps.count + 2 * remembered + Self.restoredSlotSlack
        guard saved.apps.allSatisfy({ $0.id.slot < slotLimit }) else {
            throw fail("identities spread over more than \(slotLimit) slots for \(saved.apps.count) registrations")
        }
        guard let table = AppTable(restoring: saved.apps, nextSerial: saved.nextSerial) else {
            throw fail("two registrations share a slot, or an identity is out of range")
        }
        for app in saved.apps {
            var lastTask: Int64 = 0
            for task in app.openTasks {
                guard task.id.rawValue > lastTask, task.id.rawValue < saved.nextTaskID else {
                    throw fail("\(app.name): task ids out of order or not below the next id")
                }
                lastTask = task.id.rawValue
            }
            let eventIDs = app.queue.entries.map(\.event.id.rawValue) + [app.pendingAcknowledgement?.rawValue ?? 0]
            guard eventIDs.allSatisfy({ $0 < saved.nextEventID }) else {
                throw fail("\(app.name): an event id not below the next id")
            }
            guard
                DeadlineKind.allCases.allSatisfy({ app.deadlines[$0].map { $0.sequence < saved.nextSequence } ?? true })
            else {
                throw fail("\(app.name): a deadline sequence not below the next one")
            }
            guard app.queue.entries.allSatisfy({ $0.event.payloadJSON.map(isValidPayload) ?? true }) else {
                throw fail("\(app.name): a queued notification's payload is not a JSON object")
            }
            guard app.queue.isEmpty || app.state == .suspended else {
                throw fail("\(app.name): events queued for an app that is not suspended")
            }
        }
        for (kind, names) in [
            ("live", saved.liveNames), ("detached", saved.detachedNames), ("ended", saved.endedNames),
        ] {
            for (name, id) in names where table[id]?.name != name {
                throw fail("the \(kind) name \(name) names no registration of that name")
            }
        }
        guard Set(saved.liveNames.values).count == saved.liveNames.count else {
            throw fail("one registration holds two live names")
        }
        for id in saved.endedOrder + saved.detachedOrder where id.serial >= saved.nextSerial {
            throw fail("\(id) in the history was never made")
        }
        apps = table
        liveNames = NameTable(saved.liveNames)
        recountLiveApps()
        detachedNames = NameTable(saved.detachedNames)
        endedNames = NameTable(saved.endedNames)
        endedOrder = saved.endedOrder
        detachedOrder = saved.detachedOrder
        ledgers = NameTable(saved.ledgers)
        nextTaskID = saved.nextTaskID
        nextEventID = saved.nextEventID
        nextSequence = saved.nextSequence
        openTaskCount = saved.apps.reduce(0) { $0 + $1.openTasks.count }
        for app in saved.apps {
            if let earliest = app.deadlines.earliest { deadlines.set(app.id, to: earliest.order) }
        }
        try restoreScheduling(saved.scheduling ?? SavedScheduling(), of: saved.apps)
        if let conditions {
            scheduling.conditions = conditions
            scheduling.isConditionsKnown = true
        }
        scheduling.wallClockOffset = wallClockOffset
        scheduling.deadline = plannedSchedulingDeadline(after: now)
        scheduling.needsEvaluation = true
    }

    /// Takes on saved scheduling state, checked against the registrations: every running request names an open
    /// scheduled task of its app, and every open scheduled task is claimed by exactly one.
    private mutating func restoreScheduling(_ saved: SavedScheduling, of savedApps: [TrackedApp])
        throws(SavedStateError)
    {
        func fail(_ reason: String) -> SavedStateError { SavedStateError(reason: reason) }
        var claimed: Set<TaskID> = []
        var countByName: [String: Int] = [:]
        for (key, record) in saved.requests {
            let request = record.request
            guard ScheduledRequest.isValidIdentifier(request.identifier),
                key == SchedulingState.key(request.appName, request.identifier)
            else { throw fail("the scheduled request \(key) is not keyed by its app and a valid identifier") }
            countByName[request.appName, default: 0] += 1
            guard let run = record.runningTask else { continue }
            guard let app = apps[run.app], app.name == request.appName,
                app.openTasks.contains(where: {
                    $0.id == run.task && $0.isScheduled == true && $0.name == request.identifier
                }),
                claimed.insert(run.task).inserted
            else { throw fail("the scheduled request \(key) runs as a task its app does not hold") }
        }
        for app in savedApps {
            for task in app.openTasks where task.isScheduled == true && !claimed.contains(task.id) {
                throw fail("\(app.name): the scheduled task \(task.id) runs no request")
            }
        }
        scheduling.requests = NameTable(saved.requests)
        scheduling.countByName = countByName
        scheduling.ledgers = NameTable(saved.ledgers)
        scheduling.lastForeground = NameTable(saved.lastForeground)
    }

    /// The state was just restored after a daemon restart: the actions that put the world back as the policy
    /// left it. Suspended apps are suspended again (their processes may have been continued meanwhile, by the
    /// service's clean-up or by hand), and the timer is armed at the earliest deadline: one that passed while the
    /// daemon was down fires at once, in order.
    public mutating func restarted(now: MonotonicInstant) -> [Action] {
        var actions: [Action] = []
        for app in apps.values where app.state == .suspended && !app.isProcessGone {
            if let exemption = app.suspensionExemption {
                // Saved suspended with an exemption (cannot be made so; fail safe): it runs, in background.
                wake(app.id, now: now, into: &actions)
                audit(.suspensionExempted, app.id, now: now, into: &actions) { $0.trigger = exemption.description }
            } else {
                actions.append(.suspend(app.id))
            }
        }
        armedDeadline = nil
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }
}
