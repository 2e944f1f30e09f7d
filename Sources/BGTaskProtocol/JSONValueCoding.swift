// Codable straight to and from `JSONValue` trees, and JSON text written from them: the codec parses a message
// once and decodes its parts from the tree, and writes replies with every optional field present.

// MARK: - Decoding

/// Decodes `Decodable` values from a `JSONValue` tree, reporting every failure as a `DecodingError` whose coding
/// path names the member at fault, numbers included (a number that does not fit the type asked for, `1.5` or
/// `1e30` for an `Int`, is `dataCorrupted` at its key: Foundation's decoder loses the key there).
public struct JSONValueDecoder: Sendable {
    /// A decoder.
    public init() {}

    /// Decodes `type` from `value`, as the member at `codingPath` of a larger document (for the errors' paths and
    /// the nesting limit of `JSONValue`).
    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue, codingPath: [any CodingKey] = [])
        throws -> T
    {
        try TreeDecoder(value: value, codingPath: codingPath).decodeValue(type)
    }
}

/// The `Decoder` over one node of the tree.
private struct TreeDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw mismatch([String: JSONValue].self) }
        return KeyedDecodingContainer(KeyedTreeContainer<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw mismatch([JSONValue].self) }
        return UnkeyedTreeContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    func mismatch(_ type: Any.Type) -> DecodingError {
        .typeMismatch(
            type, DecodingError.Context(codingPath: codingPath, debugDescription: "expected \(type), found \(value)"))
    }

    /// Decodes `type` from this node. A `JSONValue` is the node itself, after the nesting check.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if type == JSONValue.self {
            try JSONValue.checkDepth(of: value, at: codingPath)
            // Safe: `T` is `JSONValue`, checked just above.
            return value as! T
        }
        return try T(from: self)
    }

    func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        guard case .number(let number) = value else { throw mismatch(type) }
        guard let integer = T(exactly: number) else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(codingPath: codingPath, debugDescription: "\(number) does not fit \(type)"))
        }
        return integer
    }
}

extension TreeDecoder: SingleValueDecodingContainer {
    func decodeNil() -> Bool { value == .null }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch(type) }
        return flag
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let text) = value else { throw mismatch(type) }
        return text
    }

    func decode(_ type: Double.Type) throws -> Double {
        guard case .number(let number) = value else { throw mismatch(type) }
        return number
    }

    func decode(_ type: Float.Type) throws -> Float {
        let number = try decode(Double.self)
        guard let narrowed = Float(exactly: number) ?? (number.isFinite ? Float(number) : nil),
            narrowed.isFinite || !number.isFinite
        else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(codingPath: codingPath, debugDescription: "\(number) does not fit Float"))
        }
        return narrowed
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(type) }
}

