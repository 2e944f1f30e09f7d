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
        let start = output.count
        guard root.write(to: &output, sortsKeys: sortsKeys) else {
            // Written without keeping the path, which only an error needs: found now, by a second walk.
            output.removeSubrange(start...)
            let (number, path) = root.firstNonFiniteNumber(at: []) ?? (.nan, [])
            throw EncodingError.invalidValue(
                number, EncodingError.Context(codingPath: path, debugDescription: "JSON has no \(number)"))
        }
    }
}

/// A node being built by the encoder: reference semantics, because nested containers fill their node after the
/// parent already holds it. Members and elements are appended in place.
private final class EncodingNode {
    enum Kind {
        case empty
        case value(JSONValue)
        /// An integer, written exactly in decimal (a `Double` holds integers exactly only up to 2^53).
        case integer(String)
        /// JSON text written as it is (`RawJSON`).
        case literal([UInt8])
        case object
        case array
    }

    var kind = Kind.empty
    /// The members, in the order they were encoded, when `kind` is `.object`.
    var members: [(key: String, node: EncodingNode)] = []
    /// The elements, when `kind` is `.array`.
    var elements: [EncodingNode] = []

    /// Makes this node an object (keeping its members if it is one already).
    func becomeObject() {
        if case .object = kind { return }
        kind = .object
        members = []
    }

    /// Makes this node an array (keeping its elements if it is one already).
    func becomeArray() {
        if case .array = kind { return }
        kind = .array
        elements = []
    }

    /// Writes the node; false (with `output` partly written) when it holds a NaN or infinite number.
    func write(to output: inout [UInt8], sortsKeys: Bool) -> Bool {
        switch kind {
        case .empty:
            // A value that encoded nothing (an empty keyed container never asked for) reads as an empty object.
            output.append(contentsOf: "{}".utf8)
        case .value(let value):
            return value.writeJSON(to: &output)
        case .integer(let digits):
            output.append(contentsOf: digits.utf8)
        case .literal(let text):
            output.append(contentsOf: text)
        case .object:
            output.append(UInt8(ascii: "{"))
            let ordered =
                sortsKeys ? members.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) } : members
            var isFirst = true
            for member in ordered {
                if !isFirst { output.append(UInt8(ascii: ",")) }
                isFirst = false
                JSONValue.writeString(member.key, to: &output)
                output.append(UInt8(ascii: ":"))
                guard member.node.write(to: &output, sortsKeys: sortsKeys) else { return false }
            }
            output.append(UInt8(ascii: "}"))
        case .array:
            output.append(UInt8(ascii: "["))
            var isFirst = true
            for element in elements {
                if !isFirst { output.append(UInt8(ascii: ",")) }
                isFirst = false
                guard element.write(to: &output, sortsKeys: sortsKeys) else { return false }
            }
            output.append(UInt8(ascii: "]"))
        }
        return true
    }

    /// The first NaN or infinite number under this node, with its path from the top.
    func firstNonFiniteNumber(at path: [any CodingKey]) -> (Double, [any CodingKey])? {
        switch kind {
        case .value(let value):
            return value.firstNonFiniteNumber(at: path)
        case .object:
            for member in members {
                if let found = member.node.firstNonFiniteNumber(at: path + [AnyCodingKey(member.key)]) { return found }
            }
        case .array:
            for (index, element) in elements.enumerated() {
                if let found = element.firstNonFiniteNumber(at: path + [AnyCodingKey(index: index)]) { return found }
            }
        case .empty, .integer, .literal:
            break
        }
        return nil
    }

    /// The member `key` of this object node, made (or, encoded again, replaced) now.
    func member(_ key: String) -> EncodingNode {
        becomeObject()
        let child = EncodingNode()
        if let index = members.firstIndex(where: { $0.key == key }) {
            members.remove(at: index)
        }
        members.append((key, child))
        return child
    }

    /// A new last element of this array node.
    func appendElement() -> EncodingNode {
        becomeArray()
        let child = EncodingNode()
        elements.append(child)
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
        node.becomeObject()
        return KeyedEncodingContainer(
            KeyedTreeEncoder<Key>(node: node, codingPath: codingPath, writesAbsentOptionals: writesAbsentOptionals))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        node.becomeArray()
        return UnkeyedTreeEncoder(node: node, codingPath: codingPath, writesAbsentOptionals: writesAbsentOptionals)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { self }

    /// Encodes `value` into this node; a `JSONValue` is stored as it is.
    func encodeValue<T: Encodable>(_ value: T) throws {
        // Types compared before anything is cast: the casts are costly, and most values are none of these.
        if T.self == JSONValue.self, let json = value as? JSONValue {
            node.kind = .value(json)
        } else if T.self == RawJSON.self, let raw = value as? RawJSON {
            node.kind = .literal(raw.text)
        } else if T.self == [String: JSONValue].self, let object = value as? [String: JSONValue] {
            // A free-form object (a payload, `memory`): written with its keys sorted, as every `JSONValue` object.
            node.kind = .value(.object(object))
        } else {
            try value.encode(to: self)
        }
    }
}

