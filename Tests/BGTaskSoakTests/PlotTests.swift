// The report's figures: series thinned without losing spikes, SVG that an independent XML parser reads with its
// axes, shading and markers, and lines of best fit that show a planted drift and no drift where there is none.

import BGTaskSoak
import BGTaskTestSupport
import Foundation
import Testing

/// What `Tests/Fixtures/svg_summary.py` (Python's xml.etree) read in one SVG file.
struct SVGSummary {
    var version: String?
    var title: String?
    var seriesPoints: [Int]
    var seriesNames: [String]
    var ticks: [String]
    var axisLabels: [String]
    var subtitle: String
    var warmUps: Int
    var windDowns: Int
    var restartMarkers: Int
    var faultMarkers: Int
    var pressureMarkers: Int
    var fits: Int
    var medianSteps: Int

    /// Writes `svg` to a scratch file and has Python's XML parser read it; fails the test (throws) when the
    /// parser refuses it or a point lies outside the picture.
    static func reading(_ svg: String) throws -> SVGSummary {
        let directory = try ScratchDirectory(prefix: "bgtask-plot-test")
        defer { directory.remove() }
        let path = directory.path + "/figure.svg"
        try svg.write(toFile: path, atomically: true, encoding: .utf8)
        return try read([path])[path]!  // The script answers for every path it was given or exits 1.
    }

    /// Has Python's XML parser read the SVG files at `paths`.
    static func read(_ paths: [String]) throws -> [String: SVGSummary] {
        let (status, output) = try runProgram(
            ["python3", Products.packageRoot + "/Tests/Fixtures/svg_summary.py"] + paths)
        guard status == 0, let data = output.data(using: .utf8),
            let files = try JSONSerialization.jsonObject(with: data) as? [String: [String: Any]]
        else { throw HarnessError("svg_summary.py refused the SVG (status \(status)): \(output)") }
        return files.mapValues { file in
            let series = file["series"] as? [[String: Any]] ?? []
            return SVGSummary(
                version: file["version"] as? String, title: file["title"] as? String,
                seriesPoints: series.compactMap { $0["points"] as? Int },
                seriesNames: series.compactMap { $0["name"] as? String }, ticks: file["ticks"] as? [String] ?? [],
                axisLabels: file["axisLabels"] as? [String] ?? [], subtitle: file["subtitle"] as? String ?? "",
                warmUps: file["warmUps"] as? Int ?? -1, windDowns: file["windDowns"] as? Int ?? -1,
                restartMarkers: file["restartMarkers"] as? Int ?? -1, faultMarkers: file["faultMarkers"] as? Int ?? -1,
                pressureMarkers: file["pressureMarkers"] as? Int ?? -1, fits: file["fits"] as? Int ?? -1,
                medianSteps: file["medianSteps"] as? Int ?? -1)
        }
    }
}

@Suite("Soak figures")
struct PlotTests {
    /// 6,000 samples a tenth of a second apart (ten minutes), cycling through 20.0 to 20.9 MiB, with one sample of
    /// 80 MiB at t=300.1 s.
    static var denseSeries: PlotSeries {
        let points = (0..<6_000).map { index in
            PlotPoint(time: Double(index) / 10, value: index == 3_001 ? 80 : 20 + Double(index % 10) / 10)
        }
        return PlotSeries(name: "daemon pid 1", style: .line, points: points)
    }

    static func figure(_ series: [PlotSeries], title: String = "Daemon resident memory") -> Figure {
        Figure(
            name: "rss", title: title, caption: "what it shows", quantity: "resident memory", unit: "MiB",
            series: series, shaded: [ShadedSpan(kind: .warmUp, range: 0...120)],
            markers: [
                PlotMarker(time: 200, kind: .restart, label: "restart (kill-9)"),
                PlotMarker(time: 300, kind: .fault, label: "hostile"),
                PlotMarker(time: 400, kind: .restart, label: "restart (watchdog)"),
            ],
            duration: 600)
    }