/// The members of an object, by key.
private struct KeyedTreeContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    private func member(_ key: Key) throws -> TreeDecoder {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key, DecodingError.Context(codingPath: codingPath, debugDescription: "no \(key.stringValue)"))
        }
        return TreeDecoder(value: value, codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { try member(key).decodeNil() }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        let decoder = try member(key)
        if decoder.value == .null, !(type is ExpressibleByNilLiteral.Type), type != JSONValue.self {
            throw DecodingError.valueNotFound(
                type, DecodingError.Context(codingPath: decoder.codingPath, debugDescription: "null"))
        }
        return try decoder.decodeValue(type)
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let value = members[key.stringValue], value != .null else { return nil }
        return try TreeDecoder(value: value, codingPath: codingPath + [key]).decodeValue(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try member(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try member(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { TreeDecoder(value: .object(members), codingPath: codingPath) }

    func superDecoder(forKey key: Key) throws -> any Decoder { try member(key) }
}

/// The elements of an array, in order.
private struct UnkeyedTreeContainer: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func next() throws -> TreeDecoder {
        let key = AnyCodingKey(index: currentIndex)
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(
                JSONValue.self,
                DecodingError.Context(codingPath: codingPath + [key], debugDescription: "no more elements"))
        }
        defer { currentIndex += 1 }
        return TreeDecoder(value: elements[currentIndex], codingPath: codingPath + [key])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decodeValue(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try next().container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }

    mutating func superDecoder() throws -> any Decoder { try next() }
}

// MARK: - Encoding

/// Encodes `Encodable` values as JSON text, with every optional member present: `nil` is written as `null`, so a
/// reader sees every field the interface declares (Foundation's encoder leaves absent optionals out). Members are
/// written in the order they are encoded (a struct's declaration order); the members of a `JSONValue` object, which
/// has no order, sorted by key, so the same value always reads the same.
public struct JSONTextEncoder: Sendable {
    /// Whether struct members too are written sorted by key (stable output for scripts), rather than in the order
    /// they are encoded.
    public var sortsKeys: Bool
    /// Whether an absent optional member is written as `null` (replies: every field the interface declares) or
    /// left out (calls: only what the caller gives).
    public var writesAbsentOptionals: Bool

    /// An encoder; `sortsKeys` sorts struct members by key as well; `writesAbsentOptionals: false` leaves absent
    /// optional members out.
    public init(sortsKeys: Bool = false, writesAbsentOptionals: Bool = true) {
        self.sortsKeys = sortsKeys
        self.writesAbsentOptionals = writesAbsentOptionals
    }

    /// The JSON text of `value`, as UTF-8 bytes. Throws `EncodingError.invalidValue` for a NaN or infinite number.
    public func encode<T: Encodable>(_ value: T) throws -> [UInt8] {
        var output: [UInt8] = []
        try write(value, to: &output)
        return output
    }

    /// Appends the JSON text of `value` to `output`.
    public func write<T: Encodable>(_ value: T, to output: inout [UInt8]) throws {
        let root = EncodingNode()
        try TreeEncoder(node: root, codingPath: [], writesAbsentOptionals: writesAbsentOptionals).encodeValue(value)
        try root.write(to: &output, codingPath: [], sortsKeys: sortsKeys)
    }
}

/// A node being built by the encoder: reference semantics, because nested containers fill their node after the
/// parent already holds it.
private final class EncodingNode {
    enum Content {
        case empty
        case value(JSONValue)
        /// An integer, written exactly in decimal (a `Double` holds integers exactly only up to 2^53).
        case integer(String)
        /// JSON text written as it is (`RawJSON`).
        case literal([UInt8])
        case object([(key: String, node: EncodingNode)])
        case array([EncodingNode])
    }

    var content = Content.empty

    func write(to output: inout [UInt8], codingPath: [any CodingKey], sortsKeys: Bool) throws {
        switch content {
        case .empty:
            // A value that encoded nothing (an empty keyed container never asked for) reads as an empty object.
            output.append(contentsOf: "{}".utf8)
        case .value(let value):
            try value.writeJSON(to: &output, codingPath: codingPath)
        case .integer(let digits):
            output.append(contentsOf: digits.utf8)
        case .literal(let text):
            output.append(contentsOf: text)
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            let ordered =
                sortsKeys ? members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) } : members
            for (index, member) in ordered.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                JSONValue.writeString(member.key, to: &output)
                output.append(UInt8(ascii: ":"))
                try member.node.write(
                    to: &output, codingPath: codingPath + [AnyCodingKey(member.key)], sortsKeys: sortsKeys)
            }
            output.append(UInt8(ascii: "}"))
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                try element.write(
                    to: &output, codingPath: codingPath + [AnyCodingKey(index: index)], sortsKeys: sortsKeys)
            }
            output.append(UInt8(ascii: "]"))
        }
    }

    /// The member `key` of this object node, made (or replaced) now.
    func member(_ key: String) -> EncodingNode {
        let child = EncodingNode()
        var members: [(key: String, node: EncodingNode)] = []
        if case .object(let existing) = content { members = existing.filter { $0.key != key } }
        members.append((key, child))
        content = .object(members)
        return child
    }

    /// A new last element of this array node.
    func appendElement() -> EncodingNode {
        let child = EncodingNode()
        var elements: [EncodingNode] = []
        if case .array(let existing) = content { elements = existing }
        elements.append(child)
        content = .array(elements)
        return child
    }
}

