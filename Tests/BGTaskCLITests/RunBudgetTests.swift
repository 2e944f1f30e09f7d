// `bgtask run --budget` against the real daemon: the warning before the budget ends, task-expired when CMD
// ignores it, and the lease ended at once when CMD finishes early.

import BGTaskCLI
import BGTaskProtocol
import BGTaskSystem
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
    func trappingCommandExitsBeforeTheBudgetEnds() throws {
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
        // The warning comes a quarter of the budget before its end: at 1.5 s.
        #expect(elapsed >= 1.4 && elapsed < 2.0, "exited after \(elapsed) s")
        #expect(result.errors.contains("background time is running out: sent SIGTERM"))
        let entries = try historyEntries(of: "trapper", daemon: daemon)
        #expect(entries.contains { $0.kind == .expirationWarning })
        #expect(!entries.contains { $0.reason == .taskExpired }, "\(entries)")
    }

    @Test("CMD ignoring the signal gets the app terminated task-expired")
    func ignoringCommandIsTerminatedTaskExpired() throws {
        let daemon = try DaemonHarness(configuration: budgetPolicy)
        let watch = try daemon.connect()
        try watch.send("io.bgtask.Lifecycle.Watch", more: true)
        let run = try BGTaskProcess(
            ["run", "--app", "ignorer", "--budget", "2s", "--", "sh", "-c", "trap '' TERM; echo ready; sleep 60"],
            environment: ["BGTASK_SOCKET": daemon.socketPath], flags: .newProcessGroup)
        let result = try run.finish()
        // The daemon kills bgtask's process group (it leads one) after its willTerminate grace.
        #expect(result.status == .signaled(.kill), "\(result.errors)")
        let control = try daemon.connect()
        let app = try control.call("io.bgtask.Lifecycle.GetApp", ["app": "ignorer"]).parameters["app"]
        #expect(app?["exitReason"] == "task-expired")
        #expect(app?["state"] == "terminated")
        #expect(daemon.log.contains("the task expired (policy violation)"))
        // CMD went with the group: nothing of the run is left.
        #expect(throws: Errno.noSuchProcess) { try ProcessGroup.of(run.process.pid) }
    }

    @Test("CMD finishing early ends the lease at once")
    func earlyFinishEndsTheLease() throws {
        let daemon = try DaemonHarness(configuration: budgetPolicy)
        let run = try BGTaskProcess(
            ["run", "--app", "quick", "--budget", "2s", "--", "sh", "-c", "exit 0"],
            environment: ["BGTASK_SOCKET": daemon.socketPath])
        let start = MonotonicClock.now()
        let result = try run.finish()
        #expect(result.status == .exited(0))
        #expect(Double(MonotonicClock.now() - start) / 1e9 < 1.5)
        let entries = try historyEntries(of: "quick", daemon: daemon)
        #expect(!entries.contains { $0.kind == .expirationWarning }, "\(entries)")
        let control = try daemon.connect()
        let status = try control.call("io.bgtask.Lifecycle.GetStatus").parameters
        #expect(status["tasks"] == .number(0))
    }
}
