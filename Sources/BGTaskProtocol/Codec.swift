// Encoding and decoding of Varlink calls and replies, with typed errors for every way a message can be wrong.
import BGTaskJSON

import VarlinkIDL

/// A method name split into its interface and its member: `io.bgtask.Lifecycle` and `Register`.
public struct VarlinkMethodName: Hashable, Sendable, CustomStringConvertible {
    /// The interface name, such as `io.bgtask.Lifecycle`.
    public let interface: String
    /// The method's name within the interface, such as `Register`.
    public let member: String

    /// Splits and checks a fully qualified name against the Varlink grammar; nil when it does not conform.
    ///
    /// The interface is two or more dot-separated labels of letters, digits and inner dashes, the first starting
    /// with a letter; the member starts with an uppercase letter followed by letters and digits.
    public init?(qualified name: String) {
        let utf8 = name.utf8
        guard let dot = utf8.lastIndex(of: UInt8(ascii: ".")) else { return nil }
        let interface = name[..<dot]
        let member = name[utf8.index(after: dot)...]
        guard VarlinkMethodName.isValidInterfaceName(interface.utf8),
            VarlinkMethodName.isValidMemberName(member.utf8)
        else { return nil }
        self.interface = String(interface)
        self.member = String(member)
    }

    /// A name known to conform.
    init(interface: String, member: String) {
        self.interface = interface
        self.member = member
    }

    /// The fully qualified name, `interface.member`.
    public var qualified: String { interface + "." + member }

    public var description: String { qualified }

    /// Whether `name` is an interface name: `[A-Za-z]([-]*[A-Za-z0-9])*([.][A-Za-z0-9]([-]*[A-Za-z0-9])*)+`.
    public static func isValidInterfaceName(_ name: some Collection<UInt8>) -> Bool {
        VarlinkNames.isValidInterfaceName(name)
    }

    /// Whether `name` is a member (method, type or error) name: `[A-Z][A-Za-z0-9]*`.
    public static func isValidMemberName(_ name: some Collection<UInt8>) -> Bool {
        VarlinkNames.isValidMemberName(name)
    }
}

/// What a call asks for, apart from its parameters.
public struct VarlinkCallHeader: Hashable, Sendable {
    /// The method called.
    public var method: VarlinkMethodName
    /// The caller wants a stream of replies, each but the last with `continues: true`.
    public var more: Bool
    /// The caller wants no reply at all.
    public var oneway: Bool
    /// The caller wants the connection handed over to another protocol after the reply.
    public var upgrade: Bool

    /// A call header.
    public init(method: VarlinkMethodName, more: Bool = false, oneway: Bool = false, upgrade: Bool = false) {
        self.method = method
        self.more = more
        self.oneway = oneway
        self.upgrade = upgrade
    }
}

/// A message that breaks the Varlink protocol itself. The peer cannot be trusted to be in step any more, so the
/// server (or client) closes the connection; these are never answered with an error reply.
public enum VarlinkProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The message is not valid UTF-8.
    case invalidUTF8
    /// The message is valid UTF-8 but not valid JSON (empty, truncated, nested beyond the parser's limit...).
    case invalidJSON
    /// The message is JSON but not an object.
    case notAnObject
    /// A call has no `method`.
    case missingMethod
    /// A call's `method` is not a string.
    case methodNotString
    /// A call's `method` is not of the form `interface.Method`.
    case invalidMethodName(String)
    /// A field of the envelope has the wrong type: `more`, `oneway`, `upgrade`, `continues` or `error` not of
    /// their type, or `parameters` not an object.
    case invalidField(String)
    /// A reply's parameters do not fit the reply type expected; names the first parameter at fault, or
    /// `parameters` when it cannot be told.
    case invalidReplyParameters(parameter: String)

    public var description: String {
        switch self {
        case .invalidUTF8: "message is not valid UTF-8"
        case .invalidJSON: "message is not valid JSON"
        case .notAnObject: "message is not a JSON object"
        case .missingMethod: "call has no method"
        case .methodNotString: "call's method is not a string"
        case .invalidMethodName(let name): "call's method \(name.debugDescription) is not of the form interface.Method"
        case .invalidField(let field): "message field \(field.debugDescription) has the wrong type"
        case .invalidReplyParameters(let parameter):
            "reply parameter \(parameter.debugDescription) does not fit the expected reply"
        }
    }
}

