// The evidence a soak harness gathers, as plain values: what the daemon said, and what the harness saw for itself.
//
// Every time here is the harness's own monotonic clock, as a `Duration` since the soak began: the daemon's
// wall-clock `HistoryEntry.time` is kept in the entry but never compared with anything.

import BGTaskProtocol

/// Everything a soak run observed, judged by `SoakChecker`.
public struct SoakEvidence: Hashable, Sendable {
    /// The `Watch()` stream (with the kept history it replays at each subscription filling any gap across a
    /// restart), each entry once, in the order received.
    public var entries: [ObservedEntry]
    /// The harness's samples of the apps' processes, with the state the daemon reported about then.
    public var processSamples: [ProcessSample]
    /// The harness's own readings of the apps' memory.
    public var memorySamples: [MemorySample]
    /// Every daemon restart, in order.
    public var restarts: [RestartEvidence]
    /// The harness's samples of the daemon's own resources.
    public var resourceSamples: [ResourceSample]
    /// When the daemon was finally stopped, if it was before the evidence closed.
    public var daemonStoppedAt: Duration?
    /// When the evidence closed. The harness ends every app that may hold a task before the daemon's final stop
    /// (the suspended ones, which hold none, it ends after sampling them past the stop), so a task still open here
    /// never ended.
    public var end: Duration
    /// When the `Watch()` stream was not followed: from the last entry received on a stream that ended (the daemon
    /// went down) until a new stream was subscribed. `History()` fills only what it keeps (not lease begins, lease
    /// ends by the app, or state changes), so those entries of such a window may be missing, and what hinges on
    /// them is counted as unverifiable rather than judged.
    public var watchGaps: [ClosedRange<Duration>]
    /// When the harness changed `AppsMemoryMax` (a memory-pressure phase: the limit lowered under the apps'
    /// measured total, then put back), in order; before the first, the limit is `SoakCriteria.appsMemoryMax`.
    public var memoryLimitChanges: [MemoryLimitChange]
    /// The daemon's listing of the apps taken right after each `Watch()` subscription that closed a gap: what
    /// changed in the gap and `History()` does not keep (state changes above all) is known again from it.
    public var watchListings: [AppSnapshot]
    /// What the apps themselves logged of the memory they map and free, each change at its moment: what the
    /// harness's readings, a second apart, cannot see between them.
    public var allocationChanges: [AllocationChange]
    /// Scheduled work: the power flips, the requests submitted and cancelled, what the apps recorded of their
    /// scheduled tasks and the requests held at the end.
    public var scheduled: ScheduledEvidence

    /// Evidence; every collection defaults to empty.
    public init(
        entries: [ObservedEntry] = [], processSamples: [ProcessSample] = [], memorySamples: [MemorySample] = [],
        restarts: [RestartEvidence] = [], resourceSamples: [ResourceSample] = [], daemonStoppedAt: Duration? = nil,
        end: Duration, watchGaps: [ClosedRange<Duration>] = [], memoryLimitChanges: [MemoryLimitChange] = [],
        watchListings: [AppSnapshot] = [], allocationChanges: [AllocationChange] = [],
        scheduled: ScheduledEvidence = ScheduledEvidence()
    ) {
        self.scheduled = scheduled
        self.allocationChanges = allocationChanges
        self.memoryLimitChanges = memoryLimitChanges
        self.watchListings = watchListings
        self.entries = entries
        self.processSamples = processSamples
        self.memorySamples = memorySamples
        self.restarts = restarts
        self.resourceSamples = resourceSamples
        self.daemonStoppedAt = daemonStoppedAt
        self.end = end
        self.watchGaps = watchGaps
    }
}

