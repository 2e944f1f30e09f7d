// The data a tool and its subcommands declare about themselves; the parser, the help and the man page read it.

/// A positional argument, such as `APP` or the `CMD...` of `bgtask run`.
public struct ArgumentSpec: Hashable, Sendable {
    /// The name shown in usage and help, upper case (`APP`); also the key its value is read back by.
    public var name: String
    /// One line saying what the argument is.
    public var help: String
    /// How the text is parsed.
    public var type: ValueType
    /// Whether the argument may be left out (shown as `[APP]`).
    public var isOptional: Bool
    /// Whether this is a command line to run: it takes every remaining word, options included, and is written
    /// after `--` (`-- CMD...`). Only the last argument may be one.
    public var isCommand: Bool

    /// A positional argument; required and single unless told otherwise.
    public init(
        _ name: String, help: String, type: ValueType = .text, isOptional: Bool = false,
        isCommand: Bool = false
    ) {
        self.name = name
        self.help = help
        self.type = type
        self.isOptional = isOptional
        self.isCommand = isCommand
    }
}

/// An option that takes a value: `--name NAME`, `--limit N`.
public struct OptionSpec: Hashable, Sendable {
    /// The long name without dashes (`budget` for `--budget`); also the key its value is read back by.
    public var name: String
    /// A one-letter short form without the dash (`n` for `-n`), if any.
    public var shortName: Character?
    /// The placeholder for the value in usage and help (`DURATION`).
    public var valueName: String
    /// One line saying what the option does.
    public var help: String
    /// How the value is parsed.
    public var type: ValueType
    /// What applies when the option is not given, as a user would read it (`TERM`); nil when it is simply absent.
    public var defaultValue: String?

    /// An option with a value.
    public init(
        _ name: String, short shortName: Character? = nil, valueName: String, help: String,
        type: ValueType = .text, defaultValue: String? = nil
    ) {
        self.name = name
        self.shortName = shortName
        self.valueName = valueName
        self.help = help
        self.type = type
        self.defaultValue = defaultValue
    }

    /// The spelling on the command line, `--budget`.
    public var longForm: String { "--" + name }
}

/// An option without a value, on or off: `--json`, `--all`.
public struct FlagSpec: Hashable, Sendable {
    /// The long name without dashes (`all` for `--all`); also the key it is read back by.
    public var name: String
    /// A one-letter short form without the dash, if any.
    public var shortName: Character?
    /// One line saying what the flag does.
    public var help: String

    /// A flag.
    public init(_ name: String, short shortName: Character? = nil, help: String) {
        self.name = name
        self.shortName = shortName
        self.help = help
    }

    /// The spelling on the command line, `--all`.
    public var longForm: String { "--" + name }
}

/// An example invocation with what it does, for the help and the man page.
public struct ExampleSpec: Hashable, Sendable {
    /// The command line as typed, starting with the tool's name.
    public var commandLine: String
    /// What it does, one sentence.
    public var explanation: String

    /// An example.
    public init(_ commandLine: String, _ explanation: String) {
        self.commandLine = commandLine
        self.explanation = explanation
    }
}

/// Everything a subcommand declares: its name, its words for the help, and what it accepts.
public struct CommandSpec: Hashable, Sendable {
    /// The word that selects the subcommand (`run`).
    public var name: String
    /// One line for the list of subcommands, a sentence without the final period.
    public var abstract: String
    /// Paragraphs for the full help, separated by blank lines; empty for none.
    public var discussion: String
    /// Positional arguments, in order.
    public var arguments: [ArgumentSpec]
    /// Options that take a value.
    public var options: [OptionSpec]
    /// Options without a value.
    public var flags: [FlagSpec]
    /// Example invocations.
    public var examples: [ExampleSpec]

    /// A subcommand's declaration.
    public init(
        name: String, abstract: String, discussion: String = "", arguments: [ArgumentSpec] = [],
        options: [OptionSpec] = [], flags: [FlagSpec] = [], examples: [ExampleSpec] = []
    ) {
        self.name = name
        self.abstract = abstract
        self.discussion = discussion
        self.arguments = arguments
        self.options = options
        self.flags = flags
        self.examples = examples
    }

    /// The argument that takes a command line, if the subcommand runs one.
    public var commandArgument: ArgumentSpec? { arguments.last.flatMap { $0.isCommand ? $0 : nil } }
}

/// An environment variable the tool reads, for the help and the man page.
public struct EnvironmentSpec: Hashable, Sendable {
    /// The variable's name.
    public var name: String
    /// What it does.
    public var help: String

    /// An environment variable.
    public init(_ name: String, help: String) {
        self.name = name
        self.help = help
    }
}

/// An exit status and what it means, for the man page.
public struct ExitStatusSpec: Hashable, Sendable {
    /// The status as written (`0`, `64`, or a phrase for a computed one).
    public var status: String
    /// What it means.
    public var meaning: String

    /// An exit status.
    public init(_ status: String, _ meaning: String) {
        self.status = status
        self.meaning = meaning
    }
}

/// The whole tool as data: its own words, its global options and its subcommands, in the order help lists them.
///
/// A tool without subcommands (a daemon) takes its global options only, and no positional argument.
public struct ToolSpec: Sendable {
    /// The program name, `bgtask`.
    public var name: String
    /// The version `--version` prints.
    public var version: String
    /// The package the tool belongs to, for the man page's header (`bgtaskd 0.1.0`).
    public var package: String
    /// One line saying what the tool is.
    public var abstract: String
    /// Paragraphs for the help and the man page's DESCRIPTION.
    public var discussion: String
    /// Options accepted before or after any subcommand.
    public var globalOptions: [OptionSpec]
    /// Flags accepted before or after any subcommand.
    public var globalFlags: [FlagSpec]
    /// Options and flags that cannot be given together, by long name, two or more to a group.
    public var exclusiveGroups: [[String]]
    /// Environment variables the tool reads.
    public var environment: [EnvironmentSpec]
    /// Exit statuses the tool can end with.
    public var exitStatuses: [ExitStatusSpec]
    /// Related manual pages, as `name(section)`.
    public var seeAlso: [String]
    /// The subcommands, in the order the help lists them; empty for a tool without subcommands.
    public var commands: [CommandSpec]

    /// A tool's declaration.
    public init(
        name: String, version: String, package: String? = nil, abstract: String, discussion: String = "",
        globalOptions: [OptionSpec] = [], globalFlags: [FlagSpec] = [], exclusiveGroups: [[String]] = [],
        environment: [EnvironmentSpec] = [], exitStatuses: [ExitStatusSpec] = [], seeAlso: [String] = [],
        commands: [CommandSpec] = []
    ) {
        self.name = name
        self.version = version
        self.package = package ?? name
        self.abstract = abstract
        self.discussion = discussion
        self.globalOptions = globalOptions
        self.globalFlags = globalFlags
        self.exclusiveGroups = exclusiveGroups
        self.environment = environment
        self.exitStatuses = exitStatuses
        self.seeAlso = seeAlso
        self.commands = commands
    }

    /// The subcommand named `name`, if there is one.
    public func command(named name: String) -> CommandSpec? {
        commands.first { $0.name == name }
    }
}
