// A single-threaded event loop over systemd's sd-event: descriptors, one re-armable timer, signals, defers.
import BGTaskPOSIX
import BGTaskVocabulary
import CSystemd
import Glibc

/// An sd-event loop (`sd_event`). Single-threaded: create it, add sources and run it on one thread.
///
/// The loop owns its sources: a source stays registered until `cancel()` is called on it or the loop is
/// released, whether or not the caller keeps the returned handle. Handlers are plain Swift closures; the
/// C callbacks are non-capturing trampolines that find the source through sd-event's userdata.
///
/// Handlers that capture the loop or its owner strongly form a cycle through the loop's sources; capture
/// `[unowned self]` or `[weak self]`, or cancel the sources when done.
public final class EventLoop {
    /// The `sd_event` object; owned (one reference) for the life of this object.
    let event: OpaquePointer

    /// Every live source, so the loop owns them and can cancel them all when it is released.
    private var sources: [ObjectIdentifier: EventSource] = [:]

    /// How the loop has been turning, measured by `run()`: what a stall would show.
    public private(set) var statistics = LoopStatistics()

    /// The name of the source being dispatched, set by the trampolines for `statistics` (and by the sd-bus
    /// connections' callbacks, whose sources sd-bus adds itself); "other" for a source no trampoline names.
    var dispatchingSourceName = ""

    /// Whether a source's handler is running (inside `run()` or `runIteration(timeout:)`).
    public private(set) var isDispatching = false

    /// Runs when the loop has dispatched everything pending and is about to sleep: the place to finish in one
    /// go what the handlers since the last sleep started (the daemon saves the state they changed and sends the
    /// replies waiting on it). A deferred source would do the same at the cost of a turn of the loop, and an
    /// extra poll, per wake-up. It may add, change or cancel sources: the loop then prepares again before it
    /// sleeps.
    public var whenIdle: (() -> Void)?

    /// Runs after each dispatched source's handler returns (not for a dispatch that failed).
    public var afterDispatch: (() -> Void)?

    /// Set by every change to a source, so the loop sees one `whenIdle` made; also by sd-bus connections on the
    /// loop when they queue a message (sd-bus arms its sources when the loop prepares).
    var sourcesChanged = false

    /// Creates a loop (`sd_event_new`).
    public init() throws(Errno) {
        var event: OpaquePointer?
        _ = try systemCall("sd_event_new", convention: .returnsNegativeErrno) { sd_event_new(&event) }
        guard let event else { throw Errno(rawValue: ENOMEM, operation: "sd_event_new") }
        self.event = event
    }

    deinit {
        // Each source holds a reference to the sd_event, so they go first.
        cancelAllSources()
        sd_event_unref(event)
    }

    /// The `CLOCK_MONOTONIC` time in nanoseconds at which the current iteration woke up (`sd_event_now`);
    /// before the first iteration, the current time. Handlers of one iteration all see the same value.
    public var now: Int64 {
        var microseconds: UInt64 = 0
        // sd_event_now fails only for a clock sd-event does not support; CLOCK_MONOTONIC is always supported.
        guard sd_event_now(event, CLOCK_MONOTONIC, &microseconds) >= 0 else { return MonotonicClock.now() }
        return Int64(clamping: microseconds) &* 1000
    }

    /// Watches `fd` for `events` and calls `handler` with the events that occurred, each iteration in which
    /// the descriptor is ready (level-triggered). Cancel the source before closing the descriptor.
    @discardableResult
    public func addIO(
        fd: FileDescriptor,
        events: IOEvents,
        name: String = "io",
        handler: @escaping (IOSource, IOEvents) -> Void
    ) throws(Errno) -> IOSource {
        let source = IOSource(loop: self, name: name, fileDescriptor: fd, handler: handler)
        try register(source, operation: "sd_event_add_io(\(name), fd \(fd.rawValue))") { pointer, userdata in
            sd_event_add_io(event, &pointer, fd.rawValue, events.rawValue, ioTrampoline, userdata)
        }
        return source
    }

