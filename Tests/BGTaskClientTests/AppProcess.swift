// Runs the fixture app and the example as real processes: stdin commands in, stdout lines out, always reaped.
import BGTaskSystem
import Foundation
import Testing

/// The directory of the package's built products: the test bundle is built next to the executables.
let productsDirectory: String = {
    // The test runner is the bundle executable itself; its directory holds every product of the build.
    let executable =
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return (executable as NSString).deletingLastPathComponent
}()

/// A child process with its stdin and stdout piped to the test, killed and reaped by `stop()`.
final class AppProcess {
    let process: SpawnedProcess
    private var input: FileDescriptor?
    private let output: FileDescriptor
    private var buffer: [UInt8] = []
    /// Every line read so far, in order.
    private(set) var transcript: [String] = []
    private var unread = 0
    private var exitStatus: BGTaskSystem.ExitStatus?

    /// Starts `arguments`; the program must bound its own lifetime (`--lifetime`, `timeout`).
    init(_ arguments: [String]) throws {
        let stdin = try FileDescriptor.pipe()
        let stdout = try FileDescriptor.pipe()
        defer {
            try? stdin.readEnd.close()  // The child has its own copies now.
            try? stdout.writeEnd.close()
        }
        process = try ProcessSpawner.spawn(
            arguments,
            options: SpawnOptions(
                standardInput: .fileDescriptor(stdin.readEnd), standardOutput: .fileDescriptor(stdout.writeEnd)))
        input = stdin.writeEnd
        output = stdout.readEnd
    }

    var pid: Int32 { process.pid }

    /// Sends one command line.
    func send(_ line: String) {
        guard let input else {
            Issue.record("stdin of process \(pid) is closed")
            return
        }
        do {
            try input.writeAll(Array((line + "\n").utf8))
        } catch {
            Issue.record("cannot write \(line.debugDescription) to process \(pid): \(error)")
        }
    }

    /// The next line not returned before, waiting at most `timeout`; nil at end of output or timeout.
    func nextLine(timeout: Duration = .seconds(15)) -> String? {
        let deadline = MonotonicClock.now() + Int64(timeout.components.seconds) * 1_000_000_000
        while unread == transcript.count {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                transcript.append(String(decoding: buffer[..<newline], as: UTF8.self))
                buffer.removeSubrange(...newline)
                continue
            }
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else { return nil }
            do {
                let events = try output.poll(for: .readable, timeout: .nanoseconds(remaining))
                if events.isEmpty { return nil }
                let bytes = try output.read(upTo: 4096)
                if bytes.isEmpty { return nil }
                buffer += bytes
            } catch {
                Issue.record("reading process \(pid): \(error)")
                return nil
            }
        }
        defer { unread += 1 }
        return transcript[unread]
    }

    /// Reads lines until one satisfies `condition`, and returns it; records an issue with the transcript if none
    /// comes within `timeout`.
    @discardableResult
    func expectLine(
        timeout: Duration = .seconds(15), sourceLocation: SourceLocation = #_sourceLocation,
        _ condition: (String) -> Bool
    ) -> String? {
        let deadline = MonotonicClock.now() + Int64(timeout.components.seconds) * 1_000_000_000
        while true {
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0, let line = nextLine(timeout: .nanoseconds(remaining)) else {
                Issue.record(
                    "no matching line from process \(pid); transcript:\n\(transcript.joined(separator: "\n"))",
                    sourceLocation: sourceLocation)
                return nil
            }
            if condition(line) { return line }
        }
    }

    /// Reads lines until one starts with `prefix`.
    @discardableResult
    func expectLine(
        startingWith prefix: String, timeout: Duration = .seconds(15), sourceLocation: SourceLocation = #_sourceLocation
    ) -> String? {
        expectLine(timeout: timeout, sourceLocation: sourceLocation) { $0.hasPrefix(prefix) }
    }

    /// Sends `command` and returns the next line that starts with one of `prefixes` (or "error").
    @discardableResult
    func run(_ command: String, expecting prefixes: String..., sourceLocation: SourceLocation = #_sourceLocation)
        -> String?
    {
        send(command)
        return expectLine(sourceLocation: sourceLocation) { line in
            line.hasPrefix("error") || prefixes.contains { line.hasPrefix($0) }
        }
    }

    /// Closes the child's stdin: it reads end of file.
    func closeInput() {
        try? input?.close()  // Cleanup; the descriptor is released either way.
        input = nil
    }

    /// Waits for the process to exit by itself, at most `timeout`, and returns how it ended; nil if it did not.
    func waitForExit(timeout: Duration = .seconds(15)) -> BGTaskSystem.ExitStatus? {
        if let exitStatus { return exitStatus }
        do {
            guard try process.pidFD.waitForExit(timeout: timeout) else { return nil }
            exitStatus = try process.waitForExit()
            return exitStatus
        } catch {
            Issue.record("waiting for process \(pid): \(error)")
            return nil
        }
    }

    /// Sends `signal` through the pidfd (no effect once the process exited).
    func signal(_ signal: Signal) {
        try? process.pidFD.sendSignal(signal)  // ESRCH: it already exited, which is what a kill wants.
    }

    /// Ends the process if it still runs (SIGTERM and SIGCONT, so a stopped one acts on it, or a `timeout`
    /// wrapper passes them on; SIGKILL if it is still there 10 s later), reaps it and closes the pipes.
    func stop() {
        if exitStatus == nil {
            signal(.terminate)
            signal(.continue)
            if waitForExit(timeout: .seconds(10)) == nil {
                signal(.kill)
                exitStatus = try? process.waitForExit()  // Cleanup: the kill is what matters.
            }
        }
        try? process.pidFD.close()  // Cleanup.
        closeInput()
        try? output.close()
    }
}

/// The fixture app's command line: it exits by itself after `lifetime` seconds.
func fixtureCommand(socketPath: String, lifetime: Int = 60) -> [String] {
    [productsDirectory + "/BGTaskFixtureApp", "--socket", socketPath, "--lifetime", String(lifetime)]
}

/// The example's command line, bounded by `timeout` (which passes SIGTERM on, then kills 5 s later).
func photoUploaderCommand(socketPath: String, photos: Int, chunkMilliseconds: Int) -> [String] {
    [
        "timeout", "-s", "TERM", "-k", "5", "120", productsDirectory + "/PhotoUploader", "--socket", socketPath,
        "--photos", String(photos), "--chunk-ms", String(chunkMilliseconds),
    ]
}

/// Runs `body` with a started process that is killed and reaped afterwards, whatever happens.
func withAppProcess<Result>(_ arguments: [String], _ body: (AppProcess) throws -> Result) throws -> Result {
    let process = try AppProcess(arguments)
    defer { process.stop() }
    return try body(process)
}
