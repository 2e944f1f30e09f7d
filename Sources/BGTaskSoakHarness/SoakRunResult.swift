// What a soak run did and how the daemon fared: the checker's verdicts with the run's own figures, in Markdown
// and JSON.

import BGTaskJSON
import BGTaskProtocol
import BGTaskSoak

/// The figures of one run beside the checker's report.
public struct SoakRunResult: Sendable {
    /// The seed, apps, duration and whether systemd ran the daemon.
    public var seed: UInt64
    public var apps: Int
    public var durationSeconds: Double
    public var usesSystemd: Bool
    /// The schedule's digest: equal for runs of one seed, apps, duration and faults.
    public var scheduleDigest: String
    /// Operations done per kind: answered and refused (a refusal is often right: an app between registrations).
    public var operations: [String: (done: Int, refused: Int)]
    /// Faults injected per kind (every requested kind is listed, with 0 when none was).
    public var faults: [SoakFault: Int]
    /// Each restart: its cause and the milliseconds from the fault to the new daemon's readiness.
    public var restarts: [(cause: RestartCause, downMilliseconds: Double)]
    /// Each restart's evidence (when the fault hit, when the new daemon was ready).
    public var restartEvidence: [RestartEvidence]
    /// Lease call round trips of the probe app, in nanoseconds.
    public var leaseLatencies: [Int64]
    /// The daemon's resources over time.
    public var resources: [ResourceSample]
    /// Entries received from the daemon, and process samples taken.
    public var entryCount: Int
    public var processSampleCount: Int
    /// How many times the harness subscribed to `Watch()` (once at the start, then after each stream's end).
    public var watchSubscriptions: Int
    /// How long after the daemon recorded each entry (its wall-clock time) the harness received it: the median,
    /// 99th percentile and largest, in milliseconds; nil without entries. How far behind the daemon the stream, and
    /// so each stamp, ran.
    public var watchLagMilliseconds: (p50: Double, p99: Double, max: Double)?
    /// The checker's verdicts.
    public var report: SoakReport
    /// How many times the harness lowered `AppsMemoryMax` under the apps' total.
    public var memoryPressurePhases: Int
    /// The figures over time: resident memory, descriptors, expiration-warning lateness, `GetStatus` latency.
    public var figures: [Figure]
    /// The fraction of each daemon process's life taken as its warm-up (shaded in the figures).
    public var warmUpFraction: Double

    init(run: SoakRun, evidence: SoakEvidence, report: SoakReport, figures: [Figure], warmUpFraction: Double) {
        self.figures = figures
        self.warmUpFraction = warmUpFraction
        seed = run.seed
        apps = run.options.apps
        durationSeconds = run.options.duration.secondsValue
        usesSystemd = run.options.usesSystemd
        scheduleDigest = run.schedule.digest
        operations = run.controller.counts
        var faults: [SoakFault: Int] = [:]
        for fault in run.faults { faults[fault] = run.faultCounts[fault] ?? 0 }
        self.faults = faults
        restarts = run.restartTimes
        restartEvidence = evidence.restarts
        leaseLatencies = run.finalLatencies
        resources = evidence.resourceSamples
        entryCount = evidence.entries.count
        processSampleCount = evidence.processSamples.count
        watchSubscriptions = evidence.watchGaps.count
        let lags = evidence.entries.map { ($0.observedAt - run.clock.fromWallClock($0.entry.time)).secondsValue * 1000 }
            .sorted()
        func nearestRank(_ q: Double) -> Double { lags[min(lags.count - 1, Int((Double(lags.count - 1) * q).rounded()))] }
        watchLagMilliseconds = lags.isEmpty ? nil : (nearestRank(0.5), nearestRank(0.99), lags[lags.count - 1])
        memoryPressurePhases = evidence.memoryLimitChanges.filter { $0.appsMemoryMax < run.appsMemoryMaxBytes }.count
        self.report = report
    }

    /// Whether every invariant held and every requested fault was injected.
    public var isPassing: Bool { report.isPassing && faults.values.allSatisfy { $0 > 0 } }

