// Runs the real bgtask executable as a child process with pipes, for tests against a server.
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

/// How a child process ended; named apart from Swift Testing's own `ExitStatus`.
typealias ProcessStatus = BGTaskPOSIX.ExitStatus

/// A running bgtask: its pidfd and the read ends of its standard output and error.
final class BGTaskProcess {
    let process: SpawnedProcess
    private let output: FileDescriptor
    private let errors: FileDescriptor
    private(set) var outputText = ""
    private var isFinished = false

    /// Starts `bgtask ARGUMENTS...` with `environment` (plus PATH), standard input from /dev/null; with
    /// `.newProcessGroup` it leads its own group, as when started from an interactive shell.
    init(_ arguments: [String], environment: [String: String], flags: SpawnFlags = []) throws {
        let executable = try Products.path("bgtask")
        let (outputRead, outputWrite) = try FileDescriptor.pipe()
        let (errorRead, errorWrite) = try FileDescriptor.pipe()
        var variables = environment
        variables["PATH"] = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        do {
            process = try ProcessSpawner.spawn(
                [executable] + arguments,
                options: SpawnOptions(
                    flags: flags, standardOutput: .fileDescriptor(outputWrite),
                    standardError: .fileDescriptor(errorWrite),
                    environment: variables.map { "\($0.key)=\($0.value)" }))
        } catch {
            for descriptor in [outputRead, outputWrite, errorRead, errorWrite] { try descriptor.close() }
            throw error
        }
        try outputWrite.close()
        try errorWrite.close()
        output = outputRead
        errors = errorRead
    }

    deinit {
        // A test that failed before `finish()` must not leave the child behind.
        if !isFinished {
            do {
                try process.pidFD.sendSignal(.kill)
                _ = try process.waitForExit()
            } catch {
                Issue.record("cannot stop bgtask \(process.pid): \(error)")
            }
        }
    }

    /// Reads standard output until it contains `text`, at most `timeout`; returns whether it did. A timeout or
    /// the end of the output is recorded as an issue unless `recordingTimeout` is false.
    @discardableResult
    func waitForOutput(
        containing text: String, timeout: Duration = .seconds(10), recordingTimeout: Bool = true,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Bool {
        let (seconds, attoseconds) = timeout.components
        let deadline = MonotonicClock.now() &+ seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
        while !outputText.contains(text) {
            let left = deadline &- MonotonicClock.now()
            guard left > 0, try !output.poll(for: .readable, timeout: .nanoseconds(left)).isEmpty else {
                if recordingTimeout {
                    Issue.record(
                        "no \(String(reflecting: text)) on standard output: \(outputText)",
                        sourceLocation: sourceLocation)
                }
                return false
            }
            let bytes = try output.read(upTo: 4_096)
            if bytes.isEmpty {
                if recordingTimeout {
                    Issue.record(
                        "standard output ended without \(String(reflecting: text)): \(outputText)",
                        sourceLocation: sourceLocation)
                }
                return false
            }
            outputText += String(decoding: bytes, as: UTF8.self)
        }
        return true
    }

    /// Sends `signal` to bgtask itself.
    func send(_ signal: Signal) throws {
        try process.pidFD.sendSignal(signal)
    }

    /// Waits at most 20 s for bgtask to exit (killing it and recording an issue if it does not), then returns its
    /// status and everything it wrote.
    func finish(sourceLocation: SourceLocation = #_sourceLocation) throws
        -> (status: ProcessStatus, output: String, errors: String)
    {
        if try !process.pidFD.waitForExit(timeout: .seconds(20)) {
            Issue.record("bgtask did not exit within 20 s", sourceLocation: sourceLocation)
            try process.pidFD.sendSignal(.kill)
        }
        let status = try process.waitForExit()
        isFinished = true
        outputText += String(decoding: try output.readToEnd(), as: UTF8.self)
        let errorText = String(decoding: try errors.readToEnd(), as: UTF8.self)
        try output.close()
        try errors.close()
        return (status, outputText, errorText)
    }
}

/// Runs `bgtask ARGUMENTS...` against `server` to completion.
func runBinary(_ arguments: [String], against server: ScriptedServer, sourceLocation: SourceLocation = #_sourceLocation)
    throws -> (status: ProcessStatus, output: String, errors: String)
{
    try BGTaskProcess(arguments, environment: ["BGTASK_SOCKET": server.socketPath])
        .finish(sourceLocation: sourceLocation)
}
