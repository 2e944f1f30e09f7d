// Turns the words of a command line into a help request, a version request, or a typed subcommand to run.

/// What a command line asks for.
public enum Invocation: Sendable {
    /// Print the help of a subcommand, or of the tool when nil, and exit 0.
    case help(CommandSpec?)
    /// Print the version and exit 0.
    case version
    /// Run a subcommand with the arguments given (its own and the global options).
    case command(CommandSpec, ParsedArguments)
    /// Run a tool without subcommands with the options given.
    case tool(ParsedArguments)
}

/// The options and flags accepted at one point of the command line, with lookups by each spelling.
struct OptionScope {
    var options: [OptionSpec]
    var flags: [FlagSpec]

    enum Match {
        case option(OptionSpec)
        case flag(FlagSpec)
    }

    func match(long name: String) -> Match? {
        if let option = options.first(where: { $0.name == name }) { return .option(option) }
        return flags.first { $0.name == name }.map(Match.flag)
    }

    func match(short letter: Character) -> Match? {
        if let option = options.first(where: { $0.shortName == letter }) { return .option(option) }
        return flags.first { $0.shortName == letter }.map(Match.flag)
    }

    /// Whether `token` is one of this scope's options as written, with or without `=value`.
    func recognizes(_ token: String) -> Bool {
        if token.hasPrefix("--") {
            let name = String(token.dropFirst(2).prefix { $0 != "=" })
            return match(long: name) != nil
        }
        return token.count == 2 && token.hasPrefix("-") && token.last.flatMap(match(short:)) != nil
    }

    /// Every long spelling, for "did you mean".
    var longSpellings: [String] { options.map(\.longForm) + flags.map(\.longForm) }
}

/// Whether a word is written as an option: a dash followed by something, but not `--` alone.
func isOptionLike(_ token: String) -> Bool {
    token.hasPrefix("-") && token != "-" && token != "--"
}

/// The command-line parser for a `ToolSpec`.
///
/// Accepted forms: `--opt value`, `--opt=value`, `-x value`, `-x`, `--flag`; `--` ends options (every word after
/// it is positional); for a subcommand that runs a command line, options also end at the command's first word,
/// so `bgtask run sleep 5 --verbose` passes `--verbose` to `sleep`. Global options are accepted before and after
/// the subcommand. An option given twice keeps its last value. `-h`/`--help` anywhere before `--` asks for help,
/// even on a line that has other errors, except a subcommand that does not exist: that is an error whatever follows
/// it.
public struct CommandLineParser: Sendable {
    /// The tool whose command lines are parsed.
    public let tool: ToolSpec

    /// A parser for `tool`'s command lines.
    public init(tool: ToolSpec) {
        self.tool = tool
    }

    /// Parses the words after the program name.
    public func parse(_ words: [String]) throws(UsageError) -> Invocation {
        do {
            return try parseStrictly(words)
        } catch {
            // A line with an error but also a request for help gets the help: the user is asking how to fix it.
            // Not a subcommand that does not exist: there is no help of it to give, and the tool's help would
            // read as if the line had worked.
            let beforeSeparator = words.prefix { $0 != "--" }
            if case .unknownSubcommand = error.kind { throw error }
            if beforeSeparator.contains("--help") || beforeSeparator.contains("-h") {
                return .help(error.command.flatMap { tool.command(named: $0) })
            }
            throw error
        }
    }

    private func parseStrictly(_ words: [String]) throws(UsageError) -> Invocation {
        let topScope = OptionScope(
            options: tool.globalOptions, flags: tool.globalFlags + [BuiltinFlags.help, BuiltinFlags.version])
        var parsed = ParsedArguments()
        var index = 0
        while index < words.count, isOptionLike(words[index]) || words[index] == "--" {
            if words[index] == "--" {
                // The end of the tool's options: the next word is the subcommand, whatever it looks like.
                index += 1
                break
            }
            try consumeOption(words, at: &index, scope: topScope, into: &parsed, command: nil)
            if parsed.isSet(BuiltinFlags.help) { return .help(nil) }
            if parsed.isSet(BuiltinFlags.version) { return .version }
        }
        guard !tool.commands.isEmpty else {
            // A tool without subcommands takes no positional word.
            if index < words.count { throw UsageError(.extraArgument(words[index]), command: nil) }
            try checkExclusiveGroups(parsed, command: nil)
            return .tool(parsed)
        }
        guard index < words.count else { throw UsageError(.missingSubcommand, command: nil) }
        let word = words[index]
        index += 1
        if word == "help" { return try helpInvocation(Array(words[index...])) }
        guard let spec = tool.command(named: word) else {
            let suggestion = closestMatch(to: word, among: tool.commands.map(\.name) + ["help"])
            throw UsageError(.unknownSubcommand(word, suggestion: suggestion), command: nil)
        }
        let scope = OptionScope(
            options: spec.options + tool.globalOptions, flags: spec.flags + tool.globalFlags + [BuiltinFlags.help])
        let commandIndex = spec.arguments.firstIndex(where: \.isCommand)
        var positionals: [String] = []
        var optionsEnded = false
        while index < words.count {
            let token = words[index]
            if optionsEnded || (!isOptionLike(token) && token != "--") {
                // The first word of a command line ends the options: the rest belongs to the command.
                if let commandIndex, positionals.count >= commandIndex { optionsEnded = true }
                positionals.append(token)
                index += 1
            } else if token == "--" {
                optionsEnded = true
                index += 1
            } else {
                try consumeOption(words, at: &index, scope: scope, into: &parsed, command: spec.name)
                if parsed.isSet(BuiltinFlags.help) { return .help(spec) }
            }
        }
        try assign(positionals, of: spec, into: &parsed)
        try checkExclusiveGroups(parsed, command: spec.name)
        return .command(spec, parsed)
    }

