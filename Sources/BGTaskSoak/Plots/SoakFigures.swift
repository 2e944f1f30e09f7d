// The soak report's figures, drawn from the evidence: the daemon's resident memory and descriptors, how late its
// expiration warnings came, and how long `GetStatus` took, over the whole run.

import BGTaskProtocol

/// One `GetStatus` call of the harness's status probe.
public struct StatusCall: Hashable, Sendable {
    /// When it was sent, on the harness's clock.
    public var at: Duration
    /// Its round trip (`CLOCK_MONOTONIC` around the call, client side); nil when it failed (no daemon, a timeout, a
    /// closed connection).
    public var latency: Duration?

    /// A call.
    public init(at: Duration, latency: Duration?) {
        self.at = at
        self.latency = latency
    }
}

/// A fault the harness injected, marked on every figure.
public struct FaultMark: Hashable, Sendable {
    /// When it was injected.
    public var at: Duration
    /// Its name (`client-kill`, `hostile`, ...).
    public var name: String
    /// Whether it restarts the daemon (those are marked from the restarts themselves).
    public var restartsDaemon: Bool

    /// A fault.
    public init(at: Duration, name: String, restartsDaemon: Bool) {
        self.at = at
        self.name = name
        self.restartsDaemon = restartsDaemon
    }
}

/// The figures of a soak report.
public enum SoakFigures {
    /// The report's four figures, in order: `rss`, `descriptors`, `warning-lateness`, `status-latency`.
    /// `runDuration` is how long the apps churned: after it the run winds down (the apps are ended, the daemon
    /// stopped), which is shaded and not judged.
    public static func figures(
        _ evidence: SoakEvidence, statusCalls: [StatusCall], faults: [FaultMark], runDuration: Duration,
        criteria: SoakCriteria
    ) -> [Figure] {
        let shaded = shadedSpans(evidence, runDuration: runDuration, criteria: criteria)
        let markers = markers(evidence, faults: faults, criteria: criteria)
        let duration = max(evidence.end, runDuration).secondsValue
        let processes = Set(evidence.resourceSamples.map(\.daemonPid)).count
        let processLegend = "daemon process, one colour per pid (\(processes))"
        let rss = Figure(
            name: "rss", title: "Daemon resident memory",
            caption: "The daemon's resident memory (VmRSS of /proc/PID/status, sampled about once a second), one "
                + "line per daemon process: after each warm-up the line should stay level.",
            quantity: "resident memory", unit: "MiB",
            series: resourceSeries(evidence) { Double($0.residentBytes) / 1_048_576 }, seriesLegend: processLegend,
            shaded: shaded, markers: markers, duration: duration)
        let descriptors = Figure(
            name: "descriptors", title: "Daemon open descriptors",
            caption: "The daemon's open descriptors (entries of /proc/PID/fd, about once a second), one line per "
                + "daemon process: they follow the apps connected and should not climb after the warm-up.",
            quantity: "open descriptors", unit: "count",
            series: resourceSeries(evidence) { Double($0.openDescriptors) }, seriesLegend: processLegend,
            shaded: shaded, markers: markers, duration: duration)
        return [
            rss, descriptors,
            latenessFigure(
                evidence, criteria: criteria, shaded: shaded, markers: markers,
                duration: duration),
            statusFigure(statusCalls, shaded: shaded, markers: markers, duration: duration),
        ]
    }

    /// Each daemon process's warm-up (from the fault that ended the process before it, or the start, until the
    /// first `warmUpFraction` of its samples' span is over: what `resources-flat` leaves out), and the wind-down
    /// after `runDuration`.
    static func shadedSpans(_ evidence: SoakEvidence, runDuration: Duration, criteria: SoakCriteria)
        -> [ShadedSpan]
    {
        var spans: [ShadedSpan] = []
        for samples in samplesByProcess(evidence) {
            guard let first = samples.first?.takenAt, let last = samples.last?.takenAt else { continue }
            let start =
                spans.isEmpty ? .zero : evidence.restarts.last { $0.stoppedAt <= first }.map(\.stoppedAt) ?? first
            let end = first + (last - first) * criteria.warmUpFraction
            spans.append(ShadedSpan(kind: .warmUp, range: start.secondsValue...max(start, end).secondsValue))
        }
        if evidence.end > runDuration {
            spans.append(ShadedSpan(kind: .windDown, range: runDuration.secondsValue...evidence.end.secondsValue))
        }
        return spans
    }

