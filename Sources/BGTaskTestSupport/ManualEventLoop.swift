// A manual event loop for tests: time moves only when the test says, and timers run in a defined order.

import BGTaskCore

/// A single-threaded event loop whose clock only moves when the test advances it.
///
/// Like swift-nio's `EmbeddedEventLoop`: `advanceTime(by:)` runs every timer due up to the new time, in
/// deadline order, timers with the same deadline in the order they were scheduled, each with the clock set
/// to its own deadline. Time never moves backwards.
public final class ManualEventLoop {
    /// A scheduled timer, which can be cancelled.
    public struct Timer: Hashable, Sendable {
        fileprivate let sequence: UInt64
    }

    private struct Entry {
        var deadline: MonotonicInstant
        var sequence: UInt64
        var body: () -> Void
    }

    /// The loop's current time.
    public private(set) var now: MonotonicInstant
    private var entries: [Entry] = []
    private var nextSequence: UInt64 = 0

    /// Creates a loop whose clock reads `start`.
    public init(start: MonotonicInstant = .zero) {
        now = start
    }

    /// Runs `body` when the clock reaches `deadline` (at the next advance if it is already past).
    @discardableResult
    public func schedule(at deadline: MonotonicInstant, _ body: @escaping () -> Void) -> Timer {
        defer { nextSequence += 1 }
        entries.append(Entry(deadline: deadline, sequence: nextSequence, body: body))
        return Timer(sequence: nextSequence)
    }

    /// Cancels a timer that has not run; cancelling one that ran does nothing.
    public func cancel(_ timer: Timer) {
        entries.removeAll { $0.sequence == timer.sequence }
    }

    /// The earliest pending timer's deadline.
    public var nextDeadline: MonotonicInstant? {
        entries.min { ($0.deadline, $0.sequence) < ($1.deadline, $1.sequence) }?.deadline
    }

    /// Moves the clock forward by `duration`, running every timer that falls due on the way.
    public func advanceTime(by duration: Duration) {
        precondition(duration >= .zero, "time only moves forward")
        advanceTime(to: now + duration)
    }

    /// Moves the clock forward to `instant`, running every timer that falls due on the way.
    public func advanceTime(to instant: MonotonicInstant) {
        precondition(instant >= now, "time only moves forward")
        while let index = entries.indices.min(by: {
            (entries[$0].deadline, entries[$0].sequence) < (entries[$1].deadline, entries[$1].sequence)
        }), entries[index].deadline <= instant {
            let entry = entries.remove(at: index)
            now = max(now, entry.deadline)
            entry.body()
        }
        now = instant
    }

    /// Runs timers already due without moving the clock.
    public func run() {
        advanceTime(to: now)
    }
}
