// WallClockWatch against the real clock: a setting of CLOCK_REALTIME is reported, each time, with the offset read
// afresh. The test sets the clock to its own reading, which moves it back by the microseconds between the read and
// the setting, so nothing else on the machine sees a jump.

import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Glibc
import Synchronization
import Testing

/// Sets `CLOCK_REALTIME` to its own reading: a setting the kernel reports to every `TFD_TIMER_CANCEL_ON_SET` timer.
private func setWallClockToItself() throws {
    var now = timespec()
    guard clock_gettime(CLOCK_REALTIME, &now) == 0, clock_settime(CLOCK_REALTIME, &now) == 0 else {
        throw Errno(rawValue: errno, operation: "clock_settime(CLOCK_REALTIME)")
    }
}

@Suite("Wall clock settings")
struct WallClockWatchTests {
    @Test(
        "each setting of the wall clock is reported once, with the offset from the monotonic clock",
        .requires(.root(for: "setting CLOCK_REALTIME (to its own reading)")))
    func settingsAreReported() throws {
        let loop = try EventLoop()
        let offsets = Mutex<[Int64]>([])
        let watch = try WallClockWatch(loop: loop) { offset in offsets.withLock { $0.append(offset) } }
        defer { watch.stop() }
        for setting in 1...2 {
            try setWallClockToItself()
            let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
            while offsets.withLock({ $0.count }) < setting, MonotonicClock.now() < deadline {
                _ = try loop.runIteration(timeout: .milliseconds(100))
            }
            let seen = offsets.withLock { $0 }
            // Re-armed after each: the second setting is reported as the first was, and each only once.
            #expect(seen.count == setting, "\(seen)")
            // The offset is the clocks' difference now (the setting moved it by microseconds): far under a second.
            if let last = seen.last {
                #expect(abs(last - WallClock.offsetFromMonotonic()) < 1_000_000_000, "\(last)")
            }
        }
    }
}