extension TreeEncoder: SingleValueEncodingContainer {
    func encodeNil() throws { node.kind = .value(.null) }
    func encode(_ value: Bool) throws { node.kind = .value(.bool(value)) }
    func encode(_ value: String) throws { node.kind = .value(.string(value)) }
    func encode(_ value: Double) throws { node.kind = .value(.number(value)) }
    func encode(_ value: Float) throws { node.kind = .value(.number(Double(value))) }
    func encode(_ value: Int) throws { node.kind = .integer(String(value)) }
    func encode(_ value: Int8) throws { node.kind = .integer(String(value)) }
    func encode(_ value: Int16) throws { node.kind = .integer(String(value)) }
    func encode(_ value: Int32) throws { node.kind = .integer(String(value)) }
    func encode(_ value: Int64) throws { node.kind = .integer(String(value)) }
    func encode(_ value: UInt) throws { node.kind = .integer(String(value)) }
    func encode(_ value: UInt8) throws { node.kind = .integer(String(value)) }
    func encode(_ value: UInt16) throws { node.kind = .integer(String(value)) }
    func encode(_ value: UInt32) throws { node.kind = .integer(String(value)) }
    func encode(_ value: UInt64) throws { node.kind = .integer(String(value)) }
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

    // Scalars straight into the member's node: no encoder, no cast (most members are scalars).
    private func set(_ kind: EncodingNode.Kind, _ key: Key) { node.member(key.stringValue).kind = kind }
    mutating func encode(_ value: Bool, forKey key: Key) throws { set(.value(.bool(value)), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { set(.value(.string(value)), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws { set(.value(.number(value)), key) }
    mutating func encode(_ value: Float, forKey key: Key) throws { set(.value(.number(Double(value))), key) }
    mutating func encode(_ value: Int, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { set(.integer(String(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { set(.integer(String(value)), key) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws { try encoder(key).encodeValue(value) }

    // Every optional member is written, as `null` when absent: the interface's replies name every field.
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws {
        if let value { set(.value(.bool(value)), key) } else { try absent(key) }
    }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws {
        if let value { set(.value(.string(value)), key) } else { try absent(key) }
    }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws {
        if let value { set(.value(.number(value)), key) } else { try absent(key) }
    }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws {
        if let value { set(.integer(String(value)), key) } else { try absent(key) }
    }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws {
        if let value { set(.integer(String(value)), key) } else { try absent(key) }
    }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws {
        if let value { set(.integer(String(value)), key) } else { try absent(key) }
    }

    /// An absent optional member: `null`, or nothing when absent optionals are left out.
    private func absent(_ key: Key) throws {
        if writesAbsentOptionals { set(.value(.null), key) }
    }
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

    // Scalars straight into a new element: no encoder, no cast.
    private mutating func append(_ kind: EncodingNode.Kind) {
        node.appendElement().kind = kind
        count += 1
    }
    mutating func encode(_ value: Bool) throws { append(.value(.bool(value))) }
    mutating func encode(_ value: String) throws { append(.value(.string(value))) }
    mutating func encode(_ value: Double) throws { append(.value(.number(value))) }
    mutating func encode(_ value: Float) throws { append(.value(.number(Double(value)))) }
    mutating func encode(_ value: Int) throws { append(.integer(String(value))) }
    mutating func encode(_ value: Int8) throws { append(.integer(String(value))) }
    mutating func encode(_ value: Int16) throws { append(.integer(String(value))) }
    mutating func encode(_ value: Int32) throws { append(.integer(String(value))) }
    mutating func encode(_ value: Int64) throws { append(.integer(String(value))) }
    mutating func encode(_ value: UInt) throws { append(.integer(String(value))) }
    mutating func encode(_ value: UInt8) throws { append(.integer(String(value))) }
    mutating func encode(_ value: UInt16) throws { append(.integer(String(value))) }
    mutating func encode(_ value: UInt32) throws { append(.integer(String(value))) }
    mutating func encode(_ value: UInt64) throws { append(.integer(String(value))) }

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
        guard writeJSON(to: &output) else {
            let (number, path) = firstNonFiniteNumber(at: []) ?? (.nan, [])
            throw EncodingError.invalidValue(
                number, EncodingError.Context(codingPath: path, debugDescription: "JSON has no \(number)"))
        }
        return output
    }

    /// Appends the JSON text of the value to `output`; false (with `output` partly written) when it holds a NaN or
    /// infinite number, which JSON has no way to write (`firstNonFiniteNumber(at:)` says where).
    func writeJSON(to output: inout [UInt8]) -> Bool {
        switch self {
        case .null: output.append(contentsOf: "null".utf8)
        case .bool(let flag): output.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let number): return Self.writeNumber(number, to: &output)
        case .string(let text): Self.writeString(text, to: &output)
        case .array(let elements):
            output.append(UInt8(ascii: "["))
            var isFirst = true
            for element in elements {
                if !isFirst { output.append(UInt8(ascii: ",")) }
                isFirst = false
                guard element.writeJSON(to: &output) else { return false }
            }
            output.append(UInt8(ascii: "]"))
        case .object(let members):
            output.append(UInt8(ascii: "{"))
            var isFirst = true
            for (key, value) in members.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
                if !isFirst { output.append(UInt8(ascii: ",")) }
                isFirst = false
                Self.writeString(key, to: &output)
                output.append(UInt8(ascii: ":"))
                guard value.writeJSON(to: &output) else { return false }
            }
            output.append(UInt8(ascii: "}"))
        }
        return true
    }

    /// The first NaN or infinite number in the value (members in key order), with its path below `path`.
    func firstNonFiniteNumber(at path: [any CodingKey]) -> (Double, [any CodingKey])? {
        switch self {
        case .number(let number) where !number.isFinite:
            return (number, path)
        case .array(let elements):
            for (index, element) in elements.enumerated() {
                if let found = element.firstNonFiniteNumber(at: path + [AnyCodingKey(index: index)]) { return found }
            }
        case .object(let members):
            for (key, value) in members.sorted(by: { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }) {
                if let found = value.firstNonFiniteNumber(at: path + [AnyCodingKey(key)]) { return found }
            }
        default:
            break
        }
        return nil
    }

    /// A number as JSON: integral values within ±2^53 (exact in a `Double`) without a fraction or exponent, so
    /// ids and byte counts read naturally and decode as `int` in strict peers; others in Swift's shortest form.
    /// False for a NaN or infinite number, which it does not write.
    static func writeNumber(_ number: Double, to output: inout [UInt8]) -> Bool {
        guard number.isFinite else { return false }
        if number.rounded() == number, abs(number) <= 9_007_199_254_740_992 {
            output.append(contentsOf: String(Int64(number)).utf8)
        } else {
            output.append(contentsOf: number.description.utf8)
        }
        return true
    }

    /// A string as JSON: quotes, backslashes and control characters escaped, everything else (`/` and non-ASCII
    /// included) as it is.
    static func writeString(_ text: String, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        // Most strings need no escape: copied whole.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            output.append(contentsOf: text.utf8)
            output.append(UInt8(ascii: "\""))
            return
        }
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
