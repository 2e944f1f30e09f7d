// Stop requests that arrive while `bgtask run --when` waits for its conditions, before any command exists.
import BGTaskPOSIX
import Glibc

/// Catches the requests to stop (SIGHUP, SIGINT, SIGQUIT, SIGTERM) from the moment it is made, as
/// `SupervisedCommand` does while its command runs, and wakes a thread waiting in `wait()` when one arrives: a
/// process that waits a long time before it starts its command can then give up cleanly (cancel what it asked
/// for, report the signal) instead of dying of it.
///
/// A `SupervisedCommand` started after it keeps what it caught and forwards the signals to its command from then
/// on. Make at most one at a time.
public final class StopRequestWatch: Sendable {
    private let readEnd: FileDescriptor
    private let writeEnd: FileDescriptor

    /// Installs the handler (`SignalForwarding`) and the pipe it writes to.
    public init() throws(Errno) {
        (readEnd, writeEnd) = try FileDescriptor.pipe()
        do {
            // The handler must never block: a pipe already holding a byte has woken its reader.
            try writeEnd.setNonBlocking()
        } catch {
            try? readEnd.close()
            try? writeEnd.close()
            throw error
        }
        SignalForwarding.install()
        SignalForwarding.stopWake.store(writeEnd.rawValue, ordering: .sequentiallyConsistent)
    }

    /// The last request to stop received since the watch was made, if any.
    public var stopRequest: Signal? {
        let number = SignalForwarding.stopRequest.load(ordering: .sequentiallyConsistent)
        return number == 0 ? nil : Signal(rawValue: number)
    }

    /// Blocks until a request to stop arrives (it may have arrived already) or `release()` is called; the request,
    /// or nil when released without one.
    public func wait() -> Signal? {
        while stopRequest == nil {
            var byte: UInt8 = 0
            let count = withUnsafeMutableBytes(of: &byte) { try? readEnd.read(into: $0) }
            // A zero byte, or a pipe that cannot be read, is `release()`.
            guard count == 1, byte == 1 else { break }
        }
        return stopRequest
    }

    /// Wakes `wait()` without a request; the signals stay caught.
    public func release() {
        var byte: UInt8 = 0
        _ = withUnsafeBytes(of: &byte) { try? writeEnd.write($0) }
    }

    deinit {
        // The handler stops writing before the descriptor can be closed and its number reused.
        SignalForwarding.stopWake.store(-1, ordering: .sequentiallyConsistent)
        try? readEnd.close()
        try? writeEnd.close()
    }
}
