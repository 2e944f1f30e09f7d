// The private daemon's policy for the demo: short enough that every scene fits in well under a minute.
import BGTaskCLI

/// The numbers the demo runs with, derived from `--background-time`, and the `bgtaskd.conf` that sets them.
struct DemoPolicy: Hashable, Sendable {
    /// `BackgroundTimeSec`: the background time budget of each app.
    var backgroundTime: Duration
    /// `ExpirationWarningSec`: 2 s, or a third of a shorter budget, so the warning always comes after the start.
    var expirationWarning: Duration
    /// `EnterBackgroundGraceSec`: the sample apps acknowledge within milliseconds; 1 s is ample.
    var enterBackgroundGrace = Duration.seconds(1)
    /// `WillTerminateGraceSec`: long enough to see the misbehaving app's willTerminate line before the kill.
    var willTerminateGrace = Duration.seconds(1)
    /// `MemoryWarningGraceSec`: long enough to read the warnings before the reclaim.
    var memoryWarningGrace = Duration.seconds(1)
    /// `AppsMemoryMax` in MiB. A sample app measures about 5 MiB by PSS (its Swift libraries are shared with the
    /// other apps, so each pays a part) and about 3 MiB by a cgroup of its own (the libraries' pages are charged to
    /// the cgroup that first read them, the demo's). Before the editor starts, mail, uploader and maps with its
    /// cache measure about 45 MiB: under 64 MiB, and under the reclaim's target too (90%, 57.6 MiB), so that once
    /// the editor's allocation has put them far over and the editor is reclaimed, the daemon stops there.
    var appsMemoryMaxMebibytes = 64
    /// What the editor app allocates in background: enough to put the apps well over `AppsMemoryMax`.
    var allocationMebibytes = 96
    /// What the maps app caches in background and keeps: lighter than the editor's buffer, so the two suspended
    /// apps show the order of reclamation (heaviest first), and small enough to stay within the limits above.
    var cacheMebibytes = 32
    /// How long the editor's render (and maps' prefetch) runs after allocating: short, so the editor is suspended,
    /// still holding its buffer, well before the warning's grace is up (the monitor reads at most 1 s apart when at
    /// ease), and is reclaimed as a suspended app is: at once, with no notice.
    var renderLength = Duration.milliseconds(300)
    /// How long the uploader's upload takes: it ends well before the expiration warning would come.
    var uploadLength: Duration

    /// The shortest and longest `--background-time` the scenes are paced for.
    static let backgroundTimeRange = Duration.seconds(3)...Duration.seconds(600)

    /// The policy for a background time budget; fails when the budget is outside `backgroundTimeRange`.
    init(backgroundTime: Duration) throws(DemoFailure) {
        guard Self.backgroundTimeRange.contains(backgroundTime) else {
            let range = Self.backgroundTimeRange
            throw DemoFailure(
                "--background-time must be between \(Self.readable(range.lowerBound)) and "
                    + "\(Self.readable(range.upperBound)) for the scenes to fit, not \(Self.readable(backgroundTime))")
        }
        self.backgroundTime = backgroundTime
        expirationWarning = min(.seconds(2), backgroundTime / 3)
        uploadLength = min(.milliseconds(2_500), (backgroundTime - expirationWarning) / 2)
    }

    /// The configuration file's text, as `bgtaskd --config` reads it, with the cgroups the daemon makes launched
    /// apps' cgroups in when the demo has them, and the power_supply tree the demo plugs and unplugs.
    func configuration(
        cgroupRoot: String? = nil, memoryCgroupRoot: String? = nil, powerSupplyPath: String? = nil
    ) -> String {
        var cgroups = ""
        if let cgroupRoot { cgroups += "CgroupRoot=\(cgroupRoot)\n" }
        if let memoryCgroupRoot { cgroups += "MemoryCgroupRoot=\(memoryCgroupRoot)\n" }
        return """
            # bgtask demo: a short policy so that every scene fits in well under a minute.
            [Policy]
            BackgroundTimeSec=\(Self.milliseconds(backgroundTime))
            ExpirationWarningSec=\(Self.milliseconds(expirationWarning))
            EnterBackgroundGraceSec=\(Self.milliseconds(enterBackgroundGrace))
            WillTerminateGraceSec=\(Self.milliseconds(willTerminateGrace))

            [Memory]
            AppsMemoryMax=\(appsMemoryMaxMebibytes)M
            MemoryWarningGraceSec=\(Self.milliseconds(memoryWarningGrace))
            \(cgroups)
            """ + (powerSupplyPath.map { "\n[Conditions]\nPowerSupplyPath=\($0)\n" } ?? "")
    }

    /// The policy on one line, for the narration.
    var summary: String {
        [
            "BackgroundTimeSec=\(Self.readable(backgroundTime))",
            "ExpirationWarningSec=\(Self.readable(expirationWarning))",
            "EnterBackgroundGraceSec=\(Self.readable(enterBackgroundGrace))",
            "WillTerminateGraceSec=\(Self.readable(willTerminateGrace))",
            "AppsMemoryMax=\(appsMemoryMaxMebibytes)M",
            "MemoryWarningGraceSec=\(Self.readable(memoryWarningGrace))",
        ].joined(separator: " ")
    }

    /// `2500ms`: systemd time syntax, exact.
    static func milliseconds(_ duration: Duration) -> String {
        "\(Int64((duration.inSeconds * 1_000).rounded()))ms"
    }

    /// `6s`, `2.5s`: for people.
    static func readable(_ duration: Duration) -> String {
        Formatting.duration(seconds: duration.inSeconds)
    }
}