/// A value that JSON cannot represent was given to an encoder: a NaN or infinite `Double`.
public struct VarlinkEncodingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What could not be encoded and where.
    public var description: String
}

/// A decoded reply: the method's reply parameters, or an error.
public enum VarlinkReply<Parameters> {
    /// Reply parameters; `continues` is true when more replies to the same call follow.
    case reply(Parameters, continues: Bool)
    /// An error reply; it ends the call, streaming or not.
    case error(VarlinkError)

    /// The parameters, or the error thrown.
    public func get() throws(VarlinkError) -> Parameters {
        switch self {
        case .reply(let parameters, _): return parameters
        case .error(let error): throw error
        }
    }
}

extension VarlinkReply: Sendable where Parameters: Sendable {}
extension VarlinkReply: Equatable where Parameters: Equatable {}
extension VarlinkReply: Hashable where Parameters: Hashable {}

/// A call decoded in one pass over its bytes: its header, and its parameters, as a tree to decode from or, for
/// the lease calls `LeaseCallReader` reads, already as their type.
public struct DecodedCall: Hashable, Sendable {
    /// The method and flags.
    public var header: VarlinkCallHeader
    private var storage: Storage

    /// Where the parameters are.
    enum Storage: Hashable, Sendable {
        case tree([String: JSONValue])
        case lease(LeaseParameters)
    }

    /// The parameters of a lease call, read straight from the bytes.
    enum LeaseParameters: Hashable, Sendable {
        /// `nullName`: the message had `"name": null`, which the tree holds as a member.
        case begin(BeginBackgroundTaskParameters, nullName: Bool)
        case end(EndBackgroundTaskParameters)
    }

    /// A decoded call.
    public init(header: VarlinkCallHeader, parameters: [String: JSONValue] = [:]) {
        self.header = header
        self.storage = .tree(parameters)
    }

    init(header: VarlinkCallHeader, lease: LeaseParameters) {
        self.header = header
        self.storage = .lease(lease)
    }

    /// The `parameters` object; empty when it was absent or null. For a call read by `LeaseCallReader` it is
    /// made from the parameters read, with the members the message had.
    public var parameters: [String: JSONValue] {
        get {
            switch storage {
            case .tree(let members): return members
            case .lease(.begin(let parameters, let nullName)):
                var members: [String: JSONValue] = ["app": .string(parameters.app)]
                if let name = parameters.name {
                    members["name"] = .string(name)
                } else if nullName {
                    members["name"] = .null
                }
                return members
            case .lease(.end(let parameters)):
                return ["app": .string(parameters.app), "taskId": .number(Double(parameters.taskId))]
            }
        }
        set { storage = .tree(newValue) }
    }

    /// Whether `LeaseCallReader` read the call (rather than the tree parser).
    public var wasReadDirectly: Bool {
        if case .lease = storage { return true }
        return false
    }

    /// The parameters as `type`, when the reader read them as that type.
    func leaseParameters<P>(as type: P.Type) -> P? {
        switch storage {
        case .tree: nil
        case .lease(.begin(let parameters, _)): parameters as? P
        case .lease(.end(let parameters)): parameters as? P
        }
    }

    public static func == (lhs: DecodedCall, rhs: DecodedCall) -> Bool {
        lhs.header == rhs.header && lhs.parameters == rhs.parameters
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(header)
        hasher.combine(parameters)
    }
}

/// Turns Varlink messages into typed values and back, for both ends of a connection.
///
/// Every message is parsed once. A lease call (`BeginBackgroundTask`, `EndBackgroundTask`) is read by
/// `LeaseCallReader` straight into its parameter type; any other message, and a lease call the reader leaves
/// (an escape in a string, an unknown member, anything malformed), into a `JSONValue` tree, whose envelope is read
/// from the tree and its parameters decoded from it (`JSONValueDecoder`, which names the parameter at fault in
/// every error, numbers included).
/// Server: `decodeCall(_:)` (it rejects everything that is not a well-formed call), dispatch on the method, then
/// `decodeParameters(_:of:)` with the method's parameter type, and answer with `encodeReply` or `encodeError`.
/// Client: `encodeCall` and `decodeReply`. Messages are given and returned without framing; the `encode`
/// functions append the NUL. Outgoing messages are written by `JSONTextEncoder`: every optional field of a reply
/// is present, as `null` when absent. A codec is safe to share between threads.
public struct VarlinkCodec: Sendable {
    private let treeDecoder = JSONValueDecoder()
    private let replyEncoder = JSONTextEncoder()
    private let callEncoder = JSONTextEncoder(writesAbsentOptionals: false)

