// Launch slots shared fairly between users: the few launches that may be starting at once (`LaunchesInFlightMax`)
// go, as they free, to the waiting user with the fewest starting, so no user's flood of `Launch` calls keeps another
// user's apps from starting. One part in front of whichever supervisor starts the apps (`AppSupervisor`).

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// The order and bounds of launches waiting for a slot, and how many each user has starting: a value with no clock
/// and no I/O, so its order is tested alone.
///
/// A slot that frees goes to the waiting user with the fewest launches starting; among users with as few, to the
/// one served least recently (a user waiting for the first time counts as served when it began to wait): round
/// robin. Each user's own launches go in the order they came. At most `waitingPerUserMax` launches of one user wait.
struct LaunchQueue<Item> {
    /// One launch waiting.
    struct Waiting {
        let item: Item
        let uid: uid_t
        /// It fails, still waiting, at this instant.
        let deadline: MonotonicInstant
    }

    /// The most launches of one user that wait at once.
    let waitingPerUserMax: Int
    /// Each waiting user's launches, oldest first.
    private(set) var waiting: [uid_t: [Waiting]] = [:]
    /// Launches each user has starting (handed to the supervisor, not yet ended).
    private(set) var starting: [uid_t: Int] = [:]
    /// When each user with launches waiting or starting was last served, counted in servings: the round robin.
    private var lastServed: [uid_t: UInt64] = [:]
    private var servings: UInt64 = 0

    init(waitingPerUserMax: Int) {
        self.waitingPerUserMax = waitingPerUserMax
    }

    /// How many launches wait, of every user.
    var waitingCount: Int { waiting.values.reduce(0) { $0 + $1.count } }

    /// Whether any launch waits.
    var isEmpty: Bool { waiting.isEmpty }

    /// The earliest deadline of a waiting launch.
    var nextDeadline: MonotonicInstant? { waiting.values.lazy.compactMap { $0.map(\.deadline).min() }.min() }

    /// Whether a waiting launch satisfies `predicate`.
    func contains(where predicate: (Item) -> Bool) -> Bool {
        waiting.values.contains { $0.contains { predicate($0.item) } }
    }

    /// Adds a launch of `uid` at the end of its queue, to fail at `deadline` if no slot comes; false (nothing added)
    /// when `uid` has `waitingPerUserMax` waiting already.
    mutating func enqueue(_ item: Item, uid: uid_t, deadline: MonotonicInstant) -> Bool {
        guard waiting[uid, default: []].count < waitingPerUserMax else { return false }
        waiting[uid, default: []].append(Waiting(item: item, uid: uid, deadline: deadline))
        if lastServed[uid] == nil { lastServed[uid] = servings }
        return true
    }

    /// Takes the launch a free slot goes to and counts it as starting; nil when none waits.
    mutating func next() -> Waiting? {
        var chosen: (uid: uid_t, starting: Int, served: UInt64)?
        for uid in waiting.keys {
            let candidate = (uid: uid, starting: starting[uid] ?? 0, served: lastServed[uid] ?? 0)
            if let best = chosen,
                (best.starting, best.served, best.uid) <= (candidate.starting, candidate.served, candidate.uid)
            {
                continue
            }
            chosen = candidate
        }
        guard let uid = chosen?.uid, var queue = waiting[uid], !queue.isEmpty else { return nil }
        let first = queue.removeFirst()
        waiting[uid] = queue.isEmpty ? nil : queue
        starting[uid, default: 0] += 1
        servings += 1
        lastServed[uid] = servings
        return first
    }

    /// A launch `next()` gave ended (started, failed, or was not taken after all): its user has one fewer starting.
    mutating func ended(uid: uid_t) {
        let left = (starting[uid] ?? 1) - 1
        starting[uid] = left > 0 ? left : nil
        forgetIfIdle(uid)
    }

