// Tests of the reply side: every reply and wire type round-trips, matches the IDL's shape, and spells out nulls.
import BGTaskIDL
import BGTaskJSON
import BGTaskProtocol
import Foundation
import Testing

private let codec = VarlinkCodec()

struct WireTypeTests {
    @Test(arguments: LifecycleMethod.allCases)
    func repliesRoundTripAndMatchTheInterface(_ method: LifecycleMethod) throws {
        let definition = try #require(lifecycleDefinition.method(named: method.rawValue))
        for reply in Samples.replies(for: method) {
            try check(reply, definition: definition, replyType: method.parametersType)
        }
    }

    private func check<R: Codable & Hashable & Sendable>(
        _ reply: R, definition: VarlinkMethodDefinition, replyType: any VarlinkMethodCall.Type
    ) throws {
        #expect(R.self == replyTypeOf(replyType), "sample reply type of \(definition.name)")
        for continues in [false, true] {
            let framed = try codec.encodeReply(reply, continues: continues)
            let envelope = try #require(jsonValue(ofFramed: framed).objectValue)
            #expect(Set(envelope.keys) == (continues ? ["parameters", "continues"] : ["parameters"]))
            if continues { #expect(envelope["continues"] == true) }
            let parameters = try #require(envelope["parameters"]?.objectValue)
            // Strict: every declared field present (nulls spelled out), none undeclared, types as declared.
            #expect(structMismatch(parameters, definition.reply, in: lifecycleDefinition) == nil)
            #expect(try codec.decodeReply(R.self, from: unframed(framed)) == .reply(reply, continues: continues))
            // Consumers may leave nulls out: decoding accepts absent optional fields.
            let withoutNulls = jsonText(.object(["parameters": .object(stripNulls(parameters))]))
            #expect(try codec.decodeReply(R.self, from: message(withoutNulls)) == .reply(reply, continues: false))
        }
    }

    private func replyTypeOf<P: VarlinkMethodCall>(_ type: P.Type) -> Any.Type { P.Reply.self }

    /// The object with every null member removed, recursively.
    private func stripNulls(_ members: [String: JSONValue]) -> [String: JSONValue] {
        members.compactMapValues { (value: JSONValue) -> JSONValue? in
            switch value {
            case .null: nil
            case .object(let inner): .object(stripNulls(inner))
            case .array(let elements):
                .array(elements.map { element in element.objectValue.map { .object(stripNulls($0)) } ?? element })
            default: value
            }
        }
    }

    @Test func nilFieldsAreEncodedAsExplicitNull() throws {
        let framed = try codec.encodeReply(GetAppReply(app: Samples.minimalApp))
        let app = try #require(jsonValue(ofFramed: framed)["parameters"]?["app"]?.objectValue)
        let fields = try #require(lifecycleDefinition.type(named: "App"))
        guard case .structure(let declared) = fields.type else {
            Issue.record("App is not a struct")
            return
        }
        for field in declared {
            #expect(app[field.name] != nil, "\(field.name) is present")
            if case .optional = field.type { #expect(app[field.name] == .null, "\(field.name) is null") }
        }
        let text = String(
            decoding: unframed(try codec.encodeReply(RegisterReply(app: Samples.minimalApp))), as: UTF8.self)
        #expect(text.contains(#""event":null"#))
        #expect(text.contains(#""memoryBytes":null"#))
        #expect(text.contains(#""exitReason":null"#))
    }

    @Test func wireTypesMatchTheirDeclaredTypes() throws {
        let rows: [(String, any Encodable)] = [
            ("Task", Samples.task), ("App", Samples.fullApp), ("App", Samples.minimalApp),
            ("Event", Samples.fullEvent), ("Event", Samples.minimalEvent),
            ("HistoryEntry", Samples.fullHistoryEntry), ("HistoryEntry", Samples.minimalHistoryEntry),
        ]
        for (name, value) in rows {
            let framed = try codec.encodeReply(value)
            let encoded = try #require(jsonValue(ofFramed: framed)["parameters"])
            #expect(mismatch(encoded, .named(name), in: lifecycleDefinition) == nil, "\(name)")
        }
    }

    @Test func wireTypesRoundTrip() throws {
        for app in [Samples.fullApp, Samples.minimalApp] {
            #expect(
                try codec.decodeReply(AppInfo.self, from: unframed(codec.encodeReply(app)))
                    == .reply(app, continues: false))
        }
        for event in [Samples.fullEvent, Samples.minimalEvent] {
            #expect(
                try codec.decodeReply(EventInfo.self, from: unframed(codec.encodeReply(event)))
                    == .reply(event, continues: false))
        }
        for entry in [Samples.fullHistoryEntry, Samples.minimalHistoryEntry] {
            #expect(
                try codec.decodeReply(HistoryEntry.self, from: unframed(codec.encodeReply(entry)))
                    == .reply(entry, continues: false))
        }
        #expect(
            try codec.decodeReply(TaskInfo.self, from: unframed(codec.encodeReply(Samples.task)))
                == .reply(Samples.task, continues: false))
    }

    /// Each Swift vocabulary enum against the IDL field whose comment lists the words.
    @Test func vocabulariesAreDocumentedInTheInterface() throws {
        let rows: [(type: String, field: String, words: [String])] = [
            ("App", "state", AppState.allCases.map(\.rawValue)),
            ("App", "exitReason", TerminationReason.allCases.map(\.rawValue)),
            ("Event", "kind", EventKind.allCases.map(\.rawValue)),
            ("HistoryEntry", "kind", AuditKind.allCases.map(\.rawValue)),
            ("HistoryEntry", "band", ReclamationBand.allCases.map(\.rawValue)),
            ("HistoryEntry", "taskEnd", TaskEndCause.allCases.map(\.rawValue)),
        ]
        for row in rows {
            let definition = try #require(lifecycleDefinition.type(named: row.type))
            guard case .structure(let fields) = definition.type,
                let field = fields.first(where: { $0.name == row.field })
            else {
                Issue.record("\(row.type).\(row.field) is not declared")
                continue
            }
            for word in row.words {
                #expect(field.documentation.contains(word), "\(row.type).\(row.field) documents \(word)")
            }
        }
        let post = try #require(lifecycleDefinition.method(named: "Post"))
        let behavior = try #require(post.parameters.first { $0.name == "behavior" })
        for word in DeliveryBehavior.allCases.map(\.rawValue) {
            #expect(behavior.documentation.contains(word), "Post.behavior documents \(word)")
        }
        #expect(behavior.documentation.contains("\(DeliveryBehavior.default.rawValue), the default"))
    }

    @Test func getInfoAndInterfaceDescriptionReplies() throws {
        let info = GetInfoReply.bgtaskd(version: "1.2.3")
        #expect(info.vendor == "bgtask project" && info.product == "bgtaskd" && info.version == "1.2.3")
        #expect(info.interfaces == [VarlinkServiceInterface.name, LifecycleInterface.name])
        let framed = try codec.encodeReply(info)
        let method = try #require(serviceDefinition.method(named: "GetInfo"))
        let parameters = try #require(jsonValue(ofFramed: framed)["parameters"]?.objectValue)
        #expect(structMismatch(parameters, method.reply, in: serviceDefinition) == nil)
        #expect(!String(decoding: framed, as: UTF8.self).contains(#"\/"#), "slashes are not escaped")
        #expect(
            GetInterfaceDescriptionReply.bgtaskd(interface: LifecycleInterface.name)?.description
                == LifecycleInterface.description)
        #expect(
            GetInterfaceDescriptionReply.bgtaskd(interface: VarlinkServiceInterface.name)?.description
                == VarlinkServiceInterface.description)
        #expect(GetInterfaceDescriptionReply.bgtaskd(interface: "org.example.Other") == nil)
    }

    @Test func callsCarryFlagsOnlyWhenSet() throws {
        let plain = try #require(jsonValue(ofFramed: codec.encodeCall(ListAppsParameters())).objectValue)
        #expect(Set(plain.keys) == ["method", "parameters"])
        #expect(plain["parameters"] == [:])
        let streaming = try #require(jsonValue(ofFramed: codec.encodeCall(WatchParameters(), more: true)).objectValue)
        #expect(streaming["more"] == true && streaming["oneway"] == nil)
        let oneway = try #require(
            jsonValue(
                ofFramed: codec.encodeCall(
                    method: "org.example.Thing.Do", parameters: EmptyReply(), oneway: true, upgrade: true)
            ).objectValue)
        #expect(oneway["oneway"] == true && oneway["upgrade"] == true && oneway["more"] == nil)
        #expect(oneway["method"] == "org.example.Thing.Do")
    }

    @Test func repliesWithoutParametersDecodeAsEmpty() throws {
        #expect(try codec.decodeReply(EmptyReply.self, from: message("{}")) == .reply(EmptyReply(), continues: false))
        #expect(
            try codec.decodeReply(BackgroundTimeRemainingReply.self, from: message(#"{"continues":true}"#))
                == .reply(BackgroundTimeRemainingReply(seconds: nil), continues: true))
    }

    @Test func malformedRepliesAreProtocolErrors() {
        let rows: [(String, VarlinkProtocolError)] = [
            ("", .invalidJSON),
            ("[]", .notAnObject),
            (#"{"parameters":{"taskId":"7"}}"#, .invalidReplyParameters(parameter: "taskId")),
            (#"{"parameters":{}}"#, .invalidReplyParameters(parameter: "taskId")),
            (#"{"parameters":[]}"#, .invalidReplyParameters(parameter: "parameters")),
            (#"{"continues":"yes","parameters":{"taskId":7}}"#, .invalidField("continues")),
            (#"{"error":5}"#, .invalidField("error")),
            (#"{"error":"a.b.C","parameters":[]}"#, .invalidField("parameters")),
        ]
        for (text, expected) in rows {
            #expect(throws: expected, "\(text)") {
                try codec.decodeReply(BeginBackgroundTaskReply.self, from: message(text))
            }
        }
        #expect(throws: VarlinkProtocolError.invalidUTF8) {
            try codec.decodeReply(EmptyReply.self, from: Data([0x7B, 0xFF, 0x7D]))
        }
    }

    @Test func unrepresentableNumbersAreEncodingErrors() {
        #expect(throws: VarlinkEncodingError.self) {
            try codec.encodeReply(BackgroundTimeRemainingReply(seconds: .infinity))
        }
        #expect(throws: VarlinkEncodingError.self) {
            try codec.encodeError(VarlinkError(name: "a.b.C", parameters: ["x": .number(.nan)]))
        }
    }

    @Test func jsonValueRoundTripsAndKeepsIntegersWhole() throws {
        let value: JSONValue = [
            "null": .null, "bool": false, "int": 42, "negative": -7, "big": 9_007_199_254_740_992, "float": 0.25,
            "string": "é \"quoted\" \\ / \u{1}", "array": [1, [2, [3]], [:]], "object": ["a": ["b": []]],
        ]
        let encoded = try JSONEncoder().encode(value)
        #expect(try JSONDecoder().decode(JSONValue.self, from: encoded) == value)
        let text = String(decoding: encoded, as: UTF8.self)
        #expect(text.contains(#""int":42"#) && text.contains(#""negative":-7"#) && text.contains(#""float":0.25"#))
        #expect(value["int"]?.intValue == 42 && value["float"]?.intValue == nil && value["float"]?.doubleValue == 0.25)
        #expect(value["string"]?.stringValue != nil && value["bool"]?.boolValue == false)
        #expect(value["array"]?.arrayValue?.count == 3 && value["object"]?.objectValue?.count == 1)
        #expect(value["missing"] == nil && JSONValue.string("x")["key"] == nil)
    }
}
