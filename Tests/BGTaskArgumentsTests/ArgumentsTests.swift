// The argument-parsing framework on a toy tool of its own: parsing tables, custom kinds of value, exclusive
// options, tools without subcommands, and help and man pages generated from the specs.

import BGTaskArguments
import Testing

/// A kind of value the toy tool adds: a colour by name.
private enum Colour: String, Hashable, Sendable, CaseIterable {
    case red, green
}

extension ValueType {
    fileprivate static let colour = ValueType(name: "colour") { text throws(ValueError) in
        guard let colour = Colour(rawValue: text) else { throw ValueError("expected red or green") }
        return ParsedValue(colour)
    }
}

private enum Toy {
    static let colour = OptionSpec("colour", short: "c", valueName: "COLOUR", help: "The colour.", type: .colour)
    static let count = OptionSpec("count", valueName: "N", help: "How many.", type: .integer(1...10))
    static let loud = FlagSpec("loud", short: "l", help: "Shout.")
    static let target = ArgumentSpec("TARGET", help: "What to paint.")
    static let extra = ArgumentSpec("EXTRA", help: "Something more.", isOptional: true)
    static let command = ArgumentSpec("CMD", help: "What to run.", isCommand: true)
    static let verbose = FlagSpec("verbose", short: "v", help: "Say more.")
    static let quiet = FlagSpec("quiet", short: "q", help: "Say less.")
    static let paint = CommandSpec(
        name: "paint", abstract: "Paint a target", arguments: [target, extra], options: [colour, count], flags: [loud],
        examples: [ExampleSpec("toy paint door -c red", "Paints the door red.")])
    static let run = CommandSpec(name: "run", abstract: "Run a command", arguments: [command])
    static let tool = ToolSpec(
        name: "toy", version: "1.2", abstract: "A toy tool", globalFlags: [verbose, quiet],
        exclusiveGroups: [["verbose", "quiet"]], commands: [paint, run])
    static let daemon = ToolSpec(
        name: "toyd", version: "3", abstract: "A toy daemon", globalOptions: [count], globalFlags: [loud])
}

@Suite struct ArgumentsTests {
    private let parser = CommandLineParser(tool: Toy.tool)

    private func arguments(_ words: [String]) throws -> (CommandSpec, ParsedArguments) {
        guard case .command(let spec, let arguments) = try parser.parse(words) else {
            throw UsageError(.missingSubcommand, command: nil)
        }
        return (spec, arguments)
    }

