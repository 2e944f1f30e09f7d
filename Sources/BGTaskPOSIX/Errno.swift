// A typed `errno` that remembers which call failed, so a log line says what went wrong and where.
import Glibc

/// An error number (`errno`) from a failed system call, with the call that failed.
///
/// Two values are equal when their numbers are: the operation is context for people, not identity, so
/// `catch let error as Errno where error == .wouldBlock` matches whichever call reported it.
public struct Errno: Error, Hashable, Sendable, CustomStringConvertible {
    /// The C `errno` value, e.g. `ENOENT` (2).
    public var rawValue: Int32

    /// The call that failed and its main argument, e.g. `connect(/run/bgtaskd.sock)`; empty when unknown.
    public var operation: String

    /// Wraps an error number, naming the failing call for the description.
    public init(rawValue: Int32, operation: String = "") {
        self.rawValue = rawValue
        self.operation = operation
    }

    /// The C library's message for the number, e.g. "No such file or directory".
    public var message: String {
        var buffer = [CChar](repeating: 0, count: 256)
        // The XSI strerror_r (the one Swift's Glibc exposes) fills the buffer and returns 0; unlike
        // strerror it is safe to call from several threads.
        let result = strerror_r(rawValue, &buffer, buffer.count)
        guard result == 0 else { return "error \(rawValue)" }
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `operation: message`, e.g. "connect(/run/x.sock): No such file or directory".
    public var description: String {
        operation.isEmpty ? message : "\(operation): \(message)"
    }

    /// The same number with a different operation, for callers that add context.
    public func with(operation: String) -> Errno {
        Errno(rawValue: rawValue, operation: operation)
    }

    public static func == (lhs: Errno, rhs: Errno) -> Bool { lhs.rawValue == rhs.rawValue }

    public func hash(into hasher: inout Hasher) { hasher.combine(rawValue) }

    /// Matches an error against this number in `catch` patterns and `switch`.
    public static func ~= (pattern: Errno, value: any Error) -> Bool {
        (value as? Errno)?.rawValue == pattern.rawValue
    }

    /// `EPERM`: operation not permitted.
    public static let notPermitted = Errno(rawValue: EPERM)
    /// `ENOENT`: no such file or directory.
    public static let noSuchFileOrDirectory = Errno(rawValue: ENOENT)
    /// `ESRCH`: no such process (it exited, or the pidfd's process was reaped).
    public static let noSuchProcess = Errno(rawValue: ESRCH)
    /// `EINTR`: interrupted by a signal; the syscall helper retries it.
    public static let interrupted = Errno(rawValue: EINTR)
    /// `EIO`: input/output error.
    public static let ioError = Errno(rawValue: EIO)
    /// `ECHILD`: no child to wait for (already reaped, or not ours).
    public static let noChildProcess = Errno(rawValue: ECHILD)
    /// `EAGAIN`/`EWOULDBLOCK`: a non-blocking call would have blocked.
    public static let wouldBlock = Errno(rawValue: EAGAIN)
    /// `ENOMEM`: out of memory.
    public static let noMemory = Errno(rawValue: ENOMEM)
    /// `EACCES`: permission denied.
    public static let permissionDenied = Errno(rawValue: EACCES)
    /// `EBUSY`: resource busy (e.g. a signal not blocked before sd-event adds a source for it).
    public static let busy = Errno(rawValue: EBUSY)
    /// `EEXIST`: file exists.
    public static let fileExists = Errno(rawValue: EEXIST)
    /// `ENOTDIR`: not a directory.
    public static let notDirectory = Errno(rawValue: ENOTDIR)
    /// `EINVAL`: invalid argument.
    public static let invalidArgument = Errno(rawValue: EINVAL)
    /// `ENOSPC`: no space left on device.
    public static let noSpace = Errno(rawValue: ENOSPC)
    /// `EPIPE`: the reading end is closed.
    public static let brokenPipe = Errno(rawValue: EPIPE)
    /// `ERANGE`: a result does not fit (e.g. the buffer given to getpwuid_r).
    public static let resultOutOfRange = Errno(rawValue: ERANGE)
    /// `ENAMETOOLONG`: a path is too long (for Unix sockets: longer than `sun_path`).
    public static let nameTooLong = Errno(rawValue: ENAMETOOLONG)
    /// `EFBIG`: a file is larger than allowed (here: larger than the reader takes whole).
    public static let fileTooLarge = Errno(rawValue: EFBIG)
    /// `ENOSYS`: the kernel does not have this system call.
    public static let notImplemented = Errno(rawValue: ENOSYS)
    /// `ENODATA`: no data available.
    public static let noData = Errno(rawValue: ENODATA)
    /// `EPROTO`: protocol error.
    public static let protocolError = Errno(rawValue: EPROTO)
    /// `ENOPROTOOPT`: the kernel does not know this socket option (e.g. `SO_PEERPIDFD` before 6.5).
    public static let protocolNotAvailable = Errno(rawValue: ENOPROTOOPT)
    /// `EOPNOTSUPP`: operation not supported.
    public static let notSupported = Errno(rawValue: EOPNOTSUPP)
    /// `EADDRINUSE`: address already in use (another daemon listens on the socket path).
    public static let addressInUse = Errno(rawValue: EADDRINUSE)
    /// `ECONNRESET`: the peer reset the connection.
    public static let connectionReset = Errno(rawValue: ECONNRESET)
    /// `ENOTCONN`: the socket is not connected.
    public static let notConnected = Errno(rawValue: ENOTCONN)
    /// `ETIMEDOUT`: timed out.
    public static let timedOut = Errno(rawValue: ETIMEDOUT)
    /// `ECONNREFUSED`: nobody listens on the socket (a stale socket file).
    public static let connectionRefused = Errno(rawValue: ECONNREFUSED)
    /// `EALREADY`: a connection attempt is already in progress.
    public static let alreadyInProgress = Errno(rawValue: EALREADY)
    /// `EINPROGRESS`: a non-blocking connect is in progress.
    public static let inProgress = Errno(rawValue: EINPROGRESS)
}

extension Errno {
    /// `ECONNABORTED`: a connection was aborted before `accept` took it.
    public static let connectionAborted = Errno(rawValue: ECONNABORTED)
}
