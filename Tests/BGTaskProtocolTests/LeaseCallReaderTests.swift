// The one-pass reader of lease calls, against a table of valid and invalid messages: which it reads itself, which
// it leaves to the tree parser, and that the codec's answer is the tree parser's either way.
import BGTaskJSON
import BGTaskProtocol
import Testing

/// The daemon's codec: lease calls through `LeaseCallReader`, the rest through the tree.
private let codec = VarlinkCodec()
/// Every call through the tree, as before the reader.
private let treeCodec = VarlinkCodec(readsLeaseCallsDirectly: false)

/// What a message decodes to, through `decodeCall` and then its method's parameter type.
enum LeaseOutcome: Hashable, Sendable, CustomStringConvertible {
    case begin(BeginBackgroundTaskParameters)
    case end(EndBackgroundTaskParameters)
    /// `decodeCall` refused it: the daemon answers `InvalidMessage`.
    case invalidMessage(VarlinkProtocolError)
    /// The parameters do not fit the method: `InvalidParameter` naming this one.
    case invalidParameter(String)
    /// Another method, not a lease call.
    case otherMethod(String)

    var description: String {
        switch self {
        case .begin(let parameters): "begin \(parameters)"
        case .end(let parameters): "end \(parameters)"
        case .invalidMessage(let error): "invalid message: \(error)"
        case .invalidParameter(let name): "invalid parameter \(name)"
        case .otherMethod(let name): "method \(name)"
        }
    }

    static func begin(_ app: String, name: String? = nil) -> LeaseOutcome {
        .begin(BeginBackgroundTaskParameters(app: app, name: name))
    }

    static func end(_ app: String, _ taskId: Int) -> LeaseOutcome {
        .end(EndBackgroundTaskParameters(app: app, taskId: taskId))
    }
}

/// One message of the table: whether the reader reads it (rather than the tree parser) and what it decodes to.
struct LeaseRow: CustomTestStringConvertible, Sendable {
    var name: String
    var bytes: [UInt8]
    var isReadDirectly: Bool
    var expected: LeaseOutcome

    var testDescription: String { name }

    init(_ name: String, _ text: String, direct: Bool, _ expected: LeaseOutcome) {
        self.init(name, Array(text.utf8), direct: direct, expected)
    }

    init(_ name: String, _ bytes: [UInt8], direct: Bool, _ expected: LeaseOutcome) {
        self.name = name
        self.bytes = bytes
        self.isReadDirectly = direct
        self.expected = expected
    }
}

private let begin = #""method":"io.bgtask.Lifecycle.BeginBackgroundTask""#
private let end = #""method":"io.bgtask.Lifecycle.EndBackgroundTask""#

/// `{"method": End, "parameters": {"app": "mail", "taskId": NUMBER}}`.
private func endCall(taskId number: String) -> String {
    #"{\#(end),"parameters":{"app":"mail","taskId":\#(number)}}"#
}

/// A Begin call whose unknown parameter `extra` is an array nested `depth` deep; the message is `depth + 2` deep.
private func nestedCall(depth: Int) -> String {
    #"{\#(begin),"parameters":{"app":"mail","extra":\#(String(repeating: "[", count: depth))\#(String(repeating: "]", count: depth))}}"#
}

