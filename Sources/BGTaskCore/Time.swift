// Monotonic time as a plain value: the core never reads a clock, every input carries `now`.

/// A point on `CLOCK_MONOTONIC`, in nanoseconds since an arbitrary origin (boot, on Linux).
///
/// The core only compares and offsets instants; the shell reads the clock and passes the reading in.
/// Wall-clock time never enters policy, so a clock step (NTP, suspend of the host) cannot
/// shorten or lengthen a lease.
public struct MonotonicInstant: Hashable, Comparable, Sendable, Codable, CustomStringConvertible {
    /// Nanoseconds since the clock's origin.
    public var nanoseconds: Int64

    /// Creates an instant `nanoseconds` after the clock's origin.
    public init(nanoseconds: Int64) {
        self.nanoseconds = nanoseconds
    }

    /// The clock's origin; handy as the start of a test timeline.
    public static let zero = MonotonicInstant(nanoseconds: 0)

    /// Seconds since the origin, for display.
    public var seconds: Double { Double(nanoseconds) / 1e9 }

    public var description: String { "\(seconds)s" }

    public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    /// The instant `duration` later. Saturates instead of overflowing, so an "infinite" budget stays in range.
    public static func + (lhs: MonotonicInstant, rhs: Duration) -> MonotonicInstant {
        let (sum, overflow) = lhs.nanoseconds.addingReportingOverflow(rhs.nanosecondCount)
        return MonotonicInstant(nanoseconds: overflow ? (rhs.nanosecondCount > 0 ? .max : .min) : sum)
    }

    /// The instant `duration` earlier.
    public static func - (lhs: MonotonicInstant, rhs: Duration) -> MonotonicInstant {
        lhs + .nanoseconds(-rhs.nanosecondCount)
    }

    /// The time from `rhs` to `lhs` (negative when `lhs` is earlier).
    public static func - (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Duration {
        .nanoseconds(lhs.nanoseconds &- rhs.nanoseconds)
    }
}
