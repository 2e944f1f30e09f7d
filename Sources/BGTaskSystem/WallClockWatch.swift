// Tells the daemon when the wall clock is set, so work planned in wall-clock time is planned again.
import BGTaskPOSIX
import CPOSIX
import Glibc

/// Watches for settings of `CLOCK_REALTIME` (`settimeofday`, `clock_settime`, an NTP step) with a timerfd armed
/// with `TFD_TIMER_CANCEL_ON_SET`, which the kernel makes readable whenever the clock is set; no polling.
///
/// Scheduled work is due at wall-clock times (an earliest begin must hold across reboots) while the daemon's
/// timers run on `CLOCK_MONOTONIC`; the offset between the two is what converts one into the other, and it moves
/// only when the clock is set. `handler` gets the new offset (`WallClock.offsetFromMonotonic()`).
public final class WallClockWatch {
    private let descriptor: FileDescriptor
    private var source: IOSource?
    private let handler: (Int64) -> Void

    /// Starts watching on `loop`; `handler` runs on the loop after each setting of the clock.
    public init(loop: EventLoop, handler: @escaping (_ offsetNanoseconds: Int64) -> Void) throws(Errno) {
        descriptor = FileDescriptor(
            rawValue: try systemCall("timerfd_create(CLOCK_REALTIME)") {
                bgtask_clock_set_watch()
            })
        self.handler = handler
        do {
            source = try loop.addIO(fd: descriptor, events: .readable, name: "wall-clock-set") {
                [unowned self] _, _ in self.clockWasSet()
            }
        } catch {
            try? descriptor.close()
            throw error
        }
    }

    deinit { stop() }

    /// Stops watching and closes the timerfd.
    public func stop() {
        guard let source else { return }
        source.cancel()
        self.source = nil
        try? descriptor.close()
    }

    private func clockWasSet() {
        // The read fails with ECANCELED, the setting itself, and leaves the timerfd readable until it is armed again;
        // after a spurious wake-up it fails with EAGAIN. Either way it is armed again and the offset read afresh.
        _ = try? descriptor.read(upTo: 8)
        guard bgtask_clock_set_arm(descriptor.rawValue) == 0 else {
            // Cannot happen with a valid timerfd and a constant expiry; were it to, the watch would spin on a
            // readable descriptor: it stops, and the offset stays as last read.
            stop()
            return
        }
        handler(WallClock.offsetFromMonotonic())
    }
}
