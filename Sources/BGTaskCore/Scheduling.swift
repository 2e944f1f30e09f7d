// Scheduled requests as the policy holds them: the request an app submits, its state, the wall-clock time it is
// due by, and the rolling ledger of scheduled time per app name.

/// A point in wall-clock time (`CLOCK_REALTIME`): nanoseconds since the Unix epoch.
///
/// Only what must outlive a reboot is kept in it (a request's earliest begin and retry time, the scheduled-time
/// ledgers, the last time each app name was in the foreground); the core converts it to `MonotonicInstant` with
/// the offset the shell gives it (`Lifecycle.wallClockChanged(offset:now:)`) before it plans anything.
public struct WallClockInstant: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// Nanoseconds since 1970-01-01 00:00 UTC.
    public var nanoseconds: Int64

    /// Creates the instant `nanoseconds` after the epoch.
    public init(nanoseconds: Int64) {
        self.nanoseconds = nanoseconds
    }

    /// The instant `seconds` after the epoch.
    public static func seconds(_ seconds: Int64) -> WallClockInstant {
        WallClockInstant(nanoseconds: seconds &* 1_000_000_000)
    }

    public var description: String { "wall \(Double(nanoseconds) / 1e9)s" }

    public static func < (lhs: WallClockInstant, rhs: WallClockInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    /// The instant `duration` later, saturating like `MonotonicInstant`.
    public static func + (lhs: WallClockInstant, rhs: Duration) -> WallClockInstant {
        let (sum, overflow) = lhs.nanoseconds.addingReportingOverflow(rhs.nanosecondCount)
        return WallClockInstant(nanoseconds: overflow ? (rhs.nanosecondCount > 0 ? .max : .min) : sum)
    }

    /// The instant `duration` earlier.
    public static func - (lhs: WallClockInstant, rhs: Duration) -> WallClockInstant {
        lhs + .nanoseconds(-rhs.nanosecondCount)
    }

    /// The time from `rhs` to `lhs`.
    public static func - (lhs: WallClockInstant, rhs: WallClockInstant) -> Duration {
        .nanoseconds(lhs.nanoseconds &- rhs.nanoseconds)
    }
}

/// A request for work to run later, when it is due and its constraints hold (`BGTaskRequest`).
public struct ScheduledRequest: Hashable, Sendable, Codable {
    /// The app it runs in.
    public var appName: String
    /// Names the request within its app: a submit with an identifier the app already uses replaces that request.
    /// 1–255 bytes, no control characters, no `/`.
    public var identifier: String
    /// How long it may run.
    public var kind: ScheduledTaskKind
    /// It runs no earlier than this (`earliestBeginDate`).
    public var earliestBegin: WallClockInstant
    /// Every one of these must hold for it to start, and while it runs.
    public var constraints: Set<Constraint>
    /// The user it belongs to: it runs only in a registration of its app by this uid, its app is launched for it
    /// only as this uid (`.launch(app:owner:)`), and it counts against this uid's `ScheduledRequestsPerUserMax`.
    /// nil: in any registration of its app (none the daemon makes).
    public var ownerUID: UInt32?

    /// Creates a request.
    public init(
        appName: String, identifier: String, kind: ScheduledTaskKind, earliestBegin: WallClockInstant,
        constraints: Set<Constraint> = [], ownerUID: UInt32? = nil
    ) {
        self.appName = appName
        self.identifier = identifier
        self.kind = kind
        self.earliestBegin = earliestBegin
        self.constraints = constraints
        self.ownerUID = ownerUID
    }

    private enum CodingKeys: String, CodingKey {
        case appName, identifier, kind, earliestBegin, constraints, ownerUID
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        appName = try container.decode(String.self, forKey: .appName)
        identifier = try container.decode(String.self, forKey: .identifier)
        kind = try container.decode(ScheduledTaskKind.self, forKey: .kind)
        earliestBegin = try container.decode(WallClockInstant.self, forKey: .earliestBegin)
        constraints = Set(try container.decode([Constraint].self, forKey: .constraints))
        ownerUID = try container.decodeIfPresent(UInt32.self, forKey: .ownerUID)
    }

