// The manager's time and timers: the loop's monotonic clock in the daemon, or a clock a test moves by hand.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem

/// Where the manager's time comes from.
public enum ManagerClockMode: Sendable, Hashable {
    /// The event loop's `CLOCK_MONOTONIC` and sd-event timers: the daemon.
    case loop
    /// A clock that reads `start` and moves only when `Manager.advanceTime(to:)` moves it; the manager's timers
    /// fire then, never on their own. The loop still carries every input that is not time (sockets, pidfds, the
    /// inspection worker), so a test steps the real shell through a timeline without waiting for it.
    case manual(start: MonotonicInstant)
}

/// The manager's clock and the timers on it (the policy deadline, the memory monitor's samples, the `STATUS=`
/// rate limit, the retry of a paused `accept`).
///
/// With `.loop`, `now` is the loop's time for the current iteration and each timer is an sd-event timer. With
/// `.manual`, `advance(to:)` runs the timers that fall due on the way in deadline order (one deadline: in the
/// order they were armed), each with the clock at its own deadline, like swift-nio's `EmbeddedEventLoop`.
final class ManagerClock {
    private let loop: EventLoop
    /// The manual clock's reading; nil on the loop's clock.
    private var manualNow: MonotonicInstant?
    /// Timers made on the manual clock, armed or not.
    private var manualTimers: [ManagerTimer] = []
    private var nextArmingSequence: UInt64 = 0

    init(mode: ManagerClockMode, loop: EventLoop) {
        self.loop = loop
        if case .manual(let start) = mode { manualNow = start }
    }

    /// Whether time moves only by `advance(to:)`.
    var isManual: Bool { manualNow != nil }

    /// The time of the current loop iteration (all inputs of one iteration see the same instant).
    var now: MonotonicInstant { manualNow ?? MonotonicInstant(nanoseconds: loop.now) }

    /// The time right now, read afresh: for the moment of an act that is measured (a kill against its trigger).
    var freshNow: MonotonicInstant { manualNow ?? MonotonicInstant(nanoseconds: MonotonicClock.now()) }

    /// `CLOCK_REALTIME` less this clock: what turns one of its instants into wall-clock time. On the manual clock,
    /// the wall clock now less the manual reading, so the wall-clock times a test gives map onto its timeline.
    var wallClockOffset: Duration {
        if let manualNow { return .nanoseconds(WallClock.nanosecondsSince1970() &- manualNow.nanoseconds) }
        return .nanoseconds(WallClock.offsetFromMonotonic())
    }

    /// A disarmed timer calling `handler` when it fires; `accuracy` is how late the loop may fire it to coalesce
    /// wake-ups (ignored by the manual clock, which fires at the deadline).
    func makeTimer(name: String, accuracy: Duration, handler: @escaping () -> Void) throws(Errno) -> ManagerTimer {
        let timer = ManagerTimer(clock: self, name: name, handler: handler)
        if isManual {
            manualTimers.append(timer)
        } else {
            let source = try loop.addTimer(at: .max, accuracy: accuracy, name: name) { [unowned timer] _ in
                timer.fire()
            }
            try source.setEnabled(false)
            timer.source = source
        }
        return timer
    }

    fileprivate func nextSequence() -> UInt64 {
        defer { nextArmingSequence += 1 }
        return nextArmingSequence
    }

    /// Moves the manual clock forward to `instant`, firing every timer that falls due on the way. Time never
    /// moves backwards: an earlier `instant` only fires what is already due.
    func advance(to instant: MonotonicInstant) {
        guard let current = manualNow else { preconditionFailure("advance(to:) needs the manual clock") }
        let target = max(current, instant)
        while let (timer, deadline) = nextDue(by: target) {
            manualNow = max(manualNow ?? deadline, deadline)
            timer.fire()
        }
        manualNow = target
    }

    /// The armed manual timer that fires first among those due by `instant`, with its deadline.
    private func nextDue(by instant: MonotonicInstant) -> (ManagerTimer, MonotonicInstant)? {
        var first: (timer: ManagerTimer, deadline: MonotonicInstant)?
        for timer in manualTimers {
            guard let deadline = timer.deadline, deadline <= instant else { continue }
            if let current = first,
                (current.deadline, current.timer.armingSequence) <= (deadline, timer.armingSequence)
            {
                continue
            }
            first = (timer, deadline)
        }
        return first
    }

    /// Forgets the manual clock's timers (the manager is done).
    func cancelAll() {
        for timer in manualTimers { timer.disarm() }
        manualTimers = []
    }
}

/// One timer of the manager: one-shot, re-armable, and disarmed once it fires.
final class ManagerTimer {
    private unowned let clock: ManagerClock
    let name: String
    private let handler: () -> Void
    /// The sd-event timer behind it on the loop's clock.
    fileprivate var source: TimerSource?
    /// When it fires; nil while disarmed.
    private(set) var deadline: MonotonicInstant?
    /// When it was last armed relative to the others: same-deadline timers fire in arming order.
    fileprivate private(set) var armingSequence: UInt64 = 0

    fileprivate init(clock: ManagerClock, name: String, handler: @escaping () -> Void) {
        self.clock = clock
        self.name = name
        self.handler = handler
    }

    /// Arms (or re-arms) the timer at `instant`: cheap enough to call after every policy step.
    func rearm(at instant: MonotonicInstant) throws(Errno) {
        try source?.rearm(at: instant.nanoseconds)
        deadline = instant
        armingSequence = clock.nextSequence()
    }

    /// Arms the timer at `instant`, or disarms it for nil: what a part keeping several deadlines calls with the
    /// earliest of them after each change. Nothing when it is armed there already.
    func schedule(at instant: MonotonicInstant?) throws(Errno) {
        guard let instant else { return disarm() }
        guard instant != deadline else { return }
        try rearm(at: instant)
    }

    /// Disarms the timer; nothing when it is not armed.
    func disarm() {
        guard deadline != nil else { return }
        deadline = nil
        try? source?.setEnabled(false)
    }

    fileprivate func fire() {
        deadline = nil
        handler()
    }
}