    private let readsLeaseCallsDirectly: Bool

    /// A codec. `readsLeaseCallsDirectly` false makes `decodeCall` parse every call into a tree, lease calls
    /// included, as the differential fuzz target and tests need to compare the two ways.
    public init(readsLeaseCallsDirectly: Bool = true) {
        self.readsLeaseCallsDirectly = readsLeaseCallsDirectly
    }

    // MARK: Server side

    /// Parses a call: its header (method and flags) and its parameters, checking that the message is a
    /// well-formed call. The whole message must be valid UTF-8.
    public func decodeCall<Message: Collection>(_ message: Message) throws(VarlinkProtocolError) -> DecodedCall
    where Message.Element == UInt8 {
        if readsLeaseCallsDirectly,
            let call = message.withContiguousStorageIfAvailable({ LeaseCallReader.read(UnsafeRawBufferPointer($0)) }),
            let call
        {
            return call
        }
        guard case .object(let envelope) = try parse(message) else { throw .notAnObject }
        guard let methodValue = envelope["method"] else { throw .missingMethod }
        guard case .string(let name) = methodValue else { throw .methodNotString }
        guard let method = VarlinkMethodName(qualified: name) else { throw .invalidMethodName(name) }
        let header = VarlinkCallHeader(
            method: method, more: try Self.flag("more", in: envelope), oneway: try Self.flag("oneway", in: envelope),
            upgrade: try Self.flag("upgrade", in: envelope))
        switch envelope["parameters"] {
        case nil, .null?: return DecodedCall(header: header)
        case .object(let parameters)?: return DecodedCall(header: header, parameters: parameters)
        default: throw .invalidField("parameters")
        }
    }

    /// The header of a call (`decodeCall(_:)` without keeping the parameters).
    public func decodeCallHeader<Message: Collection>(_ message: Message) throws(VarlinkProtocolError)
        -> VarlinkCallHeader where Message.Element == UInt8
    {
        try decodeCall(message).header
    }

    /// Decodes a call's parameters as `type`. Missing `parameters` decode as `{}`. Parameters the type does not
    /// declare are ignored. A missing, null (for a non-optional parameter) or wrongly typed parameter throws
    /// `org.varlink.service.InvalidParameter` naming it.
    public func decodeParameters<P: Decodable>(_ type: P.Type, of call: DecodedCall) throws(VarlinkError) -> P {
        if let parameters = call.leaseParameters(as: type) {
            // Read with the call in its one pass.
            return parameters
        }
        if let direct = type as? any DirectParametersDecodable.Type,
            let parameters = try direct.init(
                directParameters: call.parameters) as? P
        {
            // The lease calls' parameters, read on every call: straight from the tree, with no decoder.
            return parameters
        }
        do {
            return try treeDecoder.decode(
                type, from: .object(call.parameters), codingPath: [AnyCodingKey("parameters")])
        } catch {
            throw .invalidParameter(parameter: Self.parameterName(of: error, depth: 1))
        }
    }

    /// Decodes the parameters of the call in `message` as `type`; a message that is not a well-formed call is an
    /// invalid `parameters`.
    public func decodeParameters<P: Decodable, Message: Collection>(_ type: P.Type, from message: Message)
        throws(VarlinkError) -> P where Message.Element == UInt8
    {
        let call: DecodedCall
        do {
            call = try decodeCall(message)
        } catch {
            throw .invalidParameter(parameter: "parameters")
        }
        return try decodeParameters(type, of: call)
    }

