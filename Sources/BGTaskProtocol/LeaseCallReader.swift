// The lease calls read in one pass over their bytes, straight into their parameter types, with no tree.

import Glibc

/// Reads a `BeginBackgroundTask` or `EndBackgroundTask` call in one pass over its bytes: the envelope, the method
/// and the parameters, straight into their types, with no `JSONValue` tree and no decoder. These are the calls an
/// app makes on its way out of the foreground, when every microsecond counts.
///
/// The reader knows a strict subset of JSON and hands everything else to the tree parser by answering nil, so
/// that it never accepts what `JSONParser` and the tree decoder would refuse, and never reads a value differently
/// (the differential fuzz target and `LeaseCallReaderTests` check both). It answers only for a message that:
/// - is one object, with JSON whitespace (space, tab, LF, CR) around its tokens and nothing after it;
/// - has only the members `method`, `parameters`, `more`, `oneway` and `upgrade`, each at most once, in any order;
/// - calls exactly `io.bgtask.Lifecycle.BeginBackgroundTask` or `io.bgtask.Lifecycle.EndBackgroundTask`;
/// - has flags `true`, `false` or `null`, and `parameters` an object (or `null`, or absent);
/// - has exactly the parameters the method declares, each at most once: `app` and, for `BeginBackgroundTask`,
///   optionally `name` (a string or `null`), or `app` and `taskId` for `EndBackgroundTask`;
/// - writes its strings without escapes, in printable ASCII (so the message is valid UTF-8), and `taskId` as an
///   integer of at most 15 digits (every such integer is exact as the `Double` the tree parser reads).
///
/// Nothing nests deeper than the parameters object, so the reader needs no depth limit; it reads each byte at
/// most once and allocates only the strings it returns.
public enum LeaseCallReader {
    /// The call `message` holds, if it is a lease call in the subset above; nil for anything else, well-formed
    /// or not, which the tree parser then reads (and refuses, when it must).
    public static func read(_ message: UnsafeRawBufferPointer) -> DecodedCall? {
        var cursor = Cursor(bytes: message)
        return cursor.readCall()
    }

    /// The longest `taskId` read here, in digits: 10^15 - 1 is below 2^53, so a `Double` holds it exactly.
    static let maximumIntegerDigits = 15
}

/// The two methods read here.
private enum LeaseMethod {
    case begin, end

    static let beginName = VarlinkMethodName(
        interface: LifecycleInterface.name, member: LifecycleMethod.beginBackgroundTask.rawValue)
    static let endName = VarlinkMethodName(
        interface: LifecycleInterface.name, member: LifecycleMethod.endBackgroundTask.rawValue)

    var name: VarlinkMethodName {
        switch self {
        case .begin: Self.beginName
        case .end: Self.endName
        }
    }
}

/// The members of the envelope and of the parameters object, as bits of a set, so that a repeated one is seen.
private struct Members: OptionSet {
    let rawValue: UInt8

    static let method = Members(rawValue: 1 << 0)
    static let parameters = Members(rawValue: 1 << 1)
    static let more = Members(rawValue: 1 << 2)
    static let oneway = Members(rawValue: 1 << 3)
    static let upgrade = Members(rawValue: 1 << 4)

    static let app = Members(rawValue: 1 << 0)
    static let name = Members(rawValue: 1 << 1)
    static let taskId = Members(rawValue: 1 << 2)
}

