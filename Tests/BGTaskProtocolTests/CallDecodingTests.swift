// Tests of call decoding on the server side: well-formed calls, hostile messages, and wrongly typed parameters.
import BGTaskIDL
import BGTaskJSON
import BGTaskProtocol
import Foundation
import Testing

private let codec = VarlinkCodec()

/// Decodes a call's header, returning the protocol error instead of throwing it.
private func headerResult(_ bytes: Data) -> Result<VarlinkCallHeader, VarlinkProtocolError> {
    Result { () throws(VarlinkProtocolError) in try codec.decodeCallHeader(bytes) }
}

struct CallDecodingTests {
    // MARK: Well-formed calls

    @Test(arguments: LifecycleMethod.allCases)
    func everyMethodRoundTrips(_ method: LifecycleMethod) throws {
        for sample in Samples.parameters(for: method) {
            try roundTrip(sample, method: method)
        }
    }

    private func roundTrip<P: VarlinkMethodCall & Hashable>(_ sample: P, method: LifecycleMethod) throws {
        #expect(P.methodName == method.qualifiedName)
        #expect(type(of: sample) == method.parametersType)
        let framed = try codec.encodeCall(sample, more: method.requiresMore)
        let header = try codec.decodeCallHeader(unframed(framed))
        #expect(LifecycleMethod(header.method) == method)
        #expect(header.method.qualified == method.qualifiedName)
        #expect(header.more == method.requiresMore)
        #expect(!header.oneway && !header.upgrade)
        #expect(try codec.decodeParameters(P.self, from: unframed(framed)) == sample)
    }

    @Test func flagsAreRead() throws {
        let call = #"{"method":"io.bgtask.Lifecycle.Watch","more":true,"oneway":false,"upgrade":true}"#
        let header = try codec.decodeCallHeader(message(call))
        #expect(
            header
                == VarlinkCallHeader(
                    method: try #require(VarlinkMethodName(qualified: "io.bgtask.Lifecycle.Watch")), more: true,
                    oneway: false, upgrade: true))
        let oneway = try codec.decodeCallHeader(message(#"{"method":"a.b.C","oneway":true,"more":null}"#))
        #expect(oneway.oneway && !oneway.more)
    }

    @Test func missingOrNullParametersDecodeAsEmpty() throws {
        // Python's varlink client leaves `parameters` out of calls without arguments.
        for call in [
            #"{"method":"io.bgtask.Lifecycle.History"}"#,
            #"{"method":"io.bgtask.Lifecycle.History","parameters":null}"#,
        ] {
            _ = try codec.decodeCallHeader(message(call))
            #expect(try codec.decodeParameters(HistoryParameters.self, from: message(call)) == HistoryParameters())
        }
        let missing = #"{"method":"io.bgtask.Lifecycle.GetApp"}"#
        #expect(throws: VarlinkError.invalidParameter(parameter: "app")) {
            try codec.decodeParameters(GetAppParameters.self, from: message(missing))
        }
    }

    @Test func methodLookup() throws {
        let lifecycle = try #require(VarlinkMethodName(qualified: "io.bgtask.Lifecycle.Register"))
        #expect(lifecycle.interface == "io.bgtask.Lifecycle" && lifecycle.member == "Register")
        #expect(LifecycleMethod(lifecycle) == .register)
        #expect(VarlinkServiceMethod(lifecycle) == nil)
        let service = try #require(VarlinkMethodName(qualified: "org.varlink.service.GetInfo"))
        #expect(VarlinkServiceMethod(service) == .getInfo)
        #expect(LifecycleMethod(service) == nil)
        let unknown = try #require(VarlinkMethodName(qualified: "io.bgtask.Lifecycle.Nope"))
        #expect(LifecycleMethod(unknown) == nil)
        #expect(LifecycleMethod.register.requiresMore && LifecycleMethod.watch.requiresMore)
        #expect(LifecycleMethod.allCases.filter(\.requiresMore).count == 2)
    }

    // MARK: Hostile messages

    struct HostileRow: CustomTestStringConvertible, Sendable {
        var name: String
        var bytes: [UInt8]
        var expected: VarlinkProtocolError
        var testDescription: String { name }

        init(_ name: String, _ text: String, _ expected: VarlinkProtocolError) {
            self.init(name, Array(text.utf8), expected)
        }

        init(_ name: String, _ bytes: [UInt8], _ expected: VarlinkProtocolError) {
            self.name = name
            self.bytes = bytes
            self.expected = expected
        }
    }

