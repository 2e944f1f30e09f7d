// How the text of an option or argument becomes a typed value; tools add their own kinds of value.

/// The kind of value an option or a positional argument takes, which decides how its text is parsed.
///
/// The framework knows text and whole numbers; a tool declares its own kinds (a duration, a signal) as static
/// members in an extension, each with a name and a parser, and reads the values back with `ParsedArguments.value`.
public struct ValueType: Hashable, Sendable, CustomStringConvertible {
    /// The kind's name, unique among the tool's kinds: its identity, and the word tests and errors show.
    public let name: String
    private let parser: @Sendable (String) throws(ValueError) -> ParsedValue

    /// A kind of value named `name`, whose text `parse` turns into a value or refuses with the reason.
    public init(name: String, parse: @escaping @Sendable (String) throws(ValueError) -> ParsedValue) {
        self.name = name
        parser = parse
    }

    /// Parses `text` as a value of this kind.
    public func parse(_ text: String) throws(ValueError) -> ParsedValue {
        try parser(text)
    }

    public var description: String { name }

    public static func == (lhs: ValueType, rhs: ValueType) -> Bool { lhs.name == rhs.name }

    public func hash(into hasher: inout Hasher) { hasher.combine(name) }

    /// Any non-empty text (an app name, a task name, a path).
    public static let text = ValueType(name: "text") { text throws(ValueError) in
        guard !text.isEmpty else { throw ValueError("must not be empty") }
        return ParsedValue(text)
    }

    /// A whole decimal number in `range`: digits only, no sign, no spaces (`--limit 20`, a task id).
    public static func integer(_ range: ClosedRange<Int>) -> ValueType {
        ValueType(name: "integer(\(range.lowerBound)...\(range.upperBound))") { text throws(ValueError) in
            let expectation =
                range.upperBound == Int.max
                ? "expected a whole number of at least \(range.lowerBound)"
                : "expected a whole number from \(range.lowerBound) to \(range.upperBound)"
            // Int("+5") and Int("٣") would accept more than a script author means; only ASCII digits count.
            guard !text.isEmpty, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
                throw ValueError(expectation)
            }
            guard let number = Int(text), range.contains(number) else { throw ValueError(expectation) }
            return ParsedValue(number)
        }
    }
}

/// A parsed value of any kind, compared by value; read back as its type with `ParsedArguments.value(_:as:)`.
public struct ParsedValue: Hashable, Sendable, CustomStringConvertible {
    /// The value.
    public let value: any Hashable & Sendable

    /// Wraps a value.
    public init(_ value: some Hashable & Sendable) {
        self.value = value
    }

    /// The value as `type`, nil when it is another type.
    public func get<Value>(_ type: Value.Type) -> Value? { value as? Value }

    public static func == (lhs: ParsedValue, rhs: ParsedValue) -> Bool {
        AnyHashable(lhs.value) == AnyHashable(rhs.value)
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(AnyHashable(value)) }

    public var description: String { "\(value)" }
}

/// Why a value's text was refused: the second half of a "bad value" usage error.
public struct ValueError: Error, Hashable, Sendable {
    /// What was wrong and what was expected, without the value itself (`unknown unit "x" (expected ...)`).
    public var reason: String

    /// A refusal for `reason`.
    public init(_ reason: String) {
        self.reason = reason
    }
}
