// Tests of the interface text: it is embedded verbatim, parses, declares what the Swift types implement, is fully
// documented, is accepted by Python's varlink package, and docs/PROTOCOL.md is generated from it.
import BGTaskIDL
import BGTaskJSON
import BGTaskProtocol
import Foundation
import Testing

struct IDLTests {
    // MARK: The embedded interfaces

    @Test(arguments: [LifecycleInterface.name, VarlinkServiceInterface.name])
    func embeddedTextEqualsTheFile(_ interface: String) throws {
        let embedded = try #require(GetInterfaceDescriptionReply.bgtaskd(interface: interface)?.description)
        let url = packageRoot.appendingPathComponent("Sources/BGTaskProtocol/\(interface).varlink")
        #expect(Data(embedded.utf8) == (try Data(contentsOf: url)))
    }

    @Test func lifecycleDeclaresEveryMethodAndErrorOfTheSwiftTypes() {
        #expect(lifecycleDefinition.name == LifecycleInterface.name)
        #expect(lifecycleDefinition.methods.map(\.name) == LifecycleMethod.allCases.map(\.rawValue))
        #expect(Set(lifecycleDefinition.errors.map(\.name)) == Set(LifecycleErrorName.allCases.map(\.rawValue)))
        #expect(
            Set(lifecycleDefinition.types.map(\.name)) == [
                "Task", "App", "Event", "HistoryEntry", "Request", "RefusedFile", "Configuration",
            ])
    }

    @Test func serviceDeclaresEveryMethodAndErrorOfTheSwiftTypes() {
        #expect(serviceDefinition.name == VarlinkServiceInterface.name)
        #expect(serviceDefinition.methods.map(\.name) == VarlinkServiceMethod.allCases.map(\.rawValue))
        #expect(Set(serviceDefinition.errors.map(\.name)) == Set(VarlinkServiceErrorName.allCases.map(\.rawValue)))
    }

    @Test func everyMemberAndFieldOfTheLifecycleInterfaceIsDocumented() {
        let definition = lifecycleDefinition
        #expect(!definition.documentation.isEmpty)
        var undocumented: [String] = []
        func check(_ fields: [VarlinkField], in owner: String) {
            for field in fields where field.documentation.isEmpty { undocumented.append("\(owner).\(field.name)") }
        }
        for type in definition.types {
            if type.documentation.isEmpty { undocumented.append(type.name) }
            if case .structure(let fields) = type.type { check(fields, in: type.name) }
        }
        for method in definition.methods {
            if method.documentation.isEmpty { undocumented.append(method.name) }
            check(method.parameters, in: method.name)
            check(method.reply, in: method.name + "->")
        }
        for error in definition.errors {
            if error.documentation.isEmpty { undocumented.append(error.name) }
            check(error.parameters, in: error.name)
        }
        #expect(undocumented == [])
    }

    /// The interface's original names and shapes, as IDL text, checked against the parsed file: clients written
    /// against them must keep working, so the `.varlink` file may add (comments, optional parameters, fields,
    /// methods) but never rename, reorder or retype what is here. In docs/PROTOCOL.md they open each list.
    @Test func originalShapesAreKept() throws {
        let original = """
            interface io.bgtask.Lifecycle
            type Task (id: int, name: string, ageSec: float)
            type App (name: string, state: string, pid: int, uid: int, managed: bool,
                      tasks: []Task, backgroundTimeRemaining: ?float, memoryBytes: ?int,
                      exitReason: ?string)
            type Event (id: int, kind: string, taskIds: ?[]int, name: ?string,
                        payload: ?object, count: ?int, likelyVictim: ?bool, rank: ?int)
            type HistoryEntry (time: float, app: string, kind: string, reason: ?string,
                               band: ?string, memoryBytes: ?int, latencyMs: ?float)
            method Register(name: string, exitsOnSuspend: ?bool, state: ?string)
                -> (app: ?App, event: ?Event)
            method BeginBackgroundTask(app: string, name: ?string) -> (taskId: int)
            method EndBackgroundTask(app: string, taskId: int) -> ()
            method BackgroundTimeRemaining(app: string) -> (seconds: ?float)
            method Acknowledge(app: string, eventId: int) -> ()
            method ListApps() -> (apps: []App)
            method GetApp(app: string) -> (app: App)
            method SetState(app: string, state: string) -> (app: App)
            method Launch(name: string, argv: []string, exitsOnSuspend: ?bool) -> (app: App)
            method Terminate(app: string) -> ()
            method Post(name: string, payload: ?object, behavior: ?string, app: ?string)
                -> (delivered: int, queued: int)
            method History(limit: ?int) -> (entries: []HistoryEntry)
            method Watch() -> (entry: HistoryEntry)
            method GetStatus() -> (version: string, uptimeSec: float, backends: object,
                                   apps: int, suspended: int, tasks: int, memory: object)
            error NoSuchApp (app: string)
            error AppExists (app: string)
            error NoSuchTask (app: string, taskId: int)
            error BackgroundTimeExhausted (app: string)
            error PermissionDenied ()
            error InvalidState (app: string, state: string)
            error LimitExceeded (limit: string, max: int)
            """
        let expected = try VarlinkInterfaceDefinition(parsing: original)
        let actual = lifecycleDefinition
        func shape(_ fields: [VarlinkField]) -> [String] { fields.map { "\($0.name): \($0.type)" } }
        for type in expected.types {
            let found = try #require(actual.type(named: type.name))
            guard case .structure(let expectedFields) = type.type, case .structure(let actualFields) = found.type else {
                Issue.record("\(type.name) is not a struct")
                continue
            }
            // The original fields, in their original order, come first; additions follow.
            #expect(Array(shape(actualFields).prefix(expectedFields.count)) == shape(expectedFields), "\(type.name)")
        }
        for method in expected.methods {
            let found = try #require(actual.method(named: method.name))
            // The original parameters, in order, come first; an added parameter must be optional so that callers
            // written against the original shape keep working.
            let parameters = shape(found.parameters)
            #expect(Array(parameters.prefix(method.parameters.count)) == shape(method.parameters), "\(method.name)")
            for added in parameters.dropFirst(method.parameters.count) {
                #expect(added.contains(": ?"), "\(method.name) adds a required parameter \(added)")
            }
            // The original reply fields, in order, come first; a client written against them ignores additions.
            #expect(
                Array(shape(found.reply).prefix(method.reply.count)) == shape(method.reply), "\(method.name) reply")
        }
        for error in expected.errors {
            let found = try #require(actual.error(named: error.name))
            #expect(shape(found.parameters) == shape(error.parameters), "\(error.name)")
        }
    }

    // MARK: The parser

    @Test func documentationIsTheCommentBlockDirectlyAbove() throws {
        let text = """
            # Interface doc,
            # two lines.
            interface org.example.Docs

            # A detached comment: not documentation.

            # The type.
            #
            # Second paragraph.
            type Thing (
              # The field.
              field: int, # a trailing comment documents nothing
              other: ?[]Thing,

              # Separated from its field by nothing but this line.
              third: [string]string
            )

            method Do(
              choice: (a, b, c)
            ) -> () # trailing
            # Error doc.
            error Failed ()
            """
        let definition = try VarlinkInterfaceDefinition(parsing: text)
        #expect(definition.name == "org.example.Docs")
        #expect(definition.documentation == "Interface doc,\ntwo lines.")
        let thing = try #require(definition.type(named: "Thing"))
        #expect(thing.documentation == "The type.\n\nSecond paragraph.")
        guard case .structure(let fields) = thing.type else {
            Issue.record("Thing is not a struct")
            return
        }
        #expect(fields.map(\.name) == ["field", "other", "third"])
        #expect(
            fields.map(\.documentation) == ["The field.", "", "Separated from its field by nothing but this line."])
        #expect(fields.map(\.type) == [.int, .optional(.array(.named("Thing"))), .dictionary(.string)])
        let method = try #require(definition.method(named: "Do"))
        #expect(method.documentation == "")
        #expect(method.parameters.map(\.type) == [.enumeration(["a", "b", "c"])])
        #expect(method.reply == [])
        #expect(definition.error(named: "Failed")?.documentation == "Error doc.")
    }

    /// The comment's margin is one space scalar, even when a combining mark follows it (a space and a mark make
    /// one `Character`): found by the varlink-idl fuzz target, whose round trip wrote "#\u{301}x" back as
    /// "# \u{301}x" and read a different documentation.
    @Test(arguments: [
        ("# \u{301}x", "\u{301}x"),
        ("#\u{301}x", "\u{301}x"),
        ("#  x", " x"),
        ("#x", "x"),
    ])
    func documentationLosesOneSpaceScalar(comment: String, documentation: String) throws {
        let text = "interface org.example.X\n\(comment)\nmethod A() -> ()\n"
        #expect(try VarlinkInterfaceDefinition(parsing: text).method(named: "A")?.documentation == documentation)
    }

    struct BadIDLRow: CustomTestStringConvertible, Sendable {
        var name: String
        var text: String
        var testDescription: String { name }
    }

    static let badRows: [BadIDLRow] = [
        BadIDLRow(name: "empty", text: ""),
        BadIDLRow(name: "comment only", text: "# nothing\n"),
        BadIDLRow(name: "no members", text: "interface org.example.Empty\n"),
        BadIDLRow(name: "one-label interface name", text: "interface example\nmethod A() -> ()"),
        BadIDLRow(name: "interface name with a space", text: "interface org.ex ample\nmethod A() -> ()"),
        BadIDLRow(name: "lowercase member", text: "interface org.example.X\nmethod a() -> ()"),
        BadIDLRow(name: "unknown keyword", text: "interface org.example.X\nfunction A() -> ()"),
        BadIDLRow(name: "missing arrow", text: "interface org.example.X\nmethod A() ()"),
        BadIDLRow(name: "missing reply", text: "interface org.example.X\nmethod A() ->"),
        BadIDLRow(name: "unterminated struct", text: "interface org.example.X\nmethod A(a: int -> ()"),
        BadIDLRow(name: "missing colon", text: "interface org.example.X\nmethod A(a int) -> ()"),
        BadIDLRow(name: "double optional", text: "interface org.example.X\nmethod A(a: ??int) -> ()"),
        BadIDLRow(name: "undeclared type", text: "interface org.example.X\nmethod A(a: Missing) -> ()"),
        BadIDLRow(name: "duplicate member", text: "interface org.example.X\nmethod A() -> ()\nerror A ()"),
        BadIDLRow(name: "duplicate field", text: "interface org.example.X\nmethod A(a: int, a: int) -> ()"),
        BadIDLRow(name: "enum in a method", text: "interface org.example.X\nmethod A(a, b) -> ()"),
        BadIDLRow(name: "enum mixed with fields", text: "interface org.example.X\ntype T (a, b: int)"),
        BadIDLRow(name: "type alias of a scalar", text: "interface org.example.X\ntype T int"),
        BadIDLRow(name: "bad dictionary key", text: "interface org.example.X\ntype T (a: [int]string)"),
        BadIDLRow(name: "bad field name", text: "interface org.example.X\ntype T (a__b: int)"),
        BadIDLRow(name: "field name with a trailing underscore", text: "interface org.example.X\ntype T (a_: int)"),
        BadIDLRow(name: "stray character", text: "interface org.example.X\nmethod A() -> () ;"),
        BadIDLRow(name: "non-ASCII name", text: "interface org.example.X\nmethod Ä() -> ()"),
        BadIDLRow(name: "trailing comma", text: "interface org.example.X\ntype T (a: int,)"),
        BadIDLRow(
            name: "deeply nested optionals and arrays",
            text: "interface org.example.X\ntype T (a: " + String(repeating: "[]?", count: 20000) + "int)"),
        BadIDLRow(
            name: "deeply nested structs",
            text: "interface org.example.X\ntype T " + String(repeating: "(a: ", count: 20000) + "int"
                + String(repeating: ")", count: 20000)),
    ]

    @Test(arguments: badRows)
    func malformedInterfacesAreRefused(_ row: BadIDLRow) {
        #expect(throws: VarlinkIDLError.self) { try VarlinkInterfaceDefinition(parsing: row.text) }
    }

    @Test func errorsCarryTheirPosition() {
        // The second `int` on line 3 (column 20) is where a ':' was expected.
        do {
            _ = try VarlinkInterfaceDefinition(parsing: "interface org.example.X\n\nmethod A(b: int, a int) -> ()")
            Issue.record("parsed an invalid interface")
        } catch {
            #expect(error.line == 3 && error.column == 20, "\(error)")
        }
    }

    @Test func randomTextNeverCrashesTheParser() {
        var generator = SplitMix64(state: 7)
        let alphabet = Array("interface org.example.X\ntype method error ()[]?:,->#string int Thing\n".unicodeScalars)
        for _ in 0..<2000 {
            var text = "interface org.example.X\n"
            for _ in 0..<Int.random(in: 0...200, using: &generator) {
                text.unicodeScalars.append(alphabet[Int.random(in: 0..<alphabet.count, using: &generator)])
            }
            // Either outcome is fine; the parser must return rather than crash or recurse without bound.
            _ = try? VarlinkInterfaceDefinition(parsing: text)
        }
    }

    // MARK: Python's varlink package

    @Test(arguments: [LifecycleInterface.name, VarlinkServiceInterface.name])
    func pythonVarlinkAcceptsTheDescription(_ interface: String) throws {
        let description = try #require(GetInterfaceDescriptionReply.bgtaskd(interface: interface)?.description)
        let result = try runPython("import varlink,sys; varlink.Interface(sys.stdin.read())", input: description)
        #expect(result.status == 0, "python: \(result.standardError)")
    }

    @Test func pythonVarlinkSeesTheSameMembersAndFields() throws {
        // An independent parser: member names and kinds, and the field names of every method, as Python reads them.
        let script = """
            import json, sys, varlink
            interface = varlink.Interface(sys.stdin.read())
            members = {}
            for name, member in interface.members.items():
                kind = type(member).__name__
                fields = {}
                if kind == "_Method":
                    fields = {"in": list(member.in_type.fields), "out": list(member.out_type.fields)}
                elif kind == "_Error":
                    fields = {"in": list(member.type.fields)}
                else:
                    fields = {"in": list(member.type.fields)}
                members[name] = {"kind": kind, **fields}
            print(json.dumps({"name": interface.name, "members": members}))
            """
        let result = try runPython(script, input: LifecycleInterface.description)
        #expect(result.status == 0, "python: \(result.standardError)")
        let python = try JSONDecoder().decode(JSONValue.self, from: Data(result.standardOutput.utf8))
        var mine: [String: JSONValue] = [:]
        for type in lifecycleDefinition.types {
            guard case .structure(let fields) = type.type else { continue }
            mine[type.name] = ["kind": "_Alias", "in": .array(fields.map { .string($0.name) })]
        }
        for method in lifecycleDefinition.methods {
            mine[method.name] = [
                "kind": "_Method", "in": .array(method.parameters.map { .string($0.name) }),
                "out": .array(method.reply.map { .string($0.name) }),
            ]
        }
        for error in lifecycleDefinition.errors {
            mine[error.name] = ["kind": "_Error", "in": .array(error.parameters.map { .string($0.name) })]
        }
        #expect(python == ["name": .string(lifecycleDefinition.name), "members": .object(mine)])
    }

    @Test func pythonClientCallsDecode() throws {
        // Calls built the way Python's varlink client builds them (filter_params, then the envelope it sends).
        let script = """
            import json, sys, varlink
            interface = varlink.Interface(sys.stdin.read())
            calls = [
                ("Register", {"name": "org.example.py", "state": "background"}, True),
                ("BeginBackgroundTask", {"app": "org.example.py", "name": "upload"}, False),
                ("EndBackgroundTask", {"app": "org.example.py", "taskId": 7}, False),
                ("ListApps", {}, False),
                ("Post", {"name": "sync", "payload": {"a": [1, 2.5, None]}, "behavior": "hold"}, False),
                ("History", {"limit": 3}, False),
                ("Watch", {}, True),
            ]
            for name, kwargs, more in calls:
                method = interface.get_method(name)
                parameters = interface.filter_params("client.call", method.in_type, False, (), kwargs)
                out = {"method": interface.name + "." + name}
                if more:
                    out["more"] = True
                    out["parameters"] = parameters
                elif parameters:
                    out["parameters"] = parameters
                print(json.dumps(out))
            """
        let result = try runPython(script, input: LifecycleInterface.description)
        #expect(result.status == 0, "python: \(result.standardError)")
        let codec = VarlinkCodec()
        let lines = result.standardOutput.split(separator: "\n").map { Data($0.utf8) }
        try #require(lines.count == 7)
        let headers = try lines.map { line throws(VarlinkProtocolError) in try codec.decodeCallHeader(line) }
        #expect(
            headers.map { LifecycleMethod($0.method) } == [
                .register, .beginBackgroundTask, .endBackgroundTask, .listApps, .post, .history, .watch,
            ])
        #expect(headers.map(\.more) == [true, false, false, false, false, false, true])
        #expect(
            try codec.decodeParameters(RegisterParameters.self, from: lines[0])
                == RegisterParameters(name: "org.example.py", state: .background))
        #expect(
            try codec.decodeParameters(BeginBackgroundTaskParameters.self, from: lines[1])
                == BeginBackgroundTaskParameters(app: "org.example.py", name: "upload"))
        #expect(
            try codec.decodeParameters(EndBackgroundTaskParameters.self, from: lines[2])
                == EndBackgroundTaskParameters(app: "org.example.py", taskId: 7))
        #expect(try codec.decodeParameters(ListAppsParameters.self, from: lines[3]) == ListAppsParameters())
        #expect(
            try codec.decodeParameters(PostParameters.self, from: lines[4])
                == PostParameters(name: "sync", payload: ["a": [1, 2.5, .null]], behavior: .hold))
        #expect(try codec.decodeParameters(HistoryParameters.self, from: lines[5]) == HistoryParameters(limit: 3))
        #expect(try codec.decodeParameters(WatchParameters.self, from: lines[6]) == WatchParameters())
    }

    // MARK: docs/PROTOCOL.md

    @Test func protocolDocumentationIsInSync() throws {
        let generated = try ProtocolDocumentation.generate()
        let url = packageRoot.appendingPathComponent("docs/PROTOCOL.md")
        if ProcessInfo.processInfo.environment["BGTASK_REGENERATE_DOCS"] == "1" {
            try Data(generated.utf8).write(to: url, options: .atomic)
        }
        let committed = String(decoding: try Data(contentsOf: url), as: UTF8.self)
        #expect(committed == generated, "docs/PROTOCOL.md is stale: run BGTASK_REGENERATE_DOCS=1 swift test")
        // The reference covers every member of both interfaces.
        for name in lifecycleDefinition.methods.map(\.name) + lifecycleDefinition.types.map(\.name)
            + lifecycleDefinition.errors.map(\.name) + serviceDefinition.methods.map(\.name)
        {
            #expect(generated.contains("#### \(name)\n"), "\(name) has a section")
        }
    }
}