    /// Calls `handler` once, at or up to `accuracy` after `deadline` (`CLOCK_MONOTONIC` nanoseconds).
    ///
    /// After firing the timer is disabled, not cancelled: `rearm(at:)` schedules it again cheaply, so a
    /// daemon keeps one timer and re-arms it at its policy's next deadline.
    @discardableResult
    public func addTimer(
        at deadline: Int64,
        accuracy: Duration = .milliseconds(1),
        name: String = "timer",
        handler: @escaping (TimerSource) -> Void
    ) throws(Errno) -> TimerSource {
        let source = TimerSource(loop: self, name: name, deadline: deadline, handler: handler)
        let microseconds = TimerSource.microseconds(deadline)
        let accuracyMicroseconds = UInt64(max(1, accuracy.nanosecondCount / 1000))
        try register(source, operation: "sd_event_add_time(\(name))") { pointer, userdata in
            sd_event_add_time(
                event, &pointer, CLOCK_MONOTONIC, microseconds, accuracyMicroseconds,
                timerTrampoline, userdata)
        }
        return source
    }

    /// Blocks `signal` in the calling thread, then calls `handler` each time it arrives (through a
    /// signalfd, so the handler runs in the loop, not in signal context).
    ///
    /// Only a signal directed at this thread, or at the process while every thread blocks it, reaches the
    /// loop; a daemon blocks its signals before starting other threads. One source per signal and loop.
    @discardableResult
    public func addSignal(
        _ signal: Signal,
        name: String? = nil,
        handler: @escaping (SignalSource, SignalInfo) -> Void
    ) throws(Errno) -> SignalSource {
        try Signal.block([signal])
        let name = name ?? signal.name
        let source = SignalSource(loop: self, name: name, handler: handler)
        try register(source, operation: "sd_event_add_signal(\(signal.name))") { pointer, userdata in
            sd_event_add_signal(event, &pointer, signal.rawValue, signalTrampoline, userdata)
        }
        return source
    }

    /// Runs `handler` once, on the next iteration, before the loop waits again; the source then cancels
    /// itself. Cancelling it first means it never runs.
    @discardableResult
    public func addDefer(name: String = "defer", handler: @escaping () -> Void) throws(Errno) -> EventSource {
        let source = CallbackSource(loop: self, name: name, isOneShot: true) { source in
            source.cancel()
            handler()
        }
        try register(source, operation: "sd_event_add_defer(\(name))") { pointer, userdata in
            sd_event_add_defer(event, &pointer, callbackTrampoline, userdata)
        }
        return source
    }

    /// Runs `handler` on every iteration in which nothing else is ready, while the source is enabled, until
    /// cancelled: work that must go on in bounded slices between other events (a client's backlog of pipelined
    /// calls). Created disabled; enable it with `setEnabled(true)` when there is work and disable it when there
    /// is none, or the loop never sleeps.
    ///
    /// It runs at idle priority because an enabled defer source stays pending from the iteration it was first
    /// marked, so at the same priority it would always be dispatched before descriptors and timers that became
    /// ready later: they would never run while it has work.
    @discardableResult
    public func addRepeatingDefer(name: String = "defer", handler: @escaping (EventSource) -> Void) throws(Errno)
        -> EventSource
    {
        let source = CallbackSource(loop: self, name: name, isOneShot: false, handler: handler)
        try register(source, operation: "sd_event_add_defer(\(name))") { pointer, userdata in
            sd_event_add_defer(event, &pointer, callbackTrampoline, userdata)
        }
        try source.setPriority(.idle)
        try source.setEnabled(false)
        return source
    }