    /// Refuses two options of one of the tool's exclusive groups given together.
    private func checkExclusiveGroups(_ parsed: ParsedArguments, command: String?) throws(UsageError) {
        let options = tool.globalOptions + (command.flatMap { tool.command(named: $0)?.options } ?? [])
        let flags = tool.globalFlags + (command.flatMap { tool.command(named: $0)?.flags } ?? [])
        func isGiven(_ name: String) -> Bool {
            if let option = options.first(where: { $0.name == name }) { return parsed.value(option) != nil }
            if let flag = flags.first(where: { $0.name == name }) { return parsed.isSet(flag) }
            return false
        }
        for group in tool.exclusiveGroups {
            let given = group.filter(isGiven)
            if given.count >= 2 {
                throw UsageError(.conflictingOptions("--" + given[0], "--" + given[1]), command: command)
            }
        }
    }

    /// `bgtask help [SUBCOMMAND]`.
    private func helpInvocation(_ rest: [String]) throws(UsageError) -> Invocation {
        guard let word = rest.first else { return .help(nil) }
        if rest.count > 1 { throw UsageError(.extraArgument(rest[1]), command: nil) }
        if word == "help" { return .help(nil) }
        guard let spec = tool.command(named: word) else {
            let suggestion = closestMatch(to: word, among: tool.commands.map(\.name))
            throw UsageError(.unknownSubcommand(word, suggestion: suggestion), command: nil)
        }
        return .help(spec)
    }

    /// Reads the option at `words[index]` (and its value, if it takes one), advancing `index` past them.
    private func consumeOption(
        _ words: [String], at index: inout Int, scope: OptionScope, into parsed: inout ParsedArguments,
        command: String?
    ) throws(UsageError) {
        let token = words[index]
        index += 1
        let spelling: String
        let inlineValue: String?
        let match: OptionScope.Match?
        if token.hasPrefix("--") {
            let body = token.dropFirst(2)
            let name = body.prefix { $0 != "=" }
            spelling = "--" + name
            inlineValue = name.endIndex < body.endIndex ? String(body[body.index(after: name.endIndex)...]) : nil
            match = scope.match(long: String(name))
        } else {
            spelling = token
            inlineValue = nil
            match = token.count == 2 ? token.last.flatMap(scope.match(short:)) : nil
        }
        switch match {
        case nil:
            let suggestion = token.hasPrefix("--") ? closestMatch(to: spelling, among: scope.longSpellings) : nil
            throw UsageError(.unknownOption(spelling, suggestion: suggestion), command: command)
        case .flag(let flag):
            if inlineValue != nil { throw UsageError(.unexpectedValue(option: spelling), command: command) }
            parsed.set(flag)
        case .option(let option):
            let text: String
            if let inlineValue {
                text = inlineValue
            } else if index < words.count, words[index] != "--", !scope.recognizes(words[index]) {
                text = words[index]
                index += 1
            } else {
                throw UsageError(.missingValue(option: spelling, valueName: option.valueName), command: command)
            }
            do {
                parsed.set(try option.type.parse(text), for: option)
            } catch {
                throw UsageError(
                    .badValue(text, valueName: option.valueName, option: spelling, reason: error.reason),
                    command: command)
            }
        }
    }

    /// Matches positional words to the spec's arguments, in order.
    private func assign(_ positionals: [String], of spec: CommandSpec, into parsed: inout ParsedArguments)
        throws(UsageError)
    {
        var remaining = positionals[...]
        for argument in spec.arguments {
            if argument.isCommand {
                if remaining.isEmpty {
                    if argument.isOptional { continue }
                    throw UsageError(.missingCommand(name: argument.name), command: spec.name)
                }
                parsed.set(ParsedValue(Array(remaining)), for: argument)
                remaining = []
            } else if let word = remaining.popFirst() {
                do {
                    parsed.set(try argument.type.parse(word), for: argument)
                } catch {
                    throw UsageError(
                        .badValue(word, valueName: argument.name, option: nil, reason: error.reason),
                        command: spec.name)
                }
            } else if !argument.isOptional {
                throw UsageError(.missingArgument(name: argument.name), command: spec.name)
            }
        }
        if let extra = remaining.first { throw UsageError(.extraArgument(extra), command: spec.name) }
    }
}

/// The flags every command line accepts, handled by the parser itself.
public enum BuiltinFlags {
    /// `-h`, `--help`: print the help of the tool or of the subcommand.
    public static let help = FlagSpec("help", short: "h", help: "Show this help and exit.")
    /// `--version`: print the version.
    public static let version = FlagSpec("version", help: "Show the version and exit.")
}