    /// Encodes the constraints in the enum's order: the same request always saves as the same bytes.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(appName, forKey: .appName)
        try container.encode(identifier, forKey: .identifier)
        try container.encode(kind, forKey: .kind)
        try container.encode(earliestBegin, forKey: .earliestBegin)
        try container.encode(constraints.sorted(), forKey: .constraints)
        try container.encodeIfPresent(ownerUID, forKey: .ownerUID)
    }

    /// The longest identifier, in bytes of UTF-8.
    public static let identifierBytesMax = 255

    /// Whether `identifier` may name a request: 1–255 bytes, no control character (C0, DEL, C1), no `/` (it
    /// separates the app name from the identifier in the saved state's keys).
    public static func isValidIdentifier(_ identifier: String) -> Bool {
        let count = identifier.utf8.count
        guard count >= 1, count <= identifierBytesMax else { return false }
        return identifier.unicodeScalars.allSatisfy { scalar in
            scalar != "/" && !(scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value))
        }
    }
}

/// Why a scheduling request was refused; nothing changed. Each case maps to a typed Varlink error.
public enum SchedulingError: Error, Hashable, Sendable {
    /// The identifier is empty, longer than 255 bytes, or holds a control character or `/`.
    case invalidIdentifier(String)
    /// This host has no source for these constraints, so a request needing them would wait forever.
    case missingSources([Constraint])
    /// A bound was hit: `limit` is the configuration key, `max` its value.
    case limitExceeded(limit: String, max: Int)
    /// The app holds no request with that identifier.
    case noSuchRequest(app: String, identifier: String)
    /// The app has no open scheduled task with that id.
    case noSuchTask(app: String, task: TaskID)
}

/// Where a scheduled request stands, as shown to clients.
public enum ScheduledRequestState: Hashable, Sendable {
    /// Waiting: due at `due` (its earliest begin, or its retry time if later), and, among its constraints, those
    /// that do not hold now (`waitingOn`, in the enum's order).
    case pending(due: WallClockInstant, waitingOn: [Constraint])
    /// Its app is being launched to run it.
    case launching
    /// Running as task `task` of the app registration `app`.
    case running(app: AppID, task: TaskID)
}

/// A scheduled request as shown to clients.
public struct ScheduledRequestSnapshot: Hashable, Sendable {
    /// The request as submitted.
    public var request: ScheduledRequest
    /// Where it stands.
    public var state: ScheduledRequestState
    /// Failed runs in a row (each doubling the wait before the next).
    public var failures: Int
    /// Whether a newer submit with the same identifier waits for this running one to end, and then replaces it.
    public var hasReplacement: Bool
}

/// How a scheduled task's app said it went (`setTaskCompleted`).
public enum ScheduledTaskOutcome: Hashable, Sendable {
    /// Done: the request is removed.
    case success
    /// Failed: the request is removed, or with `retry`, waits again with exponential backoff.
    case failure(retry: Bool)
}

/// The phase of one held request.
package enum ScheduledPhase: Sendable, Codable, Equatable {
    /// Waiting for its time, its constraints, a free slot, its daily budget or its app.
    case pending
    /// Its app was asked to launch; it must register by `until`, or the request waits again with backoff.
    case launching(until: MonotonicInstant)
    /// Running under a lease of its app.
    case running(ScheduledRun)
}

/// A running scheduled task: its lease and its deadlines (monotonic, like every lease's).
package struct ScheduledRun: Sendable, Codable, Equatable {
    package var app: AppID
    package var task: TaskID
    package var began: MonotonicInstant
    /// Its time ends (`RefreshTaskSec` or `ProcessingTaskSec`, less what the daily budget did not leave).
    package var ends: MonotonicInstant
    /// `backgroundTaskExpiring` is due (`ExpirationWarningSec` before `ends`).
    package var warnAt: MonotonicInstant
    /// `backgroundTaskExpiring` was sent.
    package var isWarned: Bool
    /// A constraint stopped holding: the app was warned, and the task ends `constraints-lost` at this instant.
    package var lostGraceEnds: MonotonicInstant?
}

/// One request the policy holds, with its state. Saved as it is: its times before it runs are wall-clock.
package struct ScheduledRecord: Sendable, Codable, Equatable {
    package var request: ScheduledRequest
    /// The shell said at submit that it can launch the app when it is not running.
    package var isLaunchable: Bool
    /// Failed runs in a row: the next waits `backoff(failures)`.
    package var failures: Int = 0
    /// It runs no earlier than this after a failure.
    package var retryAfter: WallClockInstant?
    package var phase: ScheduledPhase = .pending
    /// A newer submit of the same identifier, waiting for this running one to end.
    package var replacement: ScheduledReplacement?

    /// When it is due: its earliest begin, or its retry time if later.
    var due: WallClockInstant { max(request.earliestBegin, retryAfter ?? request.earliestBegin) }

    var runningTask: ScheduledRun? {
        if case .running(let run) = phase { return run }
        return nil
    }

    var isPending: Bool { phase == .pending }
}