    /// Runs `handler` at the end of every iteration that dispatched some other source, until cancelled:
    /// the place to do once per batch of events what each event would otherwise do (save state, flush).
    @discardableResult
    public func addPost(name: String = "post", handler: @escaping (EventSource) -> Void) throws(Errno)
        -> EventSource
    {
        let source = CallbackSource(loop: self, name: name, isOneShot: false, handler: handler)
        try register(source, operation: "sd_event_add_post(\(name))") { pointer, userdata in
            sd_event_add_post(event, &pointer, callbackTrampoline, userdata)
        }
        return source
    }

    /// Runs `handler` once when the loop exits (`exit(code:)`), before `run()` returns: the place for
    /// cleanup that must also happen on a signal-driven stop (thawing frozen apps).
    @discardableResult
    public func addExit(name: String = "exit", handler: @escaping (EventSource) -> Void) throws(Errno)
        -> EventSource
    {
        let source = CallbackSource(loop: self, name: name, isOneShot: true, handler: handler)
        try register(source, operation: "sd_event_add_exit(\(name))") { pointer, userdata in
            sd_event_add_exit(event, &pointer, callbackTrampoline, userdata)
        }
        return source
    }

    /// Lets the loop send `WATCHDOG=1` by itself at half of `WATCHDOG_USEC` (`sd_event_set_watchdog`), so the
    /// watchdog fires only if the loop stops turning. Returns whether the service manager asked for it.
    @discardableResult
    public func enableWatchdog() throws(Errno) -> Bool {
        try systemCall("sd_event_set_watchdog", convention: .returnsNegativeErrno) {
            sd_event_set_watchdog(event, 1)
        } > 0
    }

    /// Runs until `exit(code:)` is called and returns that code, as `sd_event_loop` does, timing each dispatch
    /// for `statistics`. A loop runs once: after it exits, sd-event refuses new sources and further runs with
    /// `ESTALE`.
    public func run() throws(Errno) -> Int32 {
        while sd_event_get_state(event) != Int32(SD_EVENT_FINISHED) {
            _ = try turn(timeout: UInt64.max, timed: true)
        }
        var code: Int32 = 0
        _ = try systemCall("sd_event_get_exit_code", convention: .returnsNegativeErrno) {
            sd_event_get_exit_code(event, &code)
        }
        return code
    }

    /// Runs one iteration: waits at most `timeout` (`nil`: no limit) for an event and dispatches it (untimed:
    /// for tests that step a loop).
    /// Returns whether something was dispatched (false: timed out, or the loop has finished).
    @discardableResult
    public func runIteration(timeout: Duration?) throws(Errno) -> Bool {
        let microseconds = timeout.map { UInt64(max(0, $0.nanosecondCount) / 1000) } ?? UInt64.max
        while sd_event_get_state(event) != Int32(SD_EVENT_FINISHED) {
            switch try turn(timeout: microseconds, timed: false) {
            case .dispatched: return true
            case .timedOut: return false
            case .idleWorkChangedSources: continue
            }
        }
        return false
    }

    /// What one turn of the loop came to.
    private enum Turn {
        case dispatched
        case timedOut
        /// `whenIdle` changed a source after the loop prepared its wait; the next turn prepares again.
        case idleWorkChangedSources
    }

    /// One turn, sd_event_run's steps with a stop in between: prepare; when nothing is pending, `whenIdle`, then
    /// wait up to `timeout` µs; dispatch one source, then `afterDispatch`.
    private func turn(timeout: UInt64, timed: Bool) throws(Errno) -> Turn {
        var pending = try systemCall("sd_event_prepare", convention: .returnsNegativeErrno) {
            sd_event_prepare(event)
        }
        var changedSources = false
        if pending == 0 {
            if let whenIdle {
                sourcesChanged = false
                whenIdle()
                changedSources = sourcesChanged
            }
            // sd_event_prepare armed the timers and found nothing pending; a source the idle work added, enabled
            // or re-armed since is not in that (sd_event_wait would sleep past it). Such a turn only polls,
            // which takes the loop back to where it can prepare again.
            let wait = changedSources ? 0 : timeout
            pending = try systemCall("sd_event_wait", convention: .returnsNegativeErrno) {
                sd_event_wait(event, wait)
            }
        }
        guard pending > 0 else { return changedSources ? .idleWorkChangedSources : .timedOut }
        let start = timed ? MonotonicClock.now() : 0
        dispatchingSourceName = "other"
        _ = try systemCall("sd_event_dispatch", convention: .returnsNegativeErrno) { () -> Int32 in
            isDispatching = true
            defer { isDispatching = false }
            return sd_event_dispatch(event)
        }
        afterDispatch?()
        if timed { statistics.record(nanoseconds: MonotonicClock.now() - start, source: dispatchingSourceName) }
        return .dispatched
    }

