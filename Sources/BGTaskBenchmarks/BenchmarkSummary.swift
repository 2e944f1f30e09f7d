// The table of `bgtask-bench all`: every mode's headline figure beside its same-run floor or reference, the ratio,
// the aim and a verdict, as text and as Markdown.

import Foundation

/// One run of every benchmark reduced to one comparison table. Built from plain numbers, so the rendering can be
/// tested without running a benchmark.
public struct BenchmarkSummary: Sendable, Equatable {
    /// What a row's figure came to.
    public enum Verdict: Sendable, Equatable {
        /// Within its aim.
        case meets
        /// Outside its aim: reported, not an error.
        case misses
        /// Shown for reference only: there is no aim for it.
        case reported
        /// Not measured on this host, for the reason given: not an error.
        case unavailable(String)
        /// The mode failed, for the reason given: the run's exit status is 1.
        case failed(String)

        /// The verdict column's text.
        public var text: String {
            switch self {
            case .meets: "meets"
            case .misses: "misses"
            case .reported: "-"
            case .unavailable(let reason): "not available: \(reason)"
            case .failed(let reason): "FAILED: \(reason)"
            }
        }
    }

    /// One line of the table.
    public struct Row: Sendable, Equatable {
        /// The mode that measured it (`core`, `ipc`, `scale`, `reclaim`).
        public var mode: String
        /// What is measured.
        public var figure: String
        /// The value, with its unit.
        public var value: String
        /// The floor or reference it is set against, with its unit; `-` for none.
        public var reference: String
        /// The value over the reference, `-` for none.
        public var ratio: String
        /// The aim, `-` for none.
        public var aim: String
        /// What came of it.
        public var verdict: Verdict

        /// A row of `mode` whose every column is given.
        public init(
            mode: String, figure: String, value: String, reference: String, ratio: String, aim: String,
            verdict: Verdict
        ) {
            self.mode = mode
            self.figure = figure
            self.value = value
            self.reference = reference
            self.ratio = ratio
            self.aim = aim
            self.verdict = verdict
        }
    }

    /// The rows, mode by mode.
    public var rows: [Row]
    /// What the run changed from each mode's defaults (reduced rounds), printed under the table.
    public var notes: [String]

    /// A summary of `rows` with `notes` under it.
    public init(rows: [Row] = [], notes: [String] = []) {
        self.rows = rows
        self.notes = notes
    }

    /// Whether a mode failed: the run then exits 1. A miss is not a failure.
    public var hasFailure: Bool {
        rows.contains { if case .failed = $0.verdict { true } else { false } }
    }

    /// The column headings, in order.
    static let headings = ["mode", "figure", "value", "reference", "ratio", "aim", "verdict"]

    /// A row's cells, in the order of `headings`.
    private static func cells(_ row: Row) -> [String] {
        [row.mode, row.figure, row.value, row.reference, row.ratio, row.aim, row.verdict.text]
    }