    @Test("thinning keeps each bucket's lowest and highest point, in time order, the spike among them")
    func downsampling() {
        let thinned = Self.denseSeries.downsampled(toAtMost: 1_000)
        // 500 buckets of about 12 samples, each holding a 20.0 and a 20.9 (or the spike): two points each.
        #expect(thinned.count == 1_000)
        #expect(thinned.points.contains { $0.value == 80 })
        #expect(thinned.points.map(\.time) == thinned.points.map(\.time).sorted())
        #expect(Set(thinned.points.map(\.value)) == [20, 20.9, 80])
        // Few enough points are left as they are; segments stay apart.
        #expect(Self.denseSeries.downsampled(toAtMost: 10_000) == Self.denseSeries)
        let gapped = PlotSeries(
            name: "gapped", style: .line,
            points: (0..<3_000).map { PlotPoint(time: Double($0 < 1_500 ? $0 : $0 + 100), value: Double($0 % 7)) },
            maximumStep: 5)
        #expect(gapped.segments.count == 2)
        let thinnedGapped = gapped.downsampled(toAtMost: 400)
        #expect(thinnedGapped.segments.count == 2)
        #expect(thinnedGapped.count <= 400 && thinnedGapped.count > 300)
        // Hundreds of one-point segments still end up within the bound.
        let scattered = PlotSeries(
            name: "scattered", style: .line, points: (0..<900).map { PlotPoint(time: Double($0 * 10), value: 1) },
            maximumStep: 5)
        #expect(scattered.segments.count == 900 && scattered.downsampled(toAtMost: 100).count <= 100)
    }

    @Test("the SVG parses as XML with its points, axis labels and ticks, warm-up shading and restart markers")
    func svgReads() throws {
        let svg = Self.figure([Self.denseSeries]).svg(maximumPointsPerSeries: 1_000)
        let summary = try SVGSummary.reading(svg)
        #expect(summary.version == "1.1")
        #expect(summary.title == "Daemon resident memory")
        #expect(summary.seriesPoints == [1_000])
        #expect(summary.seriesNames == ["daemon pid 1"])
        #expect(summary.axisLabels == ["minutes since the start", "resident memory (MiB)"])
        // y: 0 to 80 MiB in steps of 20; x: ten minutes in steps of 2.
        for tick in ["0", "20", "40", "60", "80", "2", "4", "6", "8", "10"] {
            #expect(summary.ticks.contains(tick), "no tick \(tick) in \(summary.ticks)")
        }
        #expect(summary.warmUps == 1 && summary.windDowns == 0)
        #expect(summary.restartMarkers == 2 && summary.faultMarkers == 1 && summary.pressureMarkers == 0)
        // Eight minutes after the warm-up: the series' line of best fit, and the medians per minute in one run.
        #expect(summary.fits == 1 && summary.medianSteps == 1)
        #expect(summary.subtitle.contains("all 6000: median 20.5"), "\(summary.subtitle)")
        // The full series is 6,000 points; drawn, an hour's worth stays small.
        #expect(svg.utf8.count < 60_000, "\(svg.utf8.count) bytes")
    }

    @Test("an hour's worth of dots, three series of 10,000 warnings, draws in a few hundred kilobytes")
    func hourOfDots() throws {
        let series = (0..<3).map { kind in
            PlotSeries(
                name: "kind \(kind)", style: .points,
                points: (0..<10_000).map { PlotPoint(time: Double($0) * 0.36, value: Double(($0 * 7 + kind) % 50)) })
        }
        let svg = Figure(
            name: "warning-lateness", title: "Lateness", caption: "c", quantity: "lateness", unit: "ms",
            series: series, duration: 3_600, clipsOutliers: true
        ).svg()
        let summary = try SVGSummary.reading(svg)
        #expect(summary.seriesPoints.count == 3 && summary.seriesPoints.allSatisfy { $0 <= 2_000 && $0 > 1_000 })
        // Dots keep each bucket's median beside its extremes: the bulk between them shows.
        let thinned = series[0].downsampled(toAtMost: Figure.maximumPointsPerSeries)
        #expect(thinned.points.contains { (20...30).contains($0.value) })
        #expect(thinned.points.contains { $0.value == 0 } && thinned.points.contains { $0.value == 49 })
        #expect(svg.utf8.count < 300_000, "\(svg.utf8.count) bytes")
    }

