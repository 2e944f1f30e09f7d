// The sample app's command line: what it accepts, and the hostile and mistaken lines it refuses.
import BGTaskDemoApp
import Testing

@Suite("bgtask-demo-app options")
struct SampleAppOptionsTests {
    /// A command line and what parsing it must give: options checked by a predicate, or an error naming a word.
    struct Row: CustomTestStringConvertible, Sendable {
        var arguments: [String]
        var check: @Sendable (SampleAppOptions) -> Bool
        var errorMentions: String?
        var testDescription: String { arguments.joined(separator: " ") }

        static func ok(_ arguments: [String], _ check: @escaping @Sendable (SampleAppOptions) -> Bool) -> Row {
            Row(arguments: arguments, check: check, errorMentions: nil)
        }

        static func refused(_ arguments: [String], mentioning word: String) -> Row {
            Row(arguments: arguments, check: { _ in false }, errorMentions: word)
        }
    }

    static let base = ["--name", "mail", "--socket", "s"]

    static let rows: [Row] = [
        .ok(base) { $0.name == "mail" && $0.socketPath == "s" && $0.work == .nothing && $0.allocationMebibytes == 0 },
        .ok(base) { $0.lifetime == .seconds(120) && $0.taskName == "work" },
        .ok(base + ["--work", "2.5"]) { $0.work == .finite(.milliseconds(2_500)) },
        .ok(base + ["--work", "0.3", "--task", "render", "--allocate", "96"]) {
            $0.work == .finite(.milliseconds(300)) && $0.taskName == "render" && $0.allocationMebibytes == 96
        },
        .ok(base + ["--work-forever", "--lifetime", "90", "--report-every", "0.5"]) {
            $0.work == .forever && $0.lifetime == .seconds(90) && $0.reportInterval == .milliseconds(500)
        },
        // The last of two contradicting options wins, as in most tools.
        .ok(base + ["--work-forever", "--work", "1"]) { $0.work == .finite(.seconds(1)) },
        .ok(["--socket", "s", "--name", "--odd name"]) { $0.name == "--odd name" },
        .refused(["--socket", "s"], mentioning: "--name"),
        .refused(["--name", "mail"], mentioning: "--socket"),
        .refused(base + ["--work"], mentioning: "--work"),
        .refused(base + ["--work", ""], mentioning: "--work"),
        .refused(base + ["--work", "soon"], mentioning: "soon"),
        .refused(base + ["--work", "-1"], mentioning: "-1"),
        .refused(base + ["--work", "0"], mentioning: "positive"),
        .refused(base + ["--work", "nan"], mentioning: "nan"),
        .refused(base + ["--work", "inf"], mentioning: "inf"),
        .refused(base + ["--lifetime", "1e300"], mentioning: "1e300"),
        .refused(base + ["--allocate", "0"], mentioning: "--allocate"),
        .refused(base + ["--allocate", "4097"], mentioning: "4097"),
        .refused(base + ["--allocate", "1.5"], mentioning: "1.5"),
        .refused(base + ["--allocate", "99999999999999999999"], mentioning: "--allocate"),
        .refused(base + ["--frobnicate"], mentioning: "--frobnicate"),
        .refused(base + ["mail"], mentioning: "mail"),
    ]

    @Test(arguments: rows)
    func parse(_ row: Row) {
        do {
            let options = try SampleAppOptions.parse(row.arguments)
            #expect(row.errorMentions == nil, "accepted \(row.arguments)")
            #expect(row.check(options), "\(options)")
        } catch {
            guard let mentions = row.errorMentions else {
                Issue.record("refused: \(error)")
                return
            }
            #expect(error.message.contains(mentions), "\(error)")
        }
    }
}