extension SoakEvidence {
    /// The daemon's listings of the apps taken inside a gap in the `Watch()` stream (after a restart, before the
    /// stream was followed again) or as it closed (right after the new subscription), in time order: the points
    /// where a check replaying the entries learns again what the gap hid. A listing taken while the stream was
    /// followed tells nothing the entries do not, and a moment apart from them, so it is left out.
    var listingsAfterGaps: [AppSnapshot] {
        (restarts.map(\.after) + watchListings)
            .filter { listing in watchGaps.contains { $0.contains(listing.takenAt) } }
            .sorted { $0.takenAt < $1.takenAt }
    }
}

/// `AppsMemoryMax` set by the harness at a moment (the configuration rewritten and the daemon told to reload).
public struct MemoryLimitChange: Hashable, Sendable {
    /// When the harness asked for the reload.
    public var at: Duration
    /// The new `AppsMemoryMax` in bytes.
    public var appsMemoryMax: Int

    /// A change.
    public init(at: Duration, appsMemoryMax: Int) {
        self.at = at
        self.appsMemoryMax = appsMemoryMax
    }
}

/// A history entry as the daemon emitted it, stamped when the harness received it.
public struct ObservedEntry: Hashable, Sendable {
    /// When the harness received it.
    public var observedAt: Duration
    /// The entry, unchanged.
    public var entry: HistoryEntry

    /// An entry received at `observedAt`.
    public init(observedAt: Duration, entry: HistoryEntry) {
        self.observedAt = observedAt
        self.entry = entry
    }
}

/// One look at an app's main process: `/proc/PID/stat` and, where the app has a cgroup, `cgroup.events`.
public struct ProcessSample: Hashable, Sendable {
    /// When the harness read it.
    public var takenAt: Duration
    /// The app the process belongs to.
    public var app: String
    /// The process id read.
    public var pid: Int
    /// The state letter of `/proc/PID/stat` (the field after the command): `T` stopped, `t` stopped by tracing,
    /// `R` running, `S` sleeping, `D` in uninterruptible sleep, `Z` zombie, and so on.
    public var stateLetter: Character
    /// Whether `cgroup.events` of the app's cgroup says `frozen 1`; nil when the app has no cgroup of its own.
    public var isCgroupFrozen: Bool?
    /// The state `ListApps` or `GetApp` reported for the app about then; nil when the daemon could not be asked.
    public var reportedState: AppState?

    /// A sample.
    public init(
        takenAt: Duration, app: String, pid: Int, stateLetter: Character, isCgroupFrozen: Bool? = nil,
        reportedState: AppState?
    ) {
        self.takenAt = takenAt
        self.app = app
        self.pid = pid
        self.stateLetter = stateLetter
        self.isCgroupFrozen = isCgroupFrozen
        self.reportedState = reportedState
    }

    /// Whether the process is stopped by a signal (`T`) or by tracing (`t`).
    public var isStopped: Bool { stateLetter == "T" || stateLetter == "t" }

    /// Whether the process cannot run app code: stopped, or in a frozen cgroup.
    public var isHeld: Bool { isStopped || isCgroupFrozen == true }

    /// What the harness saw, for counter-examples.
    var seen: String {
        let cgroup =
            switch isCgroupFrozen {
            case .some(true): ", cgroup frozen"
            case .some(false): ", cgroup not frozen"
            case nil: ""
            }
        return "pid \(pid) in state \(stateLetter)\(cgroup)"
    }
}

/// One reading of an app's memory, taken by the harness.
public struct MemorySample: Hashable, Sendable {
    /// When it was read.
    public var takenAt: Duration
    /// The app.
    public var app: String
    /// Its memory in bytes (`memory.current` of its cgroup, or PSS summed over its processes).
    public var memoryBytes: Int
    /// The process read, where the reading names one.
    public var pid: Int?

    /// A reading.
    public init(takenAt: Duration, app: String, memoryBytes: Int, pid: Int? = nil) {
        self.takenAt = takenAt
        self.app = app
        self.memoryBytes = memoryBytes
        self.pid = pid
    }
}

