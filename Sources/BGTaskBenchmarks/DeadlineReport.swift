// The deadline benchmark's figures: how late expiration warnings came, how much churn there was, the verdict.

import Foundation

/// The result of one deadline benchmark run.
public struct DeadlineReport: Sendable {
    /// Which daemon was measured, for the heading.
    public var daemonDescription: String
    /// Apps that churned.
    public var apps: Int
    /// How long the churn ran, from the apps' start to the last app's end, in seconds.
    public var churnSeconds: Double
    /// Every expiration warning's lateness against its due time, in milliseconds, sorted; negative when early.
    /// A missing warning counts at `ChurningApp.missingWarningWait`.
    public var latenessMilliseconds: [Double]
    /// Warnings that never came.
    public var missingWarnings: Int
    /// Warnings left out because the app itself asked for its lease after the warning was due.
    public var warningsAfterLateBegin: Int
    /// `SetState` calls the apps made.
    public var stateChanges: Int
    /// Tasks the apps began.
    public var tasksBegun: Int
    /// Notifications the apps posted.
    public var posts: Int
    /// Notifications the apps received.
    public var notificationsReceived: Int
    /// Registrations made, the apps' first ones included.
    public var registrations: Int
    /// Registrations that ended before the run did (the daemon terminated the app, or a step failed).
    public var earlyEndings: Int
    /// Why: the three commonest reasons, each with its count.
    public var earlyEndingReasons: [String]
    /// What the status flooder did, or why it did not say.
    public var statusFlood: Result<StatusFloodResult, BenchmarkError>
    /// The uid the status calls came from.
    public var statusUID: UInt32
    /// The daemon's own account of its loop (`GetStatus.loop`), when it gives one.
    public var daemonLoop: String?
    /// CPU time the daemon used during the churn, in seconds; nil for a daemon the benchmark did not start.
    public var daemonCPUSeconds: Double?
    /// CPU time the benchmark's own process (the apps' threads) used during the churn, in seconds.
    public var benchmarkCPUSeconds: Double
    /// How long each phase of the run took, on one line.
    public var phases: String

    /// The figures of a run from what each app did.
    init(
        daemonDescription: String, apps: Int, churnSeconds: Double, tallies: [AppTally],
        statusFlood: Result<StatusFloodResult, BenchmarkError>, statusUID: UInt32, daemonLoop: String?,
        daemonCPUSeconds: Double?, benchmarkCPUSeconds: Double, phases: String
    ) {
        func sum(_ count: (AppTally) -> Int) -> Int { tallies.reduce(0) { $0 + count($1) } }
        self.daemonDescription = daemonDescription
        self.apps = apps
        self.churnSeconds = churnSeconds
        latenessMilliseconds = tallies.flatMap(\.latenessNanoseconds).map { Double($0) / 1e6 }.sorted()
        missingWarnings = sum(\.missingWarnings)
        warningsAfterLateBegin = sum(\.warningsAfterLateBegin)
        stateChanges = sum(\.stateChanges)
        tasksBegun = sum(\.tasksBegun)
        posts = sum(\.posts)
        notificationsReceived = sum(\.notificationsReceived)
        registrations = sum(\.registrations)
        earlyEndings = sum(\.endingCount)
        let reasons = tallies.reduce(into: [String: Int]()) { $0.merge($1.endings, uniquingKeysWith: +) }
        earlyEndingReasons = reasons.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.prefix(3).map {
            "\($0.value) × \($0.key)"
        }
        self.statusFlood = statusFlood
        self.statusUID = statusUID
        self.daemonLoop = daemonLoop
        self.daemonCPUSeconds = daemonCPUSeconds
        self.benchmarkCPUSeconds = benchmarkCPUSeconds
        self.phases = phases
    }

    /// The aim: expiration warnings at most this late at the 99th percentile, in milliseconds.
    public static let aimMilliseconds = 5.0

    /// The warnings measured.
    public var warningCount: Int { latenessMilliseconds.count }

    /// The lateness at `fraction` (0.5 for the median) by nearest rank, in milliseconds; 0 with no warnings.
    public func latenessMilliseconds(atPercentile fraction: Double) -> Double {
        guard !latenessMilliseconds.isEmpty else { return 0 }
        let rank = Int((fraction * Double(latenessMilliseconds.count)).rounded(.up))
        return latenessMilliseconds[min(latenessMilliseconds.count - 1, max(0, rank - 1))]
    }

