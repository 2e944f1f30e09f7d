// bgtask's own kinds of value for options and arguments: durations, signals, JSON payloads, behaviours, states.
import BGTaskArguments
import BGTaskConfig
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import Foundation

extension ValueType {
    /// A time span in systemd syntax (`90s`, `5min`, `1h 30min`).
    public static let duration = ValueType(name: "duration") { text throws(ValueError) in
        ParsedValue(try ValueParsers.duration(text))
    }
    /// A signal by name or number (`TERM`, `SIGTERM`, `15`).
    public static let signal = ValueType(name: "signal") { text throws(ValueError) in
        ParsedValue(try ValueParsers.signal(text))
    }
    /// A JSON object (`{"folder": "inbox"}`).
    public static let jsonObject = ValueType(name: "jsonObject") { text throws(ValueError) in
        ParsedValue(try ValueParsers.jsonObject(text))
    }
    /// A `Post` behaviour: `drop`, `coalesce`, `hold` or `wake`.
    public static let behavior = ValueType(name: "behavior") { text throws(ValueError) in
        ParsedValue(try ValueParsers.behavior(text))
    }
    /// An app lifecycle state (`active`, `background`, ...).
    public static let state = ValueType(name: "state") { text throws(ValueError) in
        ParsedValue(try ValueParsers.state(text))
    }
}

extension ParsedArguments {
    /// The time span of an option; nil when absent.
    public func duration(_ option: OptionSpec) -> Duration? { value(option, as: Duration.self) }

    /// The signal of an option; nil when absent.
    public func signal(_ option: OptionSpec) -> Signal? { value(option, as: Signal.self) }

    /// The JSON object of an option; nil when absent.
    public func jsonObject(_ option: OptionSpec) -> [String: JSONValue]? {
        value(option, as: [String: JSONValue].self)
    }

    /// The behaviour of an option; nil when absent.
    public func behavior(_ option: OptionSpec) -> DeliveryBehavior? { value(option, as: DeliveryBehavior.self) }

    /// The state of an option; nil when absent.
    public func state(_ option: OptionSpec) -> AppState? { value(option, as: AppState.self) }
}

/// The parsers behind `ValueType.parse(_:)`, each usable alone.
public enum ValueParsers {
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
