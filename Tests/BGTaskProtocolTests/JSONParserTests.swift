// The wire's JSON parser against tables of valid and invalid texts, and against Python's json module.

import BGTaskJSON
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// A text the parser accepts, and the value it must give.
struct ValidJSONRow: CustomTestStringConvertible, Sendable {
    var name: String
    var text: String
    var value: JSONValue
    var testDescription: String { name }
}

/// A text the parser refuses, and words its error must contain.
struct InvalidJSONRow: CustomTestStringConvertible, Sendable {
    var name: String
    var bytes: [UInt8]
    var reason: String
    var testDescription: String { name }

    init(_ name: String, _ text: String, _ reason: String) {
        self.name = name
        bytes = Array(text.utf8)
        self.reason = reason
    }

    init(_ name: String, bytes: [UInt8], _ reason: String) {
        self.name = name
        self.bytes = bytes
        self.reason = reason
    }
}

/// `[[[...1...]]]` nested `depth` deep.
private func nested(_ depth: Int) -> String {
    String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth)
}

/// The value of `nested(depth)`.
private func nestedValue(_ depth: Int) -> JSONValue {
    var value: JSONValue = 1
    for _ in 0..<depth { value = .array([value]) }
    return value
}

let validJSONRows: [ValidJSONRow] = [
    ValidJSONRow(name: "literals", text: "[true,false,null]", value: [true, false, .null]),
    ValidJSONRow(name: "whitespace of all four kinds", text: " \t\r\n{ \"a\" :\n1 }\r\n", value: ["a": 1]),
    ValidJSONRow(name: "empty containers", text: #"{"a":[],"b":{}}"#, value: ["a": [], "b": [:]]),
    // Numbers at the limits.
    ValidJSONRow(name: "zero and negative zero", text: "[0,-0,0.0,0e0]", value: [0, 0, 0, 0]),
    ValidJSONRow(name: "2^53 exactly", text: "9007199254740992", value: 9_007_199_254_740_992),
    ValidJSONRow(name: "-2^53 exactly", text: "-9007199254740992", value: -9_007_199_254_740_992),
    ValidJSONRow(name: "the largest double", text: "1.7976931348623157e308", value: .number(.greatestFiniteMagnitude)),
    ValidJSONRow(name: "the smallest subnormal", text: "5e-324", value: .number(.leastNonzeroMagnitude)),
    ValidJSONRow(name: "an underflow is zero", text: "1e-400", value: 0),
    ValidJSONRow(name: "exponent forms", text: "[1E2,1e+2,1e-2,-1.5E-1]", value: [100, 100, 0.01, -0.15]),
    ValidJSONRow(
        name: "a number of 64 bytes", text: String(repeating: "1", count: 64),
        value: .number(Double(String(repeating: "1", count: 64))!)),
    // Escapes and Unicode.
    ValidJSONRow(
        name: "every short escape", text: #""\"\\\/\b\f\n\r\t""#, value: .string("\"\\/\u{8}\u{C}\n\r\t")),
    ValidJSONRow(name: "\\u escapes, both cases", text: #""\u00e9\u00C9\u0041""#, value: "éÉA"),
    ValidJSONRow(name: "an escaped NUL", text: #""a\u0000b""#, value: .string("a\u{0}b")),
    ValidJSONRow(name: "a surrogate pair", text: #""\ud83d\ude00""#, value: "😀"),
    ValidJSONRow(name: "raw UTF-8 of every width", text: "\"é€😀\"", value: "é€😀"),
    ValidJSONRow(name: "an escape after plain text", text: #""plain\ntext""#, value: "plain\ntext"),
    ValidJSONRow(name: "DEL and U+2028 need no escape", text: "\"\u{7F}\u{2028}\"", value: "\u{7F}\u{2028}"),
    // Unknown fields are the codec's business: the parser keeps every member.
    ValidJSONRow(
        name: "unknown fields kept", text: #"{"method":"x","_extra":{"deep":[1]}}"#,
        value: ["method": "x", "_extra": ["deep": [1]]]),
    ValidJSONRow(name: "two members", text: #"{"a":1,"b":2}"#, value: ["a": 1, "b": 2]),
    // Nesting at the limit.
    ValidJSONRow(
        name: "nesting at the limit", text: nested(JSONParser.defaultMaximumDepth),
        value: nestedValue(JSONParser.defaultMaximumDepth)),
]

let invalidJSONRows: [InvalidJSONRow] = [
    InvalidJSONRow("empty text", "", "the text ended"),
    InvalidJSONRow("whitespace only", " \n", "the text ended"),
    InvalidJSONRow("two values", "1 2", "text after the value"),
    InvalidJSONRow("a trailing comma in an array", "[1,]", "a value was expected"),
    InvalidJSONRow("a trailing comma in an object", #"{"a":1,}"#, "a member name"),
    InvalidJSONRow("a missing colon", #"{"a" 1}"#, "':' was expected"),
    InvalidJSONRow("an unquoted key", "{a:1}", "a member name"),
    InvalidJSONRow("a single-quoted string", "'a'", "a value was expected"),
    InvalidJSONRow("an unclosed array", "[1", "',' or ']'"),
    InvalidJSONRow("an unclosed object", #"{"a":1"#, "',' or '}'"),
    InvalidJSONRow("an unclosed string", #""abc"#, "ended inside a string"),
    InvalidJSONRow("a misspelled literal", "tru", "the text ended inside a literal"),
    InvalidJSONRow("a literal in capitals", "True", "a value was expected"),
    InvalidJSONRow("form feed is not whitespace", "\u{C}1", "a value was expected"),
    // Numbers.
    InvalidJSONRow("a leading zero", "01", "cannot start with 0"),
    InvalidJSONRow("a leading plus", "+1", "a value was expected"),
    InvalidJSONRow("a bare fraction", ".5", "a value was expected"),
    InvalidJSONRow("a dot with no digits after", "1.", "after '.'"),
    InvalidJSONRow("an exponent with no digits", "1e", "in the exponent"),
    InvalidJSONRow("a minus alone", "-", "a digit was expected"),
    InvalidJSONRow("NaN", "NaN", "a value was expected"),
    InvalidJSONRow("Infinity", "-Infinity", "a digit was expected"),
    InvalidJSONRow("a number past the largest double", "1e400", "out of range"),
    InvalidJSONRow("a negative number past the largest double", "-1.8e308", "out of range"),
    InvalidJSONRow("a number of 65 bytes", String(repeating: "1", count: 65), "longer than 64 bytes"),
    InvalidJSONRow("hexadecimal", "0x10", "text after the value"),
    // Strings and escapes.
    InvalidJSONRow("a raw newline in a string", "\"a\nb\"", "must be escaped"),
    InvalidJSONRow("a raw tab after an escape", "\"\\n\t\"", "must be escaped"),
    InvalidJSONRow("an unknown escape", #""\x41""#, "an unknown escape"),
    InvalidJSONRow("a short \\u escape", #""\u12""#, "four hexadecimal digits"),
    InvalidJSONRow("a \\u escape with a non-hex digit", #""\u12G4""#, "four hexadecimal digits"),
    InvalidJSONRow("a lone high surrogate", #""\ud83d""#, "a lone high surrogate"),
    InvalidJSONRow("a high surrogate then text", #""\ud83dx""#, "a lone high surrogate"),
    InvalidJSONRow("two high surrogates", #""\ud83d\ud83d""#, "without its low surrogate"),
    InvalidJSONRow("a lone low surrogate", #""\ude00""#, "a lone low surrogate"),
    // UTF-8.
    InvalidJSONRow("a stray continuation byte", bytes: Array(#""a"#.utf8) + [0x80, 0x22], "not UTF-8"),
    InvalidJSONRow("an overlong encoding", bytes: [0x22, 0xC0, 0xAF, 0x22], "not UTF-8"),
    InvalidJSONRow("a surrogate encoded in UTF-8", bytes: [0x22, 0xED, 0xA0, 0x80, 0x22], "not UTF-8"),
    InvalidJSONRow("a truncated sequence", bytes: [0x22, 0xE2, 0x82, 0x22], "not UTF-8"),
    InvalidJSONRow("0xFF", bytes: [0x31, 0xFF], "not UTF-8"),
    // Duplicate keys.
    InvalidJSONRow("a duplicate key", #"{"a":1,"a":2}"#, "appears twice"),
    InvalidJSONRow("a duplicate key spelled with an escape", #"{"a":1,"\u0061":2}"#, "appears twice"),
    InvalidJSONRow("a duplicate key in a nested object", #"{"p":{"k":1,"k":1}}"#, "appears twice"),
    // Nesting past the limit.
    InvalidJSONRow(
        "arrays one level past the limit", nested(JSONParser.defaultMaximumDepth + 1),
        "nested deeper than \(JSONParser.defaultMaximumDepth)"),
    InvalidJSONRow(
        "objects past the limit",
        String(repeating: #"{"a":"#, count: JSONParser.defaultMaximumDepth + 1) + "1"
            + String(repeating: "}", count: JSONParser.defaultMaximumDepth + 1),
        "nested deeper than"),
    InvalidJSONRow("100,000 opening brackets", String(repeating: "[", count: 100_000), "nested deeper than"),
]

@Suite("JSON parser")
struct JSONParserTests {
    @Test("valid texts give their values", arguments: validJSONRows)
    func valid(_ row: ValidJSONRow) throws {
        #expect(try JSONParser.parse(Array(row.text.utf8)) == row.value)
    }

    @Test("invalid texts are refused, each with its reason", arguments: invalidJSONRows)
    func invalid(_ row: InvalidJSONRow) {
        do {
            let value = try JSONParser.parse(row.bytes)
            Issue.record("accepted as \(value)")
        } catch {
            #expect(error.description.contains(row.reason), "\(error)")
            #expect(error.offset >= 0 && error.offset <= row.bytes.count)
        }
    }

    @Test("an integer past 2^53 becomes the nearest double, as a JSON number does")
    func integersPastDoublePrecision() throws {
        #expect(try JSONParser.parse(Array("9007199254740993".utf8)) == 9_007_199_254_740_992)
    }

    @Test("a custom depth limit applies at and past itself")
    func customDepth() throws {
        #expect(try JSONParser.parse(Array(nested(3).utf8), maximumDepth: 3) == nestedValue(3))
        #expect(throws: JSONParseError.self) { try JSONParser.parse(Array(nested(4).utf8), maximumDepth: 3) }
    }

    @Test("every valid row means the same to Python's json module")
    func agreesWithPython() throws {
        // An independent reading: Python parses each text and prints it back canonically; so does this parser's
        // value through Foundation's encoder.
        let texts = validJSONRows.filter { !$0.name.hasPrefix("nesting") }.map(\.text)
        let input = try JSONEncoder().encode(texts)
        let script = """
            import json, sys
            for text in json.load(sys.stdin):
                print(json.dumps(json.loads(text), sort_keys=True, ensure_ascii=True))
            """
        let python = try ChildProcess(["python3", "-c", script])
        defer { python.terminate() }
        try python.send(String(decoding: input, as: UTF8.self))
        python.closeInput()
        for row in validJSONRows where !row.name.hasPrefix("nesting") {
            let line = try #require(try python.nextLine(timeout: .seconds(30)), "python printed too few lines")
            let theirs = try JSONDecoder().decode(JSONValue.self, from: Data(line.utf8))
            #expect(theirs == row.value, "\(row.name): Python reads \(line)")
        }
    }
}
