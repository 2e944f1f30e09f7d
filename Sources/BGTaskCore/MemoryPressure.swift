// Memory pressure as policy: levels from readings, and the warn → grace → reclaim sequence.

/// What the shell measured, at one moment.
public struct MemoryReading: Hashable, Sendable {
    /// The apps' memory, summed over the apps that can still be reclaimed (those already being terminated are
    /// left out: their memory is on its way back) and the victims that would not die (theirs is not).
    public var appsBytes: UInt64
    /// `MemAvailable`, when known.
    public var availableBytes: UInt64?
    /// `MemTotal`, when known.
    public var totalBytes: UInt64?

    /// A reading.
    public init(appsBytes: UInt64, availableBytes: UInt64? = nil, totalBytes: UInt64? = nil) {
        self.appsBytes = appsBytes
        self.availableBytes = availableBytes
        self.totalBytes = totalBytes
    }

    /// `MemAvailable` as a percentage of `MemTotal`, when both are known.
    public var availablePercent: Double? {
        guard let availableBytes, let totalBytes, totalBytes > 0 else { return nil }
        return Double(availableBytes) / Double(totalBytes) * 100
    }
}

/// The `[Memory]` thresholds.
public struct MemoryThresholds: Hashable, Sendable {
    /// `AppsMemoryMax`: the apps' total may not exceed this (nil: no limit).
    public var appsMemoryMax: UInt64?
    /// `MemoryWarnPercent`: below this much `MemAvailable`, warn.
    public var warnPercent: Double = 10
    /// `MemoryCriticalPercent`: below this much `MemAvailable`, reclaim at once.
    public var criticalPercent: Double = 5
    /// `MemoryWarningGraceSec`: after a warning, how long apps have to shrink before reclamation.
    public var warningGrace: Duration = .milliseconds(500)

    /// The shipped defaults, as bgtaskd(8) lists them.
    public init(
        appsMemoryMax: UInt64? = nil, warnPercent: Double = 10, criticalPercent: Double = 5,
        warningGrace: Duration = .milliseconds(500)
    ) {
        self.appsMemoryMax = appsMemoryMax
        self.warnPercent = warnPercent
        self.criticalPercent = criticalPercent
        self.warningGrace = warningGrace
    }
}

/// How short memory is.
public enum MemoryLevel: Int, Sendable, Comparable, CustomStringConvertible {
    /// Within every limit, with the hysteresis margin once a pressure episode has begun.
    case normal
    /// Over `AppsMemoryMax`, or `MemAvailable` under `MemoryWarnPercent`: warn, then reclaim if it persists.
    case warning
    /// `MemAvailable` under `MemoryCriticalPercent`: reclaim at once.
    case critical

    public static func < (lhs: MemoryLevel, rhs: MemoryLevel) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .normal: "normal"
        case .warning: "warning"
        case .critical: "critical"
        }
    }
}

/// A reading judged against the thresholds.
public struct MemoryAssessment: Hashable, Sendable {
    /// The level.
    public var level: MemoryLevel
    /// How much must be freed to get back under the targets (with hysteresis); zero at `normal`.
    public var bytesToFree: UInt64
    /// What crossed which limit, for logs and history.
    public var trigger: String
}

/// The warn → grace → reclaim sequence, as a state machine fed with readings (docs/ARCHITECTURE.md, Memory).
///
/// Hysteresis: once an episode has begun, it ends only when the apps are under 90% of `AppsMemoryMax` and
/// `MemAvailable` is one point over `MemoryWarnPercent`, and reclamation aims for those targets, so a total
/// hovering at the limit does not flap between warnings. Reclamation waits for the last victims to be gone
/// before choosing more (their memory is not back until they exit), like earlyoom's `kill_wait`; the shell bounds
/// that wait (`victimsPending` turns false for a victim that does not die in time).
public struct MemoryPressureMachine: Sendable {
    /// What to do after a reading.
    public enum Decision: Hashable, Sendable {
        /// Nothing.
        case none
        /// Warn every app (`Lifecycle.memoryWarning`), marking those that would free `bytesToFree`.
        case warn(bytesToFree: UInt64)
        /// Reclaim apps in order (`Lifecycle.reclamationOrder`) until `bytesToFree` is freed, re-checking before
        /// each kill; `triggeredAt` is when the episode began, for the trigger-to-kill latency.
        case reclaim(bytesToFree: UInt64, triggeredAt: MonotonicInstant)
    }

    private enum Phase: Hashable, Sendable {
        case normal
        case warned(at: MonotonicInstant, triggeredAt: MonotonicInstant)
        case reclaiming(triggeredAt: MonotonicInstant)
    }

    /// The thresholds in force.
    public var thresholds: MemoryThresholds
    private var phase: Phase = .normal
    /// The level of the last reading.
    public private(set) var level: MemoryLevel = .normal

    /// The fraction of `AppsMemoryMax` an episode brings the apps back under.
    public static let appsTargetFraction = 0.9
    /// The points over `MemoryWarnPercent` an episode brings `MemAvailable` back over.
    public static let availableMarginPercent = 1.0

    /// A machine at rest.
    public init(thresholds: MemoryThresholds) {
        self.thresholds = thresholds
    }

    /// Whether a pressure episode is under way (warned or reclaiming).
    public var isUnderPressure: Bool { phase != .normal }

