// Reads CLOCK_MONOTONIC: the only clock the daemon's deadlines use (a wall-clock step cannot move them).
import Glibc

/// `CLOCK_MONOTONIC`, in nanoseconds since an arbitrary origin (boot, on Linux); never goes backwards.
public enum MonotonicClock {
    /// The current reading in nanoseconds.
    public static func now() -> Int64 {
        var time = timespec()
        // clock_gettime(CLOCK_MONOTONIC) cannot fail with a valid pointer: the clock always exists on Linux.
        let result = clock_gettime(CLOCK_MONOTONIC, &time)
        precondition(result == 0, "clock_gettime(CLOCK_MONOTONIC) failed")
        return Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
    }
}

/// `CLOCK_REALTIME`: the wall clock, for showing people when something happened, never for deadlines.
public enum WallClock {
    /// Seconds since the Unix epoch, with the fraction.
    public static func secondsSince1970() -> Double {
        var time = timespec()
        let result = clock_gettime(CLOCK_REALTIME, &time)
        precondition(result == 0, "clock_gettime(CLOCK_REALTIME) failed")
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// Nanoseconds since the Unix epoch (saturating far past the year 2262).
    public static func nanosecondsSince1970() -> Int64 {
        var time = timespec()
        let result = clock_gettime(CLOCK_REALTIME, &time)
        precondition(result == 0, "clock_gettime(CLOCK_REALTIME) failed")
        let (seconds, overflow) = Int64(time.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : seconds &+ Int64(time.tv_nsec)
    }

    /// `CLOCK_REALTIME` less `CLOCK_MONOTONIC`, in nanoseconds: what turns a monotonic instant into wall-clock time.
    /// The two clocks are read back to back, monotonic on both sides, and the reading with the narrowest gap of
    /// three is kept, so a preemption between the reads cannot skew it by more than that gap.
    public static func offsetFromMonotonic() -> Int64 {
        var best: (gap: Int64, offset: Int64)?
        for _ in 0..<3 {
            let before = MonotonicClock.now()
            let wall = nanosecondsSince1970()
            let after = MonotonicClock.now()
            let offset = wall &- (before / 2 &+ after / 2)
            if best.map({ after - before < $0.gap }) ?? true { best = (after - before, offset) }
        }
        // The loop ran three times, so `best` is set.
        return best!.offset
    }
}
