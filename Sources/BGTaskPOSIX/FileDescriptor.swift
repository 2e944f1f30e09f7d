// A typed file descriptor: reading, writing, closing, non-blocking mode and bounded waits for readiness.
import BGTaskVocabulary
import CPOSIX
import Glibc

/// A file descriptor number (`int fd`) with the operations the daemon performs on it.
///
/// A plain value: copying it does not duplicate the descriptor, and closing one copy closes them all.
/// Whoever opened it closes it, once; `closeAfter(_:)` does that on every path.
public struct FileDescriptor: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The descriptor number.
    public let rawValue: Int32

    /// Wraps a descriptor number received from the kernel or from systemd (`sd_listen_fds`).
    public init(rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// Standard input (fd 0).
    public static let standardInput = FileDescriptor(rawValue: 0)
    /// Standard output (fd 1).
    public static let standardOutput = FileDescriptor(rawValue: 1)
    /// Standard error (fd 2), where diagnostics go when not under systemd.
    public static let standardError = FileDescriptor(rawValue: 2)

    public var description: String { "fd \(rawValue)" }

    /// How `open(_:_:options:permissions:)` accesses the file.
    public enum AccessMode: Sendable {
        /// `O_RDONLY`.
        case readOnly
        /// `O_WRONLY`.
        case writeOnly
        /// `O_RDWR`.
        case readWrite

        var flags: Int32 {
            switch self {
            case .readOnly: O_RDONLY
            case .writeOnly: O_WRONLY
            case .readWrite: O_RDWR
            }
        }
    }

    /// Flags for `open`, beyond the access mode. `O_CLOEXEC` is always added: the daemon spawns children
    /// and must not leak its descriptors into them.
    public struct OpenOptions: OptionSet, Sendable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        /// `O_CREAT`: create the file if missing (then `permissions` applies).
        public static let create = OpenOptions(rawValue: O_CREAT)
        /// `O_EXCL`: with `.create`, fail with `EEXIST` if the file exists.
        public static let exclusiveCreate = OpenOptions(rawValue: O_EXCL)
        /// `O_TRUNC`: truncate to zero length.
        public static let truncate = OpenOptions(rawValue: O_TRUNC)
        /// `O_APPEND`: every write goes to the end.
        public static let append = OpenOptions(rawValue: O_APPEND)
        /// `O_NONBLOCK`: reads and writes return `EAGAIN` instead of waiting.
        public static let nonBlocking = OpenOptions(rawValue: O_NONBLOCK)
        /// `O_NOFOLLOW`: fail if the last path component is a symbolic link.
        public static let noFollow = OpenOptions(rawValue: O_NOFOLLOW)
        /// `O_DIRECTORY`: fail unless the path is a directory.
        public static let directory = OpenOptions(rawValue: O_DIRECTORY)
    }

    /// `open(2)` with `O_CLOEXEC`.
    public static func open(
        _ path: String,
        _ mode: AccessMode,
        options: OpenOptions = [],
        permissions: mode_t = 0o644
    ) throws(Errno) -> FileDescriptor {
        let flags = mode.flags | options.rawValue | O_CLOEXEC
        let fd = try systemCall("open(\(path))") { Glibc.open(path, flags, permissions) }
        return FileDescriptor(rawValue: fd)
    }

    /// `pipe2(O_CLOEXEC)`: a unidirectional channel, both ends close-on-exec.
    public static func pipe() throws(Errno) -> (readEnd: FileDescriptor, writeEnd: FileDescriptor) {
        var fds: [Int32] = [-1, -1]
        _ = try systemCall("pipe2") { pipe2(&fds, O_CLOEXEC) }
        return (FileDescriptor(rawValue: fds[0]), FileDescriptor(rawValue: fds[1]))
    }

    /// `read(2)` into `buffer`; returns the byte count, 0 at end of file. Throws `.wouldBlock` when
    /// non-blocking and nothing is ready.
    public func read(into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        try systemCall("read(fd \(rawValue))") { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
    }

    /// Reads at most `maximumCount` bytes; an empty result means end of file.
    public func read(upTo maximumCount: Int) throws(Errno) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: maximumCount)
        let count = try systemCall("read(fd \(rawValue))") {
            bytes.withUnsafeMutableBytes { Glibc.read(rawValue, $0.baseAddress, $0.count) }
        }
        bytes.removeSubrange(count...)
        return bytes
    }

    /// Reads until end of file (for `/proc` files, whose size is reported as 0, and pipes).
    ///
    /// `limit` bounds the memory a hostile or runaway file can make the daemon use; reading stops there.
    public func readToEnd(limit: Int = 16 << 20) throws(Errno) -> [UInt8] {
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while result.count < limit {
            let count = try systemCall("read(fd \(rawValue))") {
                chunk.withUnsafeMutableBytes { Glibc.read(rawValue, $0.baseAddress, $0.count) }
            }
            if count == 0 { break }
            result.append(contentsOf: chunk[..<min(count, limit - result.count)])
        }
        return result
    }

    /// The whole file at `path` as text, read to its end: `.fileTooLarge` past `limit` bytes, so a hostile file
    /// can neither exhaust memory nor be returned cut short.
    public static func readText(atPath path: String, limit: Int) throws(Errno) -> String {
        let descriptor = try open(path, .readOnly)
        defer { try? descriptor.close() }  // Read-only: closing cannot lose data.
        let bytes: [UInt8]
        do {
            bytes = try descriptor.readToEnd(limit: limit + 1)
        } catch {
            throw error.with(operation: "read(\(path))")
        }
        guard bytes.count <= limit else {
            throw Errno.fileTooLarge.with(operation: "read(\(path)): larger than \(limit) bytes")
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `write(2)` of `buffer`; returns how many bytes were taken (possibly fewer than offered).
    public func write(_ buffer: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try systemCall("write(fd \(rawValue))") { Glibc.write(rawValue, buffer.baseAddress, buffer.count) }
    }

    /// Writes every byte, looping over short writes. For blocking descriptors; a non-blocking one may throw
    /// `.wouldBlock` with part of the bytes written.
    public func writeAll<Bytes: Collection>(_ bytes: Bytes) throws(Errno) where Bytes.Element == UInt8 {
        let array = Array(bytes)
        var offset = 0
        while offset < array.count {
            offset += try systemCall("write(fd \(rawValue))") {
                // `baseAddress!`: the loop runs only while offset < count, so the array is not empty.
                array.withUnsafeBytes { Glibc.write(rawValue, $0.baseAddress! + offset, $0.count - offset) }
            }
        }
    }

    /// Writes every byte at `offset` with `pwrite(2)`, looping over short writes; the descriptor's own offset
    /// does not move.
    public func writeAll(_ bytes: [UInt8], at offset: Int) throws(Errno) {
        var written = 0
        while written < bytes.count {
            written += try systemCall("pwrite(fd \(rawValue))") {
                // `baseAddress!`: the loop runs only while written < count, so the array is not empty.
                bytes.withUnsafeBytes {
                    pwrite(rawValue, $0.baseAddress! + written, $0.count - written, off_t(offset + written))
                }
            }
        }
    }

    /// `close(2)`. Never retried: on Linux the number is released even when close reports `EINTR`, and
    /// a retry could close a descriptor another thread just opened.
    public func close() throws(Errno) {
        do throws(Errno) {
            _ = try systemCall("close(fd \(rawValue))", retryOnInterrupt: false) { Glibc.close(rawValue) }
        } catch  where error == .interrupted {
            return
        }
    }

    /// Runs `body`, then closes the descriptor whatever happened. A close failure is thrown only when
    /// `body` succeeded; otherwise `body`'s error wins.
    public func closeAfter<Result>(_ body: () throws -> Result) throws -> Result {
        let result: Result
        do {
            result = try body()
        } catch {
            try? close()  // The body's error is the one worth reporting; the descriptor is released anyway.
            throw error
        }
        try close()
        return result
    }

    /// Sets or clears `O_NONBLOCK`.
    public func setNonBlocking(_ isNonBlocking: Bool = true) throws(Errno) {
        let flags = try systemCall("fcntl(fd \(rawValue), F_GETFL)") { fcntl(rawValue, F_GETFL) }
        let wanted = isNonBlocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
        if wanted != flags {
            _ = try systemCall("fcntl(fd \(rawValue), F_SETFL)") { fcntl(rawValue, F_SETFL, wanted) }
        }
    }

    /// Whether `O_NONBLOCK` is set.
    public var isNonBlocking: Bool {
        get throws(Errno) {
            let flags = try systemCall("fcntl(fd \(rawValue), F_GETFL)") { fcntl(rawValue, F_GETFL) }
            return flags & O_NONBLOCK != 0
        }
    }

    /// `dup3`-style duplicate with `O_CLOEXEC`, as a new descriptor the caller closes.
    public func duplicate() throws(Errno) -> FileDescriptor {
        FileDescriptor(
            rawValue: try systemCall("fcntl(fd \(rawValue), F_DUPFD_CLOEXEC)") {
                fcntl(rawValue, F_DUPFD_CLOEXEC, 0)
            })
    }

    /// `dup2(fd, target)`: `target` (a standard stream, say) becomes another descriptor of this file, closed
    /// first if it was open, and kept across `execve`. Onto itself it does nothing.
    public func duplicate(onto target: FileDescriptor) throws(Errno) {
        guard target.rawValue != rawValue else { return }
        _ = try systemCall("dup2(fd \(rawValue), \(target.rawValue))") { dup2(rawValue, target.rawValue) }
    }

    /// Waits until the descriptor reports one of `events` (or an error/hang-up, which poll always reports),
    /// for at most `timeout` (`nil`: no limit). Returns the events seen; empty when the timeout passed.
    ///
    /// An interrupting signal does not restart the full wait: the remaining time is recomputed from
    /// `CLOCK_MONOTONIC`, so the bound holds however often the process is signalled.
    public func poll(for events: IOEvents, timeout: Duration?) throws(Errno) -> IOEvents {
        let deadline = timeout.map { MonotonicClock.now() &+ max(0, $0.nanosecondCount) }
        var entry = pollfd(fd: rawValue, events: Int16(truncatingIfNeeded: events.rawValue), revents: 0)
        // The helper calls this again after EINTR, and each call waits only for what is left.
        _ = try systemCall("poll(fd \(rawValue))") { () -> Int32 in
            var milliseconds: Int32 = -1
            if let deadline {
                let remaining = max(0, deadline - MonotonicClock.now())
                // Round up so a wait never ends before the deadline, then clamp to what poll accepts.
                milliseconds = Int32(clamping: (remaining + 999_999) / 1_000_000)
            }
            entry.revents = 0
            return Glibc.poll(&entry, 1, milliseconds)
        }
        if entry.revents & Int16(POLLNVAL) != 0 {
            preconditionFailure("poll(fd \(rawValue)): not an open descriptor (a programmer error)")
        }
        return IOEvents(rawValue: UInt32(UInt16(bitPattern: entry.revents)))
    }
}

/// Readiness events, with the values `poll(2)` and `epoll(7)` share (POLLIN == EPOLLIN, and so on).
public struct IOEvents: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// `POLLIN`/`EPOLLIN`: data to read, a connection to accept, or a pidfd whose process exited.
    public static let readable = IOEvents(rawValue: 0x001)
    /// `POLLPRI`/`EPOLLPRI`: exceptional condition (cgroup `cgroup.events` and PSI triggers use it).
    public static let priority = IOEvents(rawValue: 0x002)
    /// `POLLOUT`/`EPOLLOUT`: room to write.
    public static let writable = IOEvents(rawValue: 0x004)
    /// `POLLERR`/`EPOLLERR`: error condition; always reported, never needs requesting.
    public static let error = IOEvents(rawValue: 0x008)
    /// `POLLHUP`/`EPOLLHUP`: hang-up; always reported, never needs requesting.
    public static let hangUp = IOEvents(rawValue: 0x010)
    /// `POLLRDHUP`/`EPOLLRDHUP`: the peer shut down its writing half.
    public static let readHangUp = IOEvents(rawValue: UInt32(BGTASK_POLLRDHUP))

    public var description: String {
        let names: [(IOEvents, String)] = [
            (.readable, "readable"), (.priority, "priority"), (.writable, "writable"),
            (.error, "error"), (.hangUp, "hangUp"), (.readHangUp, "readHangUp"),
        ]
        let present = names.filter { contains($0.0) }.map(\.1)
        let unknown = subtracting(IOEvents(names.map(\.0)))
        return "["
            + (present + (unknown.isEmpty ? [] : ["0x\(String(unknown.rawValue, radix: 16))"]))
            .joined(separator: ", ") + "]"
    }
}
