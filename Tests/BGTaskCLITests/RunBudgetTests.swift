// `bgtask run --budget` against the real daemon: the warning before the budget ends, task-expired when CMD
// ignores it, and the lease ended at once when CMD finishes early.

import BGTaskArguments
import BGTaskCLI
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// The daemon's defaults but a short kill grace, so the ignoring case ends quickly.
private let budgetPolicy = """
    [Policy]
    WillTerminateGraceSec=500ms
    """

@Suite("bgtask run --budget with the real daemon")
struct RunBudgetTests {
    @Test("CMD trapping the signal exits 7 shortly before a 2 s budget ends")
    func trappingCommandExitsBeforeTheBudgetEnds() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: budgetPolicy)
            let start = MonotonicClock.now()
            let run = try BGTaskProcess(
                [
                    "run", "--app", "trapper", "--budget", "2s", "--on-expire", "TERM", "--", "sh", "-c",
                    "trap 'exit 7' TERM; sleep 60 & wait",
                ],
                environment: ["BGTASK_SOCKET": daemon.socketPath])
            let result = try run.finish()
            let elapsed = Double(MonotonicClock.now() - start) / 1e9
            #expect(result.status == .exited(7), "\(result.errors)")
            // The warning comes a quarter of the budget before its end: at 1.5 s, so not before (a busy machine
            // only delays it). That CMD exited before the budget's end is the daemon's record: no task expired.
            #expect(elapsed >= 1.4, "exited after \(elapsed) s")
            #expect(result.errors.contains("background time is running out: sent SIGTERM"))
            let entries = try historyEntries(of: "trapper", daemon: daemon)
            #expect(entries.contains { $0.kind == .expirationWarning })
            #expect(!entries.contains { $0.reason == .taskExpired }, "\(entries)")
        }
    }

    @Test("CMD ignoring the signal gets the app terminated task-expired")
    func ignoringCommandIsTerminatedTaskExpired() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: budgetPolicy)
            let watch = try daemon.connect()
            try watch.send("io.bgtask.Lifecycle.Watch", more: true)
            let run = try BGTaskProcess(
                ["run", "--app", "ignorer", "--budget", "2s", "--", "sh", "-c", "trap '' TERM; echo ready; sleep 60"],
                environment: ["BGTASK_SOCKET": daemon.socketPath], flags: .newProcessGroup)
            let result = try run.finish()
            // The daemon kills bgtask's process group (it leads one) after its willTerminate grace, member by member
            // and the leader last: bgtask is killed, or sees CMD killed first and exits as timeout(1) does, 137.
            #expect(result.status == .signaled(.kill) || result.status == .exited(137), "\(result.errors)")
            let control = try daemon.connect()
            let app = try control.call("io.bgtask.Lifecycle.GetApp", ["app": "ignorer"]).parameters["app"]
            #expect(app?["exitReason"] == "task-expired")
            #expect(app?["state"] == "terminated")
            #expect(daemon.log.contains("the task expired (policy violation)"))
            // CMD went with the group: nothing of the run is left.
            #expect(throws: Errno.noSuchProcess) { try ProcessGroup.of(run.process.pid) }
        }
    }

    @Test("started by a script without job control, CMD ignoring the signal is killed with bgtask, the script is not")
    func scriptWithoutJobControlLeavesNothingRunning() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: budgetPolicy)
            let pidFile = daemon.directory.path + "/cmd.pid"
            // The script leads its own group (so the test runner's is safe); bgtask shares it, as in any script run
            // without job control, and must make a group of its own before registering for the kill to take CMD.
            let script = try ChildProcess(
                [
                    "sh", "-c",
                    #""$0" run --app scripted --budget 2s -- sh -c 'echo $$ > "$1"; trap "" TERM; exec sleep 37' sh "$1"; "#
                        + #"echo "bgtask exited $?""#,
                    try Products.path("bgtask"), pidFile,
                ],
                environment: [
                    "BGTASK_SOCKET": daemon.socketPath,
                    "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin",
                ], flags: .newProcessGroup)
            defer { script.terminate() }
            let line = try script.waitForLine(startingWith: "bgtask exited", timeout: .seconds(30))
            // 128 + SIGKILL: the daemon killed bgtask's group; the script itself lives on to say so.
            #expect(line == "bgtask exited 137", "\(script.transcript)")
            let pidText = try String(contentsOfFile: pidFile, encoding: .utf8)
            let pid = try #require(pid_t(pidText.trimmingCharacters(in: .whitespacesAndNewlines)))
            // Gone, or exiting: a pidfd (if the process is still there to open) turns readable once it has exited.
            if let command = try? PidFD.open(pid: pid) {
                defer { try? command.close() }
                #expect(try command.waitForExit(timeout: .seconds(10)), "CMD (pid \(pid)) is still running")
            }
            let app = try daemon.connect().call("io.bgtask.Lifecycle.GetApp", ["app": "scripted"]).parameters["app"]
            #expect(app?["exitReason"] == "task-expired")
        }
    }

    @Test("CMD finishing early ends the lease at once")
    func earlyFinishEndsTheLease() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: budgetPolicy)
            // A budget far longer than the run: bgtask waiting for it instead of CMD would take 45 s to the warning
            // (finish() gives up at 20 s), so the outcome does not hang on how fast the machine starts processes.
            let run = try BGTaskProcess(
                ["run", "--app", "quick", "--budget", "60s", "--", "sh", "-c", "exit 0"],
                environment: ["BGTASK_SOCKET": daemon.socketPath])
            let result = try run.finish()
            #expect(result.status == .exited(0))
            // Ended by bgtask as CMD ended, with no warning on the way; the history says so, the task's end as asked
            // and then the job's exit, so it reads apart from a job the policy ended.
            var entries = try historyEntries(of: "quick", daemon: daemon)
            let deadline = MonotonicClock.now() + 10_000_000_000
            while !entries.contains(where: { $0.kind == .processExited }), MonotonicClock.now() < deadline {
                Thread.sleep(forTimeInterval: 0.05)
                entries = try historyEntries(of: "quick", daemon: daemon)
            }
            #expect(!entries.contains { $0.kind == .expirationWarning }, "\(entries)")
            let ends = entries.filter { $0.kind == .taskEnded }
            #expect(ends.count == 1 && ends.first?.taskId == 1 && ends.first?.taskEnd == .ended, "\(entries)")
            #expect(entries.last?.kind == .processExited && entries.last?.reason == .exited, "\(entries)")
            let history = try runBinary(["history"], against: daemon).output
            #expect(history.contains("taskEnded") && history.contains("end=ended"), "\(history)")
            #expect(history.contains("processExited") && history.contains("reason=exited"), "\(history)")
            let control = try daemon.connect()
            let app = try control.call("io.bgtask.Lifecycle.GetApp", ["app": "quick"]).parameters["app"]
            #expect(app?["exitReason"] == "exited")
            let status = try control.call("io.bgtask.Lifecycle.GetStatus").parameters
            #expect(status["tasks"] == .number(0))
        }
    }
}