private struct Cursor {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    init(bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    // MARK: The envelope

    mutating func readCall() -> DecodedCall? {
        guard takeToken(UInt8(ascii: "{")) else { return nil }
        var seen: Members = []
        var method: LeaseMethod?
        var more = false
        var oneway = false
        var upgrade = false
        var present: Members = []
        var app: String?
        var name: String?
        var nullName = false
        var taskId: Int?
        repeat {
            guard let member = readEnvelopeMember(), seen.insert(member).inserted, takeToken(UInt8(ascii: ":"))
            else { return nil }
            skipWhitespace()
            switch member {
            case .method:
                guard let called = readMethod() else { return nil }
                method = called
            case .parameters:
                guard
                    readParameters(
                        present: &present, app: &app, name: &name, nullName: &nullName, taskId: &taskId)
                else {
                    return nil
                }
            case .more:
                guard let flag = readFlag() else { return nil }
                more = flag
            case .oneway:
                guard let flag = readFlag() else { return nil }
                oneway = flag
            default:
                guard let flag = readFlag() else { return nil }
                upgrade = flag
            }
        } while takeToken(UInt8(ascii: ","))
        guard takeToken(UInt8(ascii: "}")) else { return nil }
        skipWhitespace()
        guard offset == bytes.count, let method, let app else { return nil }
        let header = VarlinkCallHeader(method: method.name, more: more, oneway: oneway, upgrade: upgrade)
        switch method {
        case .begin:
            guard !present.contains(.taskId) else { return nil }
            return DecodedCall(
                header: header, lease: .begin(BeginBackgroundTaskParameters(app: app, name: name), nullName: nullName))
        case .end:
            guard !present.contains(.name), let taskId else { return nil }
            return DecodedCall(header: header, lease: .end(EndBackgroundTaskParameters(app: app, taskId: taskId)))
        }
    }

    /// A member name of the envelope, after the whitespace before it; nil for any other name.
    mutating func readEnvelopeMember() -> Members? {
        guard let key = readPlainString() else { return nil }
        if equals(key, "method") { return .method }
        if equals(key, "parameters") { return .parameters }
        if equals(key, "more") { return .more }
        if equals(key, "oneway") { return .oneway }
        if equals(key, "upgrade") { return .upgrade }
        return nil
    }

    /// The method called, if it is one of the two read here.
    mutating func readMethod() -> LeaseMethod? {
        guard let called = readPlainString() else { return nil }
        if equals(called, "io.bgtask.Lifecycle.BeginBackgroundTask") { return .begin }
        if equals(called, "io.bgtask.Lifecycle.EndBackgroundTask") { return .end }
        return nil
    }

    /// `true`, `false` or `null` (false).
    mutating func readFlag() -> Bool? {
        if takeWord("true") { return true }
        if takeWord("false") || takeWord("null") { return false }
        return nil
    }

    // MARK: The parameters

    /// The parameters object, or `null`; false for anything else.
    mutating func readParameters(
        present: inout Members, app: inout String?, name: inout String?, nullName: inout Bool, taskId: inout Int?
    ) -> Bool {
        if takeWord("null") { return true }
        guard takeToken(UInt8(ascii: "{")) else { return false }
        skipWhitespace()
        if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
            offset += 1
            return true
        }
        repeat {
            guard let key = readPlainString(), takeToken(UInt8(ascii: ":")) else { return false }
            skipWhitespace()
            let member: Members
            if equals(key, "app") {
                member = .app
                guard let value = readPlainString() else { return false }
                app = String(decoding: value, as: UTF8.self)
            } else if equals(key, "name") {
                member = .name
                if takeWord("null") {
                    nullName = true
                } else {
                    guard let value = readPlainString() else { return false }
                    name = String(decoding: value, as: UTF8.self)
                }
            } else if equals(key, "taskId") {
                member = .taskId
                guard let value = readInteger() else { return false }
                taskId = value
            } else {
                return false
            }
            guard present.insert(member).inserted else { return false }
        } while takeToken(UInt8(ascii: ","))
        return takeToken(UInt8(ascii: "}"))
    }

    // MARK: Tokens

    /// A string of printable ASCII without escapes, after the whitespace before it; its bytes without the quotes.
    mutating func readPlainString() -> UnsafeRawBufferPointer? {
        skipWhitespace()
        guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { return nil }
        let start = offset + 1
        var index = start
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                offset = index + 1
                return UnsafeRawBufferPointer(rebasing: bytes[start..<index])
            }
            // A control character, an escape or a byte of a multi-byte character: the tree parser's to read.
            guard byte >= 0x20, byte < 0x7F, byte != UInt8(ascii: "\\") else { return nil }
            index += 1
        }
        return nil
    }

    /// An integer as JSON writes it (no leading zero, no fraction or exponent, which the token after it refuses)
    /// of at most `maximumIntegerDigits` digits.
    mutating func readInteger() -> Int? {
        var index = offset
        let negative = index < bytes.count && bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        let firstDigit = index
        var value = 0
        while index < bytes.count, bytes[index] >= UInt8(ascii: "0"), bytes[index] <= UInt8(ascii: "9") {
            guard index - firstDigit < LeaseCallReader.maximumIntegerDigits else { return nil }
            value = value * 10 + Int(bytes[index] - UInt8(ascii: "0"))
            index += 1
        }
        let digits = index - firstDigit
        guard digits > 0, digits == 1 || bytes[firstDigit] != UInt8(ascii: "0") else { return nil }
        offset = index
        return negative ? -value : value
    }

    /// Skips whitespace, then takes `byte` if it comes next.
    mutating func takeToken(_ byte: UInt8) -> Bool {
        skipWhitespace()
        guard offset < bytes.count, bytes[offset] == byte else { return false }
        offset += 1
        return true
    }

    /// Takes `word` (`true`, `false` or `null`) if it comes next.
    mutating func takeWord(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard bytes.count - offset >= count, memcmp(bytes.baseAddress! + offset, word.utf8Start, count) == 0 else {
            return false
        }
        offset += count
        return true
    }

    mutating func skipWhitespace() {
        while offset < bytes.count {
            switch bytes[offset] {
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"): offset += 1
            default: return
            }
        }
    }

    func equals(_ bytes: UnsafeRawBufferPointer, _ text: StaticString) -> Bool {
        bytes.count == text.utf8CodeUnitCount && memcmp(bytes.baseAddress!, text.utf8Start, bytes.count) == 0
    }
}
