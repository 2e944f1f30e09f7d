// Structured log lines: to the journal with fields when under systemd, else one readable line on stderr.
import BGTaskPOSIX
import CSystemd
import Glibc

/// Syslog priorities (`LOG_EMERG` … `LOG_DEBUG`), most severe first.
public enum LogPriority: Int32, Comparable, Sendable, CaseIterable, CustomStringConvertible {
    /// `LOG_EMERG` (0): the system is unusable.
    case emergency = 0
    /// `LOG_ALERT` (1): act immediately.
    case alert = 1
    /// `LOG_CRIT` (2): critical condition.
    case critical = 2
    /// `LOG_ERR` (3): error.
    case error = 3
    /// `LOG_WARNING` (4): warning (an app killed for a policy violation).
    case warning = 4
    /// `LOG_NOTICE` (5): normal but significant (start-up, reclamation).
    case notice = 5
    /// `LOG_INFO` (6): informational (lifecycle transitions).
    case info = 6
    /// `LOG_DEBUG` (7): debugging detail.
    case debug = 7

    public static func < (lhs: LogPriority, rhs: LogPriority) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
        switch self {
        case .emergency: "emergency"
        case .alert: "alert"
        case .critical: "critical"
        case .error: "error"
        case .warning: "warning"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }
}

/// One structured journal field, `NAME=value`.
public struct LogField: Hashable, Sendable {
    /// The journal field name: upper-case letters, digits and `_`, not starting with `_` or a digit
    /// (other characters are replaced by `_` when logging).
    public var name: String
    /// The value; any text, newlines included.
    public var value: String

    /// A field with any name; prefer the named constructors for the daemon's own fields.
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    /// `BGTASK_APP=`: the app the message is about.
    public static func app(_ name: String) -> LogField { LogField("BGTASK_APP", name) }
    /// `BGTASK_TASK=`: the background-task id.
    public static func task(_ id: Int64) -> LogField { LogField("BGTASK_TASK", String(id)) }
    /// `BGTASK_REASON=`: why an app was terminated (`task-expired`, `memory-reclaim`, …).
    public static func reason(_ reason: String) -> LogField { LogField("BGTASK_REASON", reason) }
    /// `MESSAGE_ID=`: a stable 128-bit id (32 hex digits) for one kind of message, for `journalctl MESSAGE_ID=`.
    public static func messageID(_ id: String) -> LogField { LogField("MESSAGE_ID", id) }

    /// The name as the journal accepts it.
    var journalName: String {
        var cleaned = String(name.uppercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" })
        if cleaned.first.map({ $0 == "_" || $0.isNumber }) ?? true { cleaned = "X" + cleaned }
        return String(cleaned.prefix(64))
    }
}

/// Writes log messages to the journal (`sd_journal_sendv`) or as single lines to a descriptor.
public struct Logger: Sendable {
    /// Where messages go.
    public enum Destination: Sendable, Hashable {
        /// The journal when stderr is connected to it (`JOURNAL_STREAM` names stderr's device and inode, as
        /// systemd sets it for services), else the stream.
        case automatic
        /// The journal's native protocol, with structured fields.
        case journal
        /// One line per message on the stream descriptor.
        case stream
    }

    /// Where messages go, with `.automatic` resolved when the logger was made.
    public let destination: Destination
    /// Messages less severe than this are dropped.
    public var threshold: LogPriority
    /// The name in `SYSLOG_IDENTIFIER=` and at the start of stream lines.
    public let identifier: String
    /// The descriptor stream lines go to (fd 2 unless a test passes a pipe).
    public let stream: FileDescriptor
    private let pid: pid_t

    /// A logger named `identifier`, writing to `destination`.
    public init(
        identifier: String = "bgtaskd",
        destination: Destination = .automatic,
        threshold: LogPriority = .info,
        stream: FileDescriptor = .standardError
    ) {
        self.identifier = identifier
        self.threshold = threshold
        self.stream = stream
        self.pid = getpid()
        if destination == .automatic {
            self.destination = Logger.isConnectedToJournal(stream) ? .journal : .stream
        } else {
            self.destination = destination
        }
    }

    /// Logs `message` at `priority` with `fields`. Never throws: if the journal refuses the message it is
    /// written to the stream instead, and a failing stream drops it (there is nowhere left to report to).
    /// The message and fields are only built when the priority passes the threshold, so debug logging on a
    /// hot path costs nothing when it is off.
    public func log(
        _ priority: LogPriority, _ message: @autoclosure () -> String, _ fields: @autoclosure () -> [LogField] = []
    ) {
        guard priority <= threshold else { return }
        let message = message()
        let fields = fields()
        if destination == .journal && sendToJournal(priority, message, fields) { return }
        let line = Logger.formatLine(
            identifier: identifier, pid: pid, priority: priority, message: message,
            fields: fields)
        // One write per line, so lines from several threads do not interleave (below PIPE_BUF).
        try? stream.writeAll(Array(line.utf8))  // Logging must not fail its caller; see above.
    }

