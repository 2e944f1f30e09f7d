// Memory pressure as the kernel and systemd signal it: PSI triggers, systemd's $MEMORY_PRESSURE_WATCH protocol
// (https://systemd.io/MEMORY_PRESSURE/), the base64 it carries its trigger in, and the pair a launched app gets.
import BGTaskPOSIX
import BGTaskVocabulary
import CPOSIX
import CSystemd
import Glibc

// MARK: - Trigger

/// A PSI trigger (`Documentation/accounting/psi.rst`): signal when tasks stalled on memory for `stall` in total
/// within any `window`. The kernel reads it as text, microseconds on the wire: `some 150000 2000000`.
public struct MemoryPressureTrigger: Hashable, Sendable, CustomStringConvertible {
    /// Which stall counts: the kernel's first word of the trigger.
    public enum Kind: String, Hashable, Sendable, CaseIterable {
        /// `some`: at least one task was stalled on memory (the others may have run).
        case some
        /// `full`: every non-idle task was stalled on memory at once.
        case full
    }

    /// Which stall counts.
    public var kind: Kind
    /// How long tasks may stall in total within a window before the trigger fires (the kernel counts microseconds).
    public var stall: Duration
    /// The sliding window the stall is measured in (the kernel takes 500 ms to 10 s).
    public var window: Duration

    /// A trigger of `kind` for `stall` within `window`.
    public init(kind: Kind = .some, stall: Duration, window: Duration) {
        self.kind = kind
        self.stall = stall
        self.window = window
    }

    /// systemd's default: 200 ms of `some` stall in a 2 s window (`MemoryPressureThresholdSec=` and
    /// `DefaultMemoryPressureThresholdSec=` default to 200 ms; sd-event's `MEMORY_PRESSURE_DEFAULT_*`). The 2 s
    /// window is the one the kernel accepts from writers without `CAP_SYS_RESOURCE`.
    public static let systemdDefault = MemoryPressureTrigger(
        kind: .some, stall: .milliseconds(200), window: .seconds(2))

    /// The window granularity the kernel demands of writers without `CAP_SYS_RESOURCE`: whole multiples of 2 s
    /// (psi.c's rule for unprivileged triggers). Measured on a build host whose root lacks that capability: 500 ms
    /// and 1 s windows are refused with `EINVAL`, on `/proc/pressure/memory` and on a cgroup's `memory.pressure`
    /// alike; 2 s is taken.
    public static let unprivilegedWindowGranularity: Duration = .seconds(2)

    /// The stall in whole microseconds, as the kernel reads it (`%u`: clamped to 0…4294967295).
    public var stallMicroseconds: UInt32 { Self.microseconds(stall) }

    /// The window in whole microseconds, as the kernel reads it (`%u`: clamped to 0…4294967295).
    public var windowMicroseconds: UInt32 { Self.microseconds(window) }

    /// The kernel's text, such as `some 150000 2000000`.
    public var kernelText: String { "\(kind.rawValue) \(stallMicroseconds) \(windowMicroseconds)" }

    /// The bytes to write to a PSI file: the text and its terminating NUL. The kernel overwrites the last byte it
    /// is given with a NUL, so without one the window would lose its last digit; systemd sends the NUL as well.
    public var kernelBytes: [UInt8] { Array(kernelText.utf8) + [0] }

    public var description: String { kernelText }

    /// Whether the window is one the kernel accepts from a writer without `CAP_SYS_RESOURCE`.
    public var hasUnprivilegedWindow: Bool {
        let granularity = Int64(Self.microseconds(Self.unprivilegedWindowGranularity))
        let window = Int64(windowMicroseconds)
        return window > 0 && window % granularity == 0
    }

    /// The same trigger with its window rounded up to the next whole multiple of 2 s (a window under 2 s becomes
    /// 2 s): the closest window an unprivileged writer may use that still holds the stall.
    public var withUnprivilegedWindow: MemoryPressureTrigger {
        let granularity = Int64(Self.microseconds(Self.unprivilegedWindowGranularity))
        let window = max(1, Int64(windowMicroseconds))
        let rounded = (window + granularity - 1) / granularity * granularity
        return MemoryPressureTrigger(kind: kind, stall: stall, window: .microseconds(rounded))
    }

