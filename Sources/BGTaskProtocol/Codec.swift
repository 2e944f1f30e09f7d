// Encoding and decoding of Varlink calls and replies, with typed errors for every way a message can be wrong.
import Foundation

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

    /// The fully qualified name, `interface.member`.
    public var qualified: String { interface + "." + member }

    public var description: String { qualified }

    /// Whether `name` is an interface name: `[A-Za-z]([-]*[A-Za-z0-9])*([.][A-Za-z0-9]([-]*[A-Za-z0-9])*)+`.
    static func isValidInterfaceName(_ name: some Collection<UInt8>) -> Bool {
        var labels = 0
        var labelLength = 0
        var previous: UInt8 = UInt8(ascii: ".")
        for byte in name {
            switch byte {
            case UInt8(ascii: "."):
                if labelLength == 0 || previous == UInt8(ascii: "-") { return false }
                labels += 1
                labelLength = 0
            case UInt8(ascii: "-"):
                if labelLength == 0 { return false }
                labelLength += 1
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                if labels == 0 && labelLength == 0 { return false }
                labelLength += 1
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"):
                labelLength += 1
            default:
                return false
            }
            previous = byte
        }
        if labelLength == 0 || previous == UInt8(ascii: "-") { return false }
        return labels + 1 >= 2
    }

    /// Whether `name` is a member (method, type or error) name: `[A-Z][A-Za-z0-9]*`.
    static func isValidMemberName(_ name: some Collection<UInt8>) -> Bool {
        guard let first = name.first, (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(first) else { return false }
        return name.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "A")...UInt8(ascii: "Z"):
                true
            default: false
            }
        }
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

/// Turns Varlink messages into typed values and back, for both ends of a connection.
///
/// Server: `decodeCallHeader(_:)` first (it rejects everything that is not a well-formed call), dispatch on the
/// method, then `decodeParameters(_:from:)` with the method's parameter type, and answer with `encodeReply` or
/// `encodeError`. A call thus costs two JSON parses. Client: `encodeCall` and `decodeReply`.
/// Messages are given and returned without framing; the `encode` functions append the NUL.
/// One codec reuses its JSON coders for every message (creating them per message more than doubles the cost);
/// it is safe to share between threads.
public struct VarlinkCodec: Sendable {
    private let decoder = JSONDecoder()
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        // Paths in argv and URLs read better unescaped, and JSON does not require escaping "/".
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()

    /// `{}`: what a call or reply without `parameters` is decoded from.
    private static let emptyObject = Data("{}".utf8)

    /// A codec with its own JSON coders.
    public init() {}

    // MARK: Server side

    /// Reads a call's method and flags, checking that the message is a well-formed call.
    ///
    /// The whole message must be valid UTF-8, unread fields included: JSONDecoder only checks the strings it is
    /// asked to decode.
    public func decodeCallHeader(_ message: Data) throws(VarlinkProtocolError) -> VarlinkCallHeader {
        guard isValidUTF8(message) else { throw .invalidUTF8 }
        do {
            return try decoder.decode(CallHeaderWire.self, from: message).header
        } catch let error as VarlinkProtocolError {
            throw error
        } catch {
            throw .invalidJSON
        }
    }

    /// Decodes a call's parameters as `type`, for a message `decodeCallHeader(_:)` accepted.
    ///
    /// Missing `parameters` decode as `{}`. Parameters the type does not declare are ignored. A missing, null
    /// (for a non-optional parameter) or wrongly typed parameter throws `org.varlink.service.InvalidParameter`
    /// naming it.
    public func decodeParameters<P: Decodable>(_ type: P.Type, from message: Data) throws(VarlinkError) -> P {
        do {
            if let parameters = try decoder.decode(ParametersWire<P>.self, from: message).parameters {
                return parameters
            }
        } catch {
            throw VarlinkCodec.invalidParameter(error, depth: 1)
        }
        do {
            return try decoder.decode(P.self, from: VarlinkCodec.emptyObject)
        } catch {
            throw VarlinkCodec.invalidParameter(error, depth: 0)
        }
    }

    /// A framed reply carrying `parameters`; `continues` marks all but the last reply to a `more` call.
    public func encodeReply<R: Encodable>(
        _ parameters: R,
        continues: Bool = false
    ) throws(VarlinkEncodingError) -> Data {
        try encodeFramed(ReplyWire(parameters: parameters, continues: continues))
    }

    /// A framed error reply.
    public func encodeError(_ error: VarlinkError) throws(VarlinkEncodingError) -> Data {
        try encodeFramed(ErrorWire(error: error.name, parameters: error.parameters))
    }

    // MARK: Client side

    /// A framed call of `method` (fully qualified) with `parameters`; flags are sent only when true.
    public func encodeCall<P: Encodable>(
        method: String,
        parameters: P,
        more: Bool = false,
        oneway: Bool = false,
        upgrade: Bool = false
    ) throws(VarlinkEncodingError) -> Data {
        try encodeFramed(
            CallWire(method: method, parameters: parameters, more: more, oneway: oneway, upgrade: upgrade)
        )
    }

    /// A framed call of the method `parameters` belongs to.
    public func encodeCall<P: VarlinkMethodCall>(
        _ parameters: P,
        more: Bool = false,
        oneway: Bool = false
    ) throws(VarlinkEncodingError) -> Data {
        try encodeCall(method: P.methodName, parameters: parameters, more: more, oneway: oneway)
    }

