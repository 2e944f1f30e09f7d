// `bgtask-bench all`'s table from given figures, as text and Markdown, and docs/PERFORMANCE.md's summary section
// replaced between its markers: pure functions, no benchmark run.

import Testing

@testable import BGTaskBenchmarks

@Suite("Benchmark summary")
struct BenchmarkSummaryTests {
    /// A summary with a row of each kind: reference only, meets, misses, unavailable, failed.
    static let summary = BenchmarkSummary(
        rows: BenchmarkSummary.Row.core(nanosecondsByPopulation: [(100, 200), (100_000, 300)]) + [
            .ipcPlacement(placement: "across CPUs", daemonMicroseconds: 30, rawMicroseconds: 20, aim: 1.25),
            .ipcPlacement(placement: "same CPU", daemonMicroseconds: 50, rawMicroseconds: 20, aim: 3),
            .ipcThroughput(clients: 16, daemonCallsPerSecond: 40_000, rawCallsPerSecond: 80_000, isJudged: false),
            .ipcThroughput(clients: 64, daemonCallsPerSecond: 95_000, rawCallsPerSecond: 100_000, isJudged: true),
            .scaleLatency(
                size: "1000 apps + 50000 tasks", atSizeMicroseconds: 33, baselineMicroseconds: 30, aim: 1.5),
            .scaleMemory(figure: "empty", residentMiB: 13.25, aimMiB: 12, isJudged: true),
            .scaleMemory(figure: "20 apps", residentMiB: 14, aimMiB: 16, isJudged: false),
        ]
            + BenchmarkSummary.Row.reclaim(
                ReclaimReport(
                    rounds: 2,
                    rows: [
                        .init(backend: "cgroup2 freeze + v1 memory", outcome: .unavailable("not root")),
                        .init(
                            backend: "SIGSTOP + PSS",
                            outcome: .measured(measurement(dead: [4, 60], trigger: "polling"))),
                        .init(backend: "v1 freezer", outcome: .failed("no daemon")),
                    ])),
        notes: ["reduced rounds: reclaim --rounds 2"])

    /// A reclaim measurement of rounds dead after `dead` milliseconds each.
    static func measurement(dead: [Double], trigger: String) -> ReclaimReport.Measurement {
        ReclaimReport.Measurement(
            rounds: dead.map {
                ReclaimReport.Round(
                    deadMilliseconds: $0, freedMilliseconds: nil, daemonMilliseconds: nil, crossingMilliseconds: 1,
                    crossingBytes: 1 << 20, heldOverLimit: true, suspendedWith: "sigstop", memoryBackend: "pss",
                    band: "suspended")
            }, redone: 0, daemonBackends: [:], trigger: trigger, freedMeasure: "pss")
    }

    @Test("every figure is set against its reference with the ratio, the aim and the verdict")
    func rowsCompareWithReference() {
        let rows = Self.summary.rows
        #expect(rows.map(\.verdict.text).prefix(8) == ["-", "-", "misses", "meets", "-", "meets", "meets", "misses"])
        #expect(rows[1].reference == "200 ns at 100" && rows[1].ratio == "1.50x")
        #expect(rows[2].reference == "raw 20 µs" && rows[2].ratio == "1.50x" && rows[2].aim == "≤ 1.25x")
        #expect(rows[5].value == "95,000" && rows[5].ratio == "95%" && rows[5].aim == "≥ 90%")
        #expect(rows[7].value == "13.2 MiB" || rows[7].value == "13.3 MiB")
        #expect(rows[8].verdict == .reported && rows[8].aim == "-")
        #expect(rows[9].verdict == .unavailable("not root"))
        // The median of 4 and 60 by nearest rank is 4, under the polling aim of 50 ms.
        #expect(rows[10].value == "4 ms" && rows[10].aim == "< 50 ms" && rows[10].verdict == .meets)
        #expect(rows[10].reference == "polling, 2 rounds")
        #expect(rows[11].verdict == .failed("no daemon"))
        #expect(Self.summary.hasFailure)
        #expect(!BenchmarkSummary(rows: Array(rows.prefix(10))).hasFailure, "a miss is not a failure")
    }

    @Test("a backend with fewer rounds than asked for is a failure, not a verdict")
    func incompleteReclaimFails() {
        let report = ReclaimReport(
            rounds: 3,
            rows: [.init(backend: "SIGSTOP + PSS", outcome: .measured(Self.measurement(dead: [4], trigger: "polling")))]
        )
        #expect(BenchmarkSummary.Row.reclaim(report).map(\.verdict) == [.failed("1 of 3 rounds measured")])
        let threshold = ReclaimReport(
            rounds: 1,
            rows: [
                .init(
                    backend: "cgroup2",
                    outcome: .measured(Self.measurement(dead: [12], trigger: "usage-threshold(/x) + psi")))
            ])
        let row = BenchmarkSummary.Row.reclaim(threshold)[0]
        #expect(row.reference == "usage threshold, 1 round" && row.aim == "< 10 ms" && row.verdict == .misses)
    }

