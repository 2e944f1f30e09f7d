// Typed identities for apps, leases and events, so a raw integer can never be passed in the wrong place.

/// The identity of one registration of an app: unique for the life of the daemon, never reused.
///
/// Names are unique only among *live* apps; a name can register again after its app ended, so
/// actions and timers refer to apps by this identity, never by name or PID. The value packs a serial number
/// (upper bits, increasing with each registration) and the slot of the policy's app table (lower bits), so a
/// lookup is an array index rather than a hash; the serial makes a stale identity miss a reused slot.
public struct AppID: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The raw value; positive.
    public var rawValue: Int64

    /// Bits of `rawValue` holding the slot: room for 16 million apps at once.
    static let slotBits: Int64 = 24

    /// Wraps a raw value previously read from `rawValue` (state files, tests).
    public init(rawValue: Int64) {
        self.rawValue = rawValue
    }

    /// The identity with serial `serial` stored in `slot`.
    init(serial: Int64, slot: Int) {
        rawValue = serial << Self.slotBits | Int64(slot)
    }

    /// The registration's serial number: 1 for the first registration, increasing.
    public var serial: Int64 { rawValue >> Self.slotBits }

    /// The slot of the app table.
    var slot: Int { Int(rawValue & (1 << Self.slotBits - 1)) }

    public var description: String { "app#\(serial)" }

    public static func < (lhs: AppID, rhs: AppID) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A background-task lease (`UIBackgroundTaskIdentifier`): positive, never reused while the daemon runs.
public struct TaskID: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The raw value; positive. Zero is never issued (it plays `UIBackgroundTaskInvalid` on the client side).
    public var rawValue: Int64

    /// Wraps a raw value received from a client.
    public init(rawValue: Int64) {
        self.rawValue = rawValue
    }

    public var description: String { "task#\(rawValue)" }

    public static func < (lhs: TaskID, rhs: TaskID) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// An event sent to an app, acknowledged by this id.
public struct EventID: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// The raw value; positive, increasing in the order events are created.
    public var rawValue: Int64

    /// Wraps a raw value received from a client.
    public init(rawValue: Int64) {
        self.rawValue = rawValue
    }

    public var description: String { "event#\(rawValue)" }

    public static func < (lhs: EventID, rhs: EventID) -> Bool { lhs.rawValue < rhs.rawValue }
}
