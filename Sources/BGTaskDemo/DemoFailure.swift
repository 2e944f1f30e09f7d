// What stops the demo: a failure with one line saying what went wrong, or a signal asking it to stop.
import BGTaskArguments
import BGTaskCLI
import BGTaskClient
import BGTaskPOSIX

/// Why the demo stopped before its end.
struct DemoFailure: Error, CustomStringConvertible {
    /// One line: what went wrong and, where known, what to do.
    var message: String
    /// The signal that interrupted the demo (SIGINT, SIGTERM, SIGHUP); nil for a failure.
    var signal: Signal?

    init(_ message: String, signal: Signal? = nil) {
        self.message = message
        self.signal = signal
    }

    var description: String { message }

    /// As `bgtask` reports it: exit status 1, or 128+N for signal N, as a shell reports a process it ended.
    var commandFailure: CommandFailure {
        guard let signal else { return CommandFailure(message) }
        return CommandFailure(message, exitCode: ExitCode(rawValue: 128 + signal.rawValue))
    }
}

/// Runs a call to the daemon, naming it in the failure.
func daemonCall<Value>(_ what: String, _ body: () throws(ClientError) -> Value) throws(DemoFailure) -> Value {
    do {
        return try body()
    } catch {
        throw DemoFailure("\(what) failed: \(error)")
    }
}

/// Runs a system call, naming what it was for in the failure.
func performing<Value>(_ what: String, _ body: () throws(Errno) -> Value) throws(DemoFailure) -> Value {
    do {
        return try body()
    } catch {
        throw DemoFailure("\(what): \(error)")
    }
}