/// A submit waiting for the running request it replaces.
package struct ScheduledReplacement: Sendable, Codable, Equatable {
    package var request: ScheduledRequest
    package var isLaunchable: Bool
}

/// Scheduled time an app name used over the last 24 hours, in wall-clock time so a reboot keeps it.
package struct ScheduledLedger: Sendable, Codable, Equatable {
    /// The rolling window of `ScheduledTimePerDaySec`.
    static let window: Duration = .seconds(24 * 60 * 60)
    /// Stretches kept: past it the two oldest merge into one spanning both, which can only overcount (fail
    /// closed), so an app running many tiny tasks cannot grow it.
    static let stretchesMax = 64

    /// One scheduled task's run.
    struct Stretch: Sendable, Codable, Equatable {
        var start: WallClockInstant
        var end: WallClockInstant
    }

    /// Closed runs, oldest first, none ending before the window.
    private(set) var stretches: [Stretch] = []

    /// Whether nothing is recorded.
    var isEmpty: Bool { stretches.isEmpty }

    /// Adds a closed run and forgets those that left the window.
    mutating func add(from start: WallClockInstant, to end: WallClockInstant) {
        guard end > start else { return }
        stretches.append(Stretch(start: start, end: end))
        stretches.sort { ($0.end, $0.start) < ($1.end, $1.start) }
        let horizon = end - Self.window
        stretches.removeAll { $0.end <= horizon }
        while stretches.count > Self.stretchesMax {
            let merged = Stretch(start: min(stretches[0].start, stretches[1].start), end: stretches[1].end)
            stretches.replaceSubrange(0...1, with: [merged])
        }
    }

    /// Time used within the window ending at `now`.
    func used(at now: WallClockInstant) -> Duration {
        let horizon = now - Self.window
        var total: Int64 = 0
        for stretch in stretches where stretch.end > horizon {
            total += (min(stretch.end, now) - max(stretch.start, horizon)).nanosecondCount
        }
        return .nanoseconds(max(total, 0))
    }

    /// The earliest instant at or after `start` when at least `needed` of `cap` is left, past runs leaving the
    /// window as it moves; nil when never (more is needed than the cap).
    func firstInstant(withAtLeast needed: Duration, of cap: Duration, from start: WallClockInstant)
        -> WallClockInstant?
    {
        guard needed <= cap else { return nil }
        if cap - used(at: start) >= needed { return start }
        // Used time never grows after the last run ended, so the first instant with enough left is found by
        // bisection; a window later everything has left it.
        var low = start
        var high = max(start, stretches.last?.end ?? start) + Self.window
        while high - low > .nanoseconds(1) {
            let middle = WallClockInstant(nanoseconds: low.nanoseconds + (high.nanoseconds - low.nanoseconds) / 2)
            if cap - used(at: middle) >= needed { high = middle } else { low = middle }
        }
        return high
    }
}

/// The saved form of the scheduling state: requests, ledgers and each app name's last time in the foreground,
/// keyed as the policy keeps them.
public struct SavedScheduling: Sendable, Codable, Equatable {
    /// Held requests by `app/identifier`.
    var requests: [String: ScheduledRecord] = [:]
    /// Scheduled time used, by app name.
    var ledgers: [String: ScheduledLedger] = [:]
    /// When each app name with requests was last in the foreground.
    var lastForeground: [String: WallClockInstant] = [:]

    /// How many requests it holds.
    public var requestCount: Int { requests.count }

    /// How many app names have a ledger of scheduled time.
    public var ledgerCount: Int { ledgers.count }

    /// The same requests as after a reboot: no process and no lease of the old boot is left, so a request that
    /// ran or was launching waits again with backoff (its app ended while it ran), its monotonic deadlines
    /// meaningless now.
    public func afterReboot(wallClockNow: WallClockInstant) -> SavedScheduling {
        var copy = self
        for (key, record) in requests where !record.isPending {
            copy.requests[key] = SchedulingState.settled(record, backoffFrom: wallClockNow)
        }
        return copy
    }
}
