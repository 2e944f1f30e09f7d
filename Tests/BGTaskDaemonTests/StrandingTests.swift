// Nothing the daemon stopped stays stopped: a group whose leader is killed from outside, a daemon that stops,
// and a process that became a group leader after it registered.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Nothing stranded")
struct StrandingTests {
    /// A group-leading python app with one child in its group, suspended: both stopped.
    private func suspendedGroup(
        _ daemon: DaemonHarness, watch: WatchStream, name: String
    ) throws -> (app: ChildProcess, child: pid_t) {
        let app = try pythonApp(daemon, name: name, newGroup: true)
        try app.send("child")
        let child = pid_t(try number(after: "child", in: try app.waitForLine(startingWith: "child")))
        let control = try daemon.connect()
        try control.lifecycle("SetState", ["app": .string(name), "state": "background"])
        try watch.waitFor("stateChanged", app: name, ["state": "suspended"])
        #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped)
        #expect(try waitForProcessState(child) { $0 == .stopped } == .stopped)
        return (app, child)
    }

    @Test("a suspended group's leader killed from outside: the rest of its group is continued")
    func leaderKilledFromOutside() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "oom-victim", newGroup: true)
            // A member of the app's group whose parent (this test) is in another group of the same session: the group
            // does not become orphaned when its leader dies, so the kernel's own SIGHUP+SIGCONT to stopped orphaned
            // groups does not come to the rescue (a child of the leader alone would be rescued so).
            let member = try ChildProcess([
                "python3", "-c",
                "import os, signal, sys; os.setpgid(0, int(sys.argv[1])); signal.alarm(60); print('joined', flush=True); "
                    + "signal.pause()",
                String(app.pid),
            ])
            defer { member.terminate() }
            _ = try member.waitForLine(startingWith: "joined")
            #expect(try ProcessGroup.of(member.pid).id == app.pid)
            try daemon.connect().lifecycle("SetState", ["app": "oom-victim", "state": "background"])
            try watch.waitFor("stateChanged", app: "oom-victim", ["state": "suspended"])
            #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped)
            #expect(try waitForProcessState(member.pid) { $0 == .stopped } == .stopped)
            // What the kernel's OOM killer or an operator would do.
            try app.process.pidFD.sendSignal(.kill)
            _ = try app.waitForExit()
            try watch.waitFor("processExited", app: "oom-victim")
            let state = try waitForProcessState(member.pid) { $0 != .stopped }
            #expect(state != .stopped, "the rest of the group stayed stopped")
        }
    }

    @Test("the daemon stopped while apps are suspended leaves no process stopped, group members included")
    func daemonStopReleasesEverything() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let (leader, child) = try suspendedGroup(daemon, watch: watch, name: "grouped")
            // Opened while the child is alive and its parent (the app) holds it unreaped.
            let childPidFD = try PidFD.open(pid: child)
            defer {
                try? childPidFD.sendSignal(.kill)
                try? childPidFD.close()
            }
            let plain = try pythonApp(daemon, name: "plain")
            try daemon.connect().lifecycle("SetState", ["app": "plain", "state": "background"])
            try watch.waitFor("stateChanged", app: "plain", ["state": "suspended"])
            #expect(try waitForProcessState(plain.pid) { $0 == .stopped } == .stopped)
            #expect(try daemon.stop() == .exited(0))
            for pid in [leader.pid, child, plain.pid] {
                #expect(try waitForProcessState(pid) { $0 != .stopped } != .stopped, "pid \(pid) stayed stopped")
            }
        }
    }

    @Test("a process that becomes a group leader after registering is stopped with its group")
    func leadershipIsCheckedWhenStopping() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            // Registers as a member of the test runner's group (never to be signalled), then makes a group of its own,
            // as bgtask run does, and forks a child into it: the world changed after registration.
            let app = try pythonApp(daemon, name: "late")
            #expect(try ProcessGroup.of(app.pid).id != app.pid)
            try app.send("lead")
            _ = try app.waitForLine(startingWith: "leading")
            try app.send("child")
            let child = pid_t(try number(after: "child", in: try app.waitForLine(startingWith: "child")))
            let childPidFD = try PidFD.open(pid: child)
            defer {
                try? childPidFD.sendSignal(.kill)
                try? childPidFD.close()
            }
            try daemon.connect().lifecycle("SetState", ["app": "late", "state": "background"])
            try watch.waitFor("stateChanged", app: "late", ["state": "suspended"])
            #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped)
            #expect(try waitForProcessState(child) { $0 == .stopped } == .stopped, "the group was not stopped")
            try daemon.stop()
        }
    }
}
