// The JSON parser of the wire: untrusted bytes to a `JSONValue` tree in one pass, strictly RFC 8259, with limits.

/// Why a JSON text was refused, and where.
public struct JSONParseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The byte offset the parser stopped at.
    public var offset: Int
    /// What was wrong there.
    public var reason: String
    /// Whether the bytes were not UTF-8 at all (rather than UTF-8 that is not valid JSON).
    public var isInvalidUTF8: Bool

    /// An error at `offset`.
    public init(offset: Int, reason: String, isInvalidUTF8: Bool = false) {
        self.offset = offset
        self.reason = reason
        self.isInvalidUTF8 = isInvalidUTF8
    }

    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

/// Parses JSON text (RFC 8259) into a `JSONValue`, refusing everything the RFC does not allow and everything past
/// its limits, so that bytes from any peer become either a bounded tree or an error, never a crash.
///
/// - The text must be valid UTF-8 (checked first, a word at a time while it is ASCII).
/// - One value, with only JSON whitespace (space, tab, LF, CR) around it.
/// - Arrays and objects nest at most `maximumDepth` deep; the recursion is bounded by it.
/// - Numbers follow the RFC's grammar (no leading zeros, `+`, `.5`, `NaN` or `Infinity`), are at most
///   `maximumNumberLength` bytes long, and must be finite as a `Double` (`1e400` is refused; `1e-400` is 0).
/// - Strings: no raw control characters; the RFC's escapes only; `\u` escapes of UTF-16 surrogates only in
///   high–low pairs (a lone surrogate is refused, as it stands for no character).
/// - Objects: keys are unique (a repeated key is refused rather than one of its values silently kept).
public struct JSONParser {
    /// The deepest nesting accepted by default: four times `JSONValue.maximumDepth`, which is applied to each
    /// parameter as it is decoded, so that a payload nested too deep is refused by its name (`InvalidParameter`)
    /// rather than as a message that is not JSON. Each level is one stack frame of a few hundred bytes.
    public static let defaultMaximumDepth = 256
    /// The longest number accepted, in bytes: a `Double` needs 17 significant digits and an exponent, and no
    /// message has a reason to send more.
    public static let maximumNumberLength = 64

    private let bytes: UnsafeRawBufferPointer
    private let maximumDepth: Int
    private var offset = 0

    private init(bytes: UnsafeRawBufferPointer, maximumDepth: Int) {
        self.bytes = bytes
        self.maximumDepth = maximumDepth
    }

    /// The value `text` holds.
    public static func parse(_ text: UnsafeRawBufferPointer, maximumDepth: Int = defaultMaximumDepth)
        throws(JSONParseError) -> JSONValue
    {
        if let invalid = firstInvalidUTF8Offset(text) {
            throw JSONParseError(offset: invalid, reason: "not UTF-8", isInvalidUTF8: true)
        }
        var parser = JSONParser(bytes: text, maximumDepth: maximumDepth)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.offset == text.count else { throw parser.error("text after the value") }
        return value
    }