/// A change an app made to the memory it maps for the soak, as the app logged it: from `at` on, that process of
/// the app held `allocatedBytes` of it (a process logs 0 as it starts). An app logs a chunk it maps once it has
/// touched all of it and a chunk it frees before it unmaps it, so between its changes it held at least what its
/// log says.
public struct AllocationChange: Hashable, Sendable {
    /// When, on the harness's clock.
    public var at: Duration
    /// The app.
    public var app: String
    /// Its process.
    public var pid: Int
    /// What that process held mapped for the soak from then on; while `isTouching`, the most it holds until its
    /// next change (it is touching a new chunk's pages, and holds at least what it held before).
    public var allocatedBytes: Int
    /// Whether the process started mapping and touching a chunk here, to hold `allocatedBytes` once done.
    public var isTouching: Bool

    /// A change.
    public init(at: Duration, app: String, pid: Int, allocatedBytes: Int, isTouching: Bool = false) {
        self.at = at
        self.app = app
        self.pid = pid
        self.allocatedBytes = allocatedBytes
        self.isTouching = isTouching
    }
}

/// What restarted the daemon, as the harness knows it.
public enum RestartCause: String, CaseIterable, Codable, Hashable, Sendable {
    /// The harness sent SIGKILL and systemd restarted it (`Restart=on-failure`).
    case killed = "kill-9"
    /// systemd's watchdog found it silent and restarted it.
    case watchdog
    /// The harness ran `systemctl restart`.
    case serviceRestart = "service-restart"
}

/// The daemon's apps as `ListApps` listed them at one moment.
public struct AppSnapshot: Hashable, Sendable {
    /// When the harness received the list.
    public var takenAt: Duration
    /// The apps, with their open tasks and remaining background time.
    public var apps: [AppInfo]

    /// A snapshot.
    public init(takenAt: Duration, apps: [AppInfo]) {
        self.takenAt = takenAt
        self.apps = apps
    }
}

/// One restart of the daemon, with the apps just before it went down and just after it was ready again.
public struct RestartEvidence: Hashable, Sendable {
    /// What restarted it.
    public var cause: RestartCause
    /// Whether the harness made the daemon hang (stopped its loop) before this restart.
    public var wasHangInjected: Bool
    /// The apps just before the daemon went down.
    public var before: AppSnapshot
    /// When the daemon went down (the kill sent, the hang injected, the restart asked for).
    public var stoppedAt: Duration
    /// When the new daemon was ready (`READY=1`, or its socket answering).
    public var readyAt: Duration
    /// The apps just after it was ready.
    public var after: AppSnapshot

    /// A restart.
    public init(
        cause: RestartCause, wasHangInjected: Bool, before: AppSnapshot, stoppedAt: Duration, readyAt: Duration,
        after: AppSnapshot
    ) {
        self.cause = cause
        self.wasHangInjected = wasHangInjected
        self.before = before
        self.stoppedAt = stoppedAt
        self.readyAt = readyAt
        self.after = after
    }
}

/// One sample of the daemon's own resources.
public struct ResourceSample: Hashable, Sendable {
    /// When it was taken.
    public var takenAt: Duration
    /// The daemon's process id: samples of different processes (across restarts) are judged apart.
    public var daemonPid: Int
    /// Resident set size (`VmRSS`) in bytes.
    public var residentBytes: Int
    /// Open descriptors (entries of `/proc/PID/fd`).
    public var openDescriptors: Int
    /// User plus system CPU time of the daemon so far, in seconds.
    public var cpuSeconds: Double
    /// Operations the harness had asked of the daemon so far (calls made), for the CPU per operation.
    public var operations: Int

    /// A sample.
    public init(
        takenAt: Duration, daemonPid: Int, residentBytes: Int, openDescriptors: Int, cpuSeconds: Double,
        operations: Int
    ) {
        self.takenAt = takenAt
        self.daemonPid = daemonPid
        self.residentBytes = residentBytes
        self.openDescriptors = openDescriptors
        self.cpuSeconds = cpuSeconds
        self.operations = operations
    }
}
