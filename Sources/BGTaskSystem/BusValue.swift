// The D-Bus values a service manager's methods take and give, as Swift values that know their type signatures.

/// A D-Bus object path (`o`), such as `/org/freedesktop/systemd1/unit/app_2eslice`: the name of an object of the
/// peer (a unit, a job). Compared by its text.
public struct BusObjectPath: RawRepresentable, Hashable, Sendable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The path as written on the wire.
    public var rawValue: String

    /// Wraps a path; `isValid` says whether the bus would accept it.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Wraps a path; `isValid` says whether the bus would accept it.
    public init(_ rawValue: String) { self.rawValue = rawValue }

    /// Wraps a literal path.
    public init(stringLiteral value: String) { self.rawValue = value }

    /// Whether the bus accepts it: `/`, or `/` followed by elements of ASCII letters, digits and `_` joined by
    /// single slashes, with no slash at the end (the D-Bus specification's rule).
    public var isValid: Bool {
        let bytes = Array(rawValue.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        var previousWasSlash = true
        for byte in bytes.dropFirst() {
            if byte == UInt8(ascii: "/") {
                if previousWasSlash { return false }
                previousWasSlash = true
            } else {
                let isElementByte =
                    (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                    || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                    || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "_")
                guard isElementByte else { return false }
                previousWasSlash = false
            }
        }
        return !previousWasSlash
    }

    /// The path itself.
    public var description: String { rawValue }
}

/// A value in a D-Bus message: the basic types a service manager's methods use, and the containers that hold them.
///
/// Building a message takes any of these; reading one gives them back for the types listed here and leaves out
/// (skips) values of other types (bytes, doubles, descriptors, dictionaries inside variants), so a property this
/// client has no use for can never make a reply unreadable.
public indirect enum BusValue: Hashable, Sendable, CustomStringConvertible {
    /// `b`: a boolean.
    case boolean(Bool)
    /// `i`: a signed 32-bit integer.
    case int32(Int32)
    /// `u`: an unsigned 32-bit integer.
    case uint32(UInt32)
    /// `x`: a signed 64-bit integer.
    case int64(Int64)
    /// `t`: an unsigned 64-bit integer.
    case uint64(UInt64)
    /// `s`: a UTF-8 string without NUL bytes.
    case string(String)
    /// `o`: an object path.
    case objectPath(BusObjectPath)
    /// `aT`: an array whose elements all have the signature `element` (stated, so an empty array has a type).
    case array(element: String, [BusValue])
    /// `(…)`: a structure of the values in order.
    case structure([BusValue])
    /// `v`: a variant, a value carrying its own signature.
    case variant(BusValue)

    /// An array of strings (`as`).
    public static func strings(_ strings: [String]) -> BusValue {
        .array(element: "s", strings.map { .string($0) })
    }

    /// The D-Bus type signature of the value, e.g. `s`, `as`, `(sasb)`, `v`.
    public var signature: String {
        switch self {
        case .boolean: "b"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .string: "s"
        case .objectPath: "o"
        case .array(let element, _): "a" + element
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        case .variant: "v"
        }
    }

    /// The string of a `.string`, else nil.
    public var stringValue: String? {
        if case .string(let value) = self { value } else { nil }
    }

    /// The number of an `.int32`, else nil.
    public var int32Value: Int32? {
        if case .int32(let value) = self { value } else { nil }
    }

    /// The number of a `.uint32`, else nil.
    public var uint32Value: UInt32? {
        if case .uint32(let value) = self { value } else { nil }
    }

    /// The number of a `.uint64`, else nil.
    public var uint64Value: UInt64? {
        if case .uint64(let value) = self { value } else { nil }
    }

    /// The strings of an array of strings (`as`), else nil.
    public var stringArrayValue: [String]? {
        guard case .array("s", let elements) = self else { return nil }
        return elements.compactMap(\.stringValue)
    }

    /// The value in a form close to busctl's: `"text"`, `42`, `true`, `[...]`, `(...)`, `<v>`.
    public var description: String {
        switch self {
        case .boolean(let value): "\(value)"
        case .int32(let value): "\(value)"
        case .uint32(let value): "\(value)"
        case .int64(let value): "\(value)"
        case .uint64(let value): "\(value)"
        case .string(let value): "\"\(value)\""
        case .objectPath(let value): value.rawValue
        case .array(_, let elements): "[" + elements.map(\.description).joined(separator: ", ") + "]"
        case .structure(let fields): "(" + fields.map(\.description).joined(separator: ", ") + ")"
        case .variant(let value): "<\(value)>"
        }
    }
}

/// The signature of one complete type that starts `signature` (`s`, `as`, `(sasb)`, `a{sv}`), or nil when it does
/// not start with one.
func firstCompleteType(of signature: Substring) -> Substring? {
    guard let first = signature.first else { return nil }
    switch first {
    case "b", "i", "u", "x", "t", "s", "o", "g", "y", "n", "q", "d", "h", "v":
        return signature.prefix(1)
    case "a":
        guard let element = firstCompleteType(of: signature.dropFirst()) else { return nil }
        return signature.prefix(1 + element.count)
    case "(", "{":
        let closing: Character = first == "(" ? ")" : "}"
        var rest = signature.dropFirst()
        var length = 1
        var fields = 0
        while let next = rest.first, next != closing {
            guard let field = firstCompleteType(of: rest) else { return nil }
            rest = rest.dropFirst(field.count)
            length += field.count
            fields += 1
        }
        guard rest.first == closing, fields > 0, first == "(" || fields == 2 else { return nil }
        return signature.prefix(length + 1)
    default:
        return nil
    }
}

/// Whether `signature` is exactly one complete type.
func isSingleCompleteType(_ signature: String) -> Bool {
    firstCompleteType(of: Substring(signature))?.count == signature.count
}
