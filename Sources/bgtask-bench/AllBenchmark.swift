// `bgtask-bench all`: core, ipc (pinned and unpinned), scale and reclaim in one run, then one comparison table.

import BGTaskBenchmarks
import BGTaskPOSIX
import Foundation

/// Runs every mode in turn, in process, printing each mode's own lines as it goes, then the summary: each headline
/// figure beside its same-run floor or reference, the ratio, the aim and a verdict. Rounds are reduced where a mode's
/// default would take the run past five minutes on a loaded 2-CPU machine. A mode that fails is a failed row; the
/// others still run.
struct AllBenchmark {
    /// Whether to write the table into docs/PERFORMANCE.md (`--write-docs`).
    var writesDocs = false
    /// `ipc --pin` rounds per placement: half the default, about ten seconds per placement.
    static let pinRounds = 10
    /// `core` populations: the default's 100,000 left out, since populating it registers 100,000 apps of one user
    /// and each registration counts that user's apps by a scan of every app: minutes, not seconds.
    static let corePopulations = [100, 1_000, 10_000]
    /// `reclaim` rounds per backend: half the default, so three backends take about a minute.
    static let reclaimRounds = 10

    /// The benchmark as `all`'s options configure it, or what is wrong with them.
    static func parse(_ options: [String]) -> Result<AllBenchmark, BenchError> {
        switch options {
        case []: .success(AllBenchmark())
        case ["--write-docs"]: .success(AllBenchmark(writesDocs: true))
        default: .failure(BenchError("unexpected arguments \(options.joined(separator: " "))"))
        }
    }

    /// One mode: its name as printed, whether it handles interruption itself, and how to run it into rows.
    private struct Step {
        var name: String
        var handlesInterruption: Bool
        var rows: () throws -> [BenchmarkSummary.Row]
    }

    /// Runs the modes and returns the summary; an interruption stops the run between modes, the modes not run
    /// shown as failed.
    func run(executablesDirectory: String) -> BenchmarkSummary {
        var summary = BenchmarkSummary(
            notes: [
                "reduced: core --populations "
                    + Self.corePopulations.map(String.init).joined(separator: ",")
                    + " (default adds 100000), ipc --pin --rounds \(Self.pinRounds) (default 20), reclaim --rounds "
                    + "\(Self.reclaimRounds) (default 20); ipc and scale at their defaults"
            ])
        var timings: [String] = []
        var interruption: String?
        BenchmarkInterruption.install()
        defer { BenchmarkInterruption.uninstall() }
        for step in steps(executablesDirectory: executablesDirectory) {
            if interruption == nil {
                do { try BenchmarkInterruption.check() } catch { interruption = "\(error)" }
            }
            if let interruption {
                summary.rows.append(.failed(mode: step.name, reason: "not run: \(interruption)"))
                continue
            }
            print("== \(step.name) ==")
            // As when run alone: a mode that does not check for a signal is ended by it, its servers bounded by
            // their own timeouts; the others install and remove their own handlers.
            if !step.handlesInterruption { BenchmarkInterruption.uninstall() }
            let started = MonotonicClock.now()
            do {
                summary.rows += try step.rows()
            } catch {
                summary.rows.append(.failed(mode: step.name, reason: "\(error)"))
            }
            timings.append("\(step.name) \(Int((Double(MonotonicClock.now() - started) / 1e9).rounded())) s")
            // The flag outlives the handlers' removal, so a signal during the mode is seen here.
            do { try BenchmarkInterruption.check() } catch { interruption = "\(error)" }
            if interruption == nil { BenchmarkInterruption.install() }
            print("")
        }
        summary.notes.append("time per mode: " + timings.joined(separator: ", "))
        return summary
    }

    /// The modes in the order run, each turned into its rows.
    private func steps(executablesDirectory: String) -> [Step] {
        [
            Step(name: "core", handlesInterruption: false) {
                var benchmark = CoreBenchmark()
                benchmark.populations = Self.corePopulations
                let report = try benchmark.run()
                report.lines.forEach { print($0) }
                return BenchmarkSummary.Row.core(
                    nanosecondsByPopulation: report.measurements.map { ($0.population, $0.beginEndNanoseconds) })
            },
            Step(name: "ipc --pin", handlesInterruption: false) {
                var benchmark = IPCPlacementBenchmark()
                benchmark.rounds = Self.pinRounds
                let report = try benchmark.run()
                report.lines.forEach { print($0) }
                return report.outcomes.map { placement, outcome in
                    switch outcome {
                    case .measured(let measurement):
                        .ipcPlacement(
                            placement: placement.name,
                            daemonMicroseconds: percentileMicroseconds(measurement.daemonNanoseconds, 0.5),
                            rawMicroseconds: percentileMicroseconds(measurement.rawNanoseconds, 0.5),
                            aim: placement.aim)
                    case .unavailable(let reason):
                        BenchmarkSummary.Row(
                            mode: "ipc", figure: "p50 round trip, \(placement.name)", value: "-", reference: "-",
                            ratio: "-", aim: "-", verdict: .unavailable(reason))
                    }
                }
            },
            Step(name: "ipc", handlesInterruption: false) {
                let report = try IPCBenchmark().run()
                report.lines.forEach { print($0) }
                let largest = report.comparisons.map(\.clients).max()
                return report.comparisons.map { comparison in
                    .ipcThroughput(
                        clients: comparison.clients, daemonCallsPerSecond: comparison.daemon.callsPerSecond,
                        rawCallsPerSecond: comparison.raw.callsPerSecond, isJudged: comparison.clients == largest)
                }
            },
            Step(name: "scale", handlesInterruption: true) {
                let report = try ScaleBenchmark().run()
                report.lines.forEach { print($0) }
                let size = "\(report.apps) apps + \(report.apps * report.tasksPerApp) tasks"
                return [
                    .scaleLatency(
                        size: size, atSizeMicroseconds: percentileMicroseconds(report.atSizeNanoseconds, 0.5),
                        baselineMicroseconds: percentileMicroseconds(report.baselineNanoseconds, 0.5),
                        aim: ScaleReport.latencyRatioAim),
                    .scaleMemory(
                        figure: "empty", residentMiB: report.empty.residentMiB, aimMiB: ScaleReport.emptyAimMiB,
                        isJudged: true),
                    .scaleMemory(
                        figure: "\(report.apps) apps", residentMiB: report.withApps.residentMiB,
                        aimMiB: ScaleReport.appsAimMiB, isJudged: report.isAimedSize),
                    .scaleMemory(
                        figure: size, residentMiB: report.withTasks.residentMiB, aimMiB: ScaleReport.tasksAimMiB,
                        isJudged: report.isAimedSize),
                ]
            },
            Step(name: "reclaim", handlesInterruption: true) {
                var configuration = ReclaimBenchmark.Configuration(executablesDirectory: executablesDirectory)
                configuration.rounds = Self.reclaimRounds
                let report = try ReclaimBenchmark(configuration: configuration).run()
                report.lines.forEach { print($0) }
                return BenchmarkSummary.Row.reclaim(report)
            },
        ]
    }

    /// The command the docs name for a run.
    static let command = "swift build -c release && .build/release/bgtask-bench all --write-docs"

    /// Writes `summary` between the markers of the document at `path`, dated today (UTC).
    static func writeDocs(_ summary: BenchmarkSummary, to path: String) throws {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd"
        let section = PerformanceDocument.section(
            summary: summary, date: formatter.string(from: Date()), command: command)
        let document = try String(contentsOfFile: path, encoding: .utf8)
        let replaced = try PerformanceDocument.replacingSection(in: document, with: section)
        try Data(replaced.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}
