// The values a command line gave, read back by the same spec constants that declared them.

/// The parsed values of one command line: options, flags and positional arguments, already typed.
///
/// Values are looked up by the spec that declared them, so a subcommand reads `arguments.text(Self.app)` with
/// the very constant its `spec` lists; an absent option reads as nil (its default applies).
public struct ParsedArguments: Hashable, Sendable {
    private var values: [String: ParsedValue] = [:]
    private var setFlags: Set<String> = []

    /// No values.
    public init() {}

    private static func key(_ argument: ArgumentSpec) -> String { "argument " + argument.name }
    private static func key(_ option: OptionSpec) -> String { "option " + option.name }
    private static func key(_ flag: FlagSpec) -> String { "flag " + flag.name }

    mutating func set(_ value: ParsedValue, for argument: ArgumentSpec) { values[Self.key(argument)] = value }
    mutating func set(_ value: ParsedValue, for option: OptionSpec) { values[Self.key(option)] = value }
    mutating func set(_ flag: FlagSpec) { setFlags.insert(Self.key(flag)) }

    /// The parsed value of a positional argument, nil when it was not given.
    public func value(_ argument: ArgumentSpec) -> ParsedValue? { values[Self.key(argument)] }

    /// The parsed value of an option, nil when it was not given.
    public func value(_ option: OptionSpec) -> ParsedValue? { values[Self.key(option)] }

    /// The value of an argument as `type`; nil when absent (or of another type).
    public func value<Value>(_ argument: ArgumentSpec, as type: Value.Type) -> Value? {
        value(argument)?.get(type)
    }

    /// The value of an option as `type`; nil when absent (or of another type).
    public func value<Value>(_ option: OptionSpec, as type: Value.Type) -> Value? {
        value(option)?.get(type)
    }

    /// Whether a flag was given.
    public func isSet(_ flag: FlagSpec) -> Bool { setFlags.contains(Self.key(flag)) }

    /// The text of an argument; nil when absent.
    public func text(_ argument: ArgumentSpec) -> String? {
        value(argument, as: String.self)
    }

    /// The text of an option; nil when absent.
    public func text(_ option: OptionSpec) -> String? {
        value(option, as: String.self)
    }

    /// The text of a required argument. The parser has already refused a command line without it, so the throw
    /// only guards a spec whose argument is declared optional but read as required.
    public func requiredText(_ argument: ArgumentSpec, command: String) throws(UsageError) -> String {
        guard let text = text(argument) else {
            throw UsageError(.missingArgument(name: argument.name), command: command)
        }
        return text
    }

    /// The number of an argument; nil when absent.
    public func integer(_ argument: ArgumentSpec) -> Int? {
        value(argument, as: Int.self)
    }

    /// The number of an option; nil when absent.
    public func integer(_ option: OptionSpec) -> Int? {
        value(option, as: Int.self)
    }

    /// The words of a command-line argument; empty when absent.
    public func words(_ argument: ArgumentSpec) -> [String] {
        value(argument, as: [String].self) ?? []
    }
}