    /// Reads a trigger from the kernel's text (`some 150000 2000000`), with at most one terminating NUL; nil for
    /// anything else. Exactly three fields split by single spaces, decimal digits only, values that fit `%u`.
    public static func parse(_ text: String) -> MemoryPressureTrigger? {
        var bytes = Array(text.utf8)
        if bytes.last == 0 { bytes.removeLast() }
        let fields = bytes.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        guard fields.count == 3,
            let kind = Kind(rawValue: String(decoding: fields[0], as: UTF8.self)),
            let stall = decimal(fields[1]), let window = decimal(fields[2])
        else { return nil }
        return MemoryPressureTrigger(kind: kind, stall: .microseconds(stall), window: .microseconds(window))
    }

    /// Opens the PSI file at `path` (`O_RDWR | O_NONBLOCK | O_CLOEXEC`) and writes this trigger exactly as it is:
    /// no fallback. The returned descriptor reports `POLLPRI` when the trigger fires, and `POLLERR` once the file
    /// is gone (its cgroup removed); the trigger lives as long as the descriptor, which the caller closes.
    public func arm(atPath path: String) throws(Errno) -> FileDescriptor {
        let descriptor = try FileDescriptor.open(path, .readWrite, options: [.nonBlocking])
        do throws(Errno) {
            // One write: the kernel parses each write as a whole trigger.
            let bytes = kernelBytes
            let written = try systemCall("write(fd \(descriptor.rawValue))") {
                bytes.withUnsafeBytes { Glibc.write(descriptor.rawValue, $0.baseAddress, $0.count) }
            }
            guard written == bytes.count else { throw Errno(rawValue: EIO, operation: "short write") }
        } catch {
            try? descriptor.close()  // The refusal is the error worth reporting; the descriptor is useless without it.
            throw error.with(operation: "arm a trigger '\(kernelText)' on \(path)")
        }
        return descriptor
    }

    private static func microseconds(_ duration: Duration) -> UInt32 {
        UInt32(clamping: duration.nanosecondCount / 1000)
    }

    /// A run of decimal digits as a `%u` value; nil when empty, not digits, or above `UInt32.max`.
    private static func decimal(_ digits: ArraySlice<UInt8>) -> Int64? {
        guard !digits.isEmpty, digits.count <= 10 else { return nil }
        var value: Int64 = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int64(digit - UInt8(ascii: "0"))
        }
        return value <= Int64(UInt32.max) ? value : nil
    }
}

// MARK: - Base64

/// Base64 of RFC 4648 §4 (alphabet `A–Z a–z 0–9 + /`, `=` padding), as `$MEMORY_PRESSURE_WRITE` carries its bytes.
///
/// The decoder is strict: the text must be exactly what the encoder would write for some bytes. Whitespace,
/// missing or misplaced padding, characters outside the alphabet and non-zero bits after the last byte are errors,
/// so a mangled variable is reported rather than turned into some other trigger.
public enum Base64 {
    /// Why a text is not base64.
    public enum DecodingError: Error, Hashable, Sendable, CustomStringConvertible {
        /// The length in bytes is not a multiple of 4 (padding is required).
        case invalidLength(Int)
        /// A byte outside the alphabet (and not padding) at a byte offset.
        case invalidCharacter(UInt8, offset: Int)
        /// `=` somewhere other than the last one or two positions of the text.
        case misplacedPadding(offset: Int)
        /// The bits after the last encoded byte are not zero: no encoder writes that text.
        case nonZeroTrailingBits