    /// Takes out the waiting launches whose deadline is at or before `now`, oldest deadline first.
    mutating func expire(at now: MonotonicInstant) -> [Waiting] {
        var expired: [Waiting] = []
        for (uid, queue) in waiting {
            let (late, kept) = (queue.filter { $0.deadline <= now }, queue.filter { $0.deadline > now })
            guard !late.isEmpty else { continue }
            expired += late
            waiting[uid] = kept.isEmpty ? nil : kept
            forgetIfIdle(uid)
        }
        return expired.sorted { $0.deadline < $1.deadline }
    }

    /// Takes out every waiting launch (the daemon is stopping).
    mutating func removeAll() -> [Waiting] {
        let all = waiting.values.flatMap { $0 }
        waiting = [:]
        for uid in Array(lastServed.keys) { forgetIfIdle(uid) }
        return all
    }

    /// Forgets the round-robin turn of a user with nothing waiting or starting, so the table holds only users with
    /// launches in hand.
    private mutating func forgetIfIdle(_ uid: uid_t) {
        if waiting[uid] == nil && starting[uid] == nil { lastServed[uid] = nil }
    }
}

/// A launch as the manager asks for it: what to start, for whom, and how long its program has to start.
struct PendingLaunch {
    let request: LaunchRequest
    let origin: LaunchOrigin
    /// `LaunchTimeoutSec` of its app: the longest it waits for a slot, and then the longest its program has to start.
    let timeout: Duration
}

/// Why a launch was never handed to the supervisor.
enum LaunchNotStarted: CustomStringConvertible {
    /// No slot came free within its timeout (`LaunchTimeoutSec`), `capacity` launches starting all along.
    case noSlot(waited: Duration, capacity: Int)
    /// The identity rule no longer lets it run as its user (a reload changed a pin while it waited).
    case denied(IdentityRefusal)
    /// The supervisor would not take it although it had room: it is stopping.
    case refused

    var description: String {
        switch self {
        case .noSlot(let waited, let capacity):
            "no launch slot came free within \(waited) (LaunchTimeoutSec): \(capacity) launches were starting "
                + "(LaunchesInFlightMax)"
        case .denied(let refusal): "\(refusal)"
        case .refused: "bgtaskd is stopping"
        }
    }
}

/// What the launch slots need of their owner (the manager, through the process table).
protocol LaunchSlotsHost: AnyObject {
    /// A launch handed to the supervisor ended (its program started, or it could not).
    func launchEnded(_ launch: LaunchAttempt, _ outcome: LaunchOutcome)
    /// Why a launch given its slot may not start as its user (the identity rule, asked again: a reload may have
    /// changed a pin while it waited); nil when it may.
    func identityRefusal(for request: LaunchRequest, origin: LaunchOrigin) -> IdentityRefusal?
    /// A launch was never handed to the supervisor, and why.
    func launchNotStarted(_ launch: PendingLaunch, because reason: LaunchNotStarted)
}

/// Fair launch slots in front of the supervisor: a launch that finds no room waits for a slot instead of failing,
/// and a slot that frees goes to the waiting user with the fewest launches starting (`LaunchQueue`).
///
/// Bounded: at most `waitingPerUserMax` launches of one user wait (past it a launch is refused with
/// `LimitExceeded`, limit `LaunchesWaitingPerUserMax`), each waits at most its `LaunchTimeoutSec`, and each waiting
/// `Launch` holds its connection's later calls, so connections (`ConnectionsPerUserMax`, `ConnectionsMax`) bound
/// them too; launches for scheduled requests are at most `ScheduledTasksMax` at once.
final class LaunchSlots {
    /// `LaunchesWaitingPerUserMax`: launches of one user waiting for a slot at once. 64: a session restoring its apps
    /// starts a few dozen at once, well under it; more from one user is a flood, and each waiting `Launch` holds a
    /// connection of its own.
    static let waitingPerUserMax = 64

    /// Where a launch went.
    enum Admission: Equatable {
        /// Handed to the supervisor at once.
        case started
        /// Waiting for a slot.
        case waiting
        /// Refused: its user has `waitingPerUserMax` launches waiting.
        case refused
    }