    /// The lag of the Watch stream as its quantiles, in milliseconds.
    var watchLagSummary: String {
        guard let lag = watchLagMilliseconds else { return "none received" }
        return "p50 \(format(lag.p50, 1)) ms, p99 \(format(lag.p99, 1)) ms, max \(format(lag.max, 1)) ms"
    }

    /// The `q` quantile of the lease latencies in milliseconds; nil without samples.
    public func leaseLatencyMilliseconds(_ q: Double) -> Double? {
        guard !leaseLatencies.isEmpty else { return nil }
        let sorted = leaseLatencies.sorted()
        let index = min(sorted.count - 1, Int((Double(sorted.count - 1) * q).rounded()))
        return Double(sorted[index]) / 1e6
    }

    /// The report for people.
    public var markdown: String { markdown(plotBase: nil) }

    /// The report for people; with `plotBase`, the figures are embedded from the files `plotBase-NAME.svg` beside it.
    public func markdown(plotBase: String?) -> String {
        var lines = [
            "# bgtask-soak report", "",
            "- result: \(isPassing ? "pass" : "FAIL")",
            "- seed: \(seed) (schedule \(scheduleDigest))",
            "- apps: \(apps), duration: \(format(durationSeconds, 0)) s, daemon run by "
                + (usesSystemd ? "a contained systemd manager" : "the harness"),
            "- entries watched: \(entryCount), process samples: \(processSampleCount)",
            "- Watch subscriptions: \(watchSubscriptions); entries received after the daemon recorded them: "
                + watchLagSummary, "",
            "## Invariants", "",
        ]
        lines += report.markdown.split(separator: "\n", omittingEmptySubsequences: false).dropFirst(2).map(String.init)
        lines += ["## Faults", "", "| fault | injected |", "|---|---|"]
        for fault in SoakFault.allCases {
            if let count = faults[fault] { lines.append("| \(fault.rawValue) | \(count) |") }
        }
        lines += [
            "",
            "Memory-pressure phases (AppsMemoryMax lowered under the apps' total, then put back): "
                + "\(memoryPressurePhases)",
        ]
        lines += [
            "", "## Restarts", "", "| # | cause | at (s) | fault to ready (ms) | apps before | apps after |",
            "|---|---|---|---|---|---|",
        ]
        for (index, restart) in restarts.enumerated() {
            let evidence = restartEvidence[index]
            lines.append(
                "| \(index + 1) | \(restart.cause.rawValue) | \(format(evidence.stoppedAt.secondsValue, 3)) | "
                    + "\(format(restart.downMilliseconds, 1)) | \(evidence.before.apps.count) | \(evidence.after.apps.count) |"
            )
        }
        lines += ["", "## Operations", "", "| kind | answered | refused or failed |", "|---|---|---|"]
        for kind in operations.keys.sorted() {
            lines.append("| \(kind) | \(operations[kind]!.done) | \(operations[kind]!.refused) |")
        }
        lines += plotLines(base: plotBase)
        lines += ["", "## Lease call latency under load (probe app, one call each)", ""]
        if let p50 = leaseLatencyMilliseconds(0.5), let p90 = leaseLatencyMilliseconds(0.9),
            let p99 = leaseLatencyMilliseconds(0.99), let maximum = leaseLatencyMilliseconds(1)
        {
            lines.append(
                "\(leaseLatencies.count) calls: p50 \(format(p50, 3)) ms, p90 \(format(p90, 3)) ms, p99 "
                    + "\(format(p99, 3)) ms, max \(format(maximum, 3)) ms")
        } else {
            lines.append("no calls measured")
        }
        lines += [
            "", "## Daemon resources over time", "", "| t (s) | pid | RSS (MiB) | fds | CPU (s) |",
            "|---|---|---|---|---|",
        ]
        for sample in resourceRows {
            lines.append(
                "| \(format(sample.takenAt.secondsValue, 1)) | \(sample.daemonPid) | "
                    + "\(format(Double(sample.residentBytes) / 1_048_576, 1)) | \(sample.openDescriptors) | "
                    + "\(format(sample.cpuSeconds, 2)) |")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The figures: each embedded (when written beside the report) with the line saying what it shows, its
    /// figures and what it left out.
    func plotLines(base: String?) -> [String] {
        var lines = [
            "", "## Over time", "",
            "Shaded: each daemon process's warm-up (from the fault before it until the first "
                + "\(format(warmUpFraction * 100, 0))% of its life is over, as `resources-flat` leaves it out) and the "
                + "wind-down; red lines: restarts; grey: other faults; orange: memory pressure. The dark steps are the "
                + "median of each minute after the warm-up, the dashed lines each series' best fit after it: drift "
                + "shows as steps or fits that climb.",
        ]
        for figure in figures {
            let summary = figure.summary
            lines.append("")
            lines.append("### \(figure.title)")
            lines.append("")
            if let base { lines += ["![\(figure.title)](\(base)-\(figure.name).svg)", ""] }
            lines.append(figure.caption)
            lines.append("")
            var facts: [String] = []
            let overall = summary.overall
            if let median = overall.median, let p99 = overall.p99, let maximum = overall.maximum {
                facts.append(
                    "\(summary.overall.count) values: median \(format(median, 3)), p99 \(format(p99, 3)), max "
                        + "\(format(maximum, 3)) \(figure.unit)")
            } else {
                facts.append("no values")
            }
            if let trend = summary.trend {
                let across = figure.seriesLegend == nil ? "" : ", across daemon processes (a restart moves it)"
                facts.append(
                    "after the warm-up the median per minute drifts \(format(trend.slopePerHour, 3)) \(figure.unit) "
                        + "per hour (\(summary.medianPerMinute.count) minutes\(across))")
            }
            func span(_ series: SeriesSummary) -> Double {
                series.judgedSpan.map { $0.upperBound - $0.lowerBound } ?? 0
            }
            let fitted = summary.series.filter { $0.fit != nil }
            if let longest = fitted.max(by: { span($0) < span($1) }), let fit = longest.fit {
                facts.append(
                    "best fit of \(longest.name) after its warm-up: \(format(fit.slopePerHour, 3)) \(figure.unit)/h")
            }
            lines.append("- " + facts.joined(separator: "; "))
            for note in figure.notes { lines.append("- " + note) }
        }
        return lines
    }

    /// About twenty resource samples spread over the run, the first and last included.
    var resourceRows: [ResourceSample] {
        guard resources.count > 20 else { return resources }
        let step = Double(resources.count - 1) / 19
        return (0..<20).map { resources[Int((Double($0) * step).rounded())] }
    }

    /// The report for scripts.
    public func jsonText() throws -> String {
        String(decoding: try JSONTextEncoder().encode(JSONRun(self)), as: UTF8.self)
    }
}

/// The JSON shape of a run.
private struct JSONRun: Encodable {
    struct Operation: Encodable {
        var kind: String
        var done: Int
        var refused: Int
    }
    struct Restart: Encodable {
        var cause: String
        var downMs: Double
    }
    struct Resource: Encodable {
        var timeSec: Double
        var pid: Int
        var rssBytes: Int
        var fds: Int
        var cpuSec: Double
    }
    struct Fit: Encodable {
        var slopePerHour: Double
        var fromSec: Double
        var toSec: Double
    }
    struct SeriesFigures: Encodable {
        var name: String
        var count: Int
        var p50: Double?
        var p99: Double?
        var max: Double?
        var judged: Int
        var fitAfterWarmUp: Fit?

        init(_ summary: SeriesSummary) {
            name = summary.name
            count = summary.count
            p50 = summary.median
            p99 = summary.p99
            max = summary.maximum
            judged = summary.judgedCount
            fitAfterWarmUp = summary.fit.flatMap { fit in
                summary.judgedSpan.map {
                    Fit(slopePerHour: fit.slopePerHour, fromSec: $0.lowerBound, toSec: $0.upperBound)
                }
            }
        }
    }
    struct Minute: Encodable {
        var minute: Int
        var median: Double
    }
    struct Plot: Encodable {
        var name: String
        var title: String
        var quantity: String
        var unit: String
        var overall: SeriesFigures
        var trendSlopePerHour: Double?
        var medianPerMinute: [Minute]
        var series: [SeriesFigures]
        var notes: [String]

        init(_ figure: Figure) {
            let summary = figure.summary
            name = figure.name
            title = figure.title
            quantity = figure.quantity
            unit = figure.unit
            overall = SeriesFigures(summary.overall)
            trendSlopePerHour = summary.trend?.slopePerHour
            medianPerMinute = summary.medianPerMinute.map {
                Minute(minute: Int(($0.time / 60).rounded(.down)), median: $0.value)
            }
            series = summary.series.map(SeriesFigures.init)
            notes = figure.notes
        }
    }
    struct Latency: Encodable {
        var count: Int
        var p50Ms: Double?
        var p90Ms: Double?
        var p99Ms: Double?
        var maxMs: Double?
    }
    var passed: Bool
    var seed: String
    var schedule: String
    var apps: Int
    var durationSec: Double
    var systemd: Bool
    var faults: [String: Int]
    var memoryPressurePhases: Int
    var operations: [Operation]
    var restarts: [Restart]
    var leaseLatency: Latency
    var resources: [Resource]
    var entries: Int
    var processSamples: Int
    var plots: [Plot]
    var invariants: JSONValue

    init(_ result: SoakRunResult) throws {
        passed = result.isPassing
        seed = String(result.seed)
        schedule = result.scheduleDigest
        apps = result.apps
        durationSec = result.durationSeconds
        systemd = result.usesSystemd
        var faults: [String: Int] = [:]
        for (fault, count) in result.faults { faults[fault.rawValue] = count }
        self.faults = faults
        memoryPressurePhases = result.memoryPressurePhases
        operations = result.operations.keys.sorted().map {
            Operation(kind: $0, done: result.operations[$0]!.done, refused: result.operations[$0]!.refused)
        }
        restarts = result.restarts.map { Restart(cause: $0.cause.rawValue, downMs: $0.downMilliseconds) }
        leaseLatency = Latency(
            count: result.leaseLatencies.count, p50Ms: result.leaseLatencyMilliseconds(0.5),
            p90Ms: result.leaseLatencyMilliseconds(0.9), p99Ms: result.leaseLatencyMilliseconds(0.99),
            maxMs: result.leaseLatencyMilliseconds(1))
        resources = result.resources.map {
            Resource(
                timeSec: $0.takenAt.secondsValue, pid: $0.daemonPid, rssBytes: $0.residentBytes,
                fds: $0.openDescriptors, cpuSec: $0.cpuSeconds)
        }
        entries = result.entryCount
        processSamples = result.processSampleCount
        plots = result.figures.map(Plot.init)
        invariants = try JSONParser.parse(Array(try result.report.jsonText().utf8))
    }
}

/// `value` with `digits` decimals.
func format(_ value: Double, _ digits: Int) -> String {
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let rounded = (value * scale).rounded() / scale
    guard digits > 0 else { return String(Int(rounded)) }
    let text = String(rounded)
    guard let dot = text.firstIndex(of: ".") else { return text }
    let decimals = text[text.index(after: dot)...]
    return decimals.count >= digits
        ? String(text[..<text.index(dot, offsetBy: digits + 1)])
        : text + String(repeating: "0", count: digits - decimals.count)
}

extension SoakRunResult {
    /// Writes the Markdown and the JSON report to `path`.md and `path`.json (a `.md` or `.json` ending of `path`
    /// is dropped first), and each figure beside them as `path-NAME.svg`; the paths written.
    public func write(to path: String) throws -> [String] {
        var base = path
        if base.hasSuffix(".md") { base.removeLast(3) } else if base.hasSuffix(".json") { base.removeLast(5) }
        let name = base.split(separator: "/").last.map(String.init) ?? base
        try writeFile(base + ".md", markdown(plotBase: name))
        try writeFile(base + ".json", try jsonText())
        var written = [base + ".md", base + ".json"]
        for figure in figures {
            try writeFile(base + "-" + figure.name + ".svg", figure.svg())
            written.append(base + "-" + figure.name + ".svg")
        }
        return written
    }
}