        public var description: String {
            switch self {
            case .invalidLength(let length):
                return "length \(length) is not a multiple of 4"
            case .invalidCharacter(let byte, let offset):
                let shown =
                    byte >= 0x21 && byte < 0x7f
                    ? "'\(Character(Unicode.Scalar(byte)))'" : "0x\(String(byte, radix: 16, uppercase: true))"
                return "unexpected character \(shown) at offset \(offset)"
            case .misplacedPadding(let offset):
                return "padding '=' at offset \(offset) is not at the end"
            case .nonZeroTrailingBits:
                return "the bits after the last byte are not zero"
            }
        }
    }

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    private static let padding = UInt8(ascii: "=")
    /// Not a value of the alphabet, in `values`.
    private static let invalid: UInt8 = 0xFF
    /// Each byte's value in the alphabet, `invalid` for the others.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: invalid, count: 256)
        for (value, character) in alphabet.enumerated() { table[Int(character)] = UInt8(value) }
        return table
    }()

    /// The base64 text of `bytes`, padded.
    public static func encode<Bytes: Collection>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        let input = Array(bytes)
        var output: [UInt8] = []
        output.reserveCapacity((input.count + 2) / 3 * 4)
        func character(_ group: UInt32, _ shift: UInt32) -> UInt8 { alphabet[Int(group >> shift & 0x3F)] }
        var index = 0
        while index < input.count {
            let count = min(3, input.count - index)
            var group = UInt32(input[index]) << 16
            if count > 1 { group |= UInt32(input[index + 1]) << 8 }
            if count > 2 { group |= UInt32(input[index + 2]) }
            output.append(character(group, 18))
            output.append(character(group, 12))
            output.append(count > 1 ? character(group, 6) : padding)
            output.append(count > 2 ? character(group, 0) : padding)
            index += count
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// The bytes `text` encodes; throws why it is not strict base64 (the empty text is zero bytes).
    public static func decode(_ text: String) throws(DecodingError) -> [UInt8] {
        let input = Array(text.utf8)
        guard input.count % 4 == 0 else { throw .invalidLength(input.count) }
        var output: [UInt8] = []
        output.reserveCapacity(input.count / 4 * 3)
        var start = 0
        while start < input.count {
            let isLast = start + 4 == input.count
            var group: UInt32 = 0
            var paddingCount = 0
            for offset in start..<start + 4 {
                let byte = input[offset]
                if byte == padding {
                    // Padding only ends the text: positions 3 and 4 of the last group, 3 only when 4 is padding too.
                    let position = offset - start
                    guard isLast, position >= 2, position == 3 || input[start + 3] == padding else {
                        throw .misplacedPadding(offset: offset)
                    }
                    paddingCount += 1
                    group <<= 6
                    continue
                }
                let value = values[Int(byte)]
                guard value != invalid else { throw .invalidCharacter(byte, offset: offset) }
                group = group << 6 | UInt32(value)
            }
            let decoded = [
                UInt8(truncatingIfNeeded: group >> 16), UInt8(truncatingIfNeeded: group >> 8),
                UInt8(truncatingIfNeeded: group),
            ]
            // One `=`: 18 bits carry 2 bytes and 2 spare bits; two: 12 bits carry 1 byte and 4 spare bits.
            let unused = paddingCount == 0 ? 0 : (paddingCount == 1 ? group & 0xFF : group & 0xFFFF)
            guard unused == 0 else { throw .nonZeroTrailingBits }
            output.append(contentsOf: decoded.prefix(3 - paddingCount))
            start += 4
        }
        return output
    }
}

// MARK: - Watch

/// Why a memory pressure watch could not be set up, with the path it was for.
public struct MemoryPressureWatchError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong.
    public enum Reason: Hashable, Sendable {
        /// `$MEMORY_PRESSURE_WATCH` is not an absolute path, or has `.` or `..` components.
        case invalidPath
        /// `$MEMORY_PRESSURE_WRITE` is not strict base64.
        case invalidWrite(Base64.DecodingError)
        /// The path is none of the three kinds the protocol knows (a directory, a device, ...); the type is named.
        case unsupportedFileType(String)
        /// A regular file on neither procfs nor cgroup2, so not a PSI file (sd-event refuses these too).
        case notAPressureFile
        /// The path was replaced by another file between looking at it and opening it.
        case changedWhileOpening
        /// The kernel refused a step: opening, writing the trigger, connecting, sending.
        case system(Errno)
    }

    /// The path watched (`$MEMORY_PRESSURE_WATCH`, or the PSI file given).
    public var path: String
    /// What went wrong.
    public var reason: Reason

    /// An error about `path`.
    public init(path: String, reason: Reason) {
        self.path = path
        self.reason = reason
    }

    /// The kernel's error, when a system call failed.
    public var errno: Errno? {
        if case .system(let error) = reason { return error }
        return nil
    }

    public var description: String {
        let detail: String
        switch reason {
        case .invalidPath: detail = "\(MemoryPressureWatch.watchVariable) must be an absolute, normalized path"
        case .invalidWrite(let error): detail = "\(MemoryPressureWatch.writeVariable) is not base64: \(error)"
        case .unsupportedFileType(let type): detail = "a \(type), not a PSI file, a FIFO or a socket"
        case .notAPressureFile: detail = "a regular file on neither procfs nor cgroup2, so not a PSI file"
        case .changedWhileOpening: detail = "replaced by another file while it was being opened"
        case .system(let error): detail = error.description
        }
        return "memory pressure watch \(path): \(detail)"
    }
}

