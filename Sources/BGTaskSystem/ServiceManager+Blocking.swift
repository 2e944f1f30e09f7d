// Bounded blocking waits on a service manager connection, for tests and command-line tools: never for the daemon,
// whose loop must keep turning while the manager answers.
import BGTaskPOSIX
import BGTaskVocabulary
import Glibc

extension ServiceManagerConnection {
    /// For tests and tools only: starts a call with `start` (which passes the completion it is given to one of the
    /// asynchronous calls), runs the connection's loop until that completion runs, at most `timeout`, and returns
    /// its value or throws its error (`.timedOut` when the time ran out first; the call's completion then still runs
    /// later, into nothing).
    ///
    /// It turns the loop itself, so every other source of the loop may run meanwhile; it refuses (`EDEADLK`) to run
    /// inside a handler of that loop.
    public func waitFor<Value>(
        timeout: Duration = .seconds(30),
        _ start: (_ completion: @escaping (Result<Value, ServiceManagerError>) -> Void) -> Void
    ) throws(ServiceManagerError) -> Value {
        let box = OutcomeBox<Value>()
        start { box.outcome = $0 }
        guard try runLoop(timeout: timeout, until: { box.outcome != nil }), let outcome = box.outcome else {
            throw .timedOut(timeout)
        }
        return try outcome.get()
    }

    /// For tests and tools only: runs the connection's loop until `condition` holds (checked before each iteration),
    /// at most `timeout`; whether it came to hold. Refuses (`EDEADLK`) to run inside a handler of that loop.
    @discardableResult
    public func runLoop(timeout: Duration, until condition: () -> Bool) throws(ServiceManagerError) -> Bool {
        guard !loop.isDispatching else {
            throw .system(Errno(rawValue: EDEADLK, operation: "a blocking wait inside a handler of its own loop"))
        }
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while !condition() {
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else { return false }
            do {
                try loop.runIteration(timeout: .nanoseconds(remaining))
            } catch {
                throw .system(error)
            }
        }
        return true
    }
}

/// Where a completion run by the loop leaves its outcome for the waiting caller.
private final class OutcomeBox<Value> {
    var outcome: Result<Value, ServiceManagerError>?
}
