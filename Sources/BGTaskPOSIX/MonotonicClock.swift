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
}