    /// The latest warning, in milliseconds.
    public var maximumLatenessMilliseconds: Double { latenessMilliseconds.last ?? 0 }

    /// The earliest warning, in milliseconds: negative when one came before its due time.
    public var minimumLatenessMilliseconds: Double { latenessMilliseconds.first ?? 0 }

    /// Warnings that came more than a millisecond before their due time. The due time counts from the arrival
    /// of `didEnterBackground`; a daemon that starts the budget at an earlier instant than it sends that event
    /// (the start of a long loop iteration, say), or whose policy differs from what the benchmark assumes (see
    /// `DeadlineBenchmark.warningLead`), sends warnings early by as much.
    public var earlyWarnings: Int { latenessMilliseconds.prefix { $0 < -1 }.count }

    /// Whether the 99th percentile meets the aim.
    public var meetsAim: Bool { warningCount > 0 && latenessMilliseconds(atPercentile: 0.99) < Self.aimMilliseconds }

    /// The report as printed, one line per item.
    public var lines: [String] {
        let p50 = latenessMilliseconds(atPercentile: 0.5)
        let p99 = latenessMilliseconds(atPercentile: 0.99)
        var lines = [
            "deadlines: \(apps) apps churning for \(format(churnSeconds)) s against \(daemonDescription)",
            "expiration warnings: \(warningCount), lateness against due time: p50 \(format(p50)) ms, "
                + "p99 \(format(p99)) ms, max \(format(maximumLatenessMilliseconds)) ms, "
                + "min \(format(minimumLatenessMilliseconds)) ms"
                + (missingWarnings > 0
                    ? ", \(missingWarnings) never came (counted at \(ChurningApp.missingWarningWait))" : "")
                + (earlyWarnings > 0 ? ", \(earlyWarnings) early by over 1 ms" : "")
                + (warningsAfterLateBegin > 0 ? ", \(warningsAfterLateBegin) left out (lease asked for late)" : ""),
            "churn per second: \(rate(stateChanges)) state changes, \(rate(tasksBegun)) tasks, \(rate(posts)) posts "
                + "(\(rate(notificationsReceived)) notifications received)",
        ]
        switch statusFlood {
        case .success(let flood):
            lines.append(
                "status calls from uid \(statusUID): \(rate(flood.calls)) per second, \(flood.errors) errors; "
                    + "longest call \(format(flood.longestCallMilliseconds)) ms, \(flood.bursts) bursts of "
                    + "\(StatusFlood.burstSize) pipelined GetStatus, longest \(format(flood.longestBurstMilliseconds)) ms"
                    + (flood.firstError.map { "; first error: \($0)" } ?? ""))
        case .failure(let error):
            lines.append("status calls from uid \(statusUID): none measured: \(error)")
        }
        lines.append(
            "apps: \(registrations) registrations, \(earlyEndings) ended early"
                + (earlyEndingReasons.isEmpty ? "" : " (" + earlyEndingReasons.joined(separator: "; ") + ")"))
        if let daemonLoop { lines.append("daemon loop: \(daemonLoop)") }
        lines.append(
            "CPU during the churn: "
                + (daemonCPUSeconds.map { "bgtaskd \(format($0)) s (\(percentOfOneCore($0))), " } ?? "")
                + "the apps' threads \(format(benchmarkCPUSeconds)) s (\(percentOfOneCore(benchmarkCPUSeconds)))")
        lines.append("phases: \(phases)")
        let aim = "the aim (p99 under \(format(Self.aimMilliseconds)) ms)"
        lines.append(
            warningCount == 0
                ? "verdict: no expiration warning measured"
                : "verdict: p99 \(format(p99)) ms \(meetsAim ? "meets" : "misses") \(aim)")
        return lines
    }

    private func percentOfOneCore(_ seconds: Double) -> String {
        format(churnSeconds > 0 ? 100 * seconds / churnSeconds : 0) + "% of one core"
    }

    private func rate(_ count: Int) -> String {
        format(churnSeconds > 0 ? Double(count) / churnSeconds : 0)
    }

    private func format(_ value: Double) -> String {
        if value == value.rounded() && abs(value) < 1e9 { return String(Int(value)) }
        if abs(value) >= 100 { return String(format: "%.0f", value) }
        if abs(value) >= 10 { return String(format: "%.1f", value) }
        return String(format: "%.2f", value)
    }
}