    @Test func parsesOptionsFlagsArgumentsAndCustomValues() throws {
        let (spec, parsed) = try arguments(["-v", "paint", "door", "--colour=green", "-l", "--count", "3", "knob"])
        #expect(spec == Toy.paint)
        #expect(parsed.text(Toy.target) == "door")
        #expect(parsed.text(Toy.extra) == "knob")
        #expect(parsed.value(Toy.colour, as: Colour.self) == .green)
        #expect(parsed.integer(Toy.count) == 3)
        #expect(parsed.isSet(Toy.loud) && parsed.isSet(Toy.verbose) && !parsed.isSet(Toy.quiet))
        // The last of a repeated option wins.
        #expect(
            try arguments(["paint", "x", "-c", "red", "-c", "green"]).1.value(Toy.colour, as: Colour.self) == .green)
    }

    @Test func aCommandArgumentTakesEverythingFromItsFirstWord() throws {
        let (_, parsed) = try arguments(["run", "ls", "-l", "--colour"])
        #expect(parsed.words(Toy.command) == ["ls", "-l", "--colour"])
        #expect(try arguments(["run", "--", "-x"]).1.words(Toy.command) == ["-x"])
    }

    /// A command line and the usage error it must give.
    static let errors: [([String], UsageError)] = [
        ([], UsageError(.missingSubcommand, command: nil)),
        (["pain"], UsageError(.unknownSubcommand("pain", suggestion: "paint"), command: nil)),
        (["paint"], UsageError(.missingArgument(name: "TARGET"), command: "paint")),
        (["paint", "a", "b", "c"], UsageError(.extraArgument("c"), command: "paint")),
        (
            ["paint", "a", "--colur", "red"],
            UsageError(.unknownOption("--colur", suggestion: "--colour"), command: "paint")
        ),
        (
            ["paint", "a", "--colour"],
            UsageError(.missingValue(option: "--colour", valueName: "COLOUR"), command: "paint")
        ),
        (["paint", "a", "--loud=yes"], UsageError(.unexpectedValue(option: "--loud"), command: "paint")),
        (
            ["paint", "a", "-c", "blue"],
            UsageError(
                .badValue("blue", valueName: "COLOUR", option: "-c", reason: "expected red or green"), command: "paint")
        ),
        (
            ["paint", "a", "--count", "11"],
            UsageError(
                .badValue("11", valueName: "N", option: "--count", reason: "expected a whole number from 1 to 10"),
                command: "paint")
        ),
        (["-v", "-q", "run", "x"], UsageError(.conflictingOptions("--verbose", "--quiet"), command: "run")),
        (["run"], UsageError(.missingCommand(name: "CMD"), command: "run")),
    ]

    @Test(arguments: errors) func refusesWithTheRightError(_ words: [String], _ expected: UsageError) {
        #expect(throws: expected) { try parser.parse(words) }
    }

    @Test func helpAndVersionWinOverErrors() throws {
        guard case .help(let spec) = try parser.parse(["paint", "--bogus", "--help"]) else {
            Issue.record("no help")
            return
        }
        #expect(spec == Toy.paint)
        // Not over a subcommand that does not exist: there is no help of it to give.
        #expect(throws: UsageError(.unknownSubcommand("pain", suggestion: "paint"), command: nil)) {
            try parser.parse(["pain", "--help"])
        }
        #expect(throws: UsageError(.unknownSubcommand("nosuch", suggestion: nil), command: nil)) {
            try parser.parse(["nosuch", "door", "--bogus", "-h"])
        }
        guard case .version = try parser.parse(["--version"]) else {
            Issue.record("no version")
            return
        }
    }

    @Test func aToolWithoutSubcommandsTakesItsOptionsAndNoWord() throws {
        let parser = CommandLineParser(tool: Toy.daemon)
        guard case .tool(let parsed) = try parser.parse(["--count", "2", "--loud"]) else {
            Issue.record("not parsed as the tool's own options")
            return
        }
        #expect(parsed.integer(Toy.count) == 2 && parsed.isSet(Toy.loud))
        #expect(throws: UsageError(.extraArgument("paint"), command: nil)) { try parser.parse(["paint"]) }
        let help = HelpFormatter.toolHelp(Toy.daemon)
        #expect(help.contains("USAGE: toyd [--count N] [--loud] [--version] [--help]"))
        #expect(!help.contains("SUBCOMMAND"))
    }

    @Test func helpAndManPageComeFromTheSpecs() {
        let help = HelpFormatter.help(of: Toy.paint, tool: Toy.tool)
        #expect(help.hasPrefix("OVERVIEW: Paint a target.\n\nUSAGE: toy paint TARGET [EXTRA] [--colour COLOUR]"))
        #expect(help.contains("  -c, --colour COLOUR"))
        #expect(help.contains("$ toy paint door -c red"))
        let toolHelp = HelpFormatter.toolHelp(Toy.tool)
        #expect(toolHelp.contains("SUBCOMMANDS:\n  paint") && toolHelp.contains("  run "))
        let page = ManPage.generate(Toy.tool)
        #expect(page.contains("\n.TH TOY 1 "))
        #expect(page.contains(".SS \"toy paint\"") && page.contains("toy 1.2"))
        let error = HelpFormatter.usageErrorText(
            UsageError(.missingArgument(name: "TARGET"), command: "paint"), tool: Toy.tool)
        #expect(error.hasPrefix("toy paint: error: missing argument TARGET\nUSAGE: toy paint"))
    }

    @Test func valuesCompareByWhatTheyHold() {
        #expect(ParsedValue(3) == ParsedValue(3))
        #expect(ParsedValue(3) != ParsedValue("3"))
        #expect(ParsedValue(Colour.red).get(Colour.self) == .red)
        #expect(ParsedValue(Colour.red).get(String.self) == nil)
        #expect(ValueType.integer(1...3) == ValueType.integer(1...3))
        #expect(ValueType.integer(1...3) != ValueType.integer(1...4))
    }

    @Test func quotingKeepsMessagesOnOneLine() {
        #expect(quoted("a\nb") == #"'a\nb'"#)
        #expect(quoted(String(repeating: "x", count: 100)).hasSuffix("...'"))
    }
}