    /// The table as printed: columns padded to their widest cell, then the notes.
    public var lines: [String] {
        let table = [Self.headings] + rows.map(Self.cells)
        let widths = Self.headings.indices.map { column in table.map { $0[column].count }.max() ?? 0 }
        let lines = table.map { cells in
            zip(cells, widths).enumerated().map { column, cell in
                // The last column is not padded, so no line ends in spaces.
                column == widths.count - 1 ? cell.0 : cell.0.padding(toLength: cell.1, withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }
        return lines + notes
    }

    /// The table in Markdown, then the notes as a list.
    public var markdown: String {
        func line(_ cells: [String]) -> String {
            "| " + cells.map { $0.replacingOccurrences(of: "|", with: "\\|") }.joined(separator: " | ") + " |"
        }
        var lines = [line(Self.headings), "|" + String(repeating: "---|", count: Self.headings.count)]
        lines += rows.map { line(Self.cells($0)) }
        if !notes.isEmpty { lines += [""] + notes.map { "- " + $0 } }
        return lines.joined(separator: "\n") + "\n"
    }
}

// MARK: - Rows from each mode's figures

extension BenchmarkSummary.Row {
    /// `core`: nanoseconds per lease begin+end at each population, against the smallest population.
    /// `nanosecondsByPopulation` is in the order measured; the first is the reference.
    public static func core(nanosecondsByPopulation: [(population: Int, nanoseconds: Double)]) -> [Self] {
        guard let first = nanosecondsByPopulation.first else { return [] }
        return nanosecondsByPopulation.enumerated().map { index, entry in
            Self(
                mode: "core", figure: "lease begin+end, \(grouped(entry.population)) live leases",
                value: "\(decimal(entry.nanoseconds)) ns",
                reference: index == 0 ? "-" : "\(decimal(first.nanoseconds)) ns at \(grouped(first.population))",
                ratio: index == 0 ? "-" : times(entry.nanoseconds / first.nanoseconds), aim: "-", verdict: .reported)
        }
    }

    /// `ipc --pin`: bgtaskd's p50 per round trip in `placement` against the raw echo server's in the same run.
    public static func ipcPlacement(
        placement: String, daemonMicroseconds: Double, rawMicroseconds: Double, aim: Double
    ) -> Self {
        let ratio = daemonMicroseconds / rawMicroseconds
        return Self(
            mode: "ipc", figure: "p50 round trip, \(placement)", value: "\(decimal(daemonMicroseconds)) µs",
            reference: "raw \(decimal(rawMicroseconds)) µs", ratio: times(ratio), aim: "≤ \(times(aim))",
            verdict: ratio <= aim ? .meets : .misses)
    }

    /// The share of the raw ping-pong's calls per second that bgtaskd should keep with many clients.
    public static let throughputAim = 0.9

    /// `ipc`: calls per second with `clients` clients against the raw echo server's; judged only when `isJudged`
    /// (the aim is stated for 64 clients).
    public static func ipcThroughput(
        clients: Int, daemonCallsPerSecond: Double, rawCallsPerSecond: Double, isJudged: Bool
    ) -> Self {
        let share = daemonCallsPerSecond / rawCallsPerSecond
        return Self(
            mode: "ipc", figure: "calls/s, \(clients) client\(clients == 1 ? "" : "s") unpinned",
            value: grouped(Int(daemonCallsPerSecond.rounded())),
            reference: "raw \(grouped(Int(rawCallsPerSecond.rounded())))",
            ratio: "\(Int((share * 100).rounded()))%",
            aim: isJudged ? "≥ \(Int(throughputAim * 100))%" : "-",
            verdict: isJudged ? (share >= throughputAim ? .meets : .misses) : .reported)
    }

    /// `scale`: the lease p50 at size against the p50 with one app.
    public static func scaleLatency(
        size: String, atSizeMicroseconds: Double, baselineMicroseconds: Double, aim: Double
    ) -> Self {
        let ratio = atSizeMicroseconds / baselineMicroseconds
        return Self(
            mode: "scale", figure: "lease p50 at \(size)", value: "\(decimal(atSizeMicroseconds)) µs",
            reference: "1 app \(decimal(baselineMicroseconds)) µs", ratio: times(ratio), aim: "≤ \(times(aim))",
            verdict: ratio <= aim ? .meets : .misses)
    }

    /// `scale`: the daemon's resident memory against its aim; judged only when `isJudged` (the aims with apps are
    /// stated for 1,000 apps with 50 leases each).
    public static func scaleMemory(figure: String, residentMiB: Double, aimMiB: Double, isJudged: Bool) -> Self {
        Self(
            mode: "scale", figure: "RSS \(figure)", value: String(format: "%.1f MiB", residentMiB),
            reference: "aim \(decimal(aimMiB)) MiB", ratio: times(residentMiB / aimMiB),
            aim: isJudged ? "≤ \(decimal(aimMiB)) MiB" : "-",
            verdict: isJudged ? (residentMiB <= aimMiB ? .meets : .misses) : .reported)
    }

    /// `reclaim`: per backend, the median from the crossing to the victim dead against the aim for the daemon's
    /// trigger; unavailable and failed backends as such.
    public static func reclaim(_ report: ReclaimReport) -> [Self] {
        report.rows.map { row in
            let figure = "trigger → dead p50, \(row.backend)"
            switch row.outcome {
            case .unavailable(let reason):
                return Self(
                    mode: "reclaim", figure: figure, value: "-", reference: "-", ratio: "-", aim: "-",
                    verdict: .unavailable(reason))
            case .failed(let reason):
                return Self(
                    mode: "reclaim", figure: figure, value: "-", reference: "-", ratio: "-", aim: "-",
                    verdict: .failed(reason))
            case .measured(let measurement):
                let aim = ReclaimReport.aimMilliseconds(trigger: measurement.trigger)
                let rounds = measurement.rounds.count
                guard let median = ReclaimReport.percentile(measurement.rounds.map(\.deadMilliseconds), 0.5) else {
                    return Self(
                        mode: "reclaim", figure: figure, value: "-", reference: "-", ratio: "-",
                        aim: "< \(decimal(aim)) ms", verdict: .failed("no round measured"))
                }
                let isComplete = rounds == report.rounds
                return Self(
                    mode: "reclaim", figure: figure, value: "\(decimal(median)) ms",
                    reference: "\(triggerName(measurement.trigger)), \(rounds) round\(rounds == 1 ? "" : "s")",
                    ratio: times(median / aim),
                    aim: "< \(decimal(aim)) ms",
                    verdict: isComplete
                        ? (median < aim ? .meets : .misses)
                        : .failed("\(rounds) of \(report.rounds) rounds measured"))
            }
        }
    }

    /// The part of the daemon's `backends.trigger` its aim depends on: "usage threshold" or "polling" (the
    /// paths and figures it adds are in `reclaim`'s own lines).
    static func triggerName(_ trigger: String) -> String {
        ReclaimReport.aimMilliseconds(trigger: trigger) == ReclaimReport.pressureAimMilliseconds
            ? "usage threshold" : "polling"
    }

    /// The row of a mode that threw before it produced a figure.
    public static func failed(mode: String, reason: String) -> Self {
        Self(mode: mode, figure: "-", value: "-", reference: "-", ratio: "-", aim: "-", verdict: .failed(reason))
    }

    /// `value` with one decimal under 100, none from there, thousands separated.
    static func decimal(_ value: Double) -> String {
        guard value.isFinite else { return "-" }
        return abs(value) >= 100 || value == value.rounded()
            ? grouped(Int(value.rounded())) : String(format: "%.1f", value)
    }

    /// `ratio` as "1.23x".
    static func times(_ ratio: Double) -> String {
        ratio.isFinite ? String(format: "%.2fx", ratio) : "-"
    }

    /// `value` with thousands separated by commas, as the docs write them.
    static func grouped(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var groups: [Substring] = []
        var end = digits.endIndex
        while end > digits.startIndex {
            let start = digits.index(end, offsetBy: -3, limitedBy: digits.startIndex) ?? digits.startIndex
            groups.insert(digits[start..<end], at: 0)
            end = start
        }
        return (value < 0 ? "-" : "") + groups.joined(separator: ",")
    }
}
