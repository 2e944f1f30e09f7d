// Table-driven tests of the command-line parser: accepted lines with their typed values, help and version
// requests, and every kind of usage error with its exact message, the usage that follows, and exit status 64.
import BGTaskArguments
import BGTaskCLI
import BGTaskPOSIX
import BGTaskProtocol
import Testing

/// A command line the parser must accept, and a check of what it built.
struct AcceptedRow: Sendable, CustomTestStringConvertible {
    var words: [String]
    var check: @Sendable (any Subcommand, GlobalOptions) -> Bool

    var testDescription: String { words.map { String(reflecting: $0) }.joined(separator: " ") }

    /// A row whose subcommand must be a `Command` satisfying `check`.
    static func ok<Command: Subcommand>(
        _ words: [String], as type: Command.Type, _ check: @escaping @Sendable (Command) -> Bool
    ) -> AcceptedRow {
        AcceptedRow(words: words) { command, _ in (command as? Command).map(check) ?? false }
    }

    /// A row that checks the global options.
    static func globals(_ words: [String], _ check: @escaping @Sendable (GlobalOptions) -> Bool) -> AcceptedRow {
        AcceptedRow(words: words) { _, globals in check(globals) }
    }
}

let acceptedRows: [AcceptedRow] = [
    .ok(["status"], as: Status.self) { $0.app == nil && !$0.json },
    .ok(["status", "org.example.mail", "--json"], as: Status.self) { $0.app == "org.example.mail" && $0.json },
    .ok(["status", "--json", "org.example.mail"], as: Status.self) { $0.app == "org.example.mail" && $0.json },
    // A lone dash is a word, not an option; after `--` even an option-like word is an argument.
    .ok(["status", "-"], as: Status.self) { $0.app == "-" },
    .ok(["status", "--", "--json"], as: Status.self) { $0.app == "--json" && !$0.json },
    .ok(["--", "status"], as: Status.self) { $0.app == nil },
    .ok(["apps"], as: Apps.self) { $0.state == nil && !$0.includesTerminated && !$0.json },
    .ok(["apps", "-a", "--json"], as: Apps.self) { $0.includesTerminated && $0.json },
    .ok(["apps", "-s", "suspended"], as: Apps.self) { $0.state == .suspended },
    .ok(["apps", "--state=notRunning"], as: Apps.self) { $0.state == .notRunning },
    .ok(["run", "--", "sleep", "5"], as: Run.self) {
        $0.command == ["sleep", "5"] && $0.expirationSignal == .terminate && $0.budget == nil && $0.taskName == nil
            && $0.app == nil
    },
    // Options end at CMD's first word, so CMD keeps its own options, `--help` included.
    .ok(["run", "sleep", "5", "--name", "x"], as: Run.self) { $0.command == ["sleep", "5", "--name", "x"] },
    .ok(["run", "ls", "--help"], as: Run.self) { $0.command == ["ls", "--help"] },
    .ok(["run", "--", "ls", "--", "-l"], as: Run.self) { $0.command == ["ls", "--", "-l"] },
    .ok(
        ["run", "--name", "n", "--app=org.a", "-s", "SIGINT", "--budget", "1h 30min", "--", "./x.sh", "-v"],
        as: Run.self
    ) {
        $0.taskName == "n" && $0.app == "org.a" && $0.expirationSignal == .interrupt
            && $0.budget == .seconds(5_400) && $0.command == ["./x.sh", "-v"]
    },
    .ok(["run", "--on-expire", "9", "x"], as: Run.self) { $0.expirationSignal == .kill },
    .ok(["run", "--on-expire=usr1", "x"], as: Run.self) { $0.expirationSignal == .user1 },
    .ok(["run", "--budget", "500ms", "x"], as: Run.self) { $0.budget == .milliseconds(500) },
    .ok(["run", "--budget=90", "x"], as: Run.self) { $0.budget == .seconds(90) },
    .ok(["run", "--when", "ac,network", "--", "backup"], as: Run.self) {
        $0.conditions == [.externalPower, .network] && $0.kind == .refresh && $0.identifier == "run"
            && $0.command == ["backup"]
    },
    .ok(["run", "--when=idle", "--processing", "--id", "nightly", "backup"], as: Run.self) {
        $0.conditions == [.idle] && $0.kind == .processing && $0.identifier == "nightly"
    },
    .ok(["run", "x"], as: Run.self) { $0.conditions == nil },
    .ok(["schedule", "org.a", "sync"], as: Schedule.self) {
        $0.app == "org.a" && $0.identifier == "sync" && $0.kind == .refresh && $0.after == nil && $0.requires.isEmpty
            && !$0.json
    },
    // Conditions come back in their declared order, whatever order they were given in.
    .ok(
        ["schedule", "org.a", "backup", "--processing", "--requires", "idle,ac,network", "--after", "1h", "--json"],
        as: Schedule.self
    ) {
        $0.kind == .processing && $0.requires == [.externalPower, .network, .idle] && $0.after == .seconds(3_600)
            && $0.json
    },
    .ok(["requests"], as: Requests.self) { $0.app == nil && !$0.json },
    .ok(["requests", "--app", "org.a", "--json"], as: Requests.self) { $0.app == "org.a" && $0.json },
    .ok(["cancel", "org.a", "backup"], as: Cancel.self) { $0.app == "org.a" && $0.identifier == "backup" },
    .ok(["begin", "org.a", "upload"], as: Begin.self) { $0.app == "org.a" && $0.name == "upload" && !$0.json },
    .ok(["end", "org.a", "42"], as: End.self) { $0.app == "org.a" && $0.taskId == 42 },
    .ok(["remaining", "org.a", "--json"], as: Remaining.self) { $0.app == "org.a" && $0.json },
    .ok(["foreground", "org.a"], as: Foreground.self) { $0.app == "org.a" && !$0.json },
    .ok(["background", "org.a", "--json"], as: Background.self) { $0.app == "org.a" && $0.json },
    .ok(["deactivate", "org.a"], as: Deactivate.self) { $0.app == "org.a" },
    .ok(["terminate", "org.a"], as: Terminate.self) { $0.app == "org.a" },
    .ok(["launch", "org.a", "--", "sleep", "5"], as: Launch.self) {
        $0.name == "org.a" && $0.command == ["sleep", "5"] && $0.exitsOnSuspend == nil && !$0.json
    },
    // As with `run`, options end at CMD's first word, `--` or not.
    .ok(["launch", "org.a", "app", "--json"], as: Launch.self) { $0.command == ["app", "--json"] && !$0.json },
    .ok(["launch", "--exits-on-suspend", "org.a", "--json", "--", "./app", "-v"], as: Launch.self) {
        $0.name == "org.a" && $0.command == ["./app", "-v"] && $0.exitsOnSuspend == true && $0.json
    },
    .ok(["post", "sync"], as: Post.self) {
        $0.name == "sync" && $0.payload == nil && $0.behavior == nil && $0.app == nil
    },
    .ok(
        ["post", "sync", "--payload", #"{"a": [1, 2.5, null], "b": {"c": "d"}}"#, "--behavior", "wake", "--app", "x"],
        as: Post.self
    ) {
        $0.payload == ["a": [1, 2.5, .null], "b": ["c": "d"]] && $0.behavior == .wake && $0.app == "x"
    },
    .ok(["post", "--payload={}", "--", "-dash-name"], as: Post.self) { $0.name == "-dash-name" && $0.payload == [:] },
    .ok(["watch", "--json"], as: Watch.self) { $0.json },
    .ok(["history"], as: History.self) { $0.limit == nil && !$0.json },
    .ok(["history", "-n", "20"], as: History.self) { $0.limit == 20 },
    // An option given twice keeps its last value.
    .ok(["history", "--limit=5", "-n", "7", "--json"], as: History.self) { $0.limit == 7 && $0.json },
    .ok(["demo"], as: Demo.self) { $0.request.backgroundTime == .seconds(6) },
    .ok(["demo", "--background-time", "1min"], as: Demo.self) { $0.request.backgroundTime == .seconds(60) },
    // Global options before or after the subcommand.
    .globals(["--socket", "/s", "status"]) { $0.socketPath == "/s" && !$0.isUser },
    .globals(["status", "--socket=/s"]) { $0.socketPath == "/s" },
    .globals(["--user", "apps"]) { $0.isUser && $0.socketPath == nil },
    .globals(["apps", "--user"]) { $0.isUser },
    .globals(["run", "--user", "--", "true"]) { $0.isUser },
]

/// A command line that asks for help (of the subcommand named, or of the tool when nil), or for the version.
struct HelpRow: Sendable, CustomTestStringConvertible {
    var words: [String]
    /// nil: the tool's help; "--version": the version; otherwise the subcommand whose help is printed.
    var expected: String?

    var testDescription: String { words.joined(separator: " ") }
}

let helpRows: [HelpRow] = [
    HelpRow(words: ["--help"], expected: nil),
    HelpRow(words: ["-h"], expected: nil),
    HelpRow(words: ["help"], expected: nil),
    HelpRow(words: ["help", "help"], expected: nil),
    HelpRow(words: ["--user", "--help"], expected: nil),
    HelpRow(words: ["help", "run"], expected: "run"),
    HelpRow(words: ["run", "--help"], expected: "run"),
    HelpRow(words: ["run", "-h"], expected: "run"),
    HelpRow(words: ["status", "org.a", "--help"], expected: "status"),
    // Help wins over an error elsewhere on the line: the user is asking how to fix it.
    HelpRow(words: ["run", "--nmae", "x", "--help"], expected: "run"),
    HelpRow(words: ["post", "--payload", "{x", "-h"], expected: "post"),
    HelpRow(words: ["--version"], expected: "--version"),
    HelpRow(words: ["--socket", "/s", "--version"], expected: "--version"),
]

/// A command line the parser must refuse: the exact message, and the subcommand whose usage follows (nil for
/// the tool's).
struct UsageErrorRow: Sendable, CustomTestStringConvertible {
    var words: [String]
    var message: String
    var command: String?

    var testDescription: String { words.map { String(reflecting: $0) }.joined(separator: " ") }

    init(_ words: [String], _ message: String, command: String?) {
        self.words = words
        self.message = message
        self.command = command
    }
}

/// The reasons the value parsers give, shared by several rows.
let signalReason = "expected a signal name or number, such as TERM, SIGINT or 15"
let conditionsReason =
    "expected conditions joined with commas, such as ac,network (each one of ac, battery, network, unmetered, idle)"
let invalidJSONReason = #"not valid JSON (expected an object such as '{"key": 1}')"#
let notObjectReason = #"not a JSON object (expected an object such as '{"key": 1}')"#
let durationUnits = "us, ms, s, min, h, d, w, M, y"

let usageErrorRows: [UsageErrorRow] = [
    // Subcommands.
    UsageErrorRow([], "missing subcommand", command: nil),
    UsageErrorRow(["stauts"], "unknown subcommand 'stauts' (did you mean 'status'?)", command: nil),
    UsageErrorRow(["hist"], "unknown subcommand 'hist' (did you mean 'history'?)", command: nil),
    UsageErrorRow(["forground", "x"], "unknown subcommand 'forground' (did you mean 'foreground'?)", command: nil),
    UsageErrorRow(["xyzzy"], "unknown subcommand 'xyzzy'", command: nil),
    UsageErrorRow(["Status"], "unknown subcommand 'Status' (did you mean 'status'?)", command: nil),
    UsageErrorRow(["help", "stauts"], "unknown subcommand 'stauts' (did you mean 'status'?)", command: nil),
    UsageErrorRow(["help", "run", "extra"], "unexpected argument 'extra'", command: nil),
    UsageErrorRow(["--"], "missing subcommand", command: nil),
    UsageErrorRow(["--", "--help"], "unknown subcommand '--help' (did you mean 'help'?)", command: nil),
    // A subcommand that does not exist is an error whatever follows it, a request for help included.
    UsageErrorRow(["stauts", "--help"], "unknown subcommand 'stauts' (did you mean 'status'?)", command: nil),
    UsageErrorRow(["NOSUCH", "--help"], "unknown subcommand 'NOSUCH'", command: nil),
    UsageErrorRow(["NOSUCH", "-h"], "unknown subcommand 'NOSUCH'", command: nil),
    UsageErrorRow(["--user", "NOSUCH", "--json", "--help"], "unknown subcommand 'NOSUCH'", command: nil),
    // Unknown options.
    UsageErrorRow(["--bogus", "status"], "unknown option '--bogus'", command: nil),
    UsageErrorRow(["--json", "apps"], "unknown option '--json'", command: nil),
    UsageErrorRow(["--usr", "apps"], "unknown option '--usr' (did you mean '--user'?)", command: nil),
    UsageErrorRow(["status", "--jsn"], "unknown option '--jsn' (did you mean '--json'?)", command: "status"),
    UsageErrorRow(["run", "--nmae", "x", "ls"], "unknown option '--nmae' (did you mean '--name'?)", command: "run"),
    UsageErrorRow(
        ["run", "--on-expiry", "INT", "ls"],
        "unknown option '--on-expiry' (did you mean '--on-expire'?)", command: "run"),
    UsageErrorRow(["status", "-x"], "unknown option '-x'", command: "status"),
    // Short options are single letters: no grouping, no attached values.
    UsageErrorRow(["apps", "-aj"], "unknown option '-aj'", command: "apps"),
    UsageErrorRow(["history", "-n5"], "unknown option '-n5'", command: "history"),
    // A negative number is written as an option, so it is refused as one.
    UsageErrorRow(["end", "org.a", "-5"], "unknown option '-5'", command: "end"),
    // Missing and unexpected values.
    UsageErrorRow(["run", "--budget"], "option '--budget' needs a value (DURATION)", command: "run"),
    UsageErrorRow(["run", "--budget", "--", "ls"], "option '--budget' needs a value (DURATION)", command: "run"),
    UsageErrorRow(["history", "--limit", "--json"], "option '--limit' needs a value (N)", command: "history"),
    UsageErrorRow(["history", "-n"], "option '-n' needs a value (N)", command: "history"),
    UsageErrorRow(["status", "--socket"], "option '--socket' needs a value (PATH)", command: "status"),
    UsageErrorRow(["--socket"], "option '--socket' needs a value (PATH)", command: nil),
    UsageErrorRow(["status", "--json=1"], "option '--json' takes no value", command: "status"),
    UsageErrorRow(["apps", "--user=yes"], "option '--user' takes no value", command: "apps"),
    // Positional arguments.
    UsageErrorRow(["begin", "org.a"], "missing argument NAME", command: "begin"),
    UsageErrorRow(["end"], "missing argument APP", command: "end"),
    UsageErrorRow(["remaining"], "missing argument APP", command: "remaining"),
    UsageErrorRow(["post", "--app", "x"], "missing argument NAME", command: "post"),
    UsageErrorRow(["status", "a", "b"], "unexpected argument 'b'", command: "status"),
    UsageErrorRow(["watch", "now"], "unexpected argument 'now'", command: "watch"),
    UsageErrorRow(["end", "org.a", "1", "2"], "unexpected argument '2'", command: "end"),
    UsageErrorRow(["status", ""], "invalid APP '': must not be empty", command: "status"),
    // The command of `run`.
    UsageErrorRow(["run"], "missing CMD: give the command to run after '--'", command: "run"),
    UsageErrorRow(["run", "--"], "missing CMD: give the command to run after '--'", command: "run"),
    UsageErrorRow(
        ["run", "--name", "x", "--budget", "5s", "--"], "missing CMD: give the command to run after '--'",
        command: "run"),
    // The command of `launch`, after its app's name.
    UsageErrorRow(["launch"], "missing argument NAME", command: "launch"),
    UsageErrorRow(["launch", "org.a"], "missing CMD: give the command to run after '--'", command: "launch"),
    UsageErrorRow(["launch", "org.a", "--"], "missing CMD: give the command to run after '--'", command: "launch"),
    UsageErrorRow(["launch", "--", "app"], "missing CMD: give the command to run after '--'", command: "launch"),
    UsageErrorRow(
        ["launch", "--exits-on-suspend=yes", "org.a", "app"], "option '--exits-on-suspend' takes no value",
        command: "launch"),
    // Durations.
    UsageErrorRow(
        ["run", "--budget", "5parsecs", "ls"],
        #"invalid DURATION '5parsecs' for '--budget': unknown unit "parsecs" "#
            + "(expected one of \(durationUnits))",
        command: "run"),
    UsageErrorRow(
        ["run", "--when", "ac", "--budget", "5s", "ls"], "'--when' and '--budget' cannot be used together",
        command: "run"),
    UsageErrorRow(["run", "--processing", "ls"], "'--processing' needs '--when'", command: "run"),
    UsageErrorRow(["run", "--id", "x", "ls"], "'--id' needs '--when'", command: "run"),
    UsageErrorRow(
        ["run", "--when", "ac,solar", "ls"],
        "invalid CONDITIONS 'ac,solar' for '--when': unknown condition \"solar\" (expected conditions joined with "
            + "commas, such as ac,network (each one of ac, battery, network, unmetered, idle))",
        command: "run"),
    UsageErrorRow(
        ["run", "--budget", "0", "ls"],
        "invalid DURATION '0' for '--budget': must be longer than zero", command: "run"),
    UsageErrorRow(
        ["run", "--budget=-5s", "ls"],
        "invalid DURATION '-5s' for '--budget': negative values are not allowed", command: "run"),
    UsageErrorRow(
        ["run", "--budget", "infinity", "ls"],
        #"invalid DURATION 'infinity' for '--budget': "infinity" is not allowed here "#
            + "(expected a finite time span)",
        command: "run"),
    UsageErrorRow(
        ["run", "--budget", "5sec5", "ls"],
        #"invalid DURATION '5sec5' for '--budget': "5" needs a unit when the value has several components"#,
        command: "run"),
    UsageErrorRow(
        ["demo", "--background-time", "soon"],
        #"invalid DURATION 'soon' for '--background-time': expected a number, found "soon" "#
            + #"(expected a number with a unit, such as "5s", "500ms" or "1h 30min")"#,
        command: "demo"),
    // Signals.
    UsageErrorRow(
        ["run", "-s", "FOO", "ls"],
        "invalid SIGNAL 'FOO' for '-s': " + signalReason,
        command: "run"),
    UsageErrorRow(
        ["run", "--on-expire", "0", "ls"],
        "invalid SIGNAL '0' for '--on-expire': " + signalReason,
        command: "run"),
    UsageErrorRow(
        ["run", "--on-expire", "65", "ls"],
        "invalid SIGNAL '65' for '--on-expire': " + signalReason,
        command: "run"),
    UsageErrorRow(
        ["run", "--on-expire=", "ls"],
        "invalid SIGNAL '' for '--on-expire': " + signalReason,
        command: "run"),
    UsageErrorRow(
        ["run", "--on-expire", "SIGTERMX", "ls"],
        "invalid SIGNAL 'SIGTERMX' for '--on-expire': " + signalReason,
        command: "run"),
    // JSON payloads.
    UsageErrorRow(
        ["post", "n", "--payload", "{x"],
        #"invalid JSON '{x' for '--payload': "# + invalidJSONReason,
        command: "post"),
    UsageErrorRow(
        ["post", "n", "--payload", ""],
        #"invalid JSON '' for '--payload': "# + invalidJSONReason,
        command: "post"),
    // What the daemon's parser refuses, the command line refuses too: a repeated key, a lone surrogate.
    UsageErrorRow(
        ["post", "n", "--payload", #"{"a":1,"a":2}"#],
        #"invalid JSON '{"a":1,"a":2}' for '--payload': "# + invalidJSONReason,
        command: "post"),
    UsageErrorRow(
        ["post", "n", "--payload", #"{"a":"\ud800"}"#],
        #"invalid JSON '{"a":"\\ud800"}' for '--payload': "# + invalidJSONReason,
        command: "post"),
    UsageErrorRow(
        ["post", "n", "--payload", #"{"a":1} trailing"#],
        #"invalid JSON '{"a":1} trailing' for '--payload': "# + invalidJSONReason,
        command: "post"),
    UsageErrorRow(
        ["post", "n", "--payload", "[1]"],
        #"invalid JSON '[1]' for '--payload': "# + notObjectReason,
        command: "post"),
    UsageErrorRow(
        ["post", "n", "--payload", "null"],
        #"invalid JSON 'null' for '--payload': "# + notObjectReason,
        command: "post"),
    UsageErrorRow(
        ["post", "n", "--payload", "\"text\""],
        #"invalid JSON '"text"' for '--payload': "# + notObjectReason,
        command: "post"),
    UsageErrorRow(
        ["post", "n", "--payload", deeplyNested],
        "invalid JSON '\(deeplyNested.prefix(64))...' for '--payload': JSON nested deeper than 64 levels",
        command: "post"),
    // Conditions.
    UsageErrorRow(
        ["schedule", "a", "b", "--requires", "ac,charging"],
        "invalid CONDITIONS 'ac,charging' for '--requires': unknown condition \"charging\" (" + conditionsReason + ")",
        command: "schedule"),
    UsageErrorRow(
        ["schedule", "a", "b", "--requires", "ac,,idle"],
        "invalid CONDITIONS 'ac,,idle' for '--requires': " + conditionsReason,
        command: "schedule"),
    UsageErrorRow(
        ["schedule", "a", "b", "--requires", "ac,ac"],
        "invalid CONDITIONS 'ac,ac' for '--requires': ac is given twice",
        command: "schedule"),
    UsageErrorRow(["schedule", "a"], "missing argument ID", command: "schedule"),
    UsageErrorRow(["cancel", "a"], "missing argument ID", command: "cancel"),
    // Behaviours and states.
    UsageErrorRow(
        ["post", "n", "--behavior", "sometimes"],
        "invalid BEHAVIOR 'sometimes' for '--behavior': expected one of drop, coalesce, hold, wake",
        command: "post"),
    UsageErrorRow(
        ["post", "n", "--behavior", "WAKE"],
        "invalid BEHAVIOR 'WAKE' for '--behavior': expected one of drop, coalesce, hold, wake",
        command: "post"),
    UsageErrorRow(
        ["apps", "--state", "sleeping"],
        "invalid STATE 'sleeping' for '--state': expected one of notRunning, inactive, active, background, "
            + "suspended, terminated",
        command: "apps"),
    // Numbers.
    UsageErrorRow(
        ["end", "org.a", "abc"], "invalid TASK 'abc': expected a whole number of at least 1", command: "end"),
    UsageErrorRow(["end", "org.a", "0"], "invalid TASK '0': expected a whole number of at least 1", command: "end"),
    UsageErrorRow(["end", "org.a", "+5"], "invalid TASK '+5': expected a whole number of at least 1", command: "end"),
    UsageErrorRow(
        ["end", "org.a", "\u{0663}"], "invalid TASK '\u{0663}': expected a whole number of at least 1",
        command: "end"),
    UsageErrorRow(
        ["end", "org.a", "99999999999999999999"],
        "invalid TASK '99999999999999999999': expected a whole number of at least 1", command: "end"),
    UsageErrorRow(
        ["history", "--limit", "0"],
        "invalid N '0' for '--limit': expected a whole number of at least 1", command: "history"),
    // Conflicts.
    UsageErrorRow(
        ["status", "--socket", "/s", "--user"], "'--socket' and '--user' cannot be used together",
        command: "status"),
    UsageErrorRow(
        ["--user", "apps", "--socket=/s"], "'--socket' and '--user' cannot be used together",
        command: "apps"),
    // Hostile words stay on one line and are cut when long.
    UsageErrorRow(["status", "--js\non"], #"unknown option '--js\non' (did you mean '--json'?)"#, command: "status"),
    UsageErrorRow(["st\u{1B}[31matus"], #"unknown subcommand 'st\u{1b}[31matus'"#, command: nil),
    UsageErrorRow(
        ["end", "org.a", String(repeating: "9", count: 200)],
        "invalid TASK '\(String(repeating: "9", count: 64))...': expected a whole number of at least 1",
        command: "end"),
    UsageErrorRow(["status", "a", "it's"], #"unexpected argument 'it\'s'"#, command: "status"),
]

/// A payload nested 100 levels deep inside an object: valid JSON, refused for its depth.
let deeplyNested = "{\"a\":" + String(repeating: "[", count: 100) + String(repeating: "]", count: 100) + "}"

@Suite struct ParserTests {
    let parser = BGTaskParser()

    @Test(arguments: acceptedRows) func acceptsCommandLine(_ row: AcceptedRow) throws {
        guard case .command(let command, let globals) = try parser.parse(row.words) else {
            Issue.record("\(row.words) did not parse as a command")
            return
        }
        #expect(row.check(command, globals), "\(command) \(globals)")
    }

    @Test(arguments: helpRows) func recognizesHelpAndVersion(_ row: HelpRow) async throws {
        let run = await runTool(row.words)
        #expect(run.status == .success)
        #expect(run.standardError.isEmpty)
        switch row.expected {
        case nil:
            #expect(run.standardOutput == HelpFormatter.toolHelp(BGTaskTool.spec))
        case "--version":
            #expect(run.standardOutput == "bgtask \(BGTaskTool.version)\n")
        case let name?:
            let spec = try #require(BGTaskTool.spec.command(named: name))
            #expect(run.standardOutput == HelpFormatter.help(of: spec, tool: BGTaskTool.spec))
        }
    }

    /// The whole standard error of a usage error: `bgtask[ NAME]: error: MESSAGE`, then the usage exactly as the
    /// help shows it, then where to read more; nothing on standard output; exit status 64.
    @Test(arguments: usageErrorRows) func reportsUsageError(_ row: UsageErrorRow) async throws {
        let run = await runTool(row.words)
        #expect(run.status == ExitCode.usage)
        #expect(run.status.rawValue == 64)
        #expect(run.standardOutput.isEmpty)
        let lines = run.errorLines
        let prefix = row.command.map { "bgtask \($0): error: " } ?? "bgtask: error: "
        #expect(lines.first == prefix + row.message)
        let help = await runTool(row.command.map { ["help", $0] } ?? ["--help"])
        let usage = usageBlock(inHelp: help.standardOutput)
        #expect(!usage.isEmpty)
        #expect(Array(lines.dropFirst().prefix(usage.count)) == usage)
        let more = row.command.map { "See 'bgtask help \($0)'." } ?? "See 'bgtask --help'."
        #expect(lines.dropFirst(1 + usage.count) == [more])
    }

    @Test func parserErrorsAreTyped() throws {
        #expect(throws: UsageError(.missingCommand(name: "CMD"), command: "run")) { try parser.parse(["run"]) }
        #expect(throws: UsageError(.unknownSubcommand("stauts", suggestion: "status"), command: nil)) {
            try parser.parse(["stauts"])
        }
        #expect(
            throws: UsageError(
                .badValue(
                    "x", valueName: "SIGNAL", option: "-s",
                    reason: "expected a signal name or number, such as TERM, SIGINT or 15"),
                command: "run")
        ) { try parser.parse(["run", "-s", "x", "ls"]) }
    }
}

/// `BGTaskTool.parse`, in the shape the tables call: parse, then build the subcommand.
struct BGTaskParser {
    func parse(_ words: [String]) throws(UsageError) -> BGTaskTool.Request {
        try BGTaskTool.parse(words)
    }
}
