// A self-registered app alone in a cgroup2 cgroup is frozen through it, not stopped with signals, and
// whatever ends the daemon, the cgroup is thawed.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@Suite("Apps in a cgroup of their own", .requires(.cgroup(.unified)))
struct CgroupFreezeTests {
    /// Waits at most 10 s until the cgroup's `frozen` is `frozen`; whether it came.
    private func waitUntil(_ cgroup: CgroupDirectory, frozen: Bool) throws -> Bool {
        try cgroup.waitUntil(frozen: frozen, timeout: .seconds(10))
    }

    @Test("frozen through its cgroup (not SIGSTOPped), thawed in the foreground and when the daemon stops")
    func frozenThroughItsCgroup() async throws {
        try await withDaemonAndScratchCgroup { daemon, scratch in
            let watch = try WatchStream(daemon)
            let (app, control) = try backgroundScopedApp(daemon, in: scratch)
            try watch.waitFor("stateChanged", app: "scoped", ["state": "suspended"])
            #expect(try waitUntil(scratch.cgroup, frozen: true), "the cgroup was never frozen:\n\(daemon.log)")
            #expect(try ProcFS().stat(app.pid).state != .stopped, "the app was SIGSTOPped, not frozen")
            #expect(
                try waitForMessage(daemon, "froze pid \(app.pid) through \(scratch.cgroup.path)"), "\(daemon.log)")
            // GetApp says how.
            let shown = try control.app("scoped")
            #expect(shown["suspendedWith"] == "cgroup2" && shown["cgroup"] == .string(scratch.cgroup.path), "\(shown)")

            try control.lifecycle("SetState", ["app": "scoped", "state": "active"])
            #expect(try waitUntil(scratch.cgroup, frozen: false), "the cgroup stayed frozen in the foreground")
            try app.waitForLine(startingWith: "event willEnterForeground")

            try control.lifecycle("SetState", ["app": "scoped", "state": "background"])
            #expect(try waitUntil(scratch.cgroup, frozen: true))
            try daemon.stop()
            #expect(try scratch.cgroup.events()["frozen"] == 0, "a stopped daemon left the cgroup frozen")
        }
    }

    @Test("after a kill -9 --release-stopped thaws the cgroup; the next daemon freezes it again, and thaws it")
    func releaseThawsAfterKill() async throws {
        try await withDaemonAndScratchCgroup { daemon, scratch in
            let (app, _) = try backgroundScopedApp(daemon, in: scratch)
            #expect(try waitUntil(scratch.cgroup, frozen: true), "\(daemon.log)")
            try daemon.daemonPidFD.sendSignal(.kill)
            _ = try daemon.daemonPidFD.waitForExit(timeout: .seconds(10))
            #expect(try scratch.cgroup.events()["frozen"] == 1, "the freeze should outlive the daemon")
            let (status, output) = try release(daemon)
            #expect(status == 0, "\(output)")
            #expect(output.contains("thawed \(scratch.cgroup.path)"), "\(output)")
            #expect(try scratch.cgroup.events()["frozen"] == 0)

            // The next daemon, on the same state: it adopts the app and suspends it again, through its cgroup.
            let statePath = (daemon.socketPath as NSString).deletingLastPathComponent + "/state.json"
            let next = try DaemonHarness(arguments: ["--state-file", statePath])
            defer { next.terminate() }
            #expect(try waitForMessage(next, "1 processes adopted"), "\(next.log)")
            #expect(try waitUntil(scratch.cgroup, frozen: true), "not frozen again:\n\(next.log)")
            #expect(try ProcFS().stat(app.pid).state != .stopped)
            let nextControl = try next.connect()
            try nextControl.lifecycle("SetState", ["app": "scoped", "state": "active"])
            #expect(try waitUntil(scratch.cgroup, frozen: false), "still frozen in the foreground:\n\(next.log)")
            try next.stop()
        }
    }

    /// Runs `body` off the pool with a daemon and a cgroup2 cgroup of the test's own (both gone after).
    private func withDaemonAndScratchCgroup(
        _ body: @escaping @Sendable (DaemonHarness, ScratchCgroup) throws -> Void
    ) async throws {
        try await offThePool {
            let scratch = try ScratchCgroup(.unified)
            defer { scratch.close() }
            let daemon = try DaemonHarness()
            defer { daemon.terminate() }
            try body(daemon, scratch)
        }
    }

    /// The python app `scoped`, registered with `daemon`, moved into `scratch` (as a desktop shell starts an app in a
    /// scope of its own) and sent to the background; with the controller connection that sent it.
    private func backgroundScopedApp(
        _ daemon: DaemonHarness, in scratch: ScratchCgroup
    ) throws -> (ChildProcess, RawVarlinkClient) {
        let app = try pythonApp(daemon, name: "scoped")
        try scratch.move(app.pid)
        let control = try daemon.connect()
        try control.lifecycle("SetState", ["app": "scoped", "state": "background"])
        return (app, control)
    }

    /// Runs `bgtaskd --release-stopped` on the state of `daemon`; its status and output.
    private func release(_ daemon: DaemonHarness) throws -> (Int32, String) {
        try runProgram([
            try Products.path("bgtaskd"), "--release-stopped", "--socket", daemon.socketPath, "--config",
            daemon.configurationPath,
        ])
    }

    /// Waits at most 10 s for the daemon's log to contain `text`.
    private func waitForMessage(_ daemon: DaemonHarness, _ text: String) throws -> Bool {
        let deadline = MonotonicClock.now() + Duration.seconds(10).nanosecondCount
        while !daemon.log.contains(text) {
            guard MonotonicClock.now() < deadline else { return false }
            usleep(20_000)
        }
        return true
    }
}