    /// Asks the loop to stop after the current iteration; `run()` returns `code`.
    public func exit(code: Int32) throws(Errno) {
        _ = try systemCall("sd_event_exit", convention: .returnsNegativeErrno) { sd_event_exit(event, code) }
    }

    /// Cancels every source. Handlers that capture the loop keep it alive through its own sources; after
    /// `run()` returns, this breaks those cycles so the loop and its descriptors are released.
    public func cancelAllSources() {
        for source in Array(sources.values) { source.cancel() }
    }

    /// The number of live (not cancelled) sources.
    public var sourceCount: Int { sources.count }

    /// Adds `source` with `add`, wires its destroy callback and takes the loop's ownership of it.
    private func register(
        _ source: EventSource,
        operation: @autoclosure () -> String,
        _ add: (inout OpaquePointer?, UnsafeMutableRawPointer) -> Int32
    ) throws(Errno) {
        let userdata = Unmanaged.passUnretained(source).toOpaque()
        var pointer: OpaquePointer?
        _ = try systemCall(operation(), convention: .returnsNegativeErrno) { add(&pointer, userdata) }
        guard let pointer else { throw Errno(rawValue: ENOMEM, operation: operation()) }
        do {
            _ = try systemCall("sd_event_source_set_destroy_callback", convention: .returnsNegativeErrno) {
                sd_event_source_set_destroy_callback(pointer, destroyTrampoline)
            }
        } catch {
            sd_event_source_unref(pointer)
            throw error
        }
        // The retain the destroy callback gives back: the object lives exactly as long as the C source,
        // including the moment after a handler cancels its own source, when sd-event frees it late.
        _ = Unmanaged.passRetained(source)
        // Descriptions show in sd-event's debug logs (SYSTEMD_LOG_LEVEL=debug); failure only loses that.
        _ = sd_event_source_set_description(pointer, source.name)
        source.pointer = pointer
        sources[ObjectIdentifier(source)] = source
        sourcesChanged = true
    }

    /// Forgets a cancelled source.
    fileprivate func remove(_ source: EventSource) {
        sources[ObjectIdentifier(source)] = nil
    }
}

/// What `EventLoop.run()` measured: how many sources it dispatched, the longest single dispatch, and how long
/// dispatches take. One handler runs per dispatch, so a long one is exactly how long every other client and
/// deadline had to wait. Times are wall-clock: a dispatch preempted by another process counts as long.
public struct LoopStatistics: Hashable, Sendable {
    /// The upper bounds of the histogram's buckets, in nanoseconds; a last bucket holds the longer ones.
    public static let bucketBoundsNanoseconds: [Int64] = [
        50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 25_000_000, 50_000_000,
        100_000_000,
    ]

    /// Dispatches since the loop started (each runs one source's handler).
    public private(set) var iterations = 0
    /// The longest single dispatch, in nanoseconds.
    public private(set) var longestDispatchNanoseconds: Int64 = 0
    /// The name of the source whose dispatch was the longest.
    public private(set) var longestDispatchSource = ""
    /// Dispatches by duration: `dispatchCounts[i]` took at most `bucketBoundsNanoseconds[i]` (and more than the
    /// bound before); the last entry counts the ones longer than every bound.
    public private(set) var dispatchCounts = [Int](
        repeating: 0, count: LoopStatistics.bucketBoundsNanoseconds.count + 1)

