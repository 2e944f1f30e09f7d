// A JSON value of any shape, for the free-form parts of the interface (`object` in the Varlink IDL).

/// Any JSON value: the `Post` payload, the `backends` and `memory` objects of `GetStatus`, error parameters.
///
/// Numbers are `Double`, as in JSON itself; integers up to 2^53 survive a round trip exactly and are encoded
/// without a fraction. Decoding refuses nesting deeper than `maximumDepth`, so a hostile payload cannot drive
/// the decoder's recursion arbitrarily deep.
public enum JSONValue: Hashable, Sendable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number; JSON does not distinguish integers.
    case number(Double)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object; JSON objects are unordered, and so is this.
    case object([String: JSONValue])

    /// The deepest nesting of arrays and objects accepted when decoding, counted from the top of the message.
    /// 64 is far more than any payload needs and keeps the recursion's stack use small on a worker thread.
    public static let maximumDepth = 64
}

extension JSONValue: Codable {
    /// Decodes whatever JSON value comes next.
    ///
    /// Codable cannot ask which kind of value is next, so each container kind is tried in turn; a failed `try?`
    /// here is the answer "not this kind", not a hidden error. Only the last attempt's error is reported.
    public init(from decoder: any Decoder) throws {
        guard decoder.codingPath.count <= JSONValue.maximumDepth else {
            throw DecodingError.dataCorrupted(
                DecodingError.Context(
                    codingPath: decoder.codingPath,
                    debugDescription: "JSON nested deeper than \(JSONValue.maximumDepth) levels"))
        }
        if var array = try? decoder.unkeyedContainer() {
            var elements: [JSONValue] = []
            if let count = array.count { elements.reserveCapacity(count) }
            while !array.isAtEnd {
                elements.append(try array.decode(JSONValue.self))
            }
            self = .array(elements)
            return
        }
        if let object = try? decoder.container(keyedBy: AnyCodingKey.self) {
            var members: [String: JSONValue] = [:]
            members.reserveCapacity(object.allKeys.count)
            for key in object.allKeys {
                members[key.stringValue] = try object.decode(JSONValue.self, forKey: key)
            }
            self = .object(members)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let value = try? single.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? single.decode(String.self) {
            self = .string(value)
        } else {
            self = .number(try decodeNumber(Double.self, in: single, codingPath: decoder.codingPath))
        }
    }

    /// Encodes the value as the JSON it stands for.
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var single = encoder.singleValueContainer()
            try single.encodeNil()
        case .bool(let value):
            var single = encoder.singleValueContainer()
            try single.encode(value)
        case .number(let value):
            var single = encoder.singleValueContainer()
            // Integral values within Int64 go out without a fraction or exponent, so ids and byte counts read
            // naturally and decode as `int` in strict peers.
            if let integer = Int64(exactly: value) {
                try single.encode(integer)
            } else {
                try single.encode(value)
            }
        case .string(let value):
            var single = encoder.singleValueContainer()
            try single.encode(value)
        case .array(let elements):
            var array = encoder.unkeyedContainer()
            for element in elements {
                try array.encode(element)
            }
        case .object(let members):
            var object = encoder.container(keyedBy: AnyCodingKey.self)
            for (key, value) in members {
                try object.encode(value, forKey: AnyCodingKey(key))
            }
        }
    }
}

// Not ExpressibleByNilLiteral: `nil` must keep meaning Optional.none (write `.null` for JSON null), or closures
// such as `compactMapValues { $0 == .null ? nil : $0 }` would silently produce `.null` instead of dropping.
extension JSONValue: ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }

    /// Builds an object; a key given twice keeps its last value, as JSON parsers do.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSONValue {
    /// The string, when this is a string.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The number as an integer, when this is a number with no fractional part that fits in `Int`.
    public var intValue: Int? {
        if case .number(let value) = self { return Int(exactly: value) }
        return nil
    }

    /// The number, when this is a number.
    public var doubleValue: Double? {
        if case .number(let value) = self { return value }
        return nil
    }

    /// The boolean, when this is a boolean.
    public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The members, when this is an object.
    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// The elements, when this is an array.
    public var arrayValue: [JSONValue]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The member named `key`, when this is an object that has it.
    public subscript(key: String) -> JSONValue? {
        objectValue?[key]
    }
}

/// A coding key made from any string, for objects whose keys are data rather than a fixed set (the codec names the
/// `parameters` of a call with one).
package struct AnyCodingKey: CodingKey, Hashable, Sendable {
    package var stringValue: String
    package var intValue: Int?

    package init(_ string: String) {
        stringValue = string
        intValue = nil
    }

    package init?(stringValue: String) {
        self.init(stringValue)
    }

    package init?(intValue: Int) {
        self.init(index: intValue)
    }

    /// The key of an array element.
    package init(index: Int) {
        stringValue = String(index)
        intValue = index
    }
}