/// The `Encoder` filling one node.
private struct TreeEncoder: Encoder {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    let writesAbsentOptionals: Bool
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = node.content {} else { node.content = .object([]) }
        return KeyedEncodingContainer(
            KeyedTreeEncoder<Key>(node: node, codingPath: codingPath, writesAbsentOptionals: writesAbsentOptionals))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = node.content {} else { node.content = .array([]) }
        return UnkeyedTreeEncoder(node: node, codingPath: codingPath, writesAbsentOptionals: writesAbsentOptionals)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { self }

    /// Encodes `value` into this node; a `JSONValue` is stored as it is.
    func encodeValue<T: Encodable>(_ value: T) throws {
        if let json = value as? JSONValue {
            node.content = .value(json)
        } else if let raw = value as? RawJSON {
            node.content = .literal(raw.text)
        } else if let object = value as? [String: JSONValue] {
            // A free-form object (a payload, `memory`): written with its keys sorted, as every `JSONValue` object.
            node.content = .value(.object(object))
        } else {
            try value.encode(to: self)
        }
    }
}

extension TreeEncoder: SingleValueEncodingContainer {
    func encodeNil() throws { node.content = .value(.null) }
    func encode(_ value: Bool) throws { node.content = .value(.bool(value)) }
    func encode(_ value: String) throws { node.content = .value(.string(value)) }
    func encode(_ value: Double) throws { node.content = .value(.number(value)) }
    func encode(_ value: Float) throws { node.content = .value(.number(Double(value))) }
    func encode(_ value: Int) throws { node.content = .integer(String(value)) }
    func encode(_ value: Int8) throws { node.content = .integer(String(value)) }
    func encode(_ value: Int16) throws { node.content = .integer(String(value)) }
    func encode(_ value: Int32) throws { node.content = .integer(String(value)) }
    func encode(_ value: Int64) throws { node.content = .integer(String(value)) }
    func encode(_ value: UInt) throws { node.content = .integer(String(value)) }
    func encode(_ value: UInt8) throws { node.content = .integer(String(value)) }
    func encode(_ value: UInt16) throws { node.content = .integer(String(value)) }
    func encode(_ value: UInt32) throws { node.content = .integer(String(value)) }
    func encode(_ value: UInt64) throws { node.content = .integer(String(value)) }
    func encode<T: Encodable>(_ value: T) throws { try encodeValue(value) }
}

