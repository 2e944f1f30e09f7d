// Tests of the subcommands' failures before a daemon answers (no daemon, stale socket, no runtime directory) and of
// the demo hook, run in-process against real sockets.
import BGTaskArguments
import BGTaskCLI
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Synchronization
import Testing

/// Every subcommand that talks to the daemon, with the arguments it needs.
let daemonCommandLines: [[String]] = [
    ["status"], ["status", "org.a"], ["apps"], ["run", "--", "true"], ["begin", "org.a", "work"],
    ["end", "org.a", "1"],
    ["remaining", "org.a"], ["foreground", "org.a"], ["background", "org.a"], ["deactivate", "org.a"],
    ["launch", "org.new", "--", "true"], ["terminate", "org.a"], ["post", "sync"], ["watch"], ["history", "-n", "3"],
]

@Suite struct CommandFailureTests {
    /// A socket path with nothing behind it: one line naming the socket and how to start the daemon, exit 1.
    @Test(arguments: daemonCommandLines) func missingDaemonSaysHowToStartIt(_ words: [String]) async throws {
        try await withTemporaryDirectory { directory in
            let socket = directory + "/missing.sock"
            // Global options go before the subcommand, where they cannot become part of `run`'s CMD.
            let run = await runTool(["--socket", socket] + words)
            #expect(run.status == .failure)
            #expect(run.standardOutput.isEmpty)
            #expect(run.errorLines.count == 1, "\(run.standardError)")
            let line = try #require(run.errorLines.first)
            #expect(line.hasPrefix("bgtask \(words[0]): error: bgtaskd is not running at \(socket): "))
            #expect(line.contains("systemctl start bgtaskd"))
        }
    }

    /// A socket file nobody listens on any more (a crashed daemon) reads as "not running" too.
    @Test func staleSocketSaysHowToStartIt() async throws {
        try await withTemporaryDirectory { directory in
            let socket = directory + "/stale.sock"
            try makeStaleSocketFile(at: socket)
            #expect(FileManager.default.fileExists(atPath: socket))
            let run = await runTool(["apps"], environment: ["BGTASK_SOCKET": socket])
            #expect(run.status == .failure)
            #expect(run.errorLines == [run.errorLines.first ?? ""])
            #expect(run.standardError.hasPrefix("bgtask apps: error: bgtaskd is not running at \(socket): "))
        }
    }

    @Test func userSocketNeedsRuntimeDirectory() async {
        for environment in [[:], ["XDG_RUNTIME_DIR": "relative/dir"]] {
            let run = await runTool(["status", "--user"], environment: environment)
            #expect(run.status == .failure)
            #expect(run.errorLines.count == 1)
            #expect(run.standardError.contains("XDG_RUNTIME_DIR"))
        }
    }

    @Test func userSocketIsUnderRuntimeDirectory() async throws {
        try await withTemporaryDirectory { directory in
            let run = await runTool(["status", "--user"], environment: ["XDG_RUNTIME_DIR": directory])
            #expect(run.status == .failure)
            #expect(run.standardError.contains("not running at \(directory)/bgtaskd/io.bgtask.Lifecycle: "))
        }
    }
}

/// A demo implementation for the hook's test: records the request and writes through the context.
final class RecordingDemoRunner: DemoRunner {
    let requests = Mutex<[DemoRequest]>([])
    let status: ExitCode

    init(status: ExitCode) {
        self.status = status
    }

    func runDemo(_ request: DemoRequest, in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        requests.withLock { $0.append(request) }
        context.standardOutput.write("narration\n")
        if status == .failure { throw CommandFailure("the private daemon did not start") }
        return status
    }
}

@Suite struct DemoHookTests {
    @Test func demoWithoutRunnerFailsWithOneLine() async {
        let run = await runTool(["demo"])
        #expect(run.status == .failure)
        #expect(
            run.errorLines == [
                "bgtask demo: error: this build of bgtask does not include the demo "
                    + "(it was built without a DemoRunner)"
            ])
    }

    @Test func demoRunsThroughTheHook() async {
        let runner = RecordingDemoRunner(status: ExitCode(rawValue: 3))
        let run = await runTool(["demo", "--background-time", "45s"], demoRunner: runner)
        #expect(run.status == ExitCode(rawValue: 3))
        #expect(run.standardOutput == "narration\n")
        #expect(runner.requests.withLock { $0 } == [DemoRequest(backgroundTime: .seconds(45))])
    }

    @Test func demoFailureIsOneLine() async {
        let runner = RecordingDemoRunner(status: .failure)
        let run = await runTool(["demo"], demoRunner: runner)
        #expect(run.status == .failure)
        #expect(run.errorLines == ["bgtask demo: error: the private daemon did not start"])
        #expect(runner.requests.withLock { $0 } == [DemoRequest(backgroundTime: .seconds(6))])
    }
}

@Suite struct DefaultAppNameTests {
    /// The name `bgtask run` registers under without `--app`: readable, unique by pid, and always one the daemon
    /// accepts (at most 255 bytes, no control characters), whatever the program's file name holds.
    static let rows: [(String, Int32, String)] = [
        ("sleep", 42, "bgtask-run.sleep.42"),
        ("a\nb\u{7F}c", 1, "bgtask-run.a_b_c.1"),
        (String(repeating: "x", count: 300), 9, "bgtask-run.\(String(repeating: "x", count: 200)).9"),
        (String(repeating: "\u{E9}", count: 150), 7, "bgtask-run.\(String(repeating: "\u{E9}", count: 100)).7"),
    ]

    @Test(arguments: rows) func defaultAppName(_ program: String, _ pid: Int32, _ expected: String) async {
        await offThePool {
            let name = Run.defaultAppName(program: program, pid: pid)
            #expect(name == expected)
            #expect(name.utf8.count <= 255)
            #expect(!name.unicodeScalars.contains { $0.properties.generalCategory == .control })
        }
    }
}
