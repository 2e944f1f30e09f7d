// Writing `BusValue`s into an sd-bus message, and reading typed values back out of a received one.
import BGTaskPOSIX
import CSystemd
import Glibc

/// A D-Bus type code as sd-bus takes it (a C `char`).
@inline(__always)
func busTypeCode(_ scalar: Unicode.Scalar) -> CChar { CChar(bitPattern: UInt8(ascii: scalar)) }

/// Runs an sd-bus call that returns a negative errno on failure, as `.system` errors naming `operation`.
@inline(__always)
@discardableResult
func busCall(_ operation: @autoclosure () -> String, _ body: () -> Int32) throws(ServiceManagerError) -> Int32 {
    do {
        return try systemCall(operation(), convention: .returnsNegativeErrno, body)
    } catch {
        throw .system(error)
    }
}

/// Appends `values` to `message` in order: basic values with `sd_bus_message_append_basic`, containers between
/// `sd_bus_message_open_container` and `sd_bus_message_close_container`.
func appendBusValues(_ values: [BusValue], to message: OpaquePointer) throws(ServiceManagerError) {
    for value in values { try appendBusValue(value, to: message) }
}

/// Appends one value; see `appendBusValues(_:to:)`. Checks the whole value first for what sd-bus would refuse with a
/// bare errno, halfway through (an array element of another type than the array's, a string with a NUL byte, a bad
/// path), to say what was wrong and leave the message as it was.
func appendBusValue(_ value: BusValue, to message: OpaquePointer) throws(ServiceManagerError) {
    if let problem = value.problem { throw .malformed(problem) }
    try appendCheckedBusValue(value, to: message)
}

/// Appends a value whose `problem` is nil.
private func appendCheckedBusValue(_ value: BusValue, to message: OpaquePointer) throws(ServiceManagerError) {
    switch value {
    case .boolean(let boolean):
        // sd-bus reads a boolean as a C int.
        var number: Int32 = boolean ? 1 : 0
        try appendBasic("b", &number)
    case .int32(var number): try appendBasic("i", &number)
    case .uint32(var number): try appendBasic("u", &number)
    case .int64(var number): try appendBasic("x", &number)
    case .uint64(var number): try appendBasic("t", &number)
    case .string(let string):
        // For string types sd-bus takes the C string itself, not a pointer to it.
        try busCall("sd_bus_message_append_basic(s)") {
            string.withCString { sd_bus_message_append_basic(message, busTypeCode("s"), $0) }
        }
    case .objectPath(let path):
        try busCall("sd_bus_message_append_basic(o)") {
            path.rawValue.withCString { sd_bus_message_append_basic(message, busTypeCode("o"), $0) }
        }
    case .array(let element, let elements):
        try inContainer("a", element, of: message) { () throws(ServiceManagerError) in
            for member in elements { try appendCheckedBusValue(member, to: message) }
        }
    case .structure(let fields):
        try inContainer("r", fields.map(\.signature).joined(), of: message) { () throws(ServiceManagerError) in
            for field in fields { try appendCheckedBusValue(field, to: message) }
        }
    case .variant(let inner):
        try inContainer("v", inner.signature, of: message) { () throws(ServiceManagerError) in
            try appendCheckedBusValue(inner, to: message)
        }
    }

    func appendBasic<Number>(_ type: Unicode.Scalar, _ number: inout Number) throws(ServiceManagerError) {
        try busCall("sd_bus_message_append_basic(\(type))") {
            withUnsafePointer(to: &number) { sd_bus_message_append_basic(message, busTypeCode(type), $0) }
        }
    }
}

extension BusValue {
    /// What makes the value impossible to put in a message, or nil: a string with a NUL byte, an invalid object
    /// path, an array element signature that is not one complete type or an element of another type, an empty
    /// structure.
    var problem: String? {
        switch self {
        case .boolean, .int32, .uint32, .int64, .uint64:
            return nil
        case .string(let string):
            return string.utf8.contains(0) ? "a string with a NUL byte: \(string.debugDescription)" : nil
        case .objectPath(let path):
            return path.isValid ? nil : "not an object path: \(path.rawValue.debugDescription)"
        case .array(let element, let elements):
            guard isSingleCompleteType(element) else { return "not an array element signature: \(element)" }
            if let stranger = elements.first(where: { $0.signature != element }) {
                return "an element of signature \(stranger.signature) in an array of \(element)"
            }
            return elements.lazy.compactMap(\.problem).first
        case .structure(let fields):
            guard !fields.isEmpty else { return "an empty structure" }
            return fields.lazy.compactMap(\.problem).first
        case .variant(let inner):
            return inner.problem
        }
    }
}