/// An open memory pressure watch: a PSI file with a trigger armed, a FIFO or a connected socket, per systemd's
/// memory pressure protocol. Register `fileDescriptor` for `events` with the loop
/// (`loop.addIO(fd: watch.fileDescriptor, events: watch.events, name: ...)`) and call `acknowledge(_:)` with the
/// events the loop reports.
///
/// A plain value like `FileDescriptor`: whoever opened it closes it, once, after cancelling its loop source.
public struct MemoryPressureWatch: Hashable, Sendable, CustomStringConvertible {
    /// What the watched path is.
    public enum Kind: String, Hashable, Sendable {
        /// A PSI file (`/proc/pressure/memory`, a cgroup's `memory.pressure`) with a trigger: signals `POLLPRI`.
        case psi
        /// A FIFO someone writes to under pressure: signals `POLLIN`; what arrives is read and discarded.
        case fifo
        /// An `AF_UNIX` socket that sends under pressure: signals `POLLIN`; what arrives is read and discarded.
        case socket
    }

    /// What a readiness of the descriptor meant, once acknowledged.
    public enum Acknowledgement: Hashable, Sendable {
        /// Memory pressure was signalled; the watch stays armed for the next one.
        case pressure
        /// Nothing to act on: no trigger event, or no bytes (another reader of a FIFO took them, or a
        /// `SOCK_SEQPACKET` peer sent empty messages).
        case nothing
        /// The watch can never signal again: the peer closed the socket, or the PSI file's cgroup was removed
        /// (`POLLERR`). Cancel the loop source and close the watch: the descriptor would be ready on every iteration.
        case ended
    }

    /// What `drain()` read and discarded.
    public struct Drained: Hashable, Sendable {
        /// Bytes read and thrown away.
        public var byteCount: Int
        /// Whether the peer closed its end of a socket (a read found the end of file).
        public var isEndOfFile: Bool

        /// A drain's outcome from its parts.
        public init(byteCount: Int, isEndOfFile: Bool) {
            self.byteCount = byteCount
            self.isEndOfFile = isEndOfFile
        }
    }

    /// systemd's variable naming the path to watch (`/dev/null` or empty: watching is turned off).
    public static let watchVariable = "MEMORY_PRESSURE_WATCH"
    /// systemd's variable holding the base64 of the bytes to write after opening.
    public static let writeVariable = "MEMORY_PRESSURE_WRITE"

    /// The most reads `drain()` makes in one call (64 KiB in 4 KiB reads): far more than any notification, few
    /// enough that a peer flooding the socket, even with empty messages, cannot hold the loop; the rest is still
    /// there, and the level-triggered source comes back for it.
    static let drainReads = 16
    /// How long sending `$MEMORY_PRESSURE_WRITE` to a socket or FIFO may wait for room: the bytes are a few dozen,
    /// so a peer that takes none within a second is not reading, and starting up must not hang on it.
    static let sendTimeout: Duration = .seconds(1)

    /// The path watched.
    public let path: String
    /// What the path is.
    public let kind: Kind
    /// The open descriptor: PSI file, FIFO (read-write) or connected socket; non-blocking and close-on-exec.
    public let fileDescriptor: FileDescriptor
    /// The trigger armed on a PSI file, as the kernel took it (its window may have been widened by `armPSI`); nil
    /// for a FIFO or socket, and for a PSI file given bytes that are not a trigger's text.
    public let trigger: MemoryPressureTrigger?
    /// Whether a socket is `SOCK_SEQPACKET` (whose zero-length reads are empty messages, not end of file).
    private let isSequencedPacket: Bool