    weak var host: (any LaunchSlotsHost)?
    /// Launches starting at once, at most: the supervisor's capacity.
    let capacity: Int
    private let supervisor: AppSupervisor
    private var queue: LaunchQueue<PendingLaunch>
    private let clock: ManagerClock
    private let logger: Logger
    private var timer: ManagerTimer?
    private var isStopped = false
    private var isDraining = false

    /// Slots in front of `supervisor` (whose outcomes now come through here), `capacity` of them.
    init(
        supervisor: AppSupervisor, capacity: Int, waitingPerUserMax: Int, clock: ManagerClock, logger: Logger
    ) throws(Errno) {
        self.supervisor = supervisor
        self.capacity = capacity
        queue = LaunchQueue(waitingPerUserMax: waitingPerUserMax)
        self.clock = clock
        self.logger = logger
        timer = try clock.makeTimer(name: "launch-slots", accuracy: .milliseconds(10)) { [unowned self] in
            self.deadlinesReached()
        }
        supervisor.onOutcome = { [unowned self] launch, outcome in self.launchEnded(launch, outcome) }
        supervisor.onRoomFreed = { [unowned self] in self.drain() }
    }

    /// How many launches wait for a slot.
    var waitingCount: Int { queue.waitingCount }

    /// Whether a launch of `name` waits for a slot or is starting (a second one is refused meanwhile).
    func isLaunching(_ name: String) -> Bool {
        supervisor.isLaunching(name) || queue.contains { $0.request.name == name }
    }

    /// Starts `launch` now if there is a slot and nobody waits for one, else queues it for the next slot its turn
    /// gives it, at most its timeout.
    func submit(_ launch: PendingLaunch) -> Admission {
        let uid = launch.request.uid
        guard !isStopped, queue.enqueue(launch, uid: uid, deadline: clock.now + launch.timeout) else {
            return .refused
        }
        drain()
        if queue.contains(where: { $0.request.name == launch.request.name && $0.request.uid == uid }) {
            logger.info(
                "\(launch.request.name) waits for a launch slot (\(capacity) starting, \(queue.waitingCount) waiting)",
                [.app(launch.request.name)])
            return .waiting
        }
        return .started
    }

    /// Hands waiting launches to the supervisor while it has room, in the queue's order.
    private func drain() {
        // A launch's outcome can come while a launch is being handed over (a refusal at once): the loop below goes on.
        guard !isDraining, !isStopped else { return }
        isDraining = true
        defer {
            isDraining = false
            armTimer()
        }
        while supervisor.hasRoom, let next = queue.next() {
            let launch = next.item
            if let refusal = host?.identityRefusal(for: launch.request, origin: launch.origin) {
                queue.ended(uid: next.uid)
                host?.launchNotStarted(launch, because: .denied(refusal))
                continue
            }
            guard supervisor.submit(launch.request, for: launch.origin, timeout: launch.timeout) else {
                queue.ended(uid: next.uid)
                host?.launchNotStarted(launch, because: .refused)
                continue
            }
        }
    }

    /// A launch the supervisor had ended: its user's slot is free for the next in turn once the host heard it.
    private func launchEnded(_ launch: LaunchAttempt, _ outcome: LaunchOutcome) {
        queue.ended(uid: launch.request.uid)
        host?.launchEnded(launch, outcome)
        drain()
    }

    private func deadlinesReached() {
        for expired in queue.expire(at: clock.now) {
            host?.launchNotStarted(expired.item, because: .noSlot(waited: expired.item.timeout, capacity: capacity))
        }
        armTimer()
    }

    private func armTimer() {
        do {
            try timer?.schedule(at: queue.nextDeadline)
        } catch {
            // Without it a waiting launch waits until a slot frees rather than until its deadline; still bounded.
            logger.error("cannot schedule the deadlines of waiting launches: \(error)")
        }
    }

    /// The daemon is stopping: nothing waits or starts from now on. Waiting calls are not answered: their
    /// connections are closing.
    func stop() {
        guard !isStopped else { return }
        isStopped = true
        timer?.disarm()
        _ = queue.removeAll()
    }
}
