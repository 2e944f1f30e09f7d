// Codable to and from JSONValue trees, and the JSON text written from them: paths in errors, nulls, order, escapes.

import BGTaskJSON
import BGTaskProtocol
import Foundation
import Testing

/// A value with every kind of member the interface's types use.
private struct Sample: Codable, Equatable {
    var name: String
    var count: Int
    var ratio: Double
    var flag: Bool
    var note: String?
    var tags: [String]
    var nested: Nested?
    var extra: [String: JSONValue]

    struct Nested: Codable, Equatable {
        var id: Int64
        var states: [AppState]
    }
}

@Suite struct JSONValueCodingTests {
    private let decoder = JSONValueDecoder()

    private func tree(_ text: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }

    private func text(_ value: some Encodable, sorted: Bool = false, nulls: Bool = true) throws -> String {
        String(
            decoding: try JSONTextEncoder(sortsKeys: sorted, writesAbsentOptionals: nulls).encode(value), as: UTF8.self)
    }

    @Test func decodesEveryKindOfMember() throws {
        let value = try decoder.decode(
            Sample.self,
            from: tree(
                #"{"name":"a","count":3,"ratio":0.5,"flag":true,"tags":["x","y"],"#
                    + #""nested":{"id":9007199254740992,"states":["active","suspended"]},"extra":{"k":[1,null]}}"#))
        #expect(
            value
                == Sample(
                    name: "a", count: 3, ratio: 0.5, flag: true, note: nil, tags: ["x", "y"],
                    nested: .init(id: 9_007_199_254_740_992, states: [.active, .suspended]), extra: ["k": [1, .null]]))
    }

    /// A failure and the coding path it must name, as keys.
    static let failures: [(String, String, [String])] = [
        ("missing member", #"{"count":1,"ratio":1,"flag":true,"tags":[],"extra":{}}"#, ["name"]),
        (
            "null for a required member", #"{"name":null,"count":1,"ratio":1,"flag":true,"tags":[],"extra":{}}"#,
            ["name"]
        ),
        ("fraction for an Int", #"{"name":"a","count":1.5,"ratio":1,"flag":true,"tags":[],"extra":{}}"#, ["count"]),
        ("beyond Int64", #"{"name":"a","count":1e30,"ratio":1,"flag":true,"tags":[],"extra":{}}"#, ["count"]),
        ("string for a Bool", #"{"name":"a","count":1,"ratio":1,"flag":"yes","tags":[],"extra":{}}"#, ["flag"]),
        (
            "number in a string array", #"{"name":"a","count":1,"ratio":1,"flag":true,"tags":[7],"extra":{}}"#,
            ["tags", "0"]
        ),
        (
            "unknown word",
            #"{"name":"a","count":1,"ratio":1,"flag":true,"tags":[],"extra":{},"#
                + #""nested":{"id":1,"states":["bogus"]}}"#, ["nested", "states", "0"]
        ),
        ("object expected", #"[1]"#, []),
    ]

    @Test(arguments: failures) func failuresNameTheMemberAtFault(_ label: String, _ input: String, _ path: [String])
        throws
    {
        do {
            _ = try decoder.decode(Sample.self, from: tree(input))
            Issue.record("\(label) decoded")
        } catch let error as DecodingError {
            let found: [any CodingKey]
            switch error {
            case .keyNotFound(let key, let context): found = context.codingPath + [key]
            case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
                found = context.codingPath
            @unknown default: found = []
            }
            #expect(found.map(\.stringValue) == path, "\(label)")
        }
    }

    @Test func freeFormValuesNestedTooDeepAreRefusedWhereTheyStand() throws {
        var deep: JSONValue = 1
        for _ in 0..<JSONValue.maximumDepth { deep = [deep] }
        #expect(throws: DecodingError.self) { try decoder.decode([String: JSONValue].self, from: ["payload": deep]) }
        var within: JSONValue = 1
        for _ in 0..<(JSONValue.maximumDepth - 1) { within = [within] }
        #expect(try decoder.decode([String: JSONValue].self, from: ["payload": within]) == ["payload": within])
    }

    @Test func writesEveryMemberInOrderWithNullsOrLeavesThemOut() throws {
        let value = Sample(
            name: "a", count: 3, ratio: 0.25, flag: false, note: nil, tags: [], nested: nil, extra: ["b": 2, "a": true])
        #expect(
            try text(value)
                == #"{"name":"a","count":3,"ratio":0.25,"flag":false,"note":null,"tags":[],"nested":null,"#
                + #""extra":{"a":true,"b":2}}"#)
        #expect(
            try text(value, nulls: false)
                == #"{"name":"a","count":3,"ratio":0.25,"flag":false,"tags":[],"extra":{"a":true,"b":2}}"#)
        #expect(
            try text(value, sorted: true)
                == #"{"count":3,"extra":{"a":true,"b":2},"flag":false,"name":"a","nested":null,"note":null,"#
                + #""ratio":0.25,"tags":[]}"#)
    }

    /// Numbers and strings as JSON text, worked out by hand.
    static let scalars: [(JSONValue, String)] = [
        (0, "0"), (-7, "-7"), (9_007_199_254_740_992, "9007199254740992"), (1.5, "1.5"), (1e300, "1e+300"),
        (0.1, "0.1"), ("plain", #""plain""#), ("a\"b\\c", #""a\"b\\c""#),
        ("tab\tline\nreturn\r", #""tab\tline\nreturn\r""#),
        ("\u{1}\u{1F}", #""\u0001\u001f""#), ("/path/é", #""/path/é""#), (.null, "null"), (true, "true"),
    ]

    @Test(arguments: scalars) func writesScalars(_ value: JSONValue, _ expected: String) throws {
        #expect(String(decoding: try value.jsonText(), as: UTF8.self) == expected)
        // What is written reads back as the same value.
        #expect(try tree(expected) == value)
    }

    @Test func refusesNumbersJSONCannotHold() {
        #expect(throws: EncodingError.self) { try JSONValue.number(.nan).jsonText() }
        #expect(throws: EncodingError.self) { try text(["x": Double.infinity]) }
    }
}
