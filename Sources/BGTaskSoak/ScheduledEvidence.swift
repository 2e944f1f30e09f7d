// The evidence of scheduled work a soak gathers outside the daemon: the power flips the harness made, the requests it
// submitted and cancelled with their answers, what the apps recorded of their scheduled tasks, and the requests held
// at the end.

import BGTaskProtocol

/// The fake power adapter's `online` file written by the harness: from `at` on, external power is `isOnline`.
public struct PowerChange: Hashable, Sendable {
    /// On the harness's clock, the widest reading of when the daemon could see it: a plug when its write started, a
    /// pull when its write was done.
    public var at: Duration
    /// Whether the adapter is online (the `ac` constraint holds) from then on.
    public var isOnline: Bool

    /// A change.
    public init(at: Duration, isOnline: Bool) {
        self.at = at
        self.isOnline = isOnline
    }
}

/// A request by its app and identifier: a new submit with the same key replaces the request held.
public struct RequestKey: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The app's name.
    public var app: String
    /// The request's identifier.
    public var identifier: String

    /// A key.
    public init(app: String, identifier: String) {
        self.app = app
        self.identifier = identifier
    }

    /// `app/identifier`, as counter-examples name it.
    public var description: String { "\(app)/\(identifier)" }

    /// By app, then identifier.
    public static func < (lhs: RequestKey, rhs: RequestKey) -> Bool {
        (lhs.app, lhs.identifier) < (rhs.app, rhs.identifier)
    }
}

/// A `SubmitRequest` or `CancelRequest` the harness made, and how the daemon answered it.
public struct RequestOperation: Hashable, Sendable {
    /// Which call.
    public enum Kind: String, Hashable, Sendable {
        /// `SubmitRequest`.
        case submit
        /// `CancelRequest`.
        case cancel
    }

    /// How the call came out.
    public enum Outcome: Hashable, Sendable {
        /// Answered with success.
        case accepted
        /// Answered with a Varlink error (its name): the daemon changed nothing (a refused submit), or held no
        /// such request (a cancel).
        case refused(String)
        /// No answer (the daemon was down, or the connection failed): it may or may not have been done.
        case unanswered
    }

    /// When the harness asked (before the call was sent): the daemon did it, if at all, after this.
    public var at: Duration
    /// The request.
    public var key: RequestKey
    /// Which call.
    public var kind: Kind
    /// For a submit: the conditions it requires (`ac`, ...).
    public var requires: [String]
    /// For a submit: the kind of task it asks for (`refresh` or `processing`); nil when not recorded.
    public var taskKind: String?
    /// The answer.
    public var outcome: Outcome
    /// When the answer came (or the call failed); nil when not recorded. The daemon did it, if at all, between
    /// `at` and this.
    public var answeredAt: Duration?

    /// An operation.
    public init(
        at: Duration, key: RequestKey, kind: Kind, requires: [String] = [], taskKind: String? = nil,
        outcome: Outcome, answeredAt: Duration? = nil
    ) {
        self.at = at
        self.key = key
        self.kind = kind
        self.requires = requires
        self.taskKind = taskKind
        self.outcome = outcome
        self.answeredAt = answeredAt
    }
}

/// What a soak app recorded of its scheduled work, each at the moment it happened in the app (`CLOCK_MONOTONIC`,
/// mapped to the harness's clock).
public struct ScheduledReceipt: Hashable, Sendable {
    /// What the app saw or did.
    public enum Kind: Hashable, Sendable {
        /// `runScheduledTask` for the request `identifier` reached its launch handler.
        case run(identifier: String)
        /// The task's expiration handler ran (`backgroundTaskExpiring` listed it).
        case expiring
        /// The app is about to call `SetTaskCompleted` (recorded before the call), with `success`, and `retry`
        /// for a failure.
        case completing(success: Bool, retry: Bool)
    }

    /// When, on the harness's clock.
    public var at: Duration
    /// The app.
    public var app: String
    /// The task id of the scheduled task.
    public var taskId: Int
    /// What happened.
    public var kind: Kind

    /// A receipt.
    public init(at: Duration, app: String, taskId: Int, kind: Kind) {
        self.at = at
        self.app = app
        self.taskId = taskId
        self.kind = kind
    }
}

/// Scheduled work as the harness saw it from outside the daemon.
public struct ScheduledEvidence: Hashable, Sendable {
    /// The adapter's `online` as the harness set it, in order; the first is the state the daemon started with.
    public var powerChanges: [PowerChange]
    /// Every `SubmitRequest` and `CancelRequest` the harness made, in order.
    public var operations: [RequestOperation]
    /// What the apps recorded, in no particular order.
    public var receipts: [ScheduledReceipt]
    /// The requests `ListRequests` held at the end, after the apps ended and before the daemon's final stop; nil
    /// when it could not be taken.
    public var heldAtEnd: Set<RequestKey>?

    /// Scheduled evidence; every collection defaults to empty.
    public init(
        powerChanges: [PowerChange] = [], operations: [RequestOperation] = [], receipts: [ScheduledReceipt] = [],
        heldAtEnd: Set<RequestKey>? = nil
    ) {
        self.powerChanges = powerChanges
        self.operations = operations
        self.receipts = receipts
        self.heldAtEnd = heldAtEnd
    }

    /// The conditions each identifier's submits required: the soak gives each identifier one set for the run.
    var requirementsByIdentifier: [String: Set<String>] {
        var requirements: [String: Set<String>] = [:]
        for operation in operations where operation.kind == .submit {
            requirements[operation.key.identifier, default: []].formUnion(operation.requires)
        }
        return requirements
    }

    /// Whether external power was online at `time` (online before the first change).
    func isOnline(at time: Duration) -> Bool {
        powerChanges.last { $0.at <= time }?.isOnline ?? true
    }

    /// Whether external power was online at any moment of `range`.
    func wasOnline(during range: ClosedRange<Duration>) -> Bool {
        isOnline(at: range.lowerBound)
            || powerChanges.contains { range.contains($0.at) && $0.isOnline }
    }
}