    /// The value `text` holds.
    public static func parse<Bytes: Collection>(_ text: Bytes, maximumDepth: Int = defaultMaximumDepth)
        throws(JSONParseError) -> JSONValue where Bytes.Element == UInt8
    {
        let result: Result<JSONValue, JSONParseError>? = text.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONParseError) in try parse(UnsafeRawBufferPointer(buffer), maximumDepth: maximumDepth)
            }
        }
        if let result { return try result.get() }
        let copy = Array(text)
        let copied = copy.withUnsafeBytes { buffer in
            Result { () throws(JSONParseError) in try parse(buffer, maximumDepth: maximumDepth) }
        }
        return try copied.get()
    }

    // MARK: Values

    private mutating func parseValue(depth: Int) throws(JSONParseError) -> JSONValue {
        guard offset < bytes.count else { throw error("a value was expected, the text ended") }
        switch bytes[offset] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth + 1)
        case UInt8(ascii: "["): return try parseArray(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectWord("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try expectWord("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try expectWord("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return .number(try parseNumber())
        default:
            throw error("a value was expected")
        }
    }

    private mutating func parseObject(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= maximumDepth else { throw error("nested deeper than \(maximumDepth) levels") }
        offset += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if try consume(UInt8(ascii: "}")) { return .object(members) }
        while true {
            guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else {
                throw error("a member name (a string) was expected")
            }
            let keyOffset = offset
            let key = try parseString()
            skipWhitespace()
            guard try consume(UInt8(ascii: ":")) else { throw error("':' was expected after a member name") }
            skipWhitespace()
            let value = try parseValue(depth: depth)
            if members.updateValue(value, forKey: key) != nil {
                throw JSONParseError(offset: keyOffset, reason: "the member name \"\(key)\" appears twice")
            }
            skipWhitespace()
            if try consume(UInt8(ascii: "}")) { return .object(members) }
            guard try consume(UInt8(ascii: ",")) else { throw error("',' or '}' was expected") }
            skipWhitespace()
        }
    }

    private mutating func parseArray(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth <= maximumDepth else { throw error("nested deeper than \(maximumDepth) levels") }
        offset += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if try consume(UInt8(ascii: "]")) { return .array(elements) }
        while true {
            elements.append(try parseValue(depth: depth))
            skipWhitespace()
            if try consume(UInt8(ascii: "]")) { return .array(elements) }
            guard try consume(UInt8(ascii: ",")) else { throw error("',' or ']' was expected") }
            skipWhitespace()
        }
    }

    // MARK: Strings

    /// A string, from its opening quote to past its closing one.
    private mutating func parseString() throws(JSONParseError) -> String {
        offset += 1
        let start = offset
        // The common case: no escape; the bytes are the string (valid UTF-8, checked up front).
        while offset < bytes.count {
            let byte = bytes[offset]
            if byte == UInt8(ascii: "\"") {
                let string = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
                offset += 1
                return string
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw error("a control character inside a string must be escaped") }
            offset += 1
        }
        var utf8 = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<offset]))
        while offset < bytes.count {
            let byte = bytes[offset]
            switch byte {
            case UInt8(ascii: "\""):
                offset += 1
                return String(decoding: utf8, as: UTF8.self)
            case UInt8(ascii: "\\"):
                try parseEscape(into: &utf8)
            case 0..<0x20:
                throw error("a control character inside a string must be escaped")
            default:
                utf8.append(byte)
                offset += 1
            }
        }
        throw error("the text ended inside a string")
    }

    /// One escape sequence, from its backslash, appended to `utf8` as UTF-8.
    private mutating func parseEscape(into utf8: inout [UInt8]) throws(JSONParseError) {
        guard offset + 1 < bytes.count else { throw error("the text ended inside an escape") }
        let letter = bytes[offset + 1]
        let simple: UInt8? =
            switch letter {
            case UInt8(ascii: "\""): UInt8(ascii: "\"")
            case UInt8(ascii: "\\"): UInt8(ascii: "\\")
            case UInt8(ascii: "/"): UInt8(ascii: "/")
            case UInt8(ascii: "b"): 0x08
            case UInt8(ascii: "f"): 0x0C
            case UInt8(ascii: "n"): 0x0A
            case UInt8(ascii: "r"): 0x0D
            case UInt8(ascii: "t"): 0x09
            default: nil
            }
        if let simple {
            utf8.append(simple)
            offset += 2
            return
        }
        guard letter == UInt8(ascii: "u") else { throw error("an unknown escape") }
        let escapeOffset = offset
        let first = try parseHexEscape()
        var scalarValue = UInt32(first)
        switch first {
        case 0xD800...0xDBFF:
            // A high surrogate: only with the low one right after it is it a character.
            guard offset + 1 < bytes.count, bytes[offset] == UInt8(ascii: "\\"), bytes[offset + 1] == UInt8(ascii: "u")
            else { throw JSONParseError(offset: escapeOffset, reason: "a lone high surrogate") }
            let second = try parseHexEscape()
            guard (0xDC00...0xDFFF).contains(second) else {
                throw JSONParseError(offset: escapeOffset, reason: "a high surrogate without its low surrogate")
            }
            scalarValue = 0x10000 + ((UInt32(first) - 0xD800) << 10) + (UInt32(second) - 0xDC00)
        case 0xDC00...0xDFFF:
            throw JSONParseError(offset: escapeOffset, reason: "a lone low surrogate")
        default:
            break
        }
        guard let scalar = Unicode.Scalar(scalarValue) else {
            throw JSONParseError(offset: escapeOffset, reason: "not a Unicode scalar")
        }
        utf8.append(contentsOf: UTF8.encode(scalar)!)
    }

    /// `\uXXXX` at `offset`: its 16-bit value.
    private mutating func parseHexEscape() throws(JSONParseError) -> UInt16 {
        var value: UInt16 = 0
        for index in (offset + 2)..<(offset + 6) {
            guard index < bytes.count else {
                throw JSONParseError(offset: index, reason: "the text ended inside a \\u escape")
            }
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw JSONParseError(offset: index, reason: "a \\u escape needs four hexadecimal digits")
            }
            value = value << 4 | UInt16(digit)
        }
        offset += 6
        return value
    }

    // MARK: Numbers

    private mutating func parseNumber() throws(JSONParseError) -> Double {
        let start = offset
        if bytes[offset] == UInt8(ascii: "-") { offset += 1 }
        guard offset < bytes.count, isDigit(bytes[offset]) else { throw error("a digit was expected") }
        if bytes[offset] == UInt8(ascii: "0") {
            offset += 1
            if offset < bytes.count, isDigit(bytes[offset]) { throw error("a number cannot start with 0") }
        } else {
            skipDigits()
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
            offset += 1
            guard offset < bytes.count, isDigit(bytes[offset]) else { throw error("a digit was expected after '.'") }
            skipDigits()
        }
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
            offset += 1
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") {
                offset += 1
            }
            guard offset < bytes.count, isDigit(bytes[offset]) else {
                throw error("a digit was expected in the exponent")
            }
            skipDigits()
        }
        guard offset - start <= Self.maximumNumberLength else {
            throw JSONParseError(offset: start, reason: "a number longer than \(Self.maximumNumberLength) bytes")
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<offset]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            throw JSONParseError(offset: start, reason: "a number out of range")
        }
        return value
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    private mutating func skipDigits() {
        while offset < bytes.count, isDigit(bytes[offset]) { offset += 1 }
    }

    // MARK: Small pieces

    private mutating func skipWhitespace() {
        while offset < bytes.count {
            switch bytes[offset] {
            case 0x20, 0x09, 0x0A, 0x0D: offset += 1
            default: return
            }
        }
    }

    /// Consumes `byte` if it comes next.
    private mutating func consume(_ byte: UInt8) throws(JSONParseError) -> Bool {
        guard offset < bytes.count, bytes[offset] == byte else { return false }
        offset += 1
        return true
    }

    private mutating func expectWord(_ word: StaticString) throws(JSONParseError) {
        let length = word.utf8CodeUnitCount
        guard offset + length <= bytes.count else { throw error("the text ended inside a literal") }
        let matches = word.withUTF8Buffer { expected in
            (0..<length).allSatisfy { bytes[offset + $0] == expected[$0] }
        }
        guard matches else { throw error("a value was expected") }
        offset += length
    }

    private func error(_ reason: String) -> JSONParseError {
        JSONParseError(offset: offset, reason: reason)
    }
}

/// The offset of the first byte that is not part of valid UTF-8 in `bytes`, or nil when it all is. Messages are
/// nearly always ASCII, so a word-at-a-time scan for high bits settles most; the rest go through the standard
/// library's validation.
func firstInvalidUTF8Offset(_ bytes: UnsafeRawBufferPointer) -> Int? {
    var offset = 0
    let highBits: UInt64 = 0x8080_8080_8080_8080
    while offset + 8 <= bytes.count {
        if bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self) & highBits != 0 { break }
        offset += 8
    }
    while offset < bytes.count, bytes[offset] < 0x80 {
        offset += 1
    }
    if offset == bytes.count { return nil }
    var iterator = UnsafeRawBufferPointer(rebasing: bytes[offset...]).makeIterator()
    var decoder = UTF8()
    var position = offset
    while true {
        // Each scalar's bytes are counted to report where the first bad one starts.
        switch decoder.decode(&iterator) {
        case .scalarValue(let scalar): position += UTF8.width(scalar)
        case .emptyInput: return nil
        case .error: return position
        }
    }
}
