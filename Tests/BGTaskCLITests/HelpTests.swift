// Tests of the generated help: committed snapshots of every help page, and checks that the help says everything
// the specs declare, fits 80 columns, and that every example in it parses.
import BGTaskArguments
import BGTaskCLI
import Foundation
import Testing

/// The names of every subcommand, for parameterized tests.
let commandNames = BGTaskTool.spec.commands.map { $0.name }

// Serialized: with BGTASK_REGENERATE_DOCS=1 the snapshot tests write the directory another test lists.
@Suite(.serialized) struct HelpTests {
    @Test func toolHelpMatchesSnapshot() async throws {
        let run = await runTool(["--help"])
        #expect(run.status == .success)
        try expectMatchesCommittedFile(run.standardOutput, at: "Tests/BGTaskCLITests/Snapshots/bgtask.txt")
    }

    @Test(arguments: commandNames) func commandHelpMatchesSnapshot(_ name: String) async throws {
        let run = await runTool([name, "--help"])
        #expect(run.status == .success)
        #expect(run.standardError.isEmpty)
        try expectMatchesCommittedFile(run.standardOutput, at: "Tests/BGTaskCLITests/Snapshots/bgtask-\(name).txt")
        // The three ways of asking print the same page.
        #expect(await runTool(["help", name]).standardOutput == run.standardOutput)
        #expect(await runTool([name, "-h"]).standardOutput == run.standardOutput)
    }

    @Test func snapshotDirectoryHoldsNoStalePages() throws {
        let directory = packageRoot.appendingPathComponent("Tests/BGTaskCLITests/Snapshots").path
        let files = Set(try FileManager.default.contentsOfDirectory(atPath: directory))
        #expect(files == Set(["bgtask.txt"] + commandNames.map { "bgtask-\($0).txt" }))
    }

    /// Every argument, option, flag and example of the spec appears in the page, and every line fits 80 columns.
    @Test(arguments: commandNames) func commandHelpIsComplete(_ name: String) async throws {
        let spec = try #require(BGTaskTool.spec.command(named: name))
        let help = await runTool(["help", name]).standardOutput
        #expect(help.hasPrefix("OVERVIEW: "))
        #expect(help.contains(spec.abstract.split(separator: " ").prefix(4).joined(separator: " ")))
        /// A row of a list: the label indented by two, then its description, on the same line or the next.
        func hasRow(_ label: String) -> Bool {
            help.contains("\n  \(label)  ") || help.contains("\n  \(label)\n")
        }
        for argument in spec.arguments { #expect(hasRow(HelpFormatter.label(argument)), "\(argument.name)") }
        for option in spec.options + BGTaskTool.spec.globalOptions {
            #expect(hasRow(HelpFormatter.label(option)), "\(option.longForm)")
            if let value = option.defaultValue {
                let words = help.split(whereSeparator: \.isWhitespace).joined(separator: " ")
                #expect(words.contains("(default: \(value))"), "\(option.longForm)")
            }
        }
        for flag in spec.flags + BGTaskTool.spec.globalFlags {
            #expect(hasRow(HelpFormatter.label(flag)), "\(flag.longForm)")
        }
        for example in spec.examples { #expect(help.contains("  $ \(example.commandLine)\n")) }
        for line in help.split(separator: "\n") { #expect(line.count <= 80, "\(line)") }
    }

    @Test func toolHelpListsEverySubcommand() async {
        let help = await runTool(["--help"]).standardOutput
        for command in BGTaskTool.spec.commands {
            #expect(help.contains("  \(command.name) "), "\(command.name)")
        }
        for line in help.split(separator: "\n") { #expect(line.count <= 80, "\(line)") }
    }

    /// Each spec's own words are well formed: an abstract without a final period, options and short names unique
    /// among the command's and the global ones, at least one example, which names the subcommand.
    @Test(arguments: commandNames) func specIsWellFormed(_ name: String) throws {
        let spec = try #require(BGTaskTool.spec.command(named: name))
        #expect(!spec.abstract.hasSuffix("."))
        #expect(!spec.abstract.isEmpty && !spec.discussion.isEmpty)
        let longNames =
            spec.options.map(\.name) + spec.flags.map(\.name) + BGTaskTool.spec.globalOptions.map(\.name)
            + BGTaskTool.spec.globalFlags.map(\.name) + ["help"]
        #expect(Set(longNames).count == longNames.count, "\(longNames)")
        let shortNames = (spec.options.compactMap(\.shortName) + spec.flags.compactMap(\.shortName) + ["h"])
        #expect(Set(shortNames).count == shortNames.count, "\(shortNames)")
        #expect(spec.arguments.dropLast().allSatisfy { !$0.isCommand }, "only the last argument takes a command")
        #expect(!spec.examples.isEmpty)
        for example in spec.examples { #expect(example.commandLine.contains("bgtask \(name)")) }
    }

    /// Every example of every page is a command line the parser accepts.
    @Test(arguments: BGTaskTool.spec.commands.flatMap { $0.examples }.map(\.commandLine))
    func exampleParses(_ commandLine: String) throws {
        // A shell variable in an example stands for a value a script got earlier: a task id from `bgtask begin`.
        let words = try #require(shellWords(ofBGTaskIn: commandLine)).map { $0.hasPrefix("$") ? "7" : $0 }
        let invocation = try CommandLineParser(tool: BGTaskTool.spec).parse(words)
        guard case .command = invocation else {
            Issue.record("\(commandLine) does not parse as a command")
            return
        }
    }
}

/// The words after `bgtask` in a shell command line, as the shell would split them: single and double quotes,
/// backslash escapes in double quotes, and the `bgtask` invocation ending at an unquoted `|` or `)` (for
/// `... | jq` and `$(bgtask ...)`). `$VAR` inside double quotes is kept as written. Nil when there is no
/// `bgtask` invocation.
func shellWords(ofBGTaskIn commandLine: String) -> [String]? {
    guard let start = commandLine.range(of: "bgtask ") else { return nil }
    var words: [String] = []
    var word: String?
    var quote: Character?
    var escaped = false
    for character in commandLine[start.upperBound...] {
        if escaped {
            word = (word ?? "") + String(character)
            escaped = false
        } else if let open = quote {
            if character == open {
                quote = nil
            } else if character == "\\" && open == "\"" {
                escaped = true
            } else {
                word = (word ?? "") + String(character)
            }
        } else if character == "'" || character == "\"" {
            quote = character
            word = word ?? ""
        } else if character == " " {
            if let finished = word { words.append(finished) }
            word = nil
        } else if character == "|" || character == ")" {
            break
        } else {
            word = (word ?? "") + String(character)
        }
    }
    if let finished = word { words.append(finished) }
    return words
}