/// The members of an object being encoded; an absent optional is written as `null`.
private struct KeyedTreeEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    let writesAbsentOptionals: Bool

    private func encoder(_ key: Key) -> TreeEncoder {
        TreeEncoder(
            node: node.member(key.stringValue), codingPath: codingPath + [key],
            writesAbsentOptionals: writesAbsentOptionals)
    }

    mutating func encodeNil(forKey key: Key) throws { try encoder(key).encodeNil() }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { try encoder(key).encodeValue(value) }

    // Every optional member is written, as `null` when absent: the interface's replies name every field.
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws { try encodeOptional(value, key) }

    private func encodeOptional<T: Encodable>(_ value: T?, _ key: Key) throws {
        if let value {
            try encoder(key).encodeValue(value)
        } else if writesAbsentOptionals {
            try encoder(key).encodeNil()
        }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
        -> KeyedEncodingContainer<NestedKey>
    {
        encoder(key).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        encoder(key).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder {
        TreeEncoder(node: node.member("super"), codingPath: codingPath, writesAbsentOptionals: writesAbsentOptionals)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder { encoder(key) }
}

/// The elements of an array being encoded.
private struct UnkeyedTreeEncoder: UnkeyedEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    let writesAbsentOptionals: Bool
    var count = 0

    init(node: EncodingNode, codingPath: [any CodingKey], writesAbsentOptionals: Bool) {
        self.node = node
        self.codingPath = codingPath
        self.writesAbsentOptionals = writesAbsentOptionals
    }

    private mutating func next() -> TreeEncoder {
        defer { count += 1 }
        return TreeEncoder(
            node: node.appendElement(), codingPath: codingPath + [AnyCodingKey(index: count)],
            writesAbsentOptionals: writesAbsentOptionals)
    }

    mutating func encodeNil() throws { try next().encodeNil() }

    mutating func encode<T: Encodable>(_ value: T) throws { try next().encodeValue(value) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
        -> KeyedEncodingContainer<NestedKey>
    {
        next().container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer { next().unkeyedContainer() }

    mutating func superEncoder() -> any Encoder { next() }
}

// MARK: - JSON text

/// A JSON value already written as text, which `JSONTextEncoder` copies into its output as it is: a value encoded
/// once (a posted payload) and sent to many without being parsed and encoded again for each. Other encoders get the
/// value it stands for.
public struct RawJSON: Encodable, Hashable, Sendable {
    /// The JSON text, as UTF-8.
    public let text: [UInt8]

    /// The JSON text of `value`.
    public init(_ value: JSONValue) throws {
        text = try value.jsonText()
    }

    /// Text known to be one valid JSON value (written by `JSONValue.jsonText()`, or checked by `JSONParser`).
    public init(validatedText text: [UInt8]) {
        self.text = text
    }

    public func encode(to encoder: any Encoder) throws {
        // Only for encoders other than `JSONTextEncoder`, which copies the text.
        try JSONParser.parse(text).encode(to: encoder)
    }
}

extension JSONValue {
    /// The JSON text of the value, object members sorted by key; throws for a NaN or infinite number.
    public func jsonText() throws -> [UInt8] {
        var output: [UInt8] = []
        try writeJSON(to: &output, codingPath: [])
        return output
    }

    /// Appends the JSON text of the value to `output`.
    func writeJSON(to output: inout [UInt8], codingPath: [any CodingKey]) throws {
        switch self {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let flag): output.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let number): try Self.writeNumber(number, to: &output, codingPath: codingPath)
        case .string(let text): Self.writeString(text, to: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                try element.writeJSON(to: &output, codingPath: codingPath + [AnyCodingKey(index: index)])
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }).enumerated() {
                if index > 0 { output.append(UInt8(ascii: ",")) }
                Self.writeString(key, to: &output)
                output.append(UInt8(ascii: ":"))
                // The key exists: it was taken from the dictionary itself.
                try members[key, default: .null].writeJSON(to: &output, codingPath: codingPath + [AnyCodingKey(key)])
            }
            output.append(UInt8(ascii: "}"))
        }
    }

    /// A number as JSON: integral values within ±2^53 (exact in a `Double`) without a fraction or exponent, so
    /// ids and byte counts read naturally and decode as `int` in strict peers; others in Swift's shortest form.
    static func writeNumber(_ number: Double, to output: inout [UInt8], codingPath: [any CodingKey]) throws {
        guard number.isFinite else {
            throw EncodingError.invalidValue(
                number, EncodingError.Context(codingPath: codingPath, debugDescription: "JSON has no \(number)"))
        }
        if number.rounded() == number, abs(number) <= 9_007_199_254_740_992 {
            output.append(contentsOf: String(Int64(number)).utf8)
        } else {
            output.append(contentsOf: number.description.utf8)
        }
    }

    /// A string as JSON: quotes, backslashes and control characters escaped, everything else (`/` and non-ASCII
    /// included) as it is.
    static func writeString(_ text: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): output.append(contentsOf: #"\\"#.utf8)
            case 0x0A: output.append(contentsOf: #"\n"#.utf8)
            case 0x0D: output.append(contentsOf: #"\r"#.utf8)
            case 0x09: output.append(contentsOf: #"\t"#.utf8)
            case 0x00..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                output.append(contentsOf: #"\u00"#.utf8)
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0xF)])
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }

    /// Refuses a subtree that would nest deeper than `maximumDepth` counted from the top of its document, where it
    /// sits at `codingPath`.
    static func checkDepth(of value: JSONValue, at codingPath: [any CodingKey]) throws {
        func depth(_ value: JSONValue, limit: Int) -> Int {
            guard limit >= 0 else { return 1 }
            switch value {
            // A container adds a level only for the members it holds, as the path of its deepest member counts.
            case .array(let elements): return elements.map { 1 + depth($0, limit: limit - 1) }.max() ?? 0
            case .object(let members): return members.values.map { 1 + depth($0, limit: limit - 1) }.max() ?? 0
            default: return 0
            }
        }
        let allowed = maximumDepth - codingPath.count
        if depth(value, limit: allowed) > allowed {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: codingPath, debugDescription: "JSON nested deeper than \(maximumDepth) levels"))
        }
    }
}