    private init(
        path: String, kind: Kind, fileDescriptor: FileDescriptor, trigger: MemoryPressureTrigger?,
        isSequencedPacket: Bool = false
    ) {
        self.path = path
        self.kind = kind
        self.fileDescriptor = fileDescriptor
        self.trigger = trigger
        self.isSequencedPacket = isSequencedPacket
    }

    /// The events to register with the loop: `POLLPRI` for a PSI file, `POLLIN` for a FIFO or socket (errors and
    /// hang-ups are always reported).
    public var events: IOEvents { kind == .psi ? .priority : .readable }

    /// For logs and status: `psi /sys/fs/cgroup/app/memory.pressure (some 200000 2000000)`.
    public var description: String {
        "\(kind.rawValue) \(path)" + (trigger.map { " (\($0.kernelText))" } ?? "")
    }

    /// Closes the descriptor, which also removes a PSI trigger. Cancel the loop source first.
    public func close() throws(Errno) {
        try fileDescriptor.close()
    }

    // MARK: Opening

    /// What the environment asks for.
    public enum EnvironmentRequest: Hashable, Sendable {
        /// `$MEMORY_PRESSURE_WATCH` is empty or `/dev/null`: the service manager turned watching off.
        case off
        /// Watch `path`, writing `write` after opening (nil: `$MEMORY_PRESSURE_WRITE` is not set).
        case watch(path: String, write: [UInt8]?)

        /// Reads `$MEMORY_PRESSURE_WATCH` and `$MEMORY_PRESSURE_WRITE`; nil when the first is not set (the second is
        /// then ignored). Throws for a path that is not absolute and normalized, and for a value that is not base64.
        public static func parse(_ environment: [String: String]) throws(MemoryPressureWatchError)
            -> EnvironmentRequest?
        {
            guard let path = environment[MemoryPressureWatch.watchVariable] else { return nil }
            if path.isEmpty || path == "/dev/null" { return .off }
            let components = path.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
            guard path.hasPrefix("/"), !components.contains(where: { $0 == "." || $0 == ".." }) else {
                throw MemoryPressureWatchError(path: path, reason: .invalidPath)
            }
            guard let text = environment[MemoryPressureWatch.writeVariable] else {
                return .watch(path: path, write: nil)
            }
            do {
                return .watch(path: path, write: try Base64.decode(text))
            } catch {
                throw MemoryPressureWatchError(path: path, reason: .invalidWrite(error))
            }
        }
    }

    /// What `fromEnvironment(_:)` set up.
    public enum EnvironmentWatch: Hashable, Sendable {
        /// The service manager turned watching off (`$MEMORY_PRESSURE_WATCH` empty or `/dev/null`).
        case off
        /// The watch the variables asked for, open.
        case watching(MemoryPressureWatch)
    }

    /// Follows systemd's protocol from `environment` (pass the process's own): nil when `$MEMORY_PRESSURE_WATCH` is
    /// not set, `.off` when it says so, else the watch opened as `open(path:write:)` does.
    public static func fromEnvironment(_ environment: [String: String]) throws(MemoryPressureWatchError)
        -> EnvironmentWatch?
    {
        switch try EnvironmentRequest.parse(environment) {
        case nil: return nil
        case .off: return .off
        case .watch(let path, let write): return .watching(try open(path: path, write: write))
        }
    }

