// Expiration warnings stay on time while a hundred apps churn and another user floods status calls.

import BGTaskBenchmarks
import BGTaskTestSupport
import Testing

@Suite("Deadlines under load")
struct DeadlineLatenessTests {
    /// The bound a stalled loop breaks and a healthy one keeps with room to spare on a loaded two-core machine
    /// and a debug build; the benchmark's aim is far tighter (`DeadlineReport.aimMilliseconds`).
    static let boundMilliseconds = 100.0

    /// Enough warnings that the percentile means something: 100 apps get about fifty a second.
    static let minimumWarnings = 100

    @Test(
        "100 churning apps get their expiration warnings within 100 ms at the 99th percentile",
        // The limit covers waiting for a place to run: the soak tests (Tests/BGTaskSoakRunTests) hold every place
        // for about four and a half minutes.
        .timeLimit(.minutes(8)))
    func warningsOnTimeUnderLoad() async throws {
        var configuration = DeadlineBenchmark.Configuration(executablesDirectory: Products.directory)
        configuration.apps = 100
        configuration.duration = .seconds(10)
        let benchmark = DeadlineBenchmark(configuration: configuration)
        // Alone: lateness is measured against the machine as the daemon gets it, not against other tests' daemons.
        let report = try await offThePool(alone: true) { try benchmark.run() }
        for line in report.lines { print(line) }
        #expect(report.warningCount >= Self.minimumWarnings, "too few warnings to judge")
        #expect(
            report.latenessMilliseconds(atPercentile: 0.99) < Self.boundMilliseconds,
            "expiration warnings late at the 99th percentile: \(report.lines.joined(separator: "\n"))")
    }
}
