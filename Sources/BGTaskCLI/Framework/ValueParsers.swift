// bgtask's own kinds of value for options and arguments: durations, signals, JSON payloads, behaviours, states,
// and the conditions a scheduled request requires.
import BGTaskArguments
import BGTaskConfig
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol

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
    /// Conditions a scheduled request requires, joined with commas (`ac,network`).
    public static let conditions = ValueType(name: "conditions") { text throws(ValueError) in
        ParsedValue(try ValueParsers.conditions(text))
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

    /// The conditions of an option, in their declared order; nil when absent.
    public func conditions(_ option: OptionSpec) -> [Constraint]? { value(option, as: [Constraint].self) }
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
        // The daemon's own parser and decoder, so that what the command line takes the daemon takes too (one value,
        // unique keys, no lone surrogates), and a payload nested deeper than `JSONValue.maximumDepth` is refused here.
        let tree: JSONValue
        do throws(JSONParseError) {
            tree = try JSONParser.parse(Array(text.utf8))
        } catch {
            // The parser names a byte offset; on a command line, saying what is expected helps more.
            throw ValueError("not valid JSON (expected an object such as '{\"key\": 1}')")
        }
        let value: JSONValue
        do {
            value = try JSONValueDecoder().decode(JSONValue.self, from: tree)
        } catch DecodingError.dataCorrupted(let context) {
            // Valid JSON refused for its depth.
            throw ValueError(context.debugDescription)
        } catch {
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

    /// Conditions joined with commas, each spelled as the interface spells it (`ac`, `battery`, `network`,
    /// `unmetered`, `idle`); each once, none empty. Returned in their declared order.
    public static func conditions(_ text: String) throws(ValueError) -> [Constraint] {
        let expected =
            "expected conditions joined with commas, such as ac,network (each one of "
            + Constraint.allCases.map(\.rawValue).joined(separator: ", ") + ")"
        var conditions: Set<Constraint> = []
        for word in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard let condition = Constraint(rawValue: String(word)) else {
                guard !word.isEmpty else { throw ValueError(expected) }
                throw ValueError("unknown condition \(String(reflecting: String(word))) (\(expected))")
            }
            guard conditions.insert(condition).inserted else {
                throw ValueError("\(condition.rawValue) is given twice")
            }
        }
        return conditions.sorted()
    }

    /// An app lifecycle state, spelled as the interface spells it (`active`, `notRunning`, ...).
    public static func state(_ text: String) throws(ValueError) -> AppState {
        guard let state = AppState(rawValue: text) else {
            throw ValueError("expected one of " + AppState.allCases.map(\.rawValue).joined(separator: ", "))
        }
        return state
    }
}
