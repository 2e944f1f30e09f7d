// The journal's record of changes written as JSON by hand: the same JSON the synthesized `Encodable` conformances
// give (a decoder reads either), in a fraction of the time, since one is written for every saved lease call.

import BGTaskCore

/// Writes values a record of changes holds straight into bytes. What is rare (a queued event, a ledger, how a
/// process ended) goes through `fallback`, the caller's JSON encoder; an app's policy, which never changes, is
/// encoded by it once per distinct policy and kept.
struct ChangesJSONWriter {
    /// Encodes a value as `Encodable` would, for the rare parts.
    typealias Fallback = (any Encodable) throws -> [UInt8]

    private let fallback: Fallback
    private var policies: [AppPolicy: [UInt8]] = [:]
    /// The last policy written and its encoding: apps mostly share one, and comparing is cheaper than hashing.
    private var lastPolicy: (policy: AppPolicy, bytes: [UInt8])?

    /// A writer using `fallback` for the rare parts.
    init(fallback: @escaping Fallback) {
        self.fallback = fallback
    }

    /// Writes `changes` as one JSON object.
    mutating func write(_ changes: LifecycleChanges, to out: inout [UInt8]) throws {
        var object = ObjectWriter(&out)
        object.key("apps", &out)
        out.append(UInt8(ascii: "["))
        for (index, app) in changes.apps.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            try write(app, to: &out)
        }
        out.append(UInt8(ascii: "]"))
        object.key("forgotten", &out)
        Self.writeIDs(changes.forgotten, to: &out)
        if let tasks = changes.tasks {
            object.key("tasks", &out)
            out.append(UInt8(ascii: "["))
            for (index, change) in tasks.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                var entry = ObjectWriter(&out)
                entry.key("app", &out)
                Self.writeID(change.app.rawValue, to: &out)
                entry.key("began", &out)
                Self.write(change.began, to: &out)
                entry.key("ended", &out)
                Self.writeIDs(change.ended, to: &out)
                entry.close(&out)
            }
            out.append(UInt8(ascii: "]"))
        }
        // Three calls rather than a loop over an array of the three: that array was built on every record.
        func writeNames(_ key: StaticString, _ names: [NamedChange<AppID>]) {
            object.key(key, &out)
            out.append(UInt8(ascii: "["))
            for (index, change) in names.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                var entry = ObjectWriter(&out)
                entry.key("name", &out)
                Self.writeString(change.name, to: &out)
                if let value = change.value {
                    entry.key("value", &out)
                    Self.writeID(value.rawValue, to: &out)
                }
                entry.close(&out)
            }
            out.append(UInt8(ascii: "]"))
        }
        writeNames("liveNames", changes.liveNames)
        writeNames("detachedNames", changes.detachedNames)
        writeNames("endedNames", changes.endedNames)
        object.key("ledgers", &out)
        if changes.ledgers.isEmpty {
            out.append(UInt8(ascii: "["))
            out.append(UInt8(ascii: "]"))
        } else {
            out += try fallback(changes.ledgers)
        }
        if let order = changes.endedOrder {
            object.key("endedOrder", &out)
            Self.writeIDs(order, to: &out)
        }
        if let order = changes.detachedOrder {
            object.key("detachedOrder", &out)
            Self.writeIDs(order, to: &out)
        }
        // Scheduled work changes seldom (a submit, a run's start and end): the encoder's form. Left out, an
        // acknowledged request would be in no file until the next snapshot.
        if let requests = changes.scheduledRequests {
            object.key("scheduledRequests", &out)
            out += try fallback(requests)
        }
        if let ledgers = changes.scheduledLedgers {
            object.key("scheduledLedgers", &out)
            out += try fallback(ledgers)
        }
        if let lastForeground = changes.lastForeground {
            object.key("lastForeground", &out)
            out += try fallback(lastForeground)
        }
        object.key("nextSerial", &out)
        Self.writeInteger(changes.nextSerial, to: &out)
        object.key("nextTaskID", &out)
        Self.writeInteger(changes.nextTaskID, to: &out)
        object.key("nextEventID", &out)
        Self.writeInteger(changes.nextEventID, to: &out)
        object.key("nextSequence", &out)
        Self.writeInteger(changes.nextSequence, to: &out)
        object.close(&out)
    }

    private mutating func write(_ app: TrackedApp, to out: inout [UInt8]) throws {
        var object = ObjectWriter(&out)
        object.key("id", &out)
        Self.writeID(app.id.rawValue, to: &out)
        object.key("name", &out)
        Self.writeString(app.name, to: &out)
        object.key("pid", &out)
        Self.writeInteger(app.pid, to: &out)
        object.key("uid", &out)
        Self.writeInteger(app.uid, to: &out)
        object.key("isManaged", &out)
        Self.writeBool(app.isManaged, to: &out)
        if let launched = app.isLaunchedForScheduledWork {
            object.key("isLaunchedForScheduledWork", &out)
            Self.writeBool(launched, to: &out)
        }
        object.key("policy", &out)
        if let lastPolicy, lastPolicy.policy == app.policy {
            out += lastPolicy.bytes
        } else if let policy = policies[app.policy] {
            lastPolicy = (app.policy, policy)
            out += policy
        } else {
            let policy = try fallback(app.policy)
            if policies.count >= 64 { policies.removeAll() }
            policies[app.policy] = policy
            lastPolicy = (app.policy, policy)
            out += policy
        }
        object.key("state", &out)
        Self.writeString(app.state.rawValue, to: &out)
        object.key("isRegistered", &out)
        Self.writeBool(app.isRegistered, to: &out)
        object.key("isProcessGone", &out)
        Self.writeBool(app.isProcessGone, to: &out)
        object.key("openTasks", &out)
        Self.write(app.openTasks, to: &out)
        if let budgetEnd = app.budgetEnd {
            object.key("budgetEnd", &out)
            Self.writeInstant(budgetEnd, to: &out)
        }
        if let since = app.runningInBackgroundSince {
            object.key("runningInBackgroundSince", &out)
            Self.writeInstant(since, to: &out)
        }
        if let event = app.pendingAcknowledgement {
            object.key("pendingAcknowledgement", &out)
            Self.writeID(event.rawValue, to: &out)
        }
        object.key("acknowledgementIsForWake", &out)
        Self.writeBool(app.acknowledgementIsForWake, to: &out)
        object.key("expirationWarned", &out)
        Self.writeBool(app.expirationWarned, to: &out)
        object.key("lockGraceActive", &out)
        Self.writeBool(app.lockGraceActive, to: &out)
        object.key("suspensionIsFinalAttempt", &out)
        Self.writeBool(app.suspensionIsFinalAttempt, to: &out)
        object.key("queue", &out)
        if app.queue.isEmpty {
            Self.appendLiteral("[]", to: &out)
        } else {
            out += try fallback(app.queue)
        }
        object.key("droppedEventCount", &out)
        Self.writeInteger(app.droppedEventCount, to: &out)
        object.key("hasRecordedDropThisSuspension", &out)
        Self.writeBool(app.hasRecordedDropThisSuspension, to: &out)
        object.key("deadlines", &out)
        var deadlines = ObjectWriter(&out)
        for kind in DeadlineKind.allCases {
            guard let order = app.deadlines[kind] else { continue }
            deadlines.key(kind.key, &out)
            var entry = ObjectWriter(&out)
            entry.key("instant", &out)
            Self.writeInstant(order.instant, to: &out)
            entry.key("sequence", &out)
            Self.writeInteger(order.sequence, to: &out)
            entry.close(&out)
        }
        deadlines.close(&out)
        if let reason = app.exitReason {
            object.key("exitReason", &out)
            Self.writeString(reason.rawValue, to: &out)
        }
        if let exit = app.processExit {
            object.key("processExit", &out)
            out += try fallback(exit)
        }
        object.key("lastForeground", &out)
        Self.writeInstant(app.lastForeground, to: &out)
        if let exemption = app.suspensionExemption {
            object.key("suspensionExemption", &out)
            out += try fallback(exemption)
        }
        object.close(&out)
    }

    /// Leases as their synthesized `Codable` form.
    static func write(_ tasks: [OpenTask], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (index, task) in tasks.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            var entry = ObjectWriter(&out)
            entry.key("id", &out)
            Self.writeID(task.id.rawValue, to: &out)
            if let name = task.name {
                entry.key("name", &out)
                Self.writeString(name, to: &out)
            }
            entry.key("began", &out)
            Self.writeInstant(task.began, to: &out)
            // Left out, a restored scheduled task would be an ordinary lease that no request claims.
            if let isScheduled = task.isScheduled {
                entry.key("isScheduled", &out)
                Self.writeBool(isScheduled, to: &out)
            }
            entry.close(&out)
        }
        out.append(UInt8(ascii: "]"))
    }

    // MARK: Scalars

    /// A JSON object being written: `{`, then members separated by commas, then `}`.
    struct ObjectWriter {
        private var isFirst = true

        init(_ out: inout [UInt8]) {
            out.append(UInt8(ascii: "{"))
        }

        mutating func key(_ key: StaticString, _ out: inout [UInt8]) {
            if !isFirst { out.append(UInt8(ascii: ",")) }
            isFirst = false
            out.append(UInt8(ascii: "\""))
            key.withUTF8Buffer { out.append(contentsOf: $0) }
            out.append(UInt8(ascii: "\""))
            out.append(UInt8(ascii: ":"))
        }

        mutating func key(_ key: String, _ out: inout [UInt8]) {
            if !isFirst { out.append(UInt8(ascii: ",")) }
            isFirst = false
            ChangesJSONWriter.writeString(key, to: &out)
            out.append(UInt8(ascii: ":"))
        }

        func close(_ out: inout [UInt8]) {
            out.append(UInt8(ascii: "}"))
        }
    }

    static func writeBool(_ value: Bool, to out: inout [UInt8]) {
        Self.appendLiteral(value ? "true" : "false", to: &out)
    }

    /// Appends a literal's bytes, with no allocation.
    static func appendLiteral(_ literal: StaticString, to out: inout [UInt8]) {
        literal.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    /// An integer in decimal, exactly, written digit by digit (no `String` made). The concrete overloads below are
    /// the ones the journal uses: generic arithmetic through witness tables cost more than the digits.
    static func writeInteger<Integer: BinaryInteger>(_ value: Integer, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        writeDigits(UInt64(value.magnitude), to: &out)
    }

    /// `value` in decimal.
    static func writeInteger(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        writeDigits(value.magnitude, to: &out)
    }

    /// `value` in decimal.
    static func writeInteger(_ value: Int, to out: inout [UInt8]) {
        writeInteger(Int64(value), to: &out)
    }

    /// `value` in decimal.
    static func writeInteger(_ value: UInt64, to out: inout [UInt8]) {
        writeDigits(value, to: &out)
    }

    /// `value` in decimal.
    static func writeInteger(_ value: UInt32, to out: inout [UInt8]) {
        writeDigits(UInt64(value), to: &out)
    }

    /// The decimal digits of `value`, built backwards on the stack and appended at once.
    static func writeDigits(_ value: UInt64, to out: inout [UInt8]) {
        // 20 digits hold UInt64.max.
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { buffer in
            var index = buffer.count
            var rest = value
            repeat {
                index -= 1
                buffer[index] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
            } while rest != 0
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[index...]))
        }
    }

    /// An identity as its synthesized `Codable` form: `{"rawValue":N}`.
    static func writeID(_ rawValue: Int64, to out: inout [UInt8]) {
        Self.appendLiteral(#"{"rawValue":"#, to: &out)
        writeInteger(rawValue, to: &out)
        out.append(UInt8(ascii: "}"))
    }

    static func writeIDs<ID: RawIdentifier>(_ ids: [ID], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (index, id) in ids.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            writeID(id.rawValue, to: &out)
        }
        out.append(UInt8(ascii: "]"))
    }

    /// An instant as its synthesized `Codable` form: `{"nanoseconds":N}`.
    static func writeInstant(_ instant: MonotonicInstant, to out: inout [UInt8]) {
        Self.appendLiteral(#"{"nanoseconds":"#, to: &out)
        writeInteger(instant.nanoseconds, to: &out)
        out.append(UInt8(ascii: "}"))
    }

    /// A string as JSON: quotes, backslashes and control characters escaped, the rest as its UTF-8.
    static func writeString(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var string = string
        let isPlain = string.withUTF8 { bytes in
            for byte in bytes where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                return false
            }
            out.append(contentsOf: bytes)
            return true
        }
        if isPlain {
            out.append(UInt8(ascii: "\""))
            return
        }
        let utf8 = string.utf8
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0..<0x20:
                Self.appendLiteral(#"\u00"#, to: &out)
                for nibble in [byte >> 4, byte & 0xF] {
                    out.append(nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10)
                }
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

/// An identity written as its synthesized `Codable` form, `{"rawValue":N}`.
protocol RawIdentifier {
    var rawValue: Int64 { get }
}

extension AppID: RawIdentifier {}
extension TaskID: RawIdentifier {}

extension DeadlineKind {
    /// The member name `PendingDeadlines` is encoded with.
    fileprivate var key: StaticString {
        switch self {
        case .launch: "launch"
        case .kill: "kill"
        case .acknowledgement: "acknowledgement"
        case .lockGrace: "lockGrace"
        case .expirationWarning: "expirationWarning"
        case .budget: "budget"
        }
    }
}