    @Test("text is escaped; latencies far above the rest are drawn at the top edge and said so")
    func escapingAndClipping() throws {
        var points = (0..<600).map { PlotPoint(time: Double($0), value: 0.4 + Double($0 % 5) / 10) }
        points[300].value = 900
        let series = PlotSeries(name: "GetStatus <\"probe\"> & co", style: .line, points: points)
        let figure = Figure(
            name: "status-latency", title: "Latency <ms> & 'more'", caption: "a & b", quantity: "round trip",
            unit: "ms", series: [series], duration: 600, clipsOutliers: true)
        let summary = try SVGSummary.reading(figure.svg())
        #expect(summary.title == "Latency <ms> & 'more'")
        #expect(summary.seriesNames == ["GetStatus <\"probe\"> & co"])
        #expect(summary.subtitle.contains("1 above the top drawn at the edge (max 900)"), "\(summary.subtitle)")
        // Clipped at 1.5 times the 99th percentile (0.8 ms), rounded up to a tick of 0.5.
        #expect(summary.ticks.contains("1.5") && !summary.ticks.contains("2.0"), "\(summary.ticks)")
    }

    @Test("a drift planted after the warm-up gives a positive slope; a flat series or a warm-up climb, about none")
    func drift() throws {
        // An hour at a sample a second, with noise; the first 20 minutes are the warm-up.
        func series(_ value: (Double) -> Double) -> PlotSeries {
            PlotSeries(
                name: "s", style: .line,
                points: (0..<3_600).map { second in
                    let time = Double(second)
                    return PlotPoint(time: time, value: value(time) + [0, 0.3, -0.2, 0.1][second % 4])
                })
        }
        func figure(_ series: PlotSeries) -> FigureSummary {
            Figure(
                name: "rss", title: "t", caption: "c", quantity: "q", unit: "MiB", series: [series],
                shaded: [ShadedSpan(kind: .warmUp, range: 0...1_200)], duration: 3_600
            ).summary
        }
        // 12 MiB, growing 2 MiB per hour after the warm-up.
        let drifting = figure(series { 12 + max(0, $0 - 1_200) * 2 / 3_600 })
        let driftFit = try #require(drifting.series.first?.fit)
        #expect(abs(driftFit.slopePerHour - 2) < 0.05, "\(driftFit)")
        #expect((drifting.trend?.slopePerHour ?? 0) > 1.5, "\(String(describing: drifting.trend))")
        let flat = figure(series { _ in 12 })
        #expect(abs(flat.series.first?.fit?.slopePerHour ?? 99) < 0.05)
        #expect(abs(flat.trend?.slopePerHour ?? 99) < 0.05)
        // Climbing 30 MiB in the warm-up, flat after it: the warm-up is left out of the fit.
        let settling = figure(series { min($0, 1_200) / 40 })
        #expect(abs(settling.series.first?.fit?.slopePerHour ?? 99) < 0.05)
        #expect(settling.medianPerMinute.count == 40 && settling.medianPerMinute.first?.time == 1_230)
        // The warm-up counted after all, the same series would read as a steep climb.
        let unshaded = Figure(
            name: "rss", title: "t", caption: "c", quantity: "q", unit: "MiB", series: [series { min($0, 1_200) / 40 }],
            duration: 3_600
        ).summary
        #expect((unshaded.series.first?.fit?.slopePerHour ?? 0) > 10)
    }

