// The one place that turns a C call's failure into a typed `Errno`: retries EINTR, traps programmer errors.
import CPOSIX
import Glibc

/// How a C function reports failure.
@usableFromInline
package enum ErrorConvention {
    /// Returns -1 and sets `errno` (system calls and most of libc).
    case minusOneSetsErrno
    /// Returns `-errno` directly, any negative value is a failure (the `sd_*` functions of libsystemd).
    case returnsNegativeErrno
    /// Returns 0 on success or the error number itself (`posix_spawn`, `pthread_*`, `get*_r`).
    case returnsErrorNumber
}

/// Calls `body` until it does not fail with `EINTR`, and returns its result or throws the failure as `Errno`.
///
/// - `operation` names the call for the error's description (it is only built on failure).
/// - `retryOnInterrupt: false` is for calls where EINTR must not be retried: `close` (the descriptor is gone
///   whatever it returns) and `connect` (the connection continues in the background).
/// - `EBADF` and `EFAULT` mean the program passed a closed descriptor or a bad pointer: continuing would
///   act on whatever object reuses that number, so they stop the process instead of being thrown.
@inlinable
package func systemCall<Result: SignedInteger>(
    _ operation: @autoclosure () -> String,
    convention: ErrorConvention = .minusOneSetsErrno,
    retryOnInterrupt: Bool = true,
    _ body: () -> Result
) throws(Errno) -> Result {
    while true {
        let result = body()
        let code: Int32
        switch convention {
        case .minusOneSetsErrno:
            guard result == -1 else { return result }
            code = errno
        case .returnsNegativeErrno:
            guard result < 0 else { return result }
            code = Int32(truncatingIfNeeded: 0 - result)
        case .returnsErrorNumber:
            guard result != 0 else { return result }
            code = Int32(truncatingIfNeeded: result)
        }
        if code == EINTR && retryOnInterrupt { continue }
        if code == EBADF || code == EFAULT {
            preconditionFailure("\(Errno(rawValue: code, operation: operation())) (a programmer error)")
        }
        throw Errno(rawValue: code, operation: operation())
    }
}