    /// No dispatch yet.
    public init() {}

    /// Counts one dispatch of `source` that took `nanoseconds`.
    mutating func record(nanoseconds: Int64, source: String) {
        iterations += 1
        if nanoseconds > longestDispatchNanoseconds {
            longestDispatchNanoseconds = nanoseconds
            longestDispatchSource = source
        }
        var bucket = 0
        while bucket < Self.bucketBoundsNanoseconds.count && nanoseconds > Self.bucketBoundsNanoseconds[bucket] {
            bucket += 1
        }
        dispatchCounts[bucket] += 1
    }
}

// EventLoop is single-threaded by design; this makes the compiler reject passing it across threads.
@available(*, unavailable)
extension EventLoop: Sendable {}

/// How urgently a ready source is dispatched relative to others ready in the same iteration.
public struct EventPriority: Hashable, Sendable {
    /// The sd-event priority; lower runs first.
    public var rawValue: Int64

    /// Wraps an sd-event priority value.
    public init(rawValue: Int64) { self.rawValue = rawValue }

    /// `SD_EVENT_PRIORITY_IMPORTANT` (-100): signals, the watchdog, the lifecycle timer.
    public static let important = EventPriority(rawValue: Int64(SD_EVENT_PRIORITY_IMPORTANT))
    /// `SD_EVENT_PRIORITY_NORMAL` (0): the default.
    public static let normal = EventPriority(rawValue: Int64(SD_EVENT_PRIORITY_NORMAL))
    /// `SD_EVENT_PRIORITY_IDLE` (100): only when nothing else is ready (accepting new connections).
    public static let idle = EventPriority(rawValue: Int64(SD_EVENT_PRIORITY_IDLE))
}

/// A registered event source (`sd_event_source`); see the subclasses for each kind.
public class EventSource {
    /// The C source, holding one reference; nil once cancelled.
    fileprivate var pointer: OpaquePointer?
    /// The owning loop, which keeps this object alive until `cancel()`.
    fileprivate weak var loop: EventLoop?
    /// The name given at creation, for logs and sd-event's debug output.
    public let name: String
    /// The value `setEnabled(true)` writes: `SD_EVENT_ONESHOT` for timers, defers and exits, else `SD_EVENT_ON`.
    private let enabledValue: Int32

    fileprivate init(loop: EventLoop, name: String, isOneShot: Bool) {
        self.loop = loop
        self.name = name
        self.enabledValue = Int32(isOneShot ? SD_EVENT_ONESHOT : SD_EVENT_ON)
    }

    /// Whether `cancel()` has been called (or the loop was released).
    public var isCancelled: Bool { pointer == nil }

    /// Whether the source will fire (a timer that fired is disabled until re-armed).
    public var isEnabled: Bool {
        get throws(Errno) {
            let pointer = try livePointer("sd_event_source_get_enabled")
            var enabled: Int32 = 0
            _ = try systemCall("sd_event_source_get_enabled(\(name))", convention: .returnsNegativeErrno) {
                sd_event_source_get_enabled(pointer, &enabled)
            }
            return enabled != Int32(SD_EVENT_OFF)
        }
    }

    /// Turns the source on or off without unregistering it (`sd_event_source_set_enabled`).
    public func setEnabled(_ isEnabled: Bool) throws(Errno) {
        let pointer = try livePointer("sd_event_source_set_enabled")
        let value = isEnabled ? enabledValue : Int32(SD_EVENT_OFF)
        loop?.sourcesChanged = true
        _ = try systemCall("sd_event_source_set_enabled(\(name))", convention: .returnsNegativeErrno) {
            sd_event_source_set_enabled(pointer, value)
        }
    }