    @Test("the Markdown table has a header, a separator and a row per figure, then the notes")
    func markdown() {
        let lines = Self.summary.markdown.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines[0] == "| mode | figure | value | reference | ratio | aim | verdict |")
        #expect(lines[1] == "|---|---|---|---|---|---|---|")
        #expect(
            lines[4]
                == "| ipc | p50 round trip, across CPUs | 30 µs | raw 20 µs | 1.50x | ≤ 1.25x | misses |")
        #expect(lines.count == 2 + Self.summary.rows.count + 3)
        #expect(lines.suffix(3) == ["", "- reduced rounds: reclaim --rounds 2", ""])
        let piped = BenchmarkSummary(rows: [.failed(mode: "scale", reason: "a | b")])
        #expect(piped.markdown.contains("FAILED: a \\| b |"), "a pipe in a cell is escaped")
    }

    @Test("the text table aligns its columns and no line ends in spaces")
    func text() {
        let lines = Self.summary.lines
        #expect(lines.count == 1 + Self.summary.rows.count + 1)
        let column = lines[0].range(of: "verdict")!.lowerBound.utf16Offset(in: lines[0])
        for line in lines.dropFirst().dropLast() {
            #expect(line.count > column, "\(line)")
            #expect(!line.hasSuffix(" "), "\(line)")
        }
    }

    /// A document shaped like docs/PERFORMANCE.md.
    static let document = "# Performance\n\nIntro.\n\n## Method\n\nText.\n"

    @Test("without markers the section goes in before the first second-level heading, inside new markers")
    func insertsWithoutMarkers() throws {
        let replaced = try PerformanceDocument.replacingSection(in: Self.document, with: "## Summary\n\nTable.\n")
        #expect(
            replaced
                == "# Performance\n\nIntro.\n\n<!-- bgtask-bench all: begin -->\n## Summary\n\nTable.\n"
                + "<!-- bgtask-bench all: end -->\n\n## Method\n\nText.\n")
        // Once in, the next run replaces it and leaves the rest as it was.
        let again = try PerformanceDocument.replacingSection(in: replaced, with: "## Summary\n\nNew.\n")
        #expect(again == replaced.replacingOccurrences(of: "Table.", with: "New."))
        #expect(try PerformanceDocument.replacingSection(in: again, with: "## Summary\n\nNew.\n") == again)
    }

    @Test("a document with no second-level heading gets the section at its end")
    func appendsWithoutHeading() throws {
        let replaced = try PerformanceDocument.replacingSection(in: "# Title\nText.", with: "S")
        #expect(replaced == "# Title\nText.\n\n<!-- bgtask-bench all: begin -->\nS\n<!-- bgtask-bench all: end -->\n")
    }

    @Test(
        "broken markers are an error, the document untouched",
        arguments: [
            ("<!-- bgtask-bench all: begin -->\ntext\n", PerformanceDocument.EditError.unmatchedMarkers),
            ("text\n<!-- bgtask-bench all: end -->\n", .unmatchedMarkers),
            ("<!-- bgtask-bench all: end -->\n<!-- bgtask-bench all: begin -->\n", .unmatchedMarkers),
            (
                "<!-- bgtask-bench all: begin -->\n<!-- bgtask-bench all: begin -->\n<!-- bgtask-bench all: end -->\n",
                .repeatedMarker(PerformanceDocument.beginMarker)
            ),
        ])
    func brokenMarkers(document: String, error: PerformanceDocument.EditError) {
        #expect(throws: error) { try PerformanceDocument.replacingSection(in: document, with: "S") }
    }

    @Test("the section names the date and the command, then the table")
    func section() {
        let section = PerformanceDocument.section(
            summary: Self.summary, date: "2026-01-02", command: "bgtask-bench all --write-docs")
        #expect(
            section.hasPrefix(
                "## Summary (bgtask-bench all)\n\nMeasured 2026-01-02 with `bgtask-bench all --write-docs`"))
        #expect(section.hasSuffix(Self.summary.markdown))
    }

    @Test("the document is found from the package root or below it, and a clear error names where it looked")
    func locate() throws {
        // The tests run from the package root, or a directory inside it.
        let found = try PerformanceDocument.locate(from: ["/nonexistent", #filePath])
        #expect(found.hasSuffix("/docs/PERFORMANCE.md"))
        #expect(throws: PerformanceDocument.EditError.notFound(searched: ["/"])) {
            try PerformanceDocument.locate(from: ["/"])
        }
    }
}