    @Test("the best fit of dots goes through their medians per minute: one late warning does not tilt it")
    func dotsFitMedians() throws {
        var points = (0..<600).map { PlotPoint(time: Double($0), value: 1 + Double($0 % 3) / 10) }
        points[30].value = 900
        let dots = PlotSeries(name: "warnings", style: .points, points: points)
        let line = PlotSeries(name: "warnings", style: .line, points: points)
        func fit(_ series: PlotSeries) throws -> LinearFit {
            try #require(
                Figure(
                    name: "n", title: "t", caption: "c", quantity: "q", unit: "ms", series: [series], duration: 600
                ).summary.series.first?.fit)
        }
        let throughMedians = try fit(dots)
        let throughDots = try fit(line)
        #expect(abs(throughMedians.slopePerHour) < 0.01, "\(throughMedians)")
        // Through the dots themselves, the one at t=30 s reads as nearly 50 ms per hour of improvement.
        #expect(throughDots.slopePerHour < -40, "\(throughDots)")
    }

    @Test("the summary over all series spans from the earliest point to the latest, whichever series holds them")
    func overallSpanAcrossSeries() throws {
        // A short soak's warnings: the first series' points all come after the second's (a `ClosedRange` from the
        // first point joined to the last crashed the report).
        let late = PlotSeries(
            name: "budget", style: .points, points: [PlotPoint(time: 50, value: 2), PlotPoint(time: 55, value: 3)])
        let early = PlotSeries(
            name: "scheduled", style: .points, points: [PlotPoint(time: 10, value: 1), PlotPoint(time: 20, value: 4)])
        let summary = Figure(
            name: "n", title: "t", caption: "c", quantity: "q", unit: "ms", series: [late, early], duration: 60
        ).summary
        #expect(summary.overall.judgedSpan == 10...55)
        #expect(summary.overall.count == 4)
    }

    @Test("GetStatus failures split the line into segments: gaps, never zeros")
    func statusGaps() throws {
        var calls = (0..<120).map { StatusCall(at: .milliseconds(Int64($0) * 500), latency: .microseconds(400)) }
        for index in [40, 41, 42, 90] { calls[index].latency = nil }
        let evidence = SoakEvidence(end: .seconds(60))
        let figures = SoakFigures.figures(
            evidence, statusCalls: calls, faults: [], runDuration: .seconds(60), criteria: SoakCriteria())
        let status = try #require(figures.first { $0.name == "status-latency" })
        let series = try #require(status.series.first)
        #expect(series.segments.map(\.count) == [40, 47, 29])
        #expect(series.points.allSatisfy { abs($0.value - 0.4) < 1e-9 })
        #expect(status.notes.contains("120 calls, 4 failed (drawn as gaps, not as zeros)."))
        #expect(figures.map(\.name) == ["rss", "descriptors", "warning-lateness", "status-latency"])
    }

    @Test("the soak's figures shade each process's warm-up and the wind-down, mark restarts and faults, and parse")
    func soakFigures() throws {
        var scenario = SoakScenario()
        scenario.criteria.warmUpFraction = 0.3
        scenario.evidence.memoryLimitChanges = [
            MemoryLimitChange(at: at(18), appsMemoryMax: mebibytes(700)),
            MemoryLimitChange(at: at(26), appsMemoryMax: mebibytes(1000)),
        ]
        let faults = [
            FaultMark(at: at(30), name: "kill", restartsDaemon: true),
            FaultMark(at: at(35), name: "hostile", restartsDaemon: false),
        ]
        let figures = SoakFigures.figures(
            scenario.evidence, statusCalls: [], faults: faults, runDuration: .seconds(55), criteria: scenario.criteria)
        let rss = try #require(figures.first)
        // pid 100 sampled 0..29 s, pid 200 31..58 s after the kill at 30: a warm-up each, 30% of its samples' span.
        let spans = rss.shaded.map { ($0.kind, $0.range.lowerBound, $0.range.upperBound) }
        try #require(spans.count == 3, "\(spans)")
        #expect(spans[0].0 == .warmUp && spans[0].1 == 0 && abs(spans[0].2 - 8.7) < 1e-6, "\(spans)")
        #expect(spans[1].0 == .warmUp && spans[1].1 == 30 && abs(spans[1].2 - 39.1) < 1e-6, "\(spans)")
        #expect(spans[2].0 == .windDown && spans[2].1 == 55 && spans[2].2 == 60, "\(spans)")
        #expect(rss.series.map(\.name) == ["daemon pid 100", "daemon pid 200"])
        #expect(rss.markers.filter { $0.kind == .restart }.map(\.time) == [30, 40])
        #expect(rss.markers.filter { $0.kind == .fault }.map(\.label) == ["hostile"])
        #expect(rss.markers.filter { $0.kind == .pressure }.map(\.time) == [18])
        let directory = try ScratchDirectory(prefix: "bgtask-plot-test")
        defer { directory.remove() }
        var paths: [String] = []
        for figure in figures {
            let path = directory.path + "/soak-\(figure.name).svg"
            try figure.svg().write(toFile: path, atomically: true, encoding: .utf8)
            paths.append(path)
        }
        let summaries = try SVGSummary.read(paths)
        #expect(summaries.count == 4)
        for (path, summary) in summaries {
            #expect(summary.warmUps == 2 && summary.windDowns == 1, "\(path)")
            #expect(summary.restartMarkers == 2 && summary.faultMarkers == 1 && summary.pressureMarkers == 1, "\(path)")
        }
    }
}
