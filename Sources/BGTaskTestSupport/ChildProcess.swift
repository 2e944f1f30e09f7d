// A child process driven by lines on its stdin and read by lines from its stdout, with bounded waits.

import BGTaskCore
import BGTaskPOSIX
import Foundation
import Glibc

/// A real child process for end-to-end tests: write command lines to it, wait for lines it prints.
///
/// Every wait has a timeout; `terminate()` (and deinit) kill it through its pidfd, so a failing test never
/// leaves it behind. Children should also bound their own lifetime (a `--lifetime` argument, `timeout`).
public final class ChildProcess {
    /// The spawned process.
    public let process: SpawnedProcess
    private var input: FileDescriptor?
    private let output: FileDescriptor
    private var buffer: [UInt8] = []
    private var exitStatus: ExitStatus?
    /// Every line read so far, for failure messages.
    public private(set) var transcript: [String] = []

    /// The child's pid.
    public var pid: pid_t { process.pid }

    /// Spawns `arguments` with stdin and stdout as pipes; stderr goes to `standardError` (inherited if nil).
    public init(
        _ arguments: [String], environment: [String: String]? = nil, standardError: FileDescriptor? = nil,
        flags: SpawnFlags = []
    ) throws {
        let (inputRead, inputWrite) = try FileDescriptor.pipe()
        let (outputRead, outputWrite) = try FileDescriptor.pipe()
        var options = SpawnOptions(flags: flags)
        options.standardInput = .fileDescriptor(inputRead)
        options.standardOutput = .fileDescriptor(outputWrite)
        if let standardError { options.standardError = .fileDescriptor(standardError) }
        if let environment { options.environment = environment.map { "\($0.key)=\($0.value)" } }
        defer {
            try? inputRead.close()
            try? outputWrite.close()
        }
        process = try ProcessSpawner.spawn(arguments, options: options)
        input = inputWrite
        output = outputRead
    }

    /// Sends one line to the child's stdin.
    public func send(_ line: String) throws {
        guard let input else { throw HarnessError("stdin of pid \(pid) is closed") }
        try input.writeAll(Array((line + "\n").utf8))
    }

    /// Closes the child's stdin (many fixtures exit on end of input).
    public func closeInput() {
        try? input?.close()
        // Forget it: deinit closing the number again could close a descriptor another thread opened since.
        input = nil
    }

    /// The next line the child prints, waiting at most `timeout`; nil at end of output.
    public func nextLine(timeout: Duration = .seconds(20)) throws -> String? {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                transcript.append(line)
                return line
            }
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else {
                throw HarnessError(
                    "pid \(pid) printed no full line within \(timeout); so far: \(transcript.suffix(20))")
            }
            let ready = try output.poll(for: .readable, timeout: .nanoseconds(remaining))
            guard !ready.isEmpty else { continue }
            let chunk = try output.read(upTo: 65536)
            if chunk.isEmpty {
                if buffer.isEmpty { return nil }
                let line = String(decoding: buffer, as: UTF8.self)
                buffer.removeAll()
                transcript.append(line)
                return line
            }
            buffer += chunk
        }
    }

    /// Reads lines until one satisfies `matches`, returning it; fails after `timeout` or at end of output.
    @discardableResult
    public func waitForLine(
        timeout: Duration = .seconds(20), where matches: (String) -> Bool
    ) throws -> String {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0, let line = try nextLine(timeout: .nanoseconds(remaining)) else {
                throw HarnessError("pid \(pid) never printed the expected line; transcript: \(transcript.suffix(30))")
            }
            if matches(line) { return line }
        }
    }

    /// Reads lines until one starts with `prefix`.
    @discardableResult
    public func waitForLine(startingWith prefix: String, timeout: Duration = .seconds(20)) throws -> String {
        try waitForLine(timeout: timeout) { $0.hasPrefix(prefix) }
    }

    /// Waits for the child to exit by itself, at most `timeout`.
    public func waitForExit(timeout: Duration = .seconds(20)) throws -> ExitStatus {
        if let exitStatus { return exitStatus }
        guard try process.pidFD.waitForExit(timeout: timeout) else {
            throw HarnessError("pid \(pid) did not exit within \(timeout)")
        }
        let status = try process.waitForExit()
        exitStatus = status
        return status
    }

    /// Whether the child has exited.
    public var hasExited: Bool {
        exitStatus != nil || ((try? process.pidFD.hasExited) ?? true)
    }

    /// Kills the child (SIGKILL through its pidfd) and reaps it.
    public func terminate() {
        if exitStatus == nil {
            try? process.pidFD.sendSignal(.kill)
            exitStatus = try? process.waitForExit()
        }
    }

    deinit {
        terminate()
        try? input?.close()
        try? output.close()
        try? process.pidFD.close()
    }
}
