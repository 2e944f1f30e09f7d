// The report written as Markdown and as JSON.

import BGTaskJSON
import BGTaskProtocol
import BGTaskSoak
import Testing

@Suite("Soak report rendering")
struct ReportRenderingTests {
    /// The clean run with task 1 of mail ended a second time at t=20.
    static var failingReport: SoakReport {
        var scenario = SoakScenario()
        let again = HistoryEntry(time: 0, app: "mail", kind: .taskEnded, taskId: 1, taskEnd: .appEnded)
        scenario.receive(again, at: at(20))
        return scenario.report
    }

    @Test("Markdown has a row per invariant and the failed one's counter-example with app and time")
    func markdown() {
        let text = Self.failingReport.markdown
        #expect(text.contains("Result: FAIL"))
        // Tasks 1, 2 and 3, and the three scheduled tasks.
        #expect(text.contains("| `task-ends-once` | fail | 6 | 1 |"))
        #expect(text.contains("| `heaviest-first` | pass | 2 | 0 |"))
        #expect(text.contains("- t=20.000s, `mail`: task 1 ended twice: at t=10.000s and again at t=20.000s"))
    }

    @Test("JSON parses back with each invariant's name, verdict and counter-examples")
    func json() throws {
        let text = try Self.failingReport.jsonText()
        let value = try JSONParser.parse(Array(text.utf8))
        guard case .object(let root) = value, case .array(let invariants)? = root["invariants"] else {
            Issue.record("no invariants in \(text)")
            return
        }
        #expect(root["passed"] == .bool(false))
        #expect(invariants.count == Invariant.allCases.count)
        guard case .object(let first) = invariants.first, case .array(let examples)? = first["counterExamples"],
            case .object(let example) = examples.first
        else {
            Issue.record("no counter-example in \(text)")
            return
        }
        #expect(first["name"] == .string("task-ends-once"))
        #expect(first["verdict"] == .string("fail"))
        #expect(example["app"] == .string("mail"))
        #expect(example["timeSec"] == .number(20))
    }
}