/// Opens a container of `type` (`a`, `r` for a structure, `v`) holding `contents`, runs `body`, closes it.
private func inContainer(
    _ type: Unicode.Scalar, _ contents: String, of message: OpaquePointer,
    _ body: () throws(ServiceManagerError) -> Void
) throws(ServiceManagerError) {
    try busCall("sd_bus_message_open_container(\(type), \(contents))") {
        sd_bus_message_open_container(message, busTypeCode(type), contents)
    }
    try body()
    try busCall("sd_bus_message_close_container(\(type), \(contents))") { sd_bus_message_close_container(message) }
}

/// Reads the arguments of a received message, in order (`sd_bus_message_read_basic`, `…enter_container`,
/// `…skip`). It exists only while the callback that received the message runs: it is not copyable and handed out
/// `inout`, so it cannot outlive the message.
///
/// Each `read…` throws `.malformed` when the next argument is of another type or missing; `readValue()` and the
/// property readers instead leave out (skip) values of types this client has no use for, so an unknown property
/// never makes a reply unreadable.
public struct BusMessageReader: ~Copyable {
    /// The message; the caller of the callback holds a reference for as long as the reader lives.
    let message: OpaquePointer

    /// A reader at the first argument of `message` (sealed: received, or sealed for a test).
    init(message: OpaquePointer) { self.message = message }

    /// The signature of all the message's arguments, e.g. `ua{sv}as`.
    public var signature: String {
        sd_bus_message_get_signature(message, 1).map { String(cString: $0) } ?? ""
    }

    /// Whether every argument of the current container (or of the message, at the top) has been read.
    public var isAtEnd: Bool { sd_bus_message_at_end(message, 0) != 0 }

    /// Reads a string (`s`).
    public mutating func readString() throws(ServiceManagerError) -> String {
        try readText("s")
    }

    /// Reads an object path (`o`).
    public mutating func readObjectPath() throws(ServiceManagerError) -> BusObjectPath {
        BusObjectPath(try readText("o"))
    }

    /// Reads a boolean (`b`).
    public mutating func readBoolean() throws(ServiceManagerError) -> Bool {
        try readBasic("b", Int32(0)) != 0
    }

    /// Reads a signed 32-bit integer (`i`).
    public mutating func readInt32() throws(ServiceManagerError) -> Int32 { try readBasic("i", Int32(0)) }

    /// Reads an unsigned 32-bit integer (`u`).
    public mutating func readUInt32() throws(ServiceManagerError) -> UInt32 { try readBasic("u", UInt32(0)) }

    /// Reads a signed 64-bit integer (`x`).
    public mutating func readInt64() throws(ServiceManagerError) -> Int64 { try readBasic("x", Int64(0)) }

    /// Reads an unsigned 64-bit integer (`t`).
    public mutating func readUInt64() throws(ServiceManagerError) -> UInt64 { try readBasic("t", UInt64(0)) }

    /// Reads an array of strings (`as`).
    public mutating func readStringArray() throws(ServiceManagerError) -> [String] {
        try enter("a", "s")
        var strings: [String] = []
        while !isAtEnd { strings.append(try readString()) }
        try exit()
        return strings
    }

    /// Reads a variant (`v`) and returns the value inside, or nil when it is of a type `readValue()` leaves out
    /// (the variant is skipped then).
    public mutating func readVariant() throws(ServiceManagerError) -> BusValue? {
        let (type, contents) = try peek()
        guard type == "v" else { throw .malformed("expected a variant, found \(type)") }
        try enter("v", contents)
        let value = try readValue()
        try exit()
        return value
    }

    /// Reads a property dictionary (`a{sv}`, as `Properties.GetAll` and `PropertiesChanged` carry): each property by
    /// name, with the value inside its variant. Properties of types `readValue()` leaves out are skipped.
    public mutating func readProperties() throws(ServiceManagerError) -> [String: BusValue] {
        try enter("a", "{sv}")
        var properties: [String: BusValue] = [:]
        while !isAtEnd {
            try enter("e", "sv")
            let name = try readString()
            let value = try readVariant()
            try exit()
            if let value { properties[name] = value }
        }
        try exit()
        return properties
    }

