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
    /// The checker's verdicts.
    public var report: SoakReport
    /// How many times the harness lowered `AppsMemoryMax` under the apps' total.
    public var memoryPressurePhases: Int

    init(run: SoakRun, evidence: SoakEvidence, report: SoakReport) {
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
        memoryPressurePhases = evidence.memoryLimitChanges.filter { $0.appsMemoryMax < run.appsMemoryMaxBytes }.count
        self.report = report
    }

    /// Whether every invariant held and every requested fault was injected.
    public var isPassing: Bool { report.isPassing && faults.values.allSatisfy { $0 > 0 } }

    /// The `q` quantile of the lease latencies in milliseconds; nil without samples.
    public func leaseLatencyMilliseconds(_ q: Double) -> Double? {
        guard !leaseLatencies.isEmpty else { return nil }
        let sorted = leaseLatencies.sorted()
        let index = min(sorted.count - 1, Int((Double(sorted.count - 1) * q).rounded()))
        return Double(sorted[index]) / 1e6
    }

    /// The report for people.
    public var markdown: String {
        var lines = [
            "# bgtask-soak report", "",
            "- result: \(isPassing ? "pass" : "FAIL")",
            "- seed: \(seed) (schedule \(scheduleDigest))",
            "- apps: \(apps), duration: \(format(durationSeconds, 0)) s, daemon run by "
                + (usesSystemd ? "a contained systemd manager" : "the harness"),
            "- entries watched: \(entryCount), process samples: \(processSampleCount)", "",
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
    /// is dropped first); the paths written.
    public func write(to path: String) throws -> [String] {
        var base = path
        if base.hasSuffix(".md") { base.removeLast(3) } else if base.hasSuffix(".json") { base.removeLast(5) }
        try writeFile(base + ".md", markdown)
        try writeFile(base + ".json", try jsonText())
        return [base + ".md", base + ".json"]
    }
}
