// Parsers for the values options and arguments take: durations, signals, JSON payloads, behaviours, states.
import BGTaskConfig
import BGTaskProtocol
import BGTaskSystem
import Foundation

/// A value parsed according to its `ValueType`.
public enum ParsedValue: Hashable, Sendable {
    /// `.text`.
    case text(String)
    /// `.integer`.
    case integer(Int)
    /// `.duration`.
    case duration(Duration)
    /// `.signal`.
    case signal(Signal)
    /// `.jsonObject`.
    case jsonObject([String: JSONValue])
    /// `.behavior`.
    case behavior(DeliveryBehavior)
    /// `.state`.
    case state(AppState)
    /// A command line: the words of an argument with `isCommand`.
    case words([String])
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

extension ValueType {
    /// Parses `text` as a value of this type.
    public func parse(_ text: String) throws(ValueError) -> ParsedValue {
        switch self {
        case .text:
            guard !text.isEmpty else { throw ValueError("must not be empty") }
            return .text(text)
        case .integer(let range): return .integer(try ValueParsers.integer(text, in: range))
        case .duration: return .duration(try ValueParsers.duration(text))
        case .signal: return .signal(try ValueParsers.signal(text))
        case .jsonObject: return .jsonObject(try ValueParsers.jsonObject(text))
        case .behavior: return .behavior(try ValueParsers.behavior(text))
        case .state: return .state(try ValueParsers.state(text))
        }
    }
}

/// The parsers behind `ValueType.parse(_:)`, each usable alone.
public enum ValueParsers {
    /// A whole decimal number in `range`: digits only, no sign, no spaces.
    public static func integer(_ text: String, in range: ClosedRange<Int>) throws(ValueError) -> Int {
        let expectation =
            range.upperBound == Int.max
            ? "expected a whole number of at least \(range.lowerBound)"
            : "expected a whole number from \(range.lowerBound) to \(range.upperBound)"
        // Int("+5") and Int("٣") would accept more than a script author means; only ASCII digits count.
        guard !text.isEmpty, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else {
            throw ValueError(expectation)
        }
        guard let number = Int(text), range.contains(number) else { throw ValueError(expectation) }
        return number
    }

    /// A time span in systemd syntax (`500ms`, `90s`, `5min`, `1h 30min`, a bare number of seconds); zero is
    /// refused, since no option of bgtask means anything with it.
    public static func duration(_ text: String) throws(ValueError) -> Duration {
        let duration: Duration
        do {
            duration = try SystemdSyntax.parseTimeSpan(text)
        } catch {
            throw ValueError(error.reasonDescription)
        }
        guard duration > .zero else { throw ValueError("must be longer than zero") }
        return duration
    }

    /// A signal by name with or without `SIG`, any case, or by number: `TERM`, `SIGTERM`, `15`, `RTMIN+2`.
    public static func signal(_ text: String) throws(ValueError) -> Signal {
        guard let signal = Signal(text) else {
            throw ValueError("expected a signal name or number, such as TERM, SIGINT or 15")
        }
        return signal
    }

    /// A JSON object; arrays, strings, numbers and `null` are refused because `Post` takes an object.
    public static func jsonObject(_ text: String) throws(ValueError) -> [String: JSONValue] {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        } catch DecodingError.dataCorrupted(let context) where !context.codingPath.isEmpty {
            // Valid JSON refused below the top level: nested deeper than `JSONValue.maximumDepth`.
            throw ValueError(context.debugDescription)
        } catch {
            // JSONDecoder's messages name no position on this platform; saying what is expected helps more.
            throw ValueError("not valid JSON (expected an object such as '{\"key\": 1}')")
        }
        guard case .object(let members) = value else {
            throw ValueError("not a JSON object (expected an object such as '{\"key\": 1}')")
        }
        return members
    }

    /// A `Post` behaviour: `drop`, `coalesce`, `hold` or `wake`.
    public static func behavior(_ text: String) throws(ValueError) -> DeliveryBehavior {
        guard let behavior = DeliveryBehavior(rawValue: text) else {
            throw ValueError("expected one of " + DeliveryBehavior.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return behavior
    }

    /// An app lifecycle state, spelled as the interface spells it (`active`, `notRunning`, ...).
    public static func state(_ text: String) throws(ValueError) -> AppState {
        guard let state = AppState(rawValue: text) else {
            throw ValueError("expected one of " + AppState.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return state
    }
}