    /// Sets the dispatch priority among sources ready in the same iteration.
    public func setPriority(_ priority: EventPriority) throws(Errno) {
        let pointer = try livePointer("sd_event_source_set_priority")
        loop?.sourcesChanged = true
        _ = try systemCall("sd_event_source_set_priority(\(name))", convention: .returnsNegativeErrno) {
            sd_event_source_set_priority(pointer, priority.rawValue)
        }
    }

    /// Disables and releases the source; its handler never runs again. Safe to call more than once and
    /// from inside the source's own handler (sd-event frees it after the handler returns).
    public func cancel() {
        guard let pointer else { return }
        self.pointer = nil
        // disable_unref turns it off first, so an IO source is removed from epoll even if sd-event has to
        // keep the object until the current dispatch ends.
        sd_event_source_disable_unref(pointer)
        loop?.sourcesChanged = true
        loop?.remove(self)
    }

    /// The C source, or `ESTALE` (sd-event's own error for a finished loop) once cancelled.
    fileprivate func livePointer(_ operation: String) throws(Errno) -> OpaquePointer {
        guard let pointer else { throw Errno(rawValue: ESTALE, operation: "\(operation)(\(name)): cancelled") }
        return pointer
    }
}

/// A descriptor watch (`sd_event_add_io`).
public final class IOSource: EventSource {
    /// The watched descriptor (not owned: the caller closes it, after cancelling the source).
    public let fileDescriptor: FileDescriptor
    fileprivate let handler: (IOSource, IOEvents) -> Void

    fileprivate init(
        loop: EventLoop, name: String, fileDescriptor: FileDescriptor,
        handler: @escaping (IOSource, IOEvents) -> Void
    ) {
        self.fileDescriptor = fileDescriptor
        self.handler = handler
        super.init(loop: loop, name: name, isOneShot: false)
    }

    /// Changes the events watched, e.g. adds `.writable` while an output buffer has data and removes it
    /// when the buffer drains (`sd_event_source_set_io_events`; a no-op if unchanged).
    public func setEvents(_ events: IOEvents) throws(Errno) {
        let pointer = try livePointer("sd_event_source_set_io_events")
        loop?.sourcesChanged = true
        _ = try systemCall("sd_event_source_set_io_events(\(name))", convention: .returnsNegativeErrno) {
            sd_event_source_set_io_events(pointer, events.rawValue)
        }
    }

    /// The events currently watched.
    public var events: IOEvents {
        get throws(Errno) {
            let pointer = try livePointer("sd_event_source_get_io_events")
            var events: UInt32 = 0
            _ = try systemCall("sd_event_source_get_io_events(\(name))", convention: .returnsNegativeErrno) {
                sd_event_source_get_io_events(pointer, &events)
            }
            return IOEvents(rawValue: events)
        }
    }
}

/// A one-shot `CLOCK_MONOTONIC` timer (`sd_event_add_time`) that can be re-armed.
public final class TimerSource: EventSource {
    /// The deadline last set, in `CLOCK_MONOTONIC` nanoseconds.
    public private(set) var deadline: Int64
    fileprivate let handler: (TimerSource) -> Void

    fileprivate init(loop: EventLoop, name: String, deadline: Int64, handler: @escaping (TimerSource) -> Void) {
        self.deadline = deadline
        self.handler = handler
        super.init(loop: loop, name: name, isOneShot: true)
    }

    /// Sets a new deadline and enables the timer: two field updates in sd-event, cheap enough to call
    /// after every policy step. Callable from the timer's own handler.
    public func rearm(at deadline: Int64) throws(Errno) {
        let pointer = try livePointer("sd_event_source_set_time")
        loop?.sourcesChanged = true
        _ = try systemCall("sd_event_source_set_time(\(name))", convention: .returnsNegativeErrno) {
            sd_event_source_set_time(pointer, TimerSource.microseconds(deadline))
        }
        self.deadline = deadline
        try setEnabled(true)
    }