    /// Opens `path` per systemd's protocol, by what it is:
    /// - a regular file (a PSI file on procfs or cgroup2): opened `O_RDWR | O_NONBLOCK | O_CLOEXEC`, `write` written
    ///   (as `armPSI` does when it is a trigger's text, widening a refused window); nil or empty `write` arms
    ///   `MemoryPressureTrigger.systemdDefault`, since a PSI file without a trigger reports `POLLERR` at once and
    ///   forever. Signals `POLLPRI`.
    /// - a FIFO: opened `O_RDWR | O_NONBLOCK | O_CLOEXEC` and `write` written, then what is queued is discarded, so
    ///   the watch's own bytes are not taken for pressure. Read-write, not read-only: a FIFO read end whose last
    ///   writer closed reports `POLLHUP` on every poll, which would spin the loop; holding a write end ourselves
    ///   means it never does. Signals `POLLIN`.
    /// - an `AF_UNIX` socket: connected as a stream socket (as `SOCK_SEQPACKET` when the listener is one, which
    ///   connect reports as `EPROTOTYPE`), `write` sent. Signals `POLLIN`. A listener whose backlog is full is an
    ///   error (`EAGAIN`), not a wait: starting up must not hang on a peer that does not accept.
    public static func open(path: String, write: [UInt8]?) throws(MemoryPressureWatchError) -> MemoryPressureWatch {
        func failure(_ error: Errno) -> MemoryPressureWatchError {
            MemoryPressureWatchError(path: path, reason: .system(error))
        }
        var status = stat()
        do {
            _ = try systemCall("stat(\(path))") { stat(path, &status) }
        } catch {
            throw failure(error)
        }
        switch status.st_mode & S_IFMT {
        case S_IFREG:
            let type = bgtask_filesystem_type(path)
            guard type == procMagic || type == CgroupHierarchies.unifiedMagic else {
                throw MemoryPressureWatchError(path: path, reason: .notAPressureFile)
            }
            guard let write, !write.isEmpty else { return try armPSI(path: path, trigger: .systemdDefault) }
            if let trigger = MemoryPressureTrigger.parse(String(decoding: write, as: UTF8.self)) {
                return try armPSI(path: path, trigger: trigger)
            }
            // Bytes that are not a trigger's text: written as given, for the kernel to judge.
            let descriptor = try openChecked(path, like: status)
            do {
                try send(write, to: descriptor, isSocket: false, path: path)
            } catch {
                try? descriptor.close()  // The refusal is the error to report.
                throw failure(error)
            }
            return MemoryPressureWatch(path: path, kind: .psi, fileDescriptor: descriptor, trigger: nil)
        case S_IFIFO:
            let descriptor = try openChecked(path, like: status)
            let watch = MemoryPressureWatch(path: path, kind: .fifo, fileDescriptor: descriptor, trigger: nil)
            do {
                if let write, !write.isEmpty {
                    try send(write, to: descriptor, isSocket: false, path: path)
                    _ = try watch.drain()
                }
            } catch {
                try? descriptor.close()  // The write failure is the error to report.
                throw failure(error)
            }
            return watch
        case S_IFSOCK:
            let (descriptor, isSequencedPacket) = try connect(path)
            do {
                if let write, !write.isEmpty { try send(write, to: descriptor, isSocket: true, path: path) }
            } catch {
                try? descriptor.close()  // The send failure is the error to report.
                throw failure(error)
            }
            return MemoryPressureWatch(
                path: path, kind: .socket, fileDescriptor: descriptor, trigger: nil,
                isSequencedPacket: isSequencedPacket)
        default:
            throw MemoryPressureWatchError(path: path, reason: .unsupportedFileType(fileTypeName(status.st_mode)))
        }
    }

    /// How `armPSI` treats a window the kernel refuses.
    public enum WindowFallback: Hashable, Sendable {
        /// Arm the trigger exactly as given, or fail.
        case none
        /// When the kernel refuses with `EINVAL` a window that is not a whole multiple of 2 s, arm it again with the
        /// window rounded up to one (2 s for anything shorter): what writers without `CAP_SYS_RESOURCE` may use.
        case unprivilegedWindow
    }

    /// Arms `trigger` on the PSI file at `path` (`O_RDWR | O_NONBLOCK | O_CLOEXEC`, the trigger's text and NUL in
    /// one write), widening a refused window per `fallback`. The watch's `trigger` is the one actually armed.
    public static func armPSI(
        path: String, trigger: MemoryPressureTrigger, fallback: WindowFallback = .unprivilegedWindow
    ) throws(MemoryPressureWatchError) -> MemoryPressureWatch {
        do {
            let descriptor = try trigger.arm(atPath: path)
            return MemoryPressureWatch(path: path, kind: .psi, fileDescriptor: descriptor, trigger: trigger)
        } catch  where error == .invalidArgument && fallback == .unprivilegedWindow && !trigger.hasUnprivilegedWindow {
            let widened = trigger.withUnprivilegedWindow
            do {
                let descriptor = try widened.arm(atPath: path)
                return MemoryPressureWatch(path: path, kind: .psi, fileDescriptor: descriptor, trigger: widened)
            } catch {
                let operation = "\(error.operation), after '\(trigger.kernelText)' was refused too"
                throw MemoryPressureWatchError(path: path, reason: .system(error.with(operation: operation)))
            }
        } catch {
            throw MemoryPressureWatchError(path: path, reason: .system(error))
        }
    }

