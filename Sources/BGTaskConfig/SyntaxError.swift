// The typed error of the value parsers, whose description says what was wrong and what was expected.

/// A value that does not follow the systemd syntax expected for it.
///
/// The description reads like systemd's own messages, with the expected form appended:
/// `invalid time span "5 parsecs": unknown unit "parsecs" (expected one of us, ms, s, min, h, d, w, M, y)`.
public struct SyntaxError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The kind of value the parser expected.
    public enum ValueKind: String, Hashable, Sendable {
        /// A systemd time span (`500ms`, `1h 30min`).
        case timeSpan = "time span"
        /// A byte size with an optional base-1024 suffix (`64K`).
        case size
        /// A systemd boolean (`yes`, `off`, ...).
        case boolean
        /// A whole percentage from 0 to 100.
        case percentage
        /// A non-negative whole number.
        case integer
    }

    /// What exactly was wrong.
    public enum Reason: Hashable, Sendable {
        /// Nothing but whitespace.
        case empty
        /// Text where a number had to start (`ms`, `inf`, `+5s`); the associated text is what was found.
        case missingNumber(found: String)
        /// A leading minus sign: none of these values can be negative.
        case negative
        /// Digits and dots that do not form a number (`1.5.5`, `3.`, `.5`).
        case malformedNumber(String)
        /// A unit or suffix that is not in the table.
        case unknownUnit(String)
        /// A number without a unit that is not the only component (`5sec5`, `1 2`).
        case missingUnit(after: String)
        /// A fraction where only whole numbers make sense (bytes, percentages, counts).
        case fractionNotAllowed
        /// A size component whose unit is not smaller than the one before it (`1M 2G`).
        case unitOrder(component: String)
        /// A value above what the type can hold; the associated text is the largest accepted value.
        case tooLarge(maximum: String)
        /// A whole number outside the accepted range.
        case outOfRange(ClosedRange<Int>)
        /// `infinity` where only finite values are accepted.
        case infinityNotAllowed
        /// Characters after a complete value (`10 %`, `1e3`).
        case unexpected(String)
        /// Not one of the boolean words.
        case notABoolean
    }

    /// The kind of value that was expected.
    public var kind: ValueKind
    /// The text as given to the parser.
    public var input: String
    /// What was wrong with it.
    public var reason: Reason

    /// Creates an error for `input`, which should have been a `kind`.
    public init(kind: ValueKind, input: String, reason: Reason) {
        self.kind = kind
        self.input = input
        self.reason = reason
    }

    public var description: String {
        "invalid \(kind.rawValue) \(String(reflecting: input)): \(reasonDescription)"
    }

    /// The reason alone, as the second half of the description.
    public var reasonDescription: String {
        switch reason {
        case .empty:
            return "empty value (expected \(kind.expectation))"
        case .missingNumber(let found):
            return "expected a number, found \(String(reflecting: found)) (expected \(kind.expectation))"
        case .negative:
            return "negative values are not allowed"
        case .malformedNumber(let text):
            return "malformed number \(String(reflecting: text))"
        case .unknownUnit(let unit):
            return "unknown unit \(String(reflecting: unit)) (expected one of \(kind.unitNames))"
        case .missingUnit(let number):
            return "\(String(reflecting: number)) needs a unit when the value has several components"
        case .fractionNotAllowed:
            return "fractions are not allowed here (expected \(kind.expectation))"
        case .unitOrder(let component):
            return "\(String(reflecting: component)) must not follow a component with an equal or smaller unit"
        case .tooLarge(let maximum):
            return "value is too large (the maximum is \(maximum))"
        case .outOfRange(let range) where range.upperBound == Int.max:
            return "expected a value of at least \(range.lowerBound)"
        case .outOfRange(let range):
            return "expected a value from \(range.lowerBound) to \(range.upperBound)"
        case .infinityNotAllowed:
            return "\"infinity\" is not allowed here (expected a finite \(kind.rawValue))"
        case .unexpected(let text):
            return "unexpected \(String(reflecting: text)) (expected \(kind.expectation))"
        case .notABoolean:
            return "expected one of yes, no, true, false, on, off, 1, 0"
        }
    }
}

extension SyntaxError.ValueKind {
    /// What a valid value of this kind looks like, for messages.
    var expectation: String {
        switch self {
        case .timeSpan: return "a number with a unit, such as \"5s\", \"500ms\" or \"1h 30min\""
        case .size: return "a number of bytes with an optional K, M, G, T, P or E suffix, such as \"64K\""
        case .boolean: return "one of yes, no, true, false, on, off, 1, 0"
        case .percentage: return "a whole number from 0 to 100, optionally followed by %"
        case .integer: return "a non-negative whole number"
        }
    }

    /// The units of this kind, for the unknown-unit message.
    var unitNames: String {
        switch self {
        case .timeSpan: return "us, ms, s, min, h, d, w, M, y"
        case .size: return "B, K, M, G, T, P, E"
        case .percentage: return "%"
        case .boolean, .integer: return "no unit"
        }
    }
}