    /// `log(.error, …)`.
    public func error(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [LogField] = []) {
        log(.error, message(), fields())
    }
    /// `log(.warning, …)`.
    public func warning(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [LogField] = []) {
        log(.warning, message(), fields())
    }
    /// `log(.notice, …)`.
    public func notice(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [LogField] = []) {
        log(.notice, message(), fields())
    }
    /// `log(.info, …)`.
    public func info(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [LogField] = []) {
        log(.info, message(), fields())
    }
    /// `log(.debug, …)`.
    public func debug(_ message: @autoclosure () -> String, _ fields: @autoclosure () -> [LogField] = []) {
        log(.debug, message(), fields())
    }

    /// The stream form: `bgtaskd[42]: warning: message (APP=mail REASON=task-expired)`.
    ///
    /// Priorities from `.warning` up are named after the pid; `BGTASK_` is dropped from field names and
    /// `MESSAGE_ID` left out (noise on a terminal); values with spaces, quotes or `=` are quoted; control
    /// characters are escaped so a message always stays on one line.
    public static func formatLine(
        identifier: String, pid: pid_t, priority: LogPriority, message: String,
        fields: [LogField]
    ) -> String {
        var line = "\(identifier)[\(pid)]: "
        if priority <= .warning { line += "\(priority): " }
        line += escaped(message)
        let shown = fields.filter { $0.name != "MESSAGE_ID" }
        if !shown.isEmpty {
            let parts = shown.map { field -> String in
                let name = field.name.hasPrefix("BGTASK_") ? String(field.name.dropFirst(7)) : field.name
                return "\(escaped(name))=\(quotedIfNeeded(field.value))"
            }
            line += " (" + parts.joined(separator: " ") + ")"
        }
        return line + "\n"
    }

    /// `text` with control characters escaped (`\n`, `\x1b`); inside quotes also `"` and `\\`.
    private static func escaped(_ text: String, insideQuotes: Bool = false) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            case "\r": result += "\\r"
            case "\"" where insideQuotes: result += "\\\""
            case "\\" where insideQuotes: result += "\\\\"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f:
                result += "\\x" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func quotedIfNeeded(_ value: String) -> String {
        let needsQuotes = value.isEmpty || value.contains { $0 == " " || $0 == "\"" || $0 == "=" || $0 == ")" }
        return needsQuotes ? "\"" + escaped(value, insideQuotes: true) + "\"" : escaped(value)
    }

    /// Sends the message with `sd_journal_sendv`; false if the journal refused it.
    private func sendToJournal(_ priority: LogPriority, _ message: String, _ fields: [LogField]) -> Bool {
        var entries = [
            "MESSAGE=" + message,
            "PRIORITY=\(priority.rawValue)",
            "SYSLOG_IDENTIFIER=" + identifier,
        ]
        entries += fields.map { $0.journalName + "=" + $0.value }
        let storage = entries.map { Array($0.utf8) }
        let result = withIOVectors(storage) { vectors in
            vectors.withUnsafeBufferPointer { buffer in
                sd_journal_sendv(buffer.baseAddress, Int32(buffer.count))
            }
        }
        return result >= 0
    }

    /// Whether `JOURNAL_STREAM` ("device:inode") names the file `stream` refers to (systemd.exec(5)).
    static func isConnectedToJournal(_ stream: FileDescriptor) -> Bool {
        guard let variable = getenv("JOURNAL_STREAM") else { return false }
        let parts = String(cString: variable).split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var status = stat()
        guard fstat(stream.rawValue, &status) == 0 else { return false }
        return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
    }
}

/// Calls `body` with one `iovec` per byte array, valid only during the call.
private func withIOVectors<Result>(_ arrays: [[UInt8]], _ body: ([iovec]) -> Result) -> Result {
    var vectors: [iovec] = []
    vectors.reserveCapacity(arrays.count)
    func build(_ index: Int) -> Result {
        guard index < arrays.count else { return body(vectors) }
        return arrays[index].withUnsafeBytes { bytes in
            // sd_journal_sendv only reads; the mutable pointer is what struct iovec declares.
            vectors.append(
                iovec(
                    iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress),
                    iov_len: bytes.count))
            return build(index + 1)
        }
    }
    return build(0)
}