    /// The variables a process launched into `cgroup` gets so it can watch its own memory pressure per systemd's
    /// protocol: `MEMORY_PRESSURE_WATCH=<cgroup>/memory.pressure` and `MEMORY_PRESSURE_WRITE=<base64 of the
    /// trigger's text and NUL>` (for the default, `c29tZSAyMDAwMDAgMjAwMDAwMAA=`, as systemd sets it).
    public static func environment(
        for cgroup: CgroupDirectory, trigger: MemoryPressureTrigger = .systemdDefault
    ) -> [String: String] {
        [watchVariable: cgroup.path + "/memory.pressure", writeVariable: Base64.encode(trigger.kernelBytes)]
    }

    // MARK: Readiness

    /// Reads and discards what a FIFO or socket has queued, at most `drainReads` reads of 4 KiB a call (nothing for a
    /// PSI file, which is never read). Stops when nothing more is queued, or at the peer's end of file.
    public func drain() throws(Errno) -> Drained {
        var drained = Drained(byteCount: 0, isEndOfFile: false)
        guard kind != .psi else { return drained }
        var buffer = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<Self.drainReads {
            let count: Int
            do {
                count = try systemCall("read(\(path))") {
                    buffer.withUnsafeMutableBytes { Glibc.read(fileDescriptor.rawValue, $0.baseAddress, $0.count) }
                }
            } catch  where error == .wouldBlock {
                break
            }
            if count == 0 {
                // A stream's end. On a SOCK_SEQPACKET socket a zero-length read is also an empty message: the end
                // is the one the socket reports as a hang-up.
                if isSequencedPacket,
                    try fileDescriptor.poll(for: .readHangUp, timeout: .zero).isDisjoint(with: [.hangUp, .readHangUp])
                {
                    continue
                }
                drained.isEndOfFile = true
                break
            }
            drained.byteCount += count
        }
        return drained
    }

    /// Handles a readiness the loop reported with `events`: drains a FIFO or socket, and says what it meant.
    /// After `.ended`, cancel the source and close the watch.
    public func acknowledge(_ events: IOEvents) throws(Errno) -> Acknowledgement {
        switch kind {
        case .psi:
            if events.contains(.error) { return .ended }
            return events.contains(.priority) ? .pressure : .nothing
        case .fifo, .socket:
            let drained: Drained
            do {
                drained = try drain()
            } catch  where error == .connectionReset {
                return .ended
            }
            if drained.isEndOfFile || events.contains(.hangUp) || events.contains(.error) { return .ended }
            return drained.byteCount > 0 ? .pressure : .nothing
        }
    }

    // MARK: Helpers

    /// procfs's `statfs` magic (`PROC_SUPER_MAGIC`).
    static let procMagic = 0x9fa0

    /// Opens a regular file or FIFO read-write and non-blocking, and checks that what was opened is the file that
    /// `status` described (nothing swapped in between, such as a regular file where a FIFO was).
    private static func openChecked(_ path: String, like status: stat) throws(MemoryPressureWatchError)
        -> FileDescriptor
    {
        let descriptor: FileDescriptor
        var opened = stat()
        do {
            descriptor = try FileDescriptor.open(path, .readWrite, options: [.nonBlocking])
        } catch {
            throw MemoryPressureWatchError(path: path, reason: .system(error))
        }
        guard fstat(descriptor.rawValue, &opened) == 0, opened.st_dev == status.st_dev,
            opened.st_ino == status.st_ino, opened.st_mode & S_IFMT == status.st_mode & S_IFMT
        else {
            try? descriptor.close()  // Not the file that was looked at: nothing was written to it.
            throw MemoryPressureWatchError(path: path, reason: .changedWhileOpening)
        }
        return descriptor
    }