    /// Judges a reading. In an episode the targets include the hysteresis margin.
    public func assess(_ reading: MemoryReading) -> MemoryAssessment {
        let inEpisode = phase != .normal
        var level = MemoryLevel.normal
        var bytesToFree: UInt64 = 0
        var triggers: [String] = []
        if let maximum = thresholds.appsMemoryMax {
            let target = inEpisode ? UInt64(Double(maximum) * Self.appsTargetFraction) : maximum
            if reading.appsBytes > target {
                level = .warning
                let aim = UInt64(Double(maximum) * Self.appsTargetFraction)
                bytesToFree = max(bytesToFree, reading.appsBytes - min(aim, reading.appsBytes))
                triggers.append("apps use \(reading.appsBytes) bytes, AppsMemoryMax is \(maximum)")
            }
        }
        if let percent = reading.availablePercent, let total = reading.totalBytes,
            let available = reading.availableBytes
        {
            let warnAt = thresholds.warnPercent + (inEpisode ? Self.availableMarginPercent : 0)
            if percent < thresholds.criticalPercent {
                level = .critical
            } else if percent < warnAt {
                level = max(level, .warning)
            }
            if percent < warnAt {
                let wanted = UInt64(Double(total) * (thresholds.warnPercent + Self.availableMarginPercent) / 100)
                bytesToFree = max(bytesToFree, wanted > available ? wanted - available : 0)
                let shown = (percent * 10).rounded() / 10
                triggers.append("MemAvailable is \(shown)% of MemTotal")
            }
        }
        return MemoryAssessment(level: level, bytesToFree: bytesToFree, trigger: triggers.joined(separator: "; "))
    }

    /// Feeds a reading; `victimsPending` says whether apps reclaimed earlier are still exiting.
    public mutating func observe(
        _ reading: MemoryReading, victimsPending: Bool, now: MonotonicInstant
    ) -> (decision: Decision, assessment: MemoryAssessment) {
        let assessment = assess(reading)
        level = assessment.level
        let decision: Decision
        switch (phase, assessment.level) {
        case (.normal, .normal):
            decision = .none
        case (.normal, .warning):
            phase = .warned(at: now, triggeredAt: now)
            decision = .warn(bytesToFree: assessment.bytesToFree)
        case (.normal, .critical):
            phase = .reclaiming(triggeredAt: now)
            decision = .reclaim(bytesToFree: assessment.bytesToFree, triggeredAt: now)
        case (.warned, .normal), (.reclaiming, .normal):
            phase = .normal
            decision = .none
        case (.warned(let warnedAt, let triggeredAt), .warning):
            if now - warnedAt >= thresholds.warningGrace {
                phase = .reclaiming(triggeredAt: triggeredAt)
                decision =
                    victimsPending ? .none : .reclaim(bytesToFree: assessment.bytesToFree, triggeredAt: triggeredAt)
            } else {
                decision = .none
            }
        case (.warned(_, let triggeredAt), .critical), (.reclaiming(let triggeredAt), _):
            phase = .reclaiming(triggeredAt: triggeredAt)
            decision = victimsPending ? .none : .reclaim(bytesToFree: assessment.bytesToFree, triggeredAt: triggeredAt)
        }
        return (decision, assessment)
    }

    /// The longest wait between readings while the apps' memory is watched (`AppsMemoryMax` set): apps can grow
    /// by hundreds of megabytes a second, and the apps' sum has no kernel trigger, so a reading at least every
    /// second, as earlyoom polls at most a second apart.
    public static let longestIntervalWithAppsLimit: Duration = .seconds(1)
    /// The longest wait when only `MemAvailable` is watched: 5 s apart when far from every threshold (half or
    /// more of the way from the warning level to 100%), so an idle device wakes for it at most twice in 10 s;
    /// memory that falls quickly is caught by the kernel's own OOM handling before the next reading in the
    /// worst case, and by the shorter waits as headroom shrinks.
    public static let longestIntervalAvailableOnly: Duration = .seconds(5)

    /// The shortest wait between readings: at the limit, under pressure, or with no headroom left. A polled sum
    /// (PSS, with no kernel trigger) crossing the limit is then seen 25 ms later on average.
    public static let shortestInterval: Duration = .milliseconds(50)

    /// How long until the next reading: `shortestInterval` under pressure or with no headroom left, up to
    /// `longestIntervalWithAppsLimit` (or `longestIntervalAvailableOnly` without `AppsMemoryMax`) with half or more
    /// of the headroom left, by the square of the headroom in between (adaptive polling: faster as headroom
    /// shrinks, and fastest where a crossing is near: 88 ms with a tenth left, 288 ms with a quarter).
    public func interval(after reading: MemoryReading) -> Duration {
        if phase != .normal { return Self.shortestInterval }
        var headroom = 1.0
        var longest = Self.longestIntervalAvailableOnly
        if let maximum = thresholds.appsMemoryMax {
            longest = Self.longestIntervalWithAppsLimit
            headroom = maximum > 0 ? min(headroom, 1 - Double(reading.appsBytes) / Double(maximum)) : 0
        }
        if let percent = reading.availablePercent, thresholds.warnPercent < 100 {
            headroom = min(headroom, (percent - thresholds.warnPercent) / (100 - thresholds.warnPercent))
        }
        let share = max(0, min(1, headroom * 2))
        let span = Double((longest - Self.shortestInterval).nanosecondCount) * share * share
        let milliseconds = Int64((span / 1e6).rounded())
        return Self.shortestInterval + .milliseconds(milliseconds)
    }
}