    /// A framed reply carrying `parameters`; `continues` marks all but the last reply to a `more` call.
    public func encodeReply<R: Encodable>(
        _ parameters: R,
        continues: Bool = false
    ) throws(VarlinkEncodingError) -> [UInt8] {
        if !continues, let direct = parameters as? any DirectReplyEncodable {
            // The replies of the lease calls, made on every call: written straight, with no encoder.
            var message: [UInt8] = []
            // Room for the longest of them, `{"parameters":{"taskId":-9223372036854775808}}` and the NUL: one
            // allocation.
            message.reserveCapacity(64)
            message.append(staticString: #"{"parameters":"#)
            direct.writeJSON(to: &message)
            message.append(UInt8(ascii: "}"))
            message.append(VarlinkFrame.terminator)
            return message
        }
        return try encodeFramed(ReplyWire(parameters: parameters, continues: continues), with: replyEncoder)
    }

    /// A framed error reply.
    public func encodeError(_ error: VarlinkError) throws(VarlinkEncodingError) -> [UInt8] {
        try encodeFramed(ErrorWire(error: error.name, parameters: error.parameters), with: replyEncoder)
    }

    // MARK: Client side

    /// A framed call of `method` (fully qualified) with `parameters`; flags are sent only when true.
    public func encodeCall<P: Encodable>(
        method: String,
        parameters: P,
        more: Bool = false,
        oneway: Bool = false,
        upgrade: Bool = false
    ) throws(VarlinkEncodingError) -> [UInt8] {
        try encodeFramed(
            CallWire(method: method, parameters: parameters, more: more, oneway: oneway, upgrade: upgrade),
            with: callEncoder)
    }

    /// A framed call of the method `parameters` belongs to.
    public func encodeCall<P: VarlinkMethodCall>(
        _ parameters: P,
        more: Bool = false,
        oneway: Bool = false
    ) throws(VarlinkEncodingError) -> [UInt8] {
        try encodeCall(method: P.methodName, parameters: parameters, more: more, oneway: oneway)
    }

    /// Decodes a reply as `type`, or as the error it carries.
    public func decodeReply<R: Decodable, Message: Collection>(
        _ type: R.Type,
        from message: Message
    ) throws(VarlinkProtocolError) -> VarlinkReply<R> where Message.Element == UInt8 {
        guard case .object(let envelope) = try parse(message) else { throw .notAnObject }
        let continues = try Self.flag("continues", in: envelope)
        switch envelope["error"] {
        case nil, .null?:
            break
        case .string(let name)?:
            switch envelope["parameters"] {
            case nil, .null?: return .error(VarlinkError(name: name))
            case .object(let parameters)?: return .error(VarlinkError(name: name, parameters: parameters))
            default: throw .invalidField("parameters")
            }
        default:
            throw .invalidField("error")
        }
        let parameters: [String: JSONValue]
        switch envelope["parameters"] {
        case nil, .null?: parameters = [:]
        case .object(let members)?: parameters = members
        default: throw .invalidReplyParameters(parameter: "parameters")
        }
        do {
            let reply = try treeDecoder.decode(
                type, from: .object(parameters), codingPath: [AnyCodingKey("parameters")])
            return .reply(reply, continues: continues)
        } catch {
            throw .invalidReplyParameters(parameter: Self.parameterName(of: error, depth: 1))
        }
    }

    // MARK: Helpers

    /// The message as a tree: one pass of the JSON parser over its bytes, in place where they are contiguous.
    private func parse<Message: Collection>(_ message: Message) throws(VarlinkProtocolError) -> JSONValue
    where Message.Element == UInt8 {
        do {
            return try JSONParser.parse(message)
        } catch {
            throw error.isInvalidUTF8 ? .invalidUTF8 : .invalidJSON
        }
    }

    /// A boolean envelope field: absent or null is false; any other non-boolean is a protocol error.
    private static func flag(_ key: String, in envelope: [String: JSONValue]) throws(VarlinkProtocolError) -> Bool {
        switch envelope[key] {
        case nil, .null?: return false
        case .bool(let flag)?: return flag
        default: throw .invalidField(key)
        }
    }

    private func encodeFramed<T: Encodable>(_ value: T, with encoder: JSONTextEncoder) throws(VarlinkEncodingError)
        -> [UInt8]
    {
        do {
            var message = try encoder.encode(value)
            message.append(VarlinkFrame.terminator)
            return message
        } catch let EncodingError.invalidValue(value, context) {
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            throw VarlinkEncodingError(description: "cannot encode \(value) at \(path): \(context.debugDescription)")
        } catch {
            throw VarlinkEncodingError(description: "\(error)")
        }
    }

    /// The name of the parameter a decoding error is about: the coding path's key at `depth` (1 when the
    /// message envelope is the top, 0 when the parameters object is), or `parameters` when the path is shorter.
    static func parameterName(of error: any Error, depth: Int) -> String {
        let path: [any CodingKey]
        switch error as? DecodingError {
        case .keyNotFound(let key, let context)?: path = context.codingPath + [key]
        case .typeMismatch(_, let context)?, .valueNotFound(_, let context)?, .dataCorrupted(let context)?:
            path = context.codingPath
        default: path = []
        }
        return path.count > depth ? path[depth].stringValue : "parameters"
    }
}

/// An outgoing call.
private struct CallWire<P: Encodable>: Encodable {
    var method: String
    var parameters: P
    var more: Bool
    var oneway: Bool
    var upgrade: Bool