    /// Connects to the socket at `path`, non-blocking and close-on-exec: a stream socket, or a `SOCK_SEQPACKET`
    /// one when the listener is of that type (`EPROTOTYPE`). Returns the socket and whether it is sequenced-packet.
    private static func connect(_ path: String) throws(MemoryPressureWatchError) -> (FileDescriptor, Bool) {
        func failure(_ error: Errno) -> MemoryPressureWatchError {
            MemoryPressureWatchError(path: path, reason: .system(error))
        }
        var address: sockaddr_un
        do {
            address = try UnixSocket.socketAddress(path, operation: "connect")
        } catch {
            throw failure(error)
        }
        for type in [SOCK_STREAM, SOCK_SEQPACKET] {
            let isSequencedPacket = type == SOCK_SEQPACKET
            let flags = Int32(type.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue)
            let descriptor: FileDescriptor
            do {
                descriptor = FileDescriptor(rawValue: try systemCall("socket(\(path))") { socket(AF_UNIX, flags, 0) })
            } catch {
                throw failure(error)
            }
            do throws(Errno) {
                let operation = "connect(\(path)\(isSequencedPacket ? ", SOCK_SEQPACKET" : ""))"
                do throws(Errno) {
                    _ = try systemCall(operation, retryOnInterrupt: false) {
                        withUnsafePointer(to: &address) { pointer in
                            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                                Glibc.connect(descriptor.rawValue, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                            }
                        }
                    }
                } catch  where error == .interrupted || error == .inProgress {
                    // The connection goes on in the background: wait for it, bounded, and read its outcome.
                    guard try !descriptor.poll(for: .writable, timeout: sendTimeout).isEmpty else {
                        throw Errno(rawValue: ETIMEDOUT, operation: operation)
                    }
                    if let pending = UnixSocket.pendingError(of: descriptor) {
                        throw pending.with(operation: operation)
                    }
                }
                return (descriptor, isSequencedPacket)
            } catch {
                try? descriptor.close()  // The connect failure is the error to report, or the next type is tried.
                if error.rawValue == EPROTOTYPE && !isSequencedPacket { continue }
                throw failure(error)
            }
        }
        // Unreachable: the sequenced-packet attempt returns or throws.
        throw failure(Errno(rawValue: EPROTOTYPE, operation: "connect(\(path))"))
    }

    /// Writes all of `bytes` to a non-blocking descriptor, waiting at most `sendTimeout` in all for room. Sockets
    /// are written with `MSG_NOSIGNAL`: a peer that hung up is an error, not a `SIGPIPE` for the whole daemon.
    private static func send(_ bytes: [UInt8], to descriptor: FileDescriptor, isSocket: Bool, path: String)
        throws(Errno)
    {
        let operation = "write \(bytes.count) bytes of \(writeVariable) to \(path)"
        let deadline = MonotonicClock.now() &+ sendTimeout.nanosecondCount
        var offset = 0
        while offset < bytes.count {
            do {
                offset += try systemCall(operation) {
                    bytes.withUnsafeBytes { buffer in
                        // `baseAddress!`: the loop runs only while offset < count, so the array is not empty.
                        let start = buffer.baseAddress! + offset
                        let count = buffer.count - offset
                        return isSocket
                            ? Glibc.send(descriptor.rawValue, start, count, Int32(MSG_NOSIGNAL))
                            : Glibc.write(descriptor.rawValue, start, count)
                    }
                }
            } catch  where error == .wouldBlock {
                let remaining = deadline - MonotonicClock.now()
                guard remaining > 0, try !descriptor.poll(for: .writable, timeout: .nanoseconds(remaining)).isEmpty
                else { throw Errno(rawValue: ETIMEDOUT, operation: operation) }
            }
        }
    }

    /// A name for a file type of `st_mode`, for errors.
    private static func fileTypeName(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFDIR: "directory"
        case S_IFCHR: "character device"
        case S_IFBLK: "block device"
        case S_IFLNK: "symbolic link"
        default: "file of type 0o\(String(mode & S_IFMT, radix: 8))"
        }
    }
}
