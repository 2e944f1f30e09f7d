// GetStatus latency over the whole run: a call every 500 ms on a connection of the harness's own, timed around the
// call on CLOCK_MONOTONIC, failures kept as failures (gaps in the figure, never zeros).

import BGTaskClient
import BGTaskPOSIX
import BGTaskSoak
import Glibc
import Synchronization

/// Calls `GetStatus` every 500 ms on a thread of its own and times each call; after a failure (the daemon down, a
/// timeout) it connects again for the next call.
final class StatusProbe: Sendable {
    private let calls = Mutex<[StatusCall]>([])
    private let stopping = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)

    /// How often it calls: twice a second shows a restart's gap and the latency around it, at a cost the daemon
    /// does not notice (a `GetStatus` reads no `/proc` file; it answers from the state it holds).
    static let interval: Duration = .milliseconds(500)
    /// How long a call may take before it counts as failed: a hung daemon answers nothing until the watchdog
    /// (6 s) replaces it, and a connection it never accepted must not hold the probe longer than that.
    static let callTimeout: Duration = .seconds(5)

    /// Starts calling the daemon at `socketPath`, stamping calls on `clock`.
    init(socketPath: String, clock: SoakClock) throws {
        try DetachedThread.start(name: "soak-status") { [self] in
            var client: LifecycleClient?
            var next = MonotonicClock.now()
            while !stopping.load(ordering: .relaxed) {
                let wait = next - MonotonicClock.now()
                if wait > 0 {
                    usleep(UInt32(min(wait, Self.interval.nanosecondCount) / 1_000))
                    continue
                }
                next += Self.interval.nanosecondCount
                let start = MonotonicClock.now()
                var latency: Duration?
                do {
                    let connected = try client ?? LifecycleClient(socketPath: socketPath, timeout: Self.callTimeout)
                    client = connected
                    _ = try connected.getStatus()
                    latency = .nanoseconds(MonotonicClock.now() - start)
                } catch {
                    client?.close()
                    client = nil
                }
                calls.withLock { $0.append(StatusCall(at: clock.since(start), latency: latency)) }
                // A call that took longer than the interval (a hang, a restart) is not made up for in a burst.
                next = max(next, MonotonicClock.now())
            }
            client?.close()
            finished.store(true, ordering: .releasing)
        }
    }

    /// Every call so far, in order.
    var results: [StatusCall] { calls.withLock { $0 } }

    /// Stops calling (within a call's timeout) and closes the connection.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        let deadline = MonotonicClock.now() + (Self.callTimeout + .seconds(1)).nanosecondCount
        while !finished.load(ordering: .acquiring), MonotonicClock.now() < deadline { usleep(20_000) }
    }
}