    /// A call whose method string holds `bytes` in the middle of an otherwise valid name.
    private static func methodWith(_ bytes: [UInt8]) -> [UInt8] {
        Array(#"{"method":"io.bgtask.Lifecycle.Li"#.utf8) + bytes + Array(#"stApps"}"#.utf8)
    }

    static let hostileRows: [HostileRow] = [
        HostileRow("empty message", "", .invalidJSON),
        HostileRow("whitespace only", " \n\t ", .invalidJSON),
        HostileRow("unterminated object", #"{"method":"io.bgtask.Lifecycle.ListApps""#, .invalidJSON),
        HostileRow("unterminated string", #"{"method":"io.bgtask.Lif"#, .invalidJSON),
        HostileRow("trailing garbage", #"{"method":"io.bgtask.Lifecycle.ListApps"} x"#, .invalidJSON),
        HostileRow("single quotes", #"{'method':'io.bgtask.Lifecycle.ListApps'}"#, .invalidJSON),
        HostileRow("bare word", "method", .invalidJSON),
        HostileRow(
            "lone surrogate escape in the method", #"{"method":"io.bgtask.Lifecycle.List\ud800Apps"}"#,
            .invalidJSON),
        HostileRow(
            "invalid UTF-8 in a field nobody reads",
            Array(#"{"method":"a.b.C","parameters":{"zzz":""#.utf8) + [0xC3, 0x28] + Array(#""}}"#.utf8),
            .invalidUTF8),
        HostileRow("60000 open brackets", String(repeating: "[", count: 60000), .invalidJSON),
        HostileRow(
            "30000 nested arrays, balanced",
            String(repeating: "[", count: 30000) + String(repeating: "]", count: 30000), .invalidJSON),
        HostileRow(
            "30000 nested objects in parameters",
            #"{"method":"a.b.C","parameters":"# + String(repeating: #"{"a":"#, count: 30000) + "1"
                + String(repeating: "}", count: 30001), .invalidJSON),
        HostileRow("invalid UTF-8: bad continuation", methodWith([0xC3, 0x28]), .invalidUTF8),
        HostileRow("invalid UTF-8: lone continuation", methodWith([0xA0, 0xA1]), .invalidUTF8),
        HostileRow("invalid UTF-8: truncated 3-byte", methodWith([0xE2, 0x82]), .invalidUTF8),
        HostileRow("invalid UTF-8: bad 4-byte", methodWith([0xF0, 0x28, 0x8C, 0xBC]), .invalidUTF8),
        HostileRow("invalid UTF-8: overlong slash", methodWith([0xC0, 0xAF]), .invalidUTF8),
        HostileRow("invalid UTF-8: encoded surrogate", methodWith([0xED, 0xA0, 0x80]), .invalidUTF8),
        HostileRow("invalid UTF-8: beyond U+10FFFF", methodWith([0xF4, 0x90, 0x80, 0x80]), .invalidUTF8),
        HostileRow("invalid UTF-8: 0xFF", methodWith([0xFF]), .invalidUTF8),
        HostileRow("invalid UTF-8 outside strings", [UInt8(ascii: "{"), 0xFE, UInt8(ascii: "}")], .invalidUTF8),
        HostileRow("invalid UTF-8 at the very end", Array(#"{"method":"a.b.C"}"#.utf8) + [0xE2], .invalidUTF8),
        HostileRow("array", "[]", .notAnObject),
        HostileRow("number", "1", .notAnObject),
        HostileRow("string", #""io.bgtask.Lifecycle.ListApps""#, .notAnObject),
        HostileRow("null", "null", .notAnObject),
        HostileRow("empty object", "{}", .missingMethod),
        HostileRow("parameters but no method", #"{"parameters":{"app":"x"}}"#, .missingMethod),
        HostileRow("method misspelt", #"{"Method":"io.bgtask.Lifecycle.ListApps"}"#, .missingMethod),
        HostileRow("method is a number", #"{"method":1}"#, .methodNotString),
        HostileRow("method is null", #"{"method":null}"#, .methodNotString),
        HostileRow("method is an array", #"{"method":["io.bgtask.Lifecycle.ListApps"]}"#, .methodNotString),
        HostileRow("method is an object", #"{"method":{}}"#, .methodNotString),
        HostileRow("method is a bool", #"{"method":true}"#, .methodNotString),
        HostileRow("method without interface", #"{"method":"ListApps"}"#, .invalidMethodName("ListApps")),
        HostileRow(
            "method with a one-label interface", #"{"method":"io.ListApps"}"#,
            .invalidMethodName("io.ListApps")),
        HostileRow("empty method", #"{"method":""}"#, .invalidMethodName("")),
        HostileRow(
            "method with empty member", #"{"method":"io.bgtask.Lifecycle."}"#,
            .invalidMethodName("io.bgtask.Lifecycle.")),
        HostileRow(
            "lowercase member", #"{"method":"io.bgtask.Lifecycle.listApps"}"#,
            .invalidMethodName("io.bgtask.Lifecycle.listApps")),
        HostileRow(
            "leading dot", #"{"method":".io.bgtask.Lifecycle.ListApps"}"#,
            .invalidMethodName(".io.bgtask.Lifecycle.ListApps")),
        HostileRow("empty label", #"{"method":"io..bgtask.ListApps"}"#, .invalidMethodName("io..bgtask.ListApps")),
        HostileRow(
            "label ending in dash", #"{"method":"io.bgtask-.ListApps"}"#,
            .invalidMethodName("io.bgtask-.ListApps")),
        HostileRow(
            "first label starting with a digit", #"{"method":"1io.bgtask.ListApps"}"#,
            .invalidMethodName("1io.bgtask.ListApps")),
        HostileRow(
            "space in the interface", #"{"method":"io.bg task.ListApps"}"#,
            .invalidMethodName("io.bg task.ListApps")),
        HostileRow(
            "dash in the member", #"{"method":"io.bgtask.Lifecycle.List-Apps"}"#,
            .invalidMethodName("io.bgtask.Lifecycle.List-Apps")),
        HostileRow(
            "NUL escape in the method", #"{"method":"io.bgtask.Lifecycle.List\u0000Apps"}"#,
            .invalidMethodName("io.bgtask.Lifecycle.List\u{0}Apps")),
        HostileRow("more is a string", #"{"method":"a.b.C","more":"yes"}"#, .invalidField("more")),
        HostileRow("oneway is a number", #"{"method":"a.b.C","oneway":1}"#, .invalidField("oneway")),
        HostileRow("upgrade is an object", #"{"method":"a.b.C","upgrade":{}}"#, .invalidField("upgrade")),
        HostileRow("parameters is an array", #"{"method":"a.b.C","parameters":[]}"#, .invalidField("parameters")),
        HostileRow("parameters is a string", #"{"method":"a.b.C","parameters":"x"}"#, .invalidField("parameters")),
        HostileRow("parameters is a number", #"{"method":"a.b.C","parameters":0}"#, .invalidField("parameters")),
    ]

    @Test(arguments: hostileRows)
    func hostileMessage(_ row: HostileRow) {
        #expect(headerResult(Data(row.bytes)) == .failure(row.expected))
    }

    @Test func randomBytesAreRefusedWithoutCrashing() {
        var generator = SplitMix64(state: 0x6267_7461_736B)
        for round in 0..<2000 {
            let length = Int.random(in: 0...256, using: &generator)
            var bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            // Every other round starts like a call, so the parser gets past the first byte.
            if round % 2 == 1 { bytes = Array(#"{"method":"#.utf8) + bytes }
            guard case .failure = headerResult(Data(bytes)) else {
                Issue.record("random bytes accepted as a call: \(bytes)")
                continue
            }
        }
    }

    @Test func randomMutationsOfAValidCallNeverCrash() throws {
        // Flip bytes of a real call: whatever comes out must be a typed result, never a crash or a hang.
        let post = PostParameters(name: "sync", payload: ["list": [1, "two", .null]], behavior: .hold, app: "a.b")
        let call = unframed(try codec.encodeCall(post))
        var generator = SplitMix64(state: 42)
        for _ in 0..<2000 {
            var bytes = Array(call)
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            if case .success = headerResult(Data(bytes)) {
                // A mutation that kept the call well formed must still decode to a typed result.
                _ = Result { () throws(VarlinkError) in
                    try codec.decodeParameters(PostParameters.self, from: Data(bytes))
                }
            }
        }
    }

    // MARK: Nesting within parameters

    /// A Post call whose payload nests `depth` arrays inside the member `deep`.
    private func deepPost(depth: Int) -> Data {
        message(
            #"{"method":"io.bgtask.Lifecycle.Post","parameters":{"name":"n","payload":{"deep":"#
                + String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth) + "}}}"
        )
    }

    @Test func payloadNestingWithinTheLimitIsKept() throws {
        // The payload sits 3 levels down (parameters, payload, deep); stay just inside JSONValue.maximumDepth.
        let depth = JSONValue.maximumDepth - 4
        let call = deepPost(depth: depth)
        _ = try codec.decodeCallHeader(call)
        let parameters = try codec.decodeParameters(PostParameters.self, from: call)
        var value = try #require(parameters.payload?["deep"])
        var levels = 0
        while case .array(let elements) = value, elements.count == 1 {
            value = elements[0]
            levels += 1
        }
        #expect(levels == depth)
        #expect(value == 1)
    }

    @Test func payloadNestingBeyondTheLimitIsAnInvalidParameter() throws {
        // Deeper than JSONValue accepts but within what the JSON parser accepts: the header is fine, the payload
        // is refused by name instead of recursing further.
        let call = deepPost(depth: JSONValue.maximumDepth + 100)
        _ = try codec.decodeCallHeader(call)
        #expect(throws: VarlinkError.invalidParameter(parameter: "payload")) {
            try codec.decodeParameters(PostParameters.self, from: call)
        }
    }

    // MARK: Wrongly typed, missing and unknown parameters

    /// JSON values that do not fit `type` in the IDL's terms (plus `null` for non-optional types).
    private static func wrongValues(for type: VarlinkType) -> [JSONValue] {
        let candidates: [JSONValue] = [
            true, 1, 1.5, 1e30, -1e300, "text", "1", [], [1], ["text"], [:], ["k": 1], .array([[:]]),
        ]
        var wrong = candidates.filter { mismatch($0, type, in: lifecycleDefinition) != nil }
        var base = type
        if case .optional(let wrapped) = type { base = wrapped } else { wrong.append(.null) }
        // Integral but beyond Int: valid for the IDL's `int`, refused by the Swift type.
        if base == .int { wrong += [1e30, -1e19] }
        return wrong
    }

    /// Values the IDL allows as `string` but the Swift types restrict to a vocabulary.
    private static let vocabularyParameters: Set<String> = ["state", "behavior"]

    @Test(arguments: LifecycleMethod.allCases)
    func wrongMissingAndUnknownParameters(_ method: LifecycleMethod) throws {
        let definition = try #require(lifecycleDefinition.method(named: method.rawValue))
        for sample in Samples.parameters(for: method) {
            try checkParameters(sample, definition)
        }
    }

    private func checkParameters<P: VarlinkMethodCall & Hashable>(
        _ sample: P, _ definition: VarlinkMethodDefinition
    ) throws {
        let valid = try #require(jsonValue(ofFramed: try codec.encodeCall(sample)).objectValue)
        let parameters = valid["parameters"]?.objectValue ?? [:]
        func call(_ parameters: [String: JSONValue]) -> Data {
            message(jsonText(.object(["method": .string(P.methodName), "parameters": .object(parameters)])))
        }
        for field in definition.parameters {
            var wrong = CallDecodingTests.wrongValues(for: field.type)
            if CallDecodingTests.vocabularyParameters.contains(field.name) { wrong.append("bogus") }
            for value in wrong {
                var modified = parameters
                modified[field.name] = value
                let bytes = call(modified)
                #expect(throws: Never.self, "\(field.name) = \(value) is still a well-formed call") {
                    try codec.decodeCallHeader(bytes)
                }
                #expect(throws: VarlinkError.invalidParameter(parameter: field.name), "\(field.name) = \(value)") {
                    try codec.decodeParameters(P.self, from: bytes)
                }
            }
            var without = parameters
            without[field.name] = nil
            if case .optional = field.type {
                // An optional parameter may be absent or null.
                #expect(throws: Never.self) { try codec.decodeParameters(P.self, from: call(without)) }
                without[field.name] = .null
                #expect(throws: Never.self) { try codec.decodeParameters(P.self, from: call(without)) }
            } else {
                #expect(throws: VarlinkError.invalidParameter(parameter: field.name), "\(field.name) missing") {
                    try codec.decodeParameters(P.self, from: call(without))
                }
            }
        }
        var extended = parameters
        extended["unknownParameter"] = ["from": "a newer client"]
        extended["_"] = .null
        #expect(try codec.decodeParameters(P.self, from: call(extended)) == sample)
    }

    @Test func integralFloatIsAcceptedForAnInt() throws {
        // Python's varlink client sends whatever number it was given; 7.0 is the int 7.
        let call = message(#"{"method":"io.bgtask.Lifecycle.EndBackgroundTask","parameters":{"app":"a","taskId":7.0}}"#)
        #expect(try codec.decodeParameters(EndBackgroundTaskParameters.self, from: call).taskId == 7)
    }
}

struct DirectReplyTests {
    /// The reply as `encodeReply` writes it, and as its `Encodable` form makes it, both parsed.
    private func forms<R: Encodable>(_ reply: R) throws -> (written: JSONValue, encoded: JSONValue) {
        var written = try codec.encodeReply(reply)
        #expect(written.last == 0)
        written.removeLast()
        let encoded = try JSONTextEncoder().encode(reply)
        return (try JSONParser.parse(written), .object(["parameters": try JSONParser.parse(encoded)]))
    }

    @Test("the lease calls' replies, written by hand, are the objects their Encodable forms make")
    func leaseReplies() throws {
        for taskId in [0, 1, 42, 1 << 40, Int.max, -1, Int.min] {
            let (written, encoded) = try forms(BeginBackgroundTaskReply(taskId: taskId))
            #expect(written == encoded, "taskId \(taskId)")
        }
        let (written, encoded) = try forms(EmptyReply())
        #expect(written == encoded)
    }
}

struct DirectParametersTests {
    /// Parameters of the lease calls: valid ones, and each way one can be wrong.
    static let rows: [[String: JSONValue]] = [
        ["app": "mail"], ["app": "mail", "name": "upload"], ["app": "mail", "name": .null],
        ["app": "mail", "taskId": 7], ["app": "mail", "taskId": 0], ["app": "mail", "taskId": -3],
        ["app": "mail", "taskId": 7, "name": "x", "unknown": true], [:], ["name": "upload"], ["app": .null],
        ["app": 5], ["app": "mail", "name": 5], ["app": "mail", "name": .array([])], ["app": "mail", "taskId": 7.5],
        ["app": "mail", "taskId": "7"], ["app": "mail", "taskId": .number(1e300)], ["app": "mail", "taskId": .null],
        ["app": .object([:]), "taskId": "x"], ["app": "é😀\u{0}", "taskId": .number(9_007_199_254_740_992)],
    ]

    /// What the call's decoding gives: the value, or the parameter named invalid.
    private func result<P: Decodable>(_ type: P.Type, _ parameters: [String: JSONValue]) -> Result<P, VarlinkError> {
        Result { () throws(VarlinkError) in
            let method = VarlinkMethodName(qualified: "io.bgtask.Lifecycle.BeginBackgroundTask")!
            return try codec.decodeParameters(
                type, of: DecodedCall(header: VarlinkCallHeader(method: method), parameters: parameters))
        }
    }

    /// What the `Decodable` conformance gives, through the same decoder the codec otherwise uses.
    private func decodableResult<P: Decodable>(_ type: P.Type, _ parameters: [String: JSONValue])
        -> Result<P, NamedParameter>
    {
        do {
            return .success(try JSONValueDecoder().decode(type, from: .object(parameters)))
        } catch {
            let path: [any CodingKey] =
                switch error as? DecodingError {
                case .keyNotFound(let key, let context)?: context.codingPath + [key]
                case .typeMismatch(_, let context)?, .valueNotFound(_, let context)?, .dataCorrupted(let context)?:
                    context.codingPath
                default: []
                }
            return .failure(NamedParameter(name: path.first?.stringValue ?? "parameters"))
        }
    }

    private func check<P: Decodable & Equatable>(_ type: P.Type) {
        for row in Self.rows {
            switch (result(type, row), decodableResult(type, row)) {
            case (.success(let direct), .success(let decoded)):
                #expect(direct == decoded, "\(row)")
            case (.failure(let error), .failure(let parameter)):
                #expect(error == .invalidParameter(parameter: parameter.name), "\(row): \(error)")
            case (let direct, let decoded):
                Issue.record("\(type) from \(row): read straight \(direct), decoded \(decoded)")
            }
        }
    }

    @Test("the lease calls' parameters read straight from the tree are what their Decodable conformances read")
    func leaseParameters() {
        check(BeginBackgroundTaskParameters.self)
        check(EndBackgroundTaskParameters.self)
    }
}

/// The parameter a decoding error names.
private struct NamedParameter: Error {
    let name: String
}
