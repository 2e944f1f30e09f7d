// The process's descriptor limit, and the boot clock that /proc start times are counted on.
import CPOSIX
import Glibc

/// `RLIMIT_NOFILE`: how many descriptors the process may hold.
public enum DescriptorLimit {
    /// The soft and hard limits (`getrlimit`).
    public static func current() throws(Errno) -> (soft: UInt64, hard: UInt64) {
        var limit = rlimit()
        _ = try systemCall("getrlimit(RLIMIT_NOFILE)") { getrlimit(openFilesResource, &limit) }
        return (UInt64(limit.rlim_cur), UInt64(limit.rlim_max))
    }

    /// Raises the soft limit to the hard one, as systemd recommends for daemons that do not use `select(2)`
    /// (the soft limit stays at 1024 only for programs that do); returns the new soft limit.
    @discardableResult
    public static func raiseToHardLimit() throws(Errno) -> UInt64 {
        var limit = rlimit()
        _ = try systemCall("getrlimit(RLIMIT_NOFILE)") { getrlimit(openFilesResource, &limit) }
        guard limit.rlim_cur < limit.rlim_max else { return UInt64(limit.rlim_cur) }
        limit.rlim_cur = limit.rlim_max
        _ = try systemCall("setrlimit(RLIMIT_NOFILE)") { setrlimit(openFilesResource, &limit) }
        return UInt64(limit.rlim_cur)
    }

    /// `RLIMIT_NOFILE` in the type Glibc's `getrlimit` takes on this platform.
    private static var openFilesResource: __rlimit_resource_t { __rlimit_resource_t(UInt32(RLIMIT_NOFILE.rawValue)) }
}

/// The C library's allocator, tuned for a process that lives for months.
public enum MemoryAllocator {
    /// Has blocks of `bytes` or more (the state file's text, a long reply) mapped on their own and given back to
    /// the kernel when freed. glibc otherwise raises its threshold after the first such block is freed, and every
    /// later one is carved from the heap, whose top stays resident: one large state write would then keep its
    /// size for the life of the daemon.
    public static func mapBlocks(ofAtLeast bytes: Int) {
        _ = bgtask_set_mmap_threshold(Int32(bytes))
    }
}

/// `CLOCK_BOOTTIME` in clock ticks: the clock and unit of a process's start time in `/proc/PID/stat`.
public enum BootClock {
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on Linux).
    public static let ticksPerSecond: UInt64 = {
        let value = sysconf(Int32(_SC_CLK_TCK))
        return value > 0 ? UInt64(value) : 100
    }()

    /// The time since boot, suspend included, in clock ticks (rounded down).
    public static func nowTicks() -> UInt64 {
        var time = timespec()
        // clock_gettime(CLOCK_BOOTTIME) cannot fail with a valid pointer on Linux 2.6.39 and later.
        _ = clock_gettime(CLOCK_BOOTTIME, &time)
        let nanoseconds = UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
        return nanoseconds / (1_000_000_000 / ticksPerSecond)
    }
}