    enum Key: String, CodingKey { case method, parameters, more, oneway, upgrade }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(method, forKey: .method)
        try container.encode(parameters, forKey: .parameters)
        if more { try container.encode(true, forKey: .more) }
        if oneway { try container.encode(true, forKey: .oneway) }
        if upgrade { try container.encode(true, forKey: .upgrade) }
    }
}

/// An outgoing reply.
private struct ReplyWire<R: Encodable>: Encodable {
    var parameters: R
    var continues: Bool

    enum Key: String, CodingKey { case parameters, continues }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        try container.encode(parameters, forKey: .parameters)
        if continues { try container.encode(true, forKey: .continues) }
    }
}

/// An outgoing error reply.
private struct ErrorWire: Encodable {
    var error: String
    var parameters: [String: JSONValue]
}

/// A reply whose JSON is written by hand (the same object its `Encodable` conformance makes): the replies of the
/// calls made most, so their encoding costs no encoder.
protocol DirectReplyEncodable {
    /// Appends the reply's parameters object.
    func writeJSON(to output: inout [UInt8])
}

extension EmptyReply: DirectReplyEncodable {
    func writeJSON(to output: inout [UInt8]) {
        output.append(staticString: "{}")
    }
}

extension BeginBackgroundTaskReply: DirectReplyEncodable {
    func writeJSON(to output: inout [UInt8]) {
        output.append(staticString: #"{"taskId":"#)
        // A task id's digits fit in a small string: no allocation.
        output.append(contentsOf: String(taskId).utf8)
        output.append(UInt8(ascii: "}"))
    }
}

/// Parameters read straight from the call's tree, as their `Decodable` conformance reads them (the same values,
/// and the same parameter named when one is wrong): the lease calls', read on every call.
protocol DirectParametersDecodable {
    init(directParameters: [String: JSONValue]) throws(VarlinkError)
}

extension [String: JSONValue] {
    /// The string member `key`; a missing or mistyped one is an invalid `key`.
    fileprivate func string(_ key: String) throws(VarlinkError) -> String {
        guard case .string(let value)? = self[key] else { throw .invalidParameter(parameter: key) }
        return value
    }

    /// The string member `key`, nil when absent or null; a mistyped one is an invalid `key`.
    fileprivate func optionalString(_ key: String) throws(VarlinkError) -> String? {
        switch self[key] {
        case nil, .null?: return nil
        case .string(let value)?: return value
        default: throw .invalidParameter(parameter: key)
        }
    }

    /// The integer member `key`, exactly; a missing, mistyped or inexact one is an invalid `key`.
    fileprivate func integer(_ key: String) throws(VarlinkError) -> Int {
        guard case .number(let number)? = self[key], let value = Int(exactly: number) else {
            throw .invalidParameter(parameter: key)
        }
        return value
    }
}

extension BeginBackgroundTaskParameters: DirectParametersDecodable {
    init(directParameters parameters: [String: JSONValue]) throws(VarlinkError) {
        self.init(app: try parameters.string("app"), name: try parameters.optionalString("name"))
    }
}

extension EndBackgroundTaskParameters: DirectParametersDecodable {
    init(directParameters parameters: [String: JSONValue]) throws(VarlinkError) {
        self.init(app: try parameters.string("app"), taskId: try parameters.integer("taskId"))
    }
}

extension [UInt8] {
    /// Appends the bytes of `text`, with no intermediate array.
    fileprivate mutating func append(staticString text: StaticString) {
        append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }
}
