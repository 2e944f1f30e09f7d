// A process handle that cannot be fooled by PID reuse: signal, wait for exit and reclaim through a pidfd.
import CPOSIX
import Glibc

/// A pidfd (`pidfd_open(2)`): a descriptor naming one process for as long as it is open.
///
/// Unlike a raw PID, a pidfd never starts to refer to another process after the first one is reaped, so
/// signals sent through it cannot hit an unrelated program. It becomes readable when the process exits,
/// which is how the daemon sees a death without polling `/proc`.
public struct PidFD: Hashable, Sendable, CustomStringConvertible {
    /// The descriptor; the owner closes it with `close()`.
    public let fileDescriptor: FileDescriptor

    /// The process id the pidfd was opened for (for logs and `/proc` paths; identity lies in the pidfd).
    public let pid: pid_t

    /// Wraps a pidfd obtained elsewhere (`SO_PEERPIDFD`, `clone3`).
    public init(fileDescriptor: FileDescriptor, pid: pid_t) {
        self.fileDescriptor = fileDescriptor
        self.pid = pid
    }

    public var description: String { "pidfd \(fileDescriptor.rawValue) (pid \(pid))" }

    /// `pidfd_open(pid, 0)`. Throws `.noSuchProcess` when no such process exists. The pidfd is
    /// close-on-exec (the kernel always sets it).
    ///
    /// Opening by PID is only race-free when the process cannot be reaped in between: for a child of ours
    /// that has not been waited for, or a process whose start time is checked after opening.
    public static func open(pid: pid_t) throws(Errno) -> PidFD {
        let fd = try systemCall("pidfd_open(\(pid))") { bgtask_pidfd_open(pid, 0) }
        return PidFD(fileDescriptor: FileDescriptor(rawValue: fd), pid: pid)
    }

    /// `pidfd_send_signal(2)`. Throws `.noSuchProcess` once the process has exited.
    public func sendSignal(_ signal: Signal) throws(Errno) {
        _ = try systemCall("pidfd_send_signal(\(pid), \(signal.name))") {
            bgtask_pidfd_send_signal(fileDescriptor.rawValue, signal.rawValue, 0)
        }
    }

    /// Whether the process has exited (a zombie counts as exited): a poll with zero timeout, never blocks.
    public var hasExited: Bool {
        get throws(Errno) { try !fileDescriptor.poll(for: .readable, timeout: .zero).isEmpty }
    }

    /// Waits until the process exits, at most `timeout` (`nil`: no limit). Returns whether it exited.
    public func waitForExit(timeout: Duration?) throws(Errno) -> Bool {
        try !fileDescriptor.poll(for: .readable, timeout: timeout).isEmpty
    }

    /// `process_mrelease(2)`: frees a dying process's memory now instead of when its last thread
    /// finishes exiting. Call after `SIGKILL`; throws `.invalidArgument` if the process is not dying and
    /// `.noSuchProcess` once it is fully gone.
    public func releaseMemory() throws(Errno) {
        _ = try systemCall("process_mrelease(\(pid))") { bgtask_process_mrelease(fileDescriptor.rawValue, 0) }
    }

    /// Closes the pidfd.
    public func close() throws(Errno) {
        try fileDescriptor.close()
    }
}