    /// The restarts (from the evidence, with their causes), the faults that leave the daemon running, and each
    /// lowering of `AppsMemoryMax`.
    static func markers(_ evidence: SoakEvidence, faults: [FaultMark], criteria: SoakCriteria) -> [PlotMarker] {
        var markers = evidence.restarts.map {
            PlotMarker(time: $0.stoppedAt.secondsValue, kind: .restart, label: "restart (\($0.cause.rawValue))")
        }
        markers += faults.filter { !$0.restartsDaemon }.map {
            PlotMarker(time: $0.at.secondsValue, kind: .fault, label: $0.name)
        }
        let configured = criteria.appsMemoryMax ?? Int.max
        markers += evidence.memoryLimitChanges.filter { $0.appsMemoryMax < configured }.map {
            PlotMarker(
                time: $0.at.secondsValue, kind: .pressure,
                label: "AppsMemoryMax lowered to \(fixed(Double($0.appsMemoryMax) / 1_048_576, digits: 0)) MiB")
        }
        return markers
    }

    /// The daemon's resource samples by process, in the order the processes were first sampled.
    static func samplesByProcess(_ evidence: SoakEvidence) -> [[ResourceSample]] {
        var order: [Int] = []
        var byProcess: [Int: [ResourceSample]] = [:]
        for sample in evidence.resourceSamples {
            if byProcess[sample.daemonPid] == nil { order.append(sample.daemonPid) }
            byProcess[sample.daemonPid, default: []].append(sample)
        }
        return order.map { (byProcess[$0] ?? []).sorted { $0.takenAt < $1.takenAt } }
    }

    /// One line per daemon process of `value` of its samples, broken where samples are more than 5 s apart (the
    /// harness samples once a second between its other work; a fault it waits on holds it longer).
    static func resourceSeries(_ evidence: SoakEvidence, value: (ResourceSample) -> Double) -> [PlotSeries] {
        samplesByProcess(evidence).map { samples in
            PlotSeries(
                name: "daemon pid \(samples.first?.daemonPid ?? 0)", style: .line,
                points: samples.map { PlotPoint(time: $0.takenAt.secondsValue, value: value($0)) }, maximumStep: 5)
        }
    }

    static func latenessFigure(
        _ evidence: SoakEvidence, criteria: SoakCriteria, shaded: [ShadedSpan], markers: [PlotMarker],
        duration: Double
    ) -> Figure {
        let timeliness = SoakChecker.warningLateness(evidence, criteria)
        let names: [WarningLateness.Kind: String] = [
            .budget: "budget (entry into background + budget − warning)",
            .atBegin: "lease begun in the warning window",
            .scheduled: "scheduled task (begin + its time − warning)",
        ]
        let series = WarningLateness.Kind.allCases.compactMap { kind -> PlotSeries? in
            let points = timeliness.samples.filter { $0.kind == kind }.map {
                PlotPoint(time: $0.receivedAt.secondsValue, value: $0.lateness.secondsValue * 1_000)
            }
            return points.isEmpty ? nil : PlotSeries(name: names[kind] ?? kind.rawValue, style: .points, points: points)
        }
        var notes = [
            "Measured at the Watch stream's arrival: both the moment the warning is counted from and the warning "
                + "itself are stamped when their entries reached the harness."
        ]
        for reason in timeliness.leftOut.keys.sorted() {
            notes.append("Left out, \(reason): \(timeliness.leftOut[reason] ?? 0).")
        }
        return Figure(
            name: "warning-lateness", title: "Expiration-warning lateness",
            caption: "How late each expiration warning reached the harness against when it was due (entry into "
                + "background + budget − ExpirationWarningSec; a scheduled task's begin + its kind's time − "
                + "ExpirationWarningSec), one dot per warning: a cloud that rises means timers slipping.",
            quantity: "lateness", unit: "ms", series: series, shaded: shaded, markers: markers, duration: duration,
            clipsOutliers: true, notes: notes)
    }

    static func statusFigure(_ calls: [StatusCall], shaded: [ShadedSpan], markers: [PlotMarker], duration: Double)
        -> Figure
    {
        var segments: [[PlotPoint]] = [[]]
        var failures = 0
        for call in calls.sorted(by: { $0.at < $1.at }) {
            guard let latency = call.latency else {
                failures += 1
                segments.append([])
                continue
            }
            segments[segments.count - 1].append(
                PlotPoint(time: call.at.secondsValue, value: latency.secondsValue * 1_000))
        }
        let series = PlotSeries(name: "GetStatus", style: .line, segments: segments)
        return Figure(
            name: "status-latency", title: "GetStatus latency",
            caption: "GetStatus round trips timed by the harness on a connection of its own every 500 ms "
                + "(CLOCK_MONOTONIC around the call, client side); calls that failed, while the daemon was down, are "
                + "gaps in the line.",
            quantity: "round trip", unit: "ms", series: [series], shaded: shaded, markers: markers, duration: duration,
            clipsOutliers: true,
            notes: ["\(calls.count) calls, \(failures) failed (drawn as gaps, not as zeros)."])
    }
}
