// One sample app process of the demo: started by the demo, its output quoted line by line, ended by the demo.
import BGTaskPOSIX
import Foundation
import Glibc

/// A `bgtask-demo-app` process the demo started, leading its own process group (so the daemon's SIGSTOP reaches
/// all of it and a Ctrl-C on the terminal does not), with its standard output and error read on a thread of
/// their own: each line is quoted in the transcript as it comes and kept for the narration to wait on.
final class SampleAppProcess: QuotedApp {
    /// The app's name, as it registers.
    let name: String
    /// The process, with the pidfd it was spawned with.
    let process: SpawnedProcess
    /// Every line it printed so far.
    let lines = Feed<String>()
    /// How it ended, once reaped.
    private(set) var exitStatus: ExitStatus?

    /// Its pid.
    var pid: pid_t { process.pid }

    /// Starts `executable ARGUMENTS...` as the app `name` with `environment`.
    init(
        name: String, executable: String, arguments: [String], environment: [String], transcript: Transcript
    ) throws(DemoFailure) {
        self.name = name
        let (readEnd, writeEnd) = try performing("a pipe for \(name)'s output") { () throws(Errno) in
            try FileDescriptor.pipe()
        }
        do throws(Errno) {
            process = try ProcessSpawner.spawn(
                [executable] + arguments,
                options: SpawnOptions(
                    flags: .newProcessGroup, standardOutput: .fileDescriptor(writeEnd),
                    standardError: .fileDescriptor(writeEnd), environment: environment))
        } catch {
            try? readEnd.close()
            try? writeEnd.close()
            throw DemoFailure("cannot start \(executable): \(error)")
        }
        // Only the child keeps the write end, so the reader sees the end of output when the app is gone.
        try? writeEnd.close()
        let lines = lines
        let source = name
        let thread = Thread {
            Self.read(readEnd, into: lines, quotingAs: source, in: transcript)
        }
        thread.name = "bgtask-demo-\(name)"
        thread.start()
    }

    /// Reads lines until the end of output, quoting each one, then closes the descriptor and the feed.
    private static func read(
        _ descriptor: FileDescriptor, into lines: Feed<String>, quotingAs source: String, in transcript: Transcript
    ) {
        var quoted = QuotedLines(source: source, lines: lines, transcript: transcript)
        while let chunk = try? descriptor.read(upTo: 4_096), !chunk.isEmpty {
            quoted.append(chunk)
        }
        try? descriptor.close()
        quoted.finish()
    }

    /// Whether the process has exited (it may still need reaping).
    var hasExited: Bool {
        exitStatus != nil || ((try? process.pidFD.hasExited) ?? true)
    }

    /// Waits at most `timeout` for the process to exit and reaps it; nil if it is still running.
    func waitForExit(timeout: Duration) throws(DemoFailure) -> ExitStatus? {
        if let exitStatus { return exitStatus }
        let deadline = ContinuousClock.now + timeout
        while true {
            try Interruption.check()
            let left = deadline - ContinuousClock.now
            let slice = min(left, .milliseconds(100))
            let exited = try performing("waiting for \(name) (pid \(pid))") { () throws(Errno) in
                try process.pidFD.waitForExit(timeout: max(slice, .zero))
            }
            if exited { return try reap() }
            if left <= .zero { return nil }
        }
    }

    private func reap() throws(DemoFailure) -> ExitStatus {
        if let exitStatus { return exitStatus }
        let status = try performing("reaping \(name) (pid \(pid))") { () throws(Errno) in try process.waitForExit() }
        exitStatus = status
        try? process.pidFD.close()
        return status
    }

    /// How `end(grace:)` found or left the process.
    enum Ending {
        /// It had ended before (and was reaped then or now).
        case alreadyEnded(ExitStatus)
        /// The demo ended it now.
        case ended(ExitStatus)
        /// It could not be ended or reaped; its own lifetime ends it.
        case stillRunning
    }

    /// Ends the process, whatever its state: SIGTERM and SIGCONT (a stopped process acts on SIGTERM only once
    /// continued), then SIGKILL if it is still there after `grace`. Never throws, so clean-up goes on with the
    /// next process. Ignores interruptions: this is the clean-up.
    func end(grace: Duration = .seconds(2)) -> Ending {
        if let exitStatus { return .alreadyEnded(exitStatus) }
        if (try? process.pidFD.hasExited) == true, let status = try? process.waitForExit() {
            exitStatus = status
            try? process.pidFD.close()
            return .alreadyEnded(status)
        }
        try? process.pidFD.sendSignal(.terminate)
        try? process.pidFD.sendSignal(.continue)
        if (try? process.pidFD.waitForExit(timeout: grace)) != true {
            try? process.pidFD.sendSignal(.kill)
            // SIGKILL acts at once, stopped or not; the bound only guards against a kernel that never reports it.
            _ = try? process.pidFD.waitForExit(timeout: .seconds(5))
        }
        guard (try? process.pidFD.hasExited) == true, let status = try? process.waitForExit() else {
            return .stillRunning
        }
        exitStatus = status
        try? process.pidFD.close()
        return .ended(status)
    }
}
