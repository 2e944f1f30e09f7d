// The real bgtask executable against the real bgtaskd (DaemonHarness): every subcommand, with `bgtask run`
// itself as the app under control, the real expiration warning forwarded to CMD, joining, watching, --user.
import BGTaskArguments
import BGTaskCLI
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// A policy with room for a test's steps while a `bgtask run` app sits in background with its lease; what an app
/// must do in time (acknowledge, register once launched) has room for a machine the other tests keep busy.
let roomyPolicy = """
    [Policy]
    BackgroundTimeSec=30s
    ExpirationWarningSec=5s
    EnterBackgroundGraceSec=20s
    WillTerminateGraceSec=2s
    LaunchTimeoutSec=30s
    LockedSuspendGraceSec=1s
    """

/// A policy whose expiration warning comes a second after a `bgtask run` starts, with 5 s after it for CMD to act
/// on the warning before the background time runs out.
let shortPolicy = """
    [Policy]
    BackgroundTimeSec=6s
    ExpirationWarningSec=5s
    EnterBackgroundGraceSec=20s
    WillTerminateGraceSec=2s
    LaunchTimeoutSec=30s
    LockedSuspendGraceSec=1s
    """

/// Runs `bgtask ARGUMENTS...` against `daemon` to completion.
func runBinary(_ arguments: [String], against daemon: DaemonHarness, sourceLocation: SourceLocation = #_sourceLocation)
    throws -> (status: ProcessStatus, output: String, errors: String)
{
    try BGTaskProcess(arguments, environment: ["BGTASK_SOCKET": daemon.socketPath])
        .finish(sourceLocation: sourceLocation)
}

/// Decodes the `--json` output of a bgtask run.
func decode<Reply: Decodable>(_ type: Reply.Type, _ output: String) throws -> Reply {
    try JSONDecoder().decode(type, from: Data(output.utf8))
}

/// The history entries about `app`, from `bgtask history --json`.
func historyEntries(of app: String, daemon: DaemonHarness) throws -> [HistoryEntry] {
    try decode(HistoryReply.self, try runBinary(["history", "--json"], against: daemon).output).entries
        .filter { $0.app == app }
}

// Serialized: each test starts its own daemon, and two cores are shared with the rest of the suite.
@Suite(.serialized) struct EndToEndTests {
    @Test func statusReportsTheRealDaemon() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: roomyPolicy)
            let run = try runBinary(["status"], against: daemon)
            #expect(run.status == .exited(0), "\(run.errors)")
            #expect(run.output.hasPrefix("bgtaskd "))
            #expect(run.output.contains("\napps:      0 (0 suspended)\n"))
            let json = try decode(GetStatusReply.self, try runBinary(["status", "--json"], against: daemon).output)
            #expect(json.apps == 0 && json.tasks == 0)
            #expect(!json.backends.isEmpty)
            try daemon.stop()
            // Once the daemon is gone, the same command says how to start it.
            let gone = try runBinary(["status"], against: daemon)
            #expect(gone.status == .exited(1))
            #expect(gone.errors.hasPrefix("bgtask status: error: bgtaskd is not running at \(daemon.socketPath): "))
        }
    }

    /// `bgtask run` registers in background, holds one task named after CMD, and forwards the daemon's real
    /// `backgroundTaskExpiring` to CMD as SIGTERM; bgtask exits with CMD's status.
    @Test func runForwardsTheRealExpirationWarning() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: shortPolicy)
            let run = try BGTaskProcess(
                ["run", "--"] + trappingCommand("TERM", exitStatus: 3),
                environment: ["BGTASK_SOCKET": daemon.socketPath])
            let app = Run.defaultAppName(program: "sh", pid: run.process.pid)
            let result = try run.finish()
            #expect(result.status == .exited(3), "\(result.errors)\n\(daemon.log)")
            #expect(result.output == "ready\ngot TERM\n")
            let lines = result.errors.split(separator: "\n").map(String.init)
            #expect(lines.first?.hasPrefix("bgtask: registered app \(app); task 1 began with ") == true, "\(lines)")
            #expect(
                lines.contains { $0.hasPrefix("bgtask: background time is running out: sent SIGTERM to 'sh' (pid ") })
            let entries = try historyEntries(of: app, daemon: daemon)
            #expect(entries.contains { $0.kind == .registered }, "\(entries)")
            #expect(entries.contains { $0.kind == .expirationWarning && $0.taskIds == [1] }, "\(entries)")
            try daemon.stop()
        }
    }

    /// Every controller and script command, against an app that is a `bgtask run` holding a lease.
    @Test func controlsARunningApp() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: roomyPolicy)
            let app = "e2e.app"
            let holder = try BGTaskProcess(
                ["run", "--app", app, "--name", "hold", "--"]
                    + trappingCommand("TERM", exitStatus: 0),
                environment: ["BGTASK_SOCKET": daemon.socketPath])
            try holder.waitForOutput(containing: "ready")

            let listed = try decode(ListAppsReply.self, try runBinary(["apps", "--json"], against: daemon).output).apps
            #expect(listed.map(\.name) == [app])
            #expect(listed.first?.state == .background && listed.first?.tasks.map(\.name) == ["hold"])
            #expect(listed.first?.pid == Int(holder.process.pid))
            let table = try runBinary(["apps"], against: daemon).output
            #expect(table.hasPrefix("NAME") && table.contains("\n\(app) ") && table.contains(" background "))
            let detail = try runBinary(["status", app], against: daemon)
            #expect(detail.output.hasPrefix("\(app)\n  state:      background\n"), "\(detail.output)")
            let remaining = try decode(
                BackgroundTimeRemainingReply.self,
                try runBinary(["remaining", app, "--json"], against: daemon).output)
            #expect((remaining.seconds ?? -1) > 0 && (remaining.seconds ?? 31) <= 30)

            // A script's own task on the app: begin prints the id, end ends it once.
            let begun = try runBinary(["begin", app, "script"], against: daemon)
            #expect(begun.status == .exited(0), "\(begun.errors)")
            let taskId = try #require(Int(begun.output.dropLast()))
            let tasks = try decode(GetAppReply.self, try runBinary(["status", app, "--json"], against: daemon).output)
                .app.tasks
            #expect(tasks.map(\.name) == ["hold", "script"] && tasks.last?.id == taskId)
            #expect(try runBinary(["end", app, String(taskId)], against: daemon).status == .exited(0))
            let again = try runBinary(["end", app, String(taskId)], against: daemon)
            #expect(again.status == .exited(1))
            #expect(again.errors.hasPrefix("bgtask end: error: app \"\(app)\" has no open task \(taskId)"))

            // Foreground, inactive, background again: the lease keeps it from being suspended.
            #expect(try runBinary(["foreground", app], against: daemon).output == "\(app): active\n")
            #expect(try runBinary(["remaining", app], against: daemon).output == "unlimited\n")
            #expect(try runBinary(["deactivate", app], against: daemon).output == "\(app): inactive\n")
            let back = try runBinary(["background", app, "--json"], against: daemon)
            #expect(try decode(SetStateReply.self, back.output).app.state == .background, "\(back.errors)")

            let posted = try runBinary(["post", "hello", "--app", app, "--payload", #"{"k": 1}"#], against: daemon)
            #expect(posted.output == "delivered to 1 app, queued for 0\n", "\(posted.errors)")
            let status = try runBinary(["status"], against: daemon).output
            #expect(status.contains("\napps:      1 (0 suspended)\ntasks:     1\n"), "\(status)")

            // Terminating the app reaches CMD as the warning signal, and bgtask ends with CMD's status.
            let terminated = try runBinary(["terminate", app], against: daemon)
            #expect(terminated.status == .exited(0) && terminated.output.isEmpty, "\(terminated.errors)")
            let result = try holder.finish()
            #expect(result.status == .exited(0), "\(result.errors)\n\(daemon.log)")
            #expect(result.output.contains("got TERM"))
            #expect(result.errors.contains("bgtask: bgtaskd is terminating app \(app): sent SIGTERM to 'sh' (pid "))
            let entries = try historyEntries(of: app, daemon: daemon)
            #expect(entries.contains { $0.kind == .terminated && $0.reason == .controller }, "\(entries)")
            let history = try runBinary(["history", "-n", "50"], against: daemon).output
            #expect(history.hasPrefix("TIME") && history.contains(" \(app) ") && history.contains("reason=controller"))
            try daemon.stop()
        }
    }

    /// A second `bgtask run --app` joins the first one's app: its task is begun on that app and ended explicitly.
    @Test func runJoinsAnAppRegisteredByAnotherProcess() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: roomyPolicy)
            let app = "e2e.join"
            let holder = try BGTaskProcess(
                ["run", "--app", app, "--"] + trappingCommand("TERM", exitStatus: 0),
                environment: ["BGTASK_SOCKET": daemon.socketPath])
            try holder.waitForOutput(containing: "ready")
            let joined = try runBinary(
                ["run", "--app", app, "--name", "joined", "--", "sh", "-c", "exit 7"],
                against: daemon)
            #expect(joined.status == .exited(7), "\(joined.errors)")
            #expect(joined.errors.hasPrefix("bgtask: joined app \(app); task 2 began\n"))
            // The joined task (2) ended; the holder's (1) goes on.
            let tasks = try decode(GetAppReply.self, try runBinary(["status", app, "--json"], against: daemon).output)
                .app.tasks
            #expect(tasks.map(\.id) == [1], "\(tasks)")
            #expect(try runBinary(["terminate", app], against: daemon).status == .exited(0))
            #expect(try holder.finish().status == .exited(0))
            try daemon.stop()
        }
    }

    @Test func watchStreamsEntriesAsTheyHappen() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: roomyPolicy)
            let watch = try BGTaskProcess(["watch", "--json"], environment: ["BGTASK_SOCKET": daemon.socketPath])
            // Entries recorded before the watch subscribed are not streamed, and nothing says when it has: run
            // commands until the watch shows one (for at most 30 s, which only a watch that never subscribes needs).
            let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
            var attempt = 0
            var isSubscribed = false
            while !isSubscribed && MonotonicClock.now() < deadline {
                attempt += 1
                let run = try runBinary(["run", "--app", "e2e.watched.\(attempt)", "--", "true"], against: daemon)
                #expect(run.status == .exited(0), "\(run.errors)")
                isSubscribed = try watchHasShown("e2e.watched.", watch: watch)
            }
            try #require(isSubscribed, "the watch showed none of \(attempt) runs in 30 s")
            // Subscribed now: everything about one more app must show, in order.
            let final = try runBinary(["run", "--app", "e2e.final", "--", "true"], against: daemon)
            #expect(final.status == .exited(0), "\(final.errors)")
            try watch.waitForOutput(
                containing: #""app":"e2e.final","band":null,"identifier":null,"kind":"processExited""#)
            try watch.send(.interrupt)
            let result = try watch.finish()
            #expect(result.status == .signaled(.interrupt))
            let kinds = try result.output.split(separator: "\n").map {
                try JSONDecoder().decode(WatchReply.self, from: Data($0.utf8)).entry
            }.filter { $0.app == "e2e.final" }.map(\.kind)
            #expect(kinds.first == .registered && kinds.last == .processExited, "\(kinds)")
            let began = try #require(kinds.firstIndex(of: .taskBegan), "\(kinds)")
            #expect(kinds[began...].contains(.taskEnded), "\(kinds)")
            try daemon.stop()
        }
    }

    @Test("watch -n N shows the last N kept entries first, marked replayed in JSON, then what happens next")
    func watchShowsKeptEntriesFirst() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: roomyPolicy)
            let before = try runBinary(["run", "--app", "e2e.before", "--", "true"], against: daemon)
            #expect(before.status == .exited(0), "\(before.errors)")
            // Its process's exit is recorded once the daemon sees it, maybe after `run` returns: wait for it, so
            // that nothing is recorded between reading the history and the watch.
            var kept: [HistoryEntry] = []
            let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
            while !kept.contains(where: { $0.app == "e2e.before" && $0.kind == .processExited })
                && MonotonicClock.now() < deadline
            {
                kept = try decode(HistoryReply.self, try runBinary(["history", "--json"], against: daemon).output)
                    .entries
            }
            let watch = try BGTaskProcess(
                ["watch", "-n", "1000", "--json"], environment: ["BGTASK_SOCKET": daemon.socketPath])
            // The replay comes first, so the stream has started once its last entry shows: no retrying needed.
            let last = try #require(kept.last)
            try watch.waitForOutput(containing: #""kind":"\#(last.kind.rawValue)""#)
            let after = try runBinary(["run", "--app", "e2e.after", "--", "true"], against: daemon)
            #expect(after.status == .exited(0), "\(after.errors)")
            try watch.waitForOutput(
                containing: #""app":"e2e.after","band":null,"identifier":null,"kind":"processExited""#)
            try watch.send(.interrupt)
            let result = try watch.finish()
            let replies = try result.output.split(separator: "\n").map {
                try JSONDecoder().decode(WatchReply.self, from: Data($0.utf8))
            }
            let replayed = replies.prefix { $0.replayed == true }.map(\.entry)
            #expect(replayed == kept, "every kept entry, oldest first, before anything new")
            let new = replies.dropFirst(replayed.count)
            #expect(new.allSatisfy { $0.replayed != true })
            let first = try #require(new.first)
            #expect(first.entry.app == "e2e.after" && first.entry.kind == .registered, "\(first)")
            try daemon.stop()
        }
    }

    /// `--user` finds the daemon under `$XDG_RUNTIME_DIR/bgtaskd/`.
    @Test func userFlagFindsTheSocketUnderTheRuntimeDirectory() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: roomyPolicy)
            let runtime = try ScratchDirectory(prefix: "bgtask-cli-runtime")
            // The harness's directory stands in for $XDG_RUNTIME_DIR/bgtaskd, where `systemctl --user` puts it.
            try FileManager.default.createSymbolicLink(
                atPath: runtime.path + "/bgtaskd", withDestinationPath: daemon.directory.path)
            let run = try BGTaskProcess(["--user", "status"], environment: ["XDG_RUNTIME_DIR": runtime.path]).finish()
            #expect(run.status == .exited(0), "\(run.errors)")
            #expect(run.output.hasPrefix("bgtaskd "))
            try daemon.stop()
        }
    }

    /// The binary's own help, version and usage errors, without a daemon.
    @Test func helpVersionAndUsageErrorsFromTheBinary() async throws {
        try await offThePool {
            let help = try BGTaskProcess(["--help"], environment: [:]).finish()
            #expect(help.status == .exited(0))
            #expect(help.output == HelpFormatter.toolHelp(BGTaskTool.spec))
            let version = try BGTaskProcess(["--version"], environment: [:]).finish()
            #expect(version.output == "bgtask \(BGTaskTool.version)\n")
            let usage = try BGTaskProcess(["run"], environment: [:]).finish()
            #expect(usage.status == .exited(64))
            #expect(usage.output.isEmpty)
            #expect(
                usage.errors.hasPrefix("bgtask run: error: missing CMD: give the command to run after '--'\nUSAGE: "))
        }
    }
}

/// Whether the watch printed a line mentioning `text` within a short wait: a poll, not a deadline (the caller
/// tries again, bounded).
func watchHasShown(_ text: String, watch: BGTaskProcess) throws -> Bool {
    try watch.waitForOutput(containing: text, timeout: .milliseconds(500), recordingTimeout: false)
}
