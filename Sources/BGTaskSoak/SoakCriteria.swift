// The numbers a soak run is judged with: the daemon's configuration as the harness set it, and the tolerances.

/// The configuration the daemon ran with and the slack the checker allows for the harness's own delays.
public struct SoakCriteria: Hashable, Sendable {
    /// `BackgroundTimeSec` of every app without an override.
    public var backgroundTime: Duration
    /// Per-app `BackgroundTimeSec` overrides (`apps.d/NAME.conf`).
    public var backgroundTimeByApp: [String: Duration]
    /// How long past its budget an app may still be seen in background with a task open: the daemon terminates
    /// it at the deadline, so this covers only the delay before the harness sees the entries.
    public var budgetGrace: Duration
    /// Process samples this close to a state change of their app, or to a restart, are not judged: freezing
    /// and thawing take effect a little after the state is recorded, and the reported state is read a little
    /// before or after the sample.
    public var settling: Duration
    /// `AppsMemoryMax` in bytes; nil when the soak set none (kills are then not judged against a target).
    public var appsMemoryMax: Int?
    /// The fraction of `AppsMemoryMax` reclamation aims for (`MemoryPressureMachine.appsTargetFraction`, 0.9):
    /// a kill is justified only while the apps use more.
    public var appsTargetFraction: Double
    /// Whether the daemon ran with `ReclaimForeground=yes`.
    public var reclaimsForeground: Bool
    /// How far apart the harness's and the daemon's readings may be (the harness reads at another moment, and
    /// PSS and `memory.current` differ): a victim is judged lighter than another app only when the other is
    /// heavier by more than this fraction, and a kill is judged under the target only when the apps' total is
    /// under it by more than this fraction.
    public var memoryTolerance: Double
    /// How old a reading may be and still speak for an app's memory at the moment of a kill.
    public var readingWindow: Duration
    /// Slack for the remaining background time across a restart (the snapshots are not taken at the instants
    /// the daemon stopped and started).
    public var restartTolerance: Duration
    /// The growth of resident memory or open descriptors that fails `resources-flat`, as a fraction.
    public var resourceGrowthLimit: Double
    /// The fraction of each daemon process's samples, from its start, left out as warm-up.
    public var warmUpFraction: Double
    /// Descriptors the median may grow by regardless of the fraction: the harness's own connections come and go.
    public var descriptorSlack: Int
    /// The fewest samples after the warm-up for one daemon process to be judged (two per third).
    public var minimumResourceSamples: Int
    /// How many counter-examples each result keeps, earliest first.
    public var counterExampleLimit: Int
    /// How soon the daemon must act on a condition that changed (a task begun while its constraint did not hold,
    /// `backgroundTaskExpiring` once it stopped holding): it watches the power_supply tree with inotify and acts in
    /// the same loop iteration, so a second covers the harness's and the app's own delays on a loaded machine.
    public var reactionBound: Duration
    /// `ExpirationWarningSec`: how long after `backgroundTaskExpiring` for a lost constraint the daemon ends a
    /// scheduled task the app did not end (`constraints-lost`), and how long before a budget or a scheduled task's
    /// time runs out the warning is due.
    public var expirationWarning: Duration
    /// A scheduled task's time by its kind (`refresh`: `RefreshTaskSec`, `processing`: `ProcessingTaskSec`): its
    /// warning is due that long after it began, less `expirationWarning`.
    public var scheduledTaskTimes: [String: Duration]

    /// Criteria; the defaults are the daemon's default configuration and the tolerances of a harness sampling about
    /// once a second.
    public init(
        backgroundTime: Duration = .seconds(600), backgroundTimeByApp: [String: Duration] = [:],
        budgetGrace: Duration = .seconds(2), settling: Duration = .seconds(1), appsMemoryMax: Int? = nil,
        appsTargetFraction: Double = 0.9, reclaimsForeground: Bool = false, memoryTolerance: Double = 0.1,
        readingWindow: Duration = .seconds(2), restartTolerance: Duration = .seconds(1),
        resourceGrowthLimit: Double = 0.1, warmUpFraction: Double = 0.2, descriptorSlack: Int = 4,
        minimumResourceSamples: Int = 6, counterExampleLimit: Int = 5, reactionBound: Duration = .seconds(1),
        expirationWarning: Duration = .seconds(3),
        scheduledTaskTimes: [String: Duration] = ["refresh": .seconds(30), "processing": .seconds(600)]
    ) {
        self.scheduledTaskTimes = scheduledTaskTimes
        self.reactionBound = reactionBound
        self.expirationWarning = expirationWarning
        self.backgroundTime = backgroundTime
        self.backgroundTimeByApp = backgroundTimeByApp
        self.budgetGrace = budgetGrace
        self.settling = settling
        self.appsMemoryMax = appsMemoryMax
        self.appsTargetFraction = appsTargetFraction
        self.reclaimsForeground = reclaimsForeground
        self.memoryTolerance = memoryTolerance
        self.readingWindow = readingWindow
        self.restartTolerance = restartTolerance
        self.resourceGrowthLimit = resourceGrowthLimit
        self.warmUpFraction = warmUpFraction
        self.descriptorSlack = descriptorSlack
        self.minimumResourceSamples = minimumResourceSamples
        self.counterExampleLimit = counterExampleLimit
    }

    /// The budget of `app`.
    func backgroundTime(of app: String) -> Duration { backgroundTimeByApp[app] ?? backgroundTime }

    /// The apps' memory reclamation brings them back under, in bytes; nil without `AppsMemoryMax`.
    var appsTargetBytes: Int? { appsMemoryMax.map { Int(Double($0) * appsTargetFraction) } }
}