    /// Decodes a reply as `type`, or as the error it carries.
    public func decodeReply<R: Decodable>(
        _ type: R.Type,
        from message: Data
    ) throws(VarlinkProtocolError) -> VarlinkReply<R> {
        guard isValidUTF8(message) else { throw .invalidUTF8 }
        let wire: ReplyReadWire<R>
        do {
            wire = try decoder.decode(ReplyReadWire<R>.self, from: message)
        } catch let error as VarlinkProtocolError {
            throw error
        } catch {
            throw .invalidJSON
        }
        if let reply = wire.reply { return reply }
        do {
            return .reply(try decoder.decode(R.self, from: VarlinkCodec.emptyObject), continues: wire.continues)
        } catch {
            throw .invalidReplyParameters(parameter: VarlinkCodec.parameterName(of: error, depth: 0))
        }
    }

    // MARK: Helpers

    private func encodeFramed<T: Encodable>(_ value: T) throws(VarlinkEncodingError) -> Data {
        do {
            // Appending to the encoder's own buffer, which nothing else references, avoids copying the message.
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

    /// `InvalidParameter` naming the parameter at fault, `depth` keys below the top of the decoded value.
    private static func invalidParameter(_ error: any Error, depth: Int) -> VarlinkError {
        .invalidParameter(parameter: parameterName(of: error, depth: depth))
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

/// The envelope of a call, read for its method and flags; `parameters` is only checked to be an object.
private struct CallHeaderWire: Decodable {
    var header: VarlinkCallHeader

    enum Key: String, CodingKey { case method, parameters, more, oneway, upgrade }

    init(from decoder: any Decoder) throws {
        let container: KeyedDecodingContainer<Key>
        do {
            container = try decoder.container(keyedBy: Key.self)
        } catch {
            throw VarlinkProtocolError.notAnObject
        }
        guard container.contains(.method) else { throw VarlinkProtocolError.missingMethod }
        let name: String
        do {
            name = try container.decode(String.self, forKey: .method)
        } catch DecodingError.typeMismatch, DecodingError.valueNotFound {
            throw VarlinkProtocolError.methodNotString
        }
        guard let method = VarlinkMethodName(qualified: name) else {
            throw VarlinkProtocolError.invalidMethodName(name)
        }
        header = VarlinkCallHeader(
            method: method,
            more: try flag(.more, in: container),
            oneway: try flag(.oneway, in: container),
            upgrade: try flag(.upgrade, in: container)
        )
        if container.contains(.parameters), try !container.decodeNil(forKey: .parameters) {
            do {
                _ = try container.nestedContainer(keyedBy: AnyCodingKey.self, forKey: .parameters)
            } catch {
                throw VarlinkProtocolError.invalidField(Key.parameters.rawValue)
            }
        }
    }
}

/// A boolean envelope field: absent or null is false; any other non-boolean is a protocol error.
private func flag<Key: CodingKey>(_ key: Key, in container: KeyedDecodingContainer<Key>) throws -> Bool {
    do {
        return try container.decodeIfPresent(Bool.self, forKey: key) ?? false
    } catch {
        throw VarlinkProtocolError.invalidField(key.stringValue)
    }
}

/// The envelope of a call, read for its parameters; nil when `parameters` is absent or null.
private struct ParametersWire<P: Decodable>: Decodable {
    var parameters: P?

    enum Key: String, CodingKey { case parameters }

    init(from decoder: any Decoder) throws {
        parameters = try decoder.container(keyedBy: Key.self).decodeIfPresent(P.self, forKey: .parameters)
    }
}

/// Whether `message` is valid UTF-8. Calls are nearly always ASCII, so a word-at-a-time scan for high bits
/// settles most messages; the rest go through the standard library's validation.
func isValidUTF8(_ message: Data) -> Bool {
    message.withUnsafeBytes { (bytes: UnsafeRawBufferPointer) -> Bool in
        var offset = 0
        let highBits: UInt64 = 0x8080_8080_8080_8080
        while offset + 8 <= bytes.count {
            if bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self) & highBits != 0 { break }
            offset += 8
        }
        while offset < bytes.count, bytes[offset] < 0x80 {
            offset += 1
        }
        if offset == bytes.count { return true }
        return String(validating: bytes[offset...], as: UTF8.self) != nil
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

/// An incoming reply; `reply` is nil when it had no parameters, to be decoded from `{}` by the codec.
private struct ReplyReadWire<R: Decodable>: Decodable {
    var reply: VarlinkReply<R>?
    var continues: Bool

    enum Key: String, CodingKey { case parameters, continues, error }

    init(from decoder: any Decoder) throws {
        let container: KeyedDecodingContainer<Key>
        do {
            container = try decoder.container(keyedBy: Key.self)
        } catch {
            throw VarlinkProtocolError.notAnObject
        }
        continues = try flag(.continues, in: container)
        let errorName: String?
        do {
            errorName = try container.decodeIfPresent(String.self, forKey: .error)
        } catch {
            throw VarlinkProtocolError.invalidField(Key.error.rawValue)
        }
        if let errorName {
            let parameters: [String: JSONValue]?
            do {
                parameters = try container.decodeIfPresent([String: JSONValue].self, forKey: .parameters)
            } catch {
                throw VarlinkProtocolError.invalidField(Key.parameters.rawValue)
            }
            reply = .error(VarlinkError(name: errorName, parameters: parameters ?? [:]))
            return
        }
        do {
            reply = try container.decodeIfPresent(R.self, forKey: .parameters).map { .reply($0, continues: continues) }
        } catch {
            throw VarlinkProtocolError.invalidReplyParameters(
                parameter: VarlinkCodec.parameterName(of: error, depth: 1))
        }
    }
}