    /// Reads the next complete value, whatever its type: basic values of the types `BusValue` has, arrays and
    /// structures of them, variants. Returns nil, having skipped it, for anything else: bytes, 16-bit integers,
    /// doubles, signatures, descriptors, dictionaries, and containers holding any of those.
    public mutating func readValue() throws(ServiceManagerError) -> BusValue? {
        let (type, contents) = try peek()
        switch type {
        case "b": return .boolean(try readBoolean())
        case "i": return .int32(try readInt32())
        case "u": return .uint32(try readUInt32())
        case "x": return .int64(try readInt64())
        case "t": return .uint64(try readUInt64())
        case "s": return .string(try readString())
        case "o": return .objectPath(try readObjectPath())
        case "v":
            return try readVariant().map { .variant($0) }
        case "a" where Self.isReadable(contents):
            try enter("a", contents)
            var elements: [BusValue] = []
            var isComplete = true
            while !isAtEnd {
                // Only a variant inside can turn out unreadable: the element signature was checked.
                if let element = try readValue() { elements.append(element) } else { isComplete = false }
            }
            try exit()
            return isComplete ? .array(element: contents, elements) : nil
        case "r" where Self.isReadable("(\(contents))"):
            try enter("r", contents)
            var fields: [BusValue] = []
            var isComplete = true
            while !isAtEnd {
                if let field = try readValue() { fields.append(field) } else { isComplete = false }
            }
            try exit()
            return isComplete ? .structure(fields) : nil
        default:
            try skip()
            return nil
        }
    }

    /// Skips the next complete value (`sd_bus_message_skip` of one element).
    public mutating func skip() throws(ServiceManagerError) {
        try reading("skip", zeroIsMissing: false) { sd_bus_message_skip(message, nil) }
    }

    /// Whether every type in `signature` is one `readValue()` gives back (it then reads a container whole).
    static func isReadable(_ signature: String) -> Bool {
        signature.allSatisfy { "biuxtsoav()".contains($0) }
    }

    /// The type of the next value and, for a container, the signature of what it holds.
    private func peek() throws(ServiceManagerError) -> (type: Character, contents: String) {
        var type: CChar = 0
        var contents: UnsafePointer<CChar>?
        try reading("peek") { sd_bus_message_peek_type(message, &type, &contents) }
        let scalar = Unicode.Scalar(UInt8(bitPattern: type))
        return (Character(scalar), contents.map { String(cString: $0) } ?? "")
    }

    /// Enters a container of `type` holding `contents`.
    private mutating func enter(_ type: Unicode.Scalar, _ contents: String) throws(ServiceManagerError) {
        try reading("enter \(type)\(contents)") {
            sd_bus_message_enter_container(message, busTypeCode(type), contents)
        }
    }

    /// Leaves the container entered last.
    private mutating func exit() throws(ServiceManagerError) {
        try reading("exit container", zeroIsMissing: false) { sd_bus_message_exit_container(message) }
    }

    /// Reads a string-like value (`s`, `o`), copied out of the message.
    private mutating func readText(_ type: Unicode.Scalar) throws(ServiceManagerError) -> String {
        var pointer: UnsafePointer<CChar>?
        try reading("read \(type)") {
            withUnsafeMutablePointer(to: &pointer) { sd_bus_message_read_basic(message, busTypeCode(type), $0) }
        }
        guard let pointer else { throw .malformed("read \(type): no value") }
        return String(cString: pointer)
    }

    /// Reads a fixed-size value of `type` into a `Number`.
    private mutating func readBasic<Number>(_ type: Unicode.Scalar, _ initial: Number) throws(ServiceManagerError)
        -> Number
    {
        var number = initial
        try reading("read \(type)") {
            withUnsafeMutablePointer(to: &number) { sd_bus_message_read_basic(message, busTypeCode(type), $0) }
        }
        return number
    }

    /// Runs a reading call: a negative errno (another type than asked for: ENXIO) and, unless `zeroIsMissing` is
    /// false, 0 (nothing left where a value was asked for) both mean the message is not what the caller expects.
    private func reading(_ what: String, zeroIsMissing: Bool = true, _ body: () -> Int32) throws(ServiceManagerError) {
        let result = body()
        if result < 0 {
            throw .malformed("\(what) at signature \(signature): \(Errno(rawValue: -result).message)")
        }
        if result == 0 && zeroIsMissing { throw .malformed("\(what) at signature \(signature): no value left") }
    }
}
