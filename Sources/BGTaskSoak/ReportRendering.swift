// A soak report written for people (Markdown) and for scripts (JSON through the protocol's own encoder).

import BGTaskJSON
import BGTaskProtocol

extension SoakReport {
    /// The report as Markdown: a table of verdicts, then each failed invariant's counter-examples.
    public var markdown: String {
        var lines = ["# Soak report", "", "Result: \(isPassing ? "pass" : "FAIL")", ""]
        lines.append("| invariant | verdict | checked | violations |")
        lines.append("|---|---|---|---|")
        for result in results {
            lines.append(
                "| `\(result.invariant.rawValue)` | \(result.verdict.rawValue) | \(result.checkedCount) "
                    + "| \(result.violationCount) |")
        }
        for result in results where result.verdict == .fail || !result.measurements.isEmpty {
            lines.append("")
            lines.append("## `\(result.invariant.rawValue)`: \(result.invariant.summary)")
            lines.append("")
            for measurement in result.measurements {
                lines.append("- \(measurement.name): \(fixed(measurement.value, digits: 6))")
            }
            if result.violationCount > result.counterExamples.count {
                lines.append("The first \(result.counterExamples.count) of \(result.violationCount) violations:")
                lines.append("")
            }
            for example in result.counterExamples {
                let app = example.app.map { "`\($0)`" } ?? "the daemon"
                lines.append("- \(moment(example.at)), \(app): \(example.evidence)")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The report as JSON text: `{"passed": Bool, "invariants": [...]}`, each invariant with its `name`,
    /// `verdict`, `checked`, `violations`, `counterExamples` (`timeSec`, `app`, `evidence`) and `measurements`.
    public func jsonText() throws -> String {
        String(decoding: try JSONTextEncoder().encode(JSONReport(self)), as: UTF8.self)
    }
}

/// The JSON shape of a report: times as seconds, names as their stable spelling.
private struct JSONReport: Encodable {
    struct Example: Encodable {
        var timeSec: Double
        var app: String?
        var evidence: String
    }

    struct Figure: Encodable {
        var name: String
        var value: Double
    }

    struct Result: Encodable {
        var name: String
        var summary: String
        var verdict: Verdict
        var checked: Int
        var violations: Int
        var counterExamples: [Example]
        var measurements: [Figure]
    }

    var passed: Bool
    var invariants: [Result]

    init(_ report: SoakReport) {
        passed = report.isPassing
        invariants = report.results.map { result in
            Result(
                name: result.invariant.rawValue, summary: result.invariant.summary, verdict: result.verdict,
                checked: result.checkedCount, violations: result.violationCount,
                counterExamples: result.counterExamples.map {
                    Example(timeSec: $0.at.secondsValue, app: $0.app, evidence: $0.evidence)
                },
                measurements: result.measurements.map { Figure(name: $0.name, value: $0.value) })
        }
    }
}