    /// sd-event counts microseconds: round up, so a timer never fires before its nanosecond deadline, and
    /// keep at least 1 (a deadline at or before boot simply fires at once).
    static func microseconds(_ nanoseconds: Int64) -> UInt64 {
        guard nanoseconds > 0 else { return 1 }
        return UInt64(nanoseconds / 1000 + (nanoseconds % 1000 == 0 ? 0 : 1))
    }
}

/// What a signalfd reported about one delivery of a signal.
public struct SignalInfo: Hashable, Sendable {
    /// The signal.
    public var signal: Signal
    /// The sender's process id (0 for the kernel).
    public var senderPID: pid_t
    /// The sender's real user id.
    public var senderUID: uid_t

    /// Signal details from their parts.
    public init(signal: Signal, senderPID: pid_t, senderUID: uid_t) {
        self.signal = signal
        self.senderPID = senderPID
        self.senderUID = senderUID
    }
}

/// A signal handled in the loop (`sd_event_add_signal`).
public final class SignalSource: EventSource {
    fileprivate let handler: (SignalSource, SignalInfo) -> Void

    fileprivate init(loop: EventLoop, name: String, handler: @escaping (SignalSource, SignalInfo) -> Void) {
        self.handler = handler
        super.init(loop: loop, name: name, isOneShot: false)
    }
}

/// A defer, post or exit source: a handler with no event details.
final class CallbackSource: EventSource {
    fileprivate let handler: (EventSource) -> Void

    fileprivate init(loop: EventLoop, name: String, isOneShot: Bool, handler: @escaping (EventSource) -> Void) {
        self.handler = handler
        super.init(loop: loop, name: name, isOneShot: isOneShot)
    }
}

// The C callbacks. Each is a non-capturing closure (swiftc 6.3.1 crashes on capturing ones used as C
// function pointers); the userdata is the source object, kept alive by the retain `register` took.

private let ioTrampoline: sd_event_io_handler_t = { _, _, revents, userdata in
    guard let userdata else { return 0 }
    let source = Unmanaged<IOSource>.fromOpaque(userdata).takeUnretainedValue()
    source.loop?.dispatchingSourceName = source.name
    withExtendedLifetime(source) { source.handler(source, IOEvents(rawValue: revents)) }
    return 0
}

private let timerTrampoline: sd_event_time_handler_t = { _, _, userdata in
    guard let userdata else { return 0 }
    let source = Unmanaged<TimerSource>.fromOpaque(userdata).takeUnretainedValue()
    source.loop?.dispatchingSourceName = source.name
    withExtendedLifetime(source) { source.handler(source) }
    return 0
}

private let signalTrampoline: sd_event_signal_handler_t = { _, info, userdata in
    guard let userdata, let info else { return 0 }
    let source = Unmanaged<SignalSource>.fromOpaque(userdata).takeUnretainedValue()
    source.loop?.dispatchingSourceName = source.name
    // The kernel only reports valid signal numbers, so the conversion cannot fail for a real delivery.
    guard let signal = Signal(rawValue: Int32(bitPattern: info.pointee.ssi_signo)) else { return 0 }
    let details = SignalInfo(
        signal: signal, senderPID: pid_t(bitPattern: info.pointee.ssi_pid),
        senderUID: info.pointee.ssi_uid)
    withExtendedLifetime(source) { source.handler(source, details) }
    return 0
}

private let callbackTrampoline: sd_event_handler_t = { _, userdata in
    guard let userdata else { return 0 }
    let source = Unmanaged<CallbackSource>.fromOpaque(userdata).takeUnretainedValue()
    source.loop?.dispatchingSourceName = source.name
    withExtendedLifetime(source) { source.handler(source) }
    return 0
}

/// Gives back the retain `register` took, when sd-event frees the C source.
private let destroyTrampoline: sd_event_destroy_t = { userdata in
    guard let userdata else { return }
    Unmanaged<EventSource>.fromOpaque(userdata).release()
}