private let leaseRows: [LeaseRow] = [
    // Read in the one pass.
    LeaseRow("begin", #"{\#(begin),"parameters":{"app":"mail"}}"#, direct: true, .begin("mail")),
    LeaseRow(
        "begin with a name", #"{\#(begin),"parameters":{"app":"mail","name":"upload"}}"#, direct: true,
        .begin("mail", name: "upload")),
    LeaseRow(
        "begin with a null name", #"{\#(begin),"parameters":{"name":null,"app":"mail"}}"#, direct: true, .begin("mail")),
    LeaseRow(
        "whitespace around every token",
        " {\t\(begin.replacingColon()) ,\r\n\"parameters\" : { \"app\" : \"mail\" } } \n",
        direct: true, .begin("mail")),
    LeaseRow("parameters before the method", #"{"parameters":{"app":"mail"},\#(begin)}"#, direct: true, .begin("mail")),
    LeaseRow(
        "flags true, false and null",
        #"{\#(begin),"more":false,"oneway":true,"upgrade":null,"parameters":{"app":"a"}}"#,
        direct: true, .begin("a")),
    LeaseRow("an empty app name", #"{\#(begin),"parameters":{"app":""}}"#, direct: true, .begin("")),
    LeaseRow("printable ASCII", #"{\#(begin),"parameters":{"app":" !#~/"}}"#, direct: true, .begin(" !#~/")),
    LeaseRow("end", endCall(taskId: "7"), direct: true, .end("mail", 7)),
    LeaseRow("taskId 0", endCall(taskId: "0"), direct: true, .end("mail", 0)),
    LeaseRow("taskId -0", endCall(taskId: "-0"), direct: true, .end("mail", 0)),
    LeaseRow("taskId negative", endCall(taskId: "-12"), direct: true, .end("mail", -12)),
    LeaseRow(
        "taskId of 15 digits", endCall(taskId: "999999999999999"), direct: true, .end("mail", 999_999_999_999_999)),
    LeaseRow(
        "taskId of 15 digits, negative", endCall(taskId: "-999999999999999"), direct: true,
        .end("mail", -999_999_999_999_999)),

    // Numbers past the reader's limit or not plain integers: the tree parser's.
    LeaseRow(
        "taskId of 16 digits", endCall(taskId: "1000000000000000"), direct: false, .end("mail", 1_000_000_000_000_000)),
    LeaseRow(
        "taskId 2^53 + 1 (read as a Double, as always)", endCall(taskId: "9007199254740993"), direct: false,
        .end("mail", 9_007_199_254_740_992)),
    LeaseRow("taskId 1e400", endCall(taskId: "1e400"), direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow("taskId 1e30", endCall(taskId: "1e30"), direct: false, .invalidParameter("taskId")),
    LeaseRow("taskId 7.0", endCall(taskId: "7.0"), direct: false, .end("mail", 7)),
    LeaseRow("taskId 7e0", endCall(taskId: "7e0"), direct: false, .end("mail", 7)),
    LeaseRow("taskId 7.5", endCall(taskId: "7.5"), direct: false, .invalidParameter("taskId")),
    LeaseRow("taskId with a leading zero", endCall(taskId: "07"), direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow("taskId with a plus", endCall(taskId: "+7"), direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow("taskId a lone minus", endCall(taskId: "-"), direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow("taskId as a string", endCall(taskId: #""7""#), direct: false, .invalidParameter("taskId")),
    LeaseRow("taskId null", endCall(taskId: "null"), direct: false, .invalidParameter("taskId")),

    // Escapes and characters beyond printable ASCII: the tree parser's.
    LeaseRow("an escaped letter", #"{\#(begin),"parameters":{"app":"ma\u0069l"}}"#, direct: false, .begin("mail")),
    LeaseRow("an escaped quote", #"{\#(begin),"parameters":{"app":"a\"b"}}"#, direct: false, .begin("a\"b")),
    LeaseRow("an escaped solidus", #"{\#(begin),"parameters":{"app":"a\/b"}}"#, direct: false, .begin("a/b")),
    LeaseRow(
        "an unknown escape", #"{\#(begin),"parameters":{"app":"a\qb"}}"#, direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow(
        "a surrogate pair", #"{\#(begin),"parameters":{"app":"\uD83D\uDE00"}}"#, direct: false, .begin("\u{1F600}")),
    LeaseRow(
        "a lone high surrogate", #"{\#(begin),"parameters":{"app":"\uD83D"}}"#, direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow(
        "a lone low surrogate", #"{\#(begin),"parameters":{"app":"\uDE00x"}}"#, direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow("UTF-8 in a name", #"{\#(begin),"parameters":{"app":"café"}}"#, direct: false, .begin("café")),
    LeaseRow(
        "bytes that are not UTF-8",
        Array(#"{\#(begin),"parameters":{"app":""#.utf8) + [0xC3, 0x28] + Array(#""}}"#.utf8), direct: false,
        .invalidMessage(.invalidUTF8)),
    LeaseRow(
        "a raw control character", "{\(begin),\"parameters\":{\"app\":\"a\u{1}b\"}}", direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow("a raw DEL", "{\(begin),\"parameters\":{\"app\":\"a\u{7F}b\"}}", direct: false, .begin("a\u{7F}b")),
    LeaseRow(
        "the method with an escape",
        #"{"method":"io.bgtask.Lifecycle.Begin\u0042ackgroundTask","parameters":{"app":"a"}}"#,
        direct: false, .begin("a")),

    // Duplicate keys: refused by the tree parser.
    LeaseRow(
        "app twice", #"{\#(begin),"parameters":{"app":"a","app":"b"}}"#, direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow(
        "method twice", #"{\#(begin),\#(begin),"parameters":{"app":"a"}}"#, direct: false, .invalidMessage(.invalidJSON)
    ),
    LeaseRow(
        "parameters twice", #"{\#(begin),"parameters":{"app":"a"},"parameters":{"app":"a"}}"#, direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow(
        "a flag twice", #"{\#(begin),"oneway":true,"oneway":true,"parameters":{"app":"a"}}"#, direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow(
        "taskId twice", #"{\#(end),"parameters":{"app":"a","taskId":1,"taskId":1}}"#, direct: false,
        .invalidMessage(.invalidJSON)),

    // Unknown fields: ignored by the tree decoder, left to it by the reader.
    LeaseRow("an unknown envelope member", #"{\#(begin),"x":1,"parameters":{"app":"a"}}"#, direct: false, .begin("a")),
    LeaseRow(
        "an unknown parameter", #"{\#(begin),"parameters":{"app":"a","extra":[1,{"b":null}]}}"#, direct: false,
        .begin("a")),
    LeaseRow("begin with a taskId", #"{\#(begin),"parameters":{"app":"a","taskId":3}}"#, direct: false, .begin("a")),
    LeaseRow(
        "end with a name", #"{\#(end),"parameters":{"app":"a","taskId":3,"name":"n"}}"#, direct: false, .end("a", 3)),

    // Nesting, at and past the tree parser's limit (the reader reads nothing nested).
    LeaseRow(
        "nested to the limit", nestedCall(depth: JSONParser.defaultMaximumDepth - 2), direct: false, .begin("mail")),
    LeaseRow(
        "nested past the limit", nestedCall(depth: JSONParser.defaultMaximumDepth - 1), direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow(
        "an object as the app", #"{\#(begin),"parameters":{"app":{"a":1}}}"#, direct: false, .invalidParameter("app")),

    // Missing or mistyped members.
    LeaseRow("no parameters", "{\(begin)}", direct: false, .invalidParameter("app")),
    LeaseRow("null parameters", #"{\#(begin),"parameters":null}"#, direct: false, .invalidParameter("app")),
    LeaseRow("empty parameters", #"{\#(begin),"parameters":{}}"#, direct: false, .invalidParameter("app")),
    LeaseRow(
        "parameters an array", #"{\#(begin),"parameters":[]}"#, direct: false,
        .invalidMessage(.invalidField("parameters"))),
    LeaseRow("app null", #"{\#(begin),"parameters":{"app":null}}"#, direct: false, .invalidParameter("app")),
    LeaseRow("app a number", #"{\#(begin),"parameters":{"app":5}}"#, direct: false, .invalidParameter("app")),
    LeaseRow(
        "name a number", #"{\#(begin),"parameters":{"app":"a","name":5}}"#, direct: false, .invalidParameter("name")),
    LeaseRow("end without taskId", #"{\#(end),"parameters":{"app":"a"}}"#, direct: false, .invalidParameter("taskId")),
    LeaseRow(
        "a flag a number", #"{\#(begin),"more":1,"parameters":{"app":"a"}}"#, direct: false,
        .invalidMessage(.invalidField("more"))),
    LeaseRow(
        "a flag misspelt", #"{\#(begin),"more":tru,"parameters":{"app":"a"}}"#, direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow("no method", #"{"parameters":{"app":"a"}}"#, direct: false, .invalidMessage(.missingMethod)),
    LeaseRow(
        "the method a number", #"{"method":5,"parameters":{"app":"a"}}"#, direct: false,
        .invalidMessage(.methodNotString)),
    LeaseRow(
        "another method", #"{"method":"io.bgtask.Lifecycle.GetStatus","parameters":{}}"#, direct: false,
        .otherMethod("io.bgtask.Lifecycle.GetStatus")),
    LeaseRow(
        "a lease method's prefix", #"{"method":"io.bgtask.Lifecycle.BeginBackgroundTas","parameters":{"app":"a"}}"#,
        direct: false, .otherMethod("io.bgtask.Lifecycle.BeginBackgroundTas")),

    // Not one object.
    LeaseRow(
        "text after the object", #"{\#(begin),"parameters":{"app":"a"}} x"#, direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow("two objects", #"{\#(begin),"parameters":{"app":"a"}}{}"#, direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow(
        "a trailing comma", #"{\#(begin),"parameters":{"app":"a"},}"#, direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow(
        "a trailing comma in parameters", #"{\#(begin),"parameters":{"app":"a",}}"#, direct: false,
        .invalidMessage(.invalidJSON)),
    LeaseRow("truncated", #"{\#(begin),"parameters":{"app":"a"#, direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow("empty", "", direct: false, .invalidMessage(.invalidJSON)),
    LeaseRow("an array", "[1]", direct: false, .invalidMessage(.notAnObject)),
    LeaseRow(
        "a form feed as whitespace", "{\(begin),\u{C}\"parameters\":{\"app\":\"a\"}}", direct: false,
        .invalidMessage(.invalidJSON)),
]

extension String {
    /// `"method":"…"` with spaces around its colon.
    fileprivate func replacingColon() -> String {
        var text = self
        if let colon = text.firstIndex(of: ":") { text.replaceSubrange(colon...colon, with: " :\t") }
        return text
    }
}

/// What `codec` makes of `bytes`, as the daemon decodes a call.
private func outcome(of bytes: [UInt8], with codec: VarlinkCodec) -> LeaseOutcome {
    let call: DecodedCall
    do {
        call = try codec.decodeCall(bytes)
    } catch {
        return .invalidMessage(error)
    }
    do {
        switch LifecycleMethod(call.header.method) {
        case .beginBackgroundTask?:
            return .begin(try codec.decodeParameters(BeginBackgroundTaskParameters.self, of: call))
        case .endBackgroundTask?:
            return .end(try codec.decodeParameters(EndBackgroundTaskParameters.self, of: call))
        default:
            return .otherMethod(call.header.method.qualified)
        }
    } catch {
        guard case .invalidParameter(let name)? = VarlinkServiceError(error) else {
            Issue.record("not an InvalidParameter: \(error)")
            return .invalidParameter("?")
        }
        return .invalidParameter(name)
    }
}

struct LeaseCallReaderTests {
    @Test(arguments: leaseRows)
    func row(_ row: LeaseRow) throws {
        let read = row.bytes.withUnsafeBytes { LeaseCallReader.read($0) }
        #expect((read != nil) == row.isReadDirectly, "read by the reader")
        #expect(outcome(of: row.bytes, with: codec) == row.expected)
        // The tree parser alone gives the same answer, and, for what the reader reads, the same call.
        #expect(outcome(of: row.bytes, with: treeCodec) == row.expected, "through the tree")
        if let read {
            #expect(read.wasReadDirectly)
            let tree = try treeCodec.decodeCall(row.bytes)
            #expect(!tree.wasReadDirectly)
            #expect(read == tree)
            #expect(read.header == tree.header)
            #expect(read.parameters == tree.parameters)
        }
    }

    @Test("the flags read are the flags sent")
    func flags() throws {
        for more in [false, true] {
            for oneway in [false, true] {
                let message = try codec.encodeCall(
                    BeginBackgroundTaskParameters(app: "mail", name: "n"), more: more, oneway: oneway)
                let call = try codec.decodeCall(message.dropLast())
                #expect(call.wasReadDirectly)
                #expect(call.header == VarlinkCallHeader(method: call.header.method, more: more, oneway: oneway))
            }
        }
    }

    @Test("what the client library sends for a lease is read in the one pass")
    func clientCallsAreReadDirectly() throws {
        for (index, message) in try [
            codec.encodeCall(BeginBackgroundTaskParameters(app: "org.example.mail")),
            codec.encodeCall(BeginBackgroundTaskParameters(app: "org.example.mail", name: "sync")),
            codec.encodeCall(EndBackgroundTaskParameters(app: "org.example.mail", taskId: 123_456)),
        ].enumerated() {
            let call = try codec.decodeCall(message.dropLast())
            #expect(call.wasReadDirectly, "message \(index)")
        }
    }

    @Test("a mutated lease call decodes as the tree parser decodes it")
    func mutationsAgreeWithTheTree() {
        var generator = SplitMix64(state: 0x6C65_6173_65)
        let seeds = leaseRows.filter(\.isReadDirectly).map(\.bytes)
        let alphabet = Array(#"{}[]":,\ -.0123456789eEtruefalsn"#.utf8) + [0, 0x7F, 0x80, 0xC3, 0xFF, 9, 10, 13, 32]
        var direct = 0
        for round in 0..<20_000 {
            var bytes = seeds[round % seeds.count]
            for _ in 0...(generator.next() % 3) {
                let position = Int(generator.next() % UInt64(bytes.count + 1))
                let byte = alphabet[Int(generator.next() % UInt64(alphabet.count))]
                switch generator.next() % 3 {
                case 0 where position < bytes.count: bytes[position] = byte
                case 1 where position < bytes.count: bytes.remove(at: position)
                default: bytes.insert(byte, at: position)
                }
            }
            let read = outcome(of: bytes, with: codec)
            let tree = outcome(of: bytes, with: treeCodec)
            #expect(read == tree, "\(String(decoding: bytes, as: UTF8.self))")
            if bytes.withUnsafeBytes({ LeaseCallReader.read($0) }) != nil { direct += 1 }
        }
        // Enough mutations keep a call the reader reads (536 with this seed), or the comparison says little of it.
        #expect(direct > 250)
    }
}
