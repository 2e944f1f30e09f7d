// An app whose process group or cgroup holds a process of another uid (a setuid child, a program run as another
// user): the daemon stops, continues and kills the app's own processes and never the other uid's, though it
// could (it holds CAP_KILL; the app does not).

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// The uid and gid the foreign members run as (`nobody`, `nogroup` on Debian).
private let nobody: uid_t = 65534

@Suite("Members of another uid")
struct ForeignMemberTests {
    @Test(
        "a group leader's members of another uid are not stopped, continued or killed with it; its own are",
        .requires(.root(for: "starting processes of another uid")))
    func groupMembersOfAnotherUid() async throws {
        try await withRoot {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "deputy", newGroup: true)
            let own = try child(of: app)
            defer { end(own) }
            // Another user's process entirely, and a setuid child's mix: the app's real uid, another effective and
            // saved one.
            let foreign = try child(of: app, uids: [nobody, nobody, nobody])
            defer { end(foreign) }
            let setuid = try child(of: app, uids: [getuid(), nobody, nobody])
            defer { end(setuid) }
            // Stopped by someone else (a debugger, its own job control): not the daemon's to continue.
            try setuid.sendSignal(.stop)
            #expect(try waitForProcessState(setuid.pid) { $0 == .stopped } == .stopped)
            for member in [own, foreign, setuid] { #expect(try ProcessGroup.of(member.pid).id == app.pid) }

            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "deputy", "state": "background"])
            try watch.waitFor("stateChanged", app: "deputy", ["state": "suspended"])
            #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped)
            #expect(try waitForProcessState(own.pid) { $0 == .stopped } == .stopped, "the app's own child ran on")
            #expect(try control.app("deputy")["suspendedWith"] == "group")
            for member in [foreign, setuid] {
                #expect(
                    try waitForMessage(daemon, "leaving pid \(member.pid) alone"),
                    "no word of the member of another uid:\n\(daemon.log)")
            }
            #expect(
                logLines(daemon, containing: "leaving pid \(foreign.pid) alone").allSatisfy {
                    $0.contains("APP=deputy")
                })
            #expect(
                try waitForProcessState(foreign.pid, timeout: .milliseconds(300)) { $0 == .stopped } != .stopped,
                "the member of another uid was stopped")

            try control.lifecycle("SetState", ["app": "deputy", "state": "active"])
            try app.waitForLine(startingWith: "event willEnterForeground")
            #expect(
                try waitForProcessState(own.pid) { $0 != .stopped } != .stopped, "the app's own child stayed stopped")
            #expect(
                try waitForProcessState(setuid.pid, timeout: .milliseconds(300)) { $0 != .stopped } == .stopped,
                "the daemon continued a process of another uid it had not stopped")
            #expect(try ProcFS().stat(foreign.pid).state != .stopped)
            // Each member is reported once, however often the app is stopped and continued.
            #expect(logLines(daemon, containing: "leaving pid \(foreign.pid) alone").count == 1, "\(daemon.log)")

            // Its owner continues it: a stopped member left in the group when the leader dies would get the
            // kernel's SIGHUP for an orphaned group, whoever killed the leader.
            try setuid.sendSignal(.continue)
            try control.lifecycle("Terminate", ["app": "deputy"])
            try watch.waitFor("killed", app: "deputy", ["reason": "controller"])
            #expect(try app.waitForExit() == .signaled(.kill))
            #expect(try own.waitForExit(timeout: .seconds(10)), "the app's own child outlived the kill")
            for member in [foreign, setuid] {
                #expect(
                    try !member.waitForExit(timeout: .milliseconds(300)), "pid \(member.pid) was killed with the app")
            }
        }
    }

    @Test(
        "a suspended group reclaimed for memory: its members of another uid survive, never stopped",
        .requires(.root(for: "starting processes of another uid")))
    func reclaimedGroupSparesOtherUid() async throws {
        try await withRoot {
            let daemon = try DaemonHarness(configuration: memoryPolicy(appsMemoryMax: "96M"))
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "heavy", newGroup: true)
            let own = try child(of: app)
            defer { end(own) }
            let foreign = try child(of: app, uids: [nobody, nobody, nobody])
            defer { end(foreign) }
            try app.send("alloc 128")
            try app.waitForLine(startingWith: "allocated")
            try daemon.connect().lifecycle("SetState", ["app": "heavy", "state": "background"])
            try watch.waitFor("terminated", app: "heavy", ["reason": "memory-reclaim"])
            #expect(try app.waitForExit() == .signaled(.kill))
            #expect(try own.waitForExit(timeout: .seconds(10)), "the app's own child outlived the reclamation")
            #expect(try !foreign.waitForExit(timeout: .milliseconds(300)), "the member of another uid was killed")
            #expect(try ProcFS().stat(foreign.pid).state != .stopped, "the member of another uid was left stopped")
            #expect(daemon.log.contains("leaving pid \(foreign.pid) alone"), "\(daemon.log)")
        }
    }

    @Test(
        "a cgroup of the app's own holding a process of another uid is not frozen: the app's processes get signals",
        .requires(.cgroup(.unified)))
    func ownCgroupWithOtherUid() async throws {
        try await withRootAndScratchCgroup { scratch in
            let daemon = try DaemonHarness()
            defer { daemon.terminate() }
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "scoped", newGroup: true)
            try scratch.move(app.pid)
            // Both children start in the app's cgroup, as its descendants.
            let own = try child(of: app)
            defer { end(own) }
            let foreign = try child(of: app, uids: [nobody, nobody, nobody])
            defer { end(foreign) }
            #expect(try Set(scratch.cgroup.processes()) == [app.pid, own.pid, foreign.pid])

            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "scoped", "state": "background"])
            try watch.waitFor("stateChanged", app: "scoped", ["state": "suspended"])
            #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped, "\(daemon.log)")
            #expect(try waitForProcessState(own.pid) { $0 == .stopped } == .stopped)
            #expect(try scratch.cgroup.events()["frozen"] == 0, "the cgroup was frozen with another uid's process")
            #expect(try control.app("scoped")["suspendedWith"] == "group")
            #expect(try waitForMessage(daemon, "leaving pid \(foreign.pid) alone"), "\(daemon.log)")
            #expect(try ProcFS().stat(foreign.pid).state != .stopped)

            try control.lifecycle("SetState", ["app": "scoped", "state": "active"])
            try app.waitForLine(startingWith: "event willEnterForeground")
            #expect(try waitForProcessState(own.pid) { $0 != .stopped } != .stopped)

            try control.lifecycle("Terminate", ["app": "scoped"])
            #expect(try app.waitForExit() == .signaled(.kill))
            #expect(try own.waitForExit(timeout: .seconds(10)))
            #expect(try !foreign.waitForExit(timeout: .milliseconds(300)), "the member of another uid was killed")
            #expect(try scratch.cgroup.processes() == [foreign.pid])
            #expect(try scratch.cgroup.events()["frozen"] == 0)
        }
    }

    @Test(
        "a process of another uid moved into an app's frozen cgroup: reclaiming the app kills it alone, and thaws it",
        .requires(.cgroup(.unified)))
    func killThroughCgroupRechecks() async throws {
        try await withRootAndScratchCgroup { scratch in
            // No limit yet: the app must be frozen before memory is short.
            let daemon = try DaemonHarness(configuration: memoryPolicy(appsMemoryMax: "infinity"))
            defer { daemon.terminate() }
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "scoped")
            try scratch.move(app.pid)
            try app.send("alloc 128")
            try app.waitForLine(startingWith: "allocated")
            try daemon.connect().lifecycle("SetState", ["app": "scoped", "state": "background"])
            try watch.waitFor("stateChanged", app: "scoped", ["state": "suspended"])
            #expect(try scratch.cgroup.waitUntil(frozen: true, timeout: .seconds(10)), "\(daemon.log)")
            // The daemon saw the freeze (and checked the cgroup once frozen) before anything else moves in.
            #expect(
                try waitForMessage(daemon, "froze pid \(app.pid) through \(scratch.cgroup.path)"), "\(daemon.log)")

            // Root puts another user's process into the frozen cgroup (it freezes with it).
            let foreign = try foreignSleeper()
            defer { foreign.terminate() }
            try scratch.move(foreign.pid)
            _ = try daemon.directory.write("bgtaskd.conf", memoryPolicy(appsMemoryMax: "96M"))
            try daemon.daemonPidFD.sendSignal(.hangUp)
            try watch.waitFor("terminated", app: "scoped", ["reason": "memory-reclaim"])
            #expect(try app.waitForExit() == .signaled(.kill))
            #expect(
                try !foreign.process.pidFD.waitForExit(timeout: .milliseconds(300)),
                "the process of another uid was killed with the app's cgroup")
            #expect(try scratch.cgroup.waitUntil(frozen: false, timeout: .seconds(10)), "left frozen:\n\(daemon.log)")
            #expect(try scratch.cgroup.processes() == [foreign.pid])
            #expect(!daemon.log.contains("with SIGSTOP instead"), "the kill was not through the frozen cgroup")
            #expect(daemon.log.contains("leaving pid \(foreign.pid) alone"), "\(daemon.log)")
        }
    }

    @Test(
        "a restarted daemon does not keep a frozen cgroup that now holds a process of another uid: it stops the app",
        .requires(.cgroup(.unified)))
    func adoptionRechecksTheCgroup() async throws {
        try await withRootAndScratchCgroup { scratch in
            let daemon = try DaemonHarness()
            defer { daemon.terminate() }
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "scoped")
            try scratch.move(app.pid)
            try daemon.connect().lifecycle("SetState", ["app": "scoped", "state": "background"])
            try watch.waitFor("stateChanged", app: "scoped", ["state": "suspended"])
            #expect(try scratch.cgroup.waitUntil(frozen: true, timeout: .seconds(10)), "\(daemon.log)")
            try daemon.daemonPidFD.sendSignal(.kill)
            _ = try daemon.daemonPidFD.waitForExit(timeout: .seconds(10))

            let foreign = try foreignSleeper()
            defer { foreign.terminate() }
            try scratch.move(foreign.pid)
            let statePath = daemon.directory.path + "/state.json"
            let next = try DaemonHarness(arguments: ["--state-file", statePath])
            defer { next.terminate() }
            #expect(try waitForMessage(next, "1 processes adopted"), "\(next.log)")
            #expect(
                try scratch.cgroup.waitUntil(frozen: false, timeout: .seconds(10)),
                "the cgroup stayed frozen with another uid's process:\n\(next.log)")
            #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped, "\(next.log)")
            #expect(try next.connect().app("scoped")["state"] == "suspended")
            try next.stop()
            #expect(try waitForProcessState(app.pid) { $0 != .stopped } != .stopped)
        }
    }

    @Test(
        "after a kill -9, --release-stopped continues the app's group but not a member of another uid",
        .requires(.root(for: "starting processes of another uid")))
    func releaseSkipsOtherUid() async throws {
        try await withRoot {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "grouped", newGroup: true)
            defer { app.terminate() }
            let own = try child(of: app)
            defer { end(own) }
            let foreign = try child(of: app, uids: [nobody, nobody, nobody])
            defer { end(foreign) }
            try daemon.connect().lifecycle("SetState", ["app": "grouped", "state": "background"])
            try watch.waitFor("stateChanged", app: "grouped", ["state": "suspended"])
            #expect(try waitForProcessState(own.pid) { $0 == .stopped } == .stopped)
            try daemon.daemonPidFD.sendSignal(.kill)
            _ = try daemon.daemonPidFD.waitForExit(timeout: .seconds(10))
            // Stopped by its own user meanwhile: the release must not continue it.
            try foreign.sendSignal(.stop)
            #expect(try waitForProcessState(foreign.pid) { $0 == .stopped } == .stopped)

            let (status, output) = try runProgram([
                try Products.path("bgtaskd"), "--release-stopped", "--socket", daemon.socketPath, "--config",
                daemon.configurationPath,
            ])
            #expect(status == 0, "\(output)")
            for pid in [app.pid, own.pid] {
                #expect(try waitForProcessState(pid) { $0 != .stopped } != .stopped, "pid \(pid) stayed stopped")
            }
            #expect(
                try waitForProcessState(foreign.pid, timeout: .milliseconds(300)) { $0 != .stopped } == .stopped,
                "the release continued a process of another uid:\n\(output)")
            #expect(output.contains("leaving pid \(foreign.pid) alone"), "\(output)")
        }
    }

    // MARK: Fixtures

    /// The fast policy with `[Memory]` for reclamation: `AppsMemoryMax` as given and a short warning grace.
    private func memoryPolicy(appsMemoryMax: String) -> String {
        DaemonHarness.fastPolicy + "\n[Memory]\nAppsMemoryMax=\(appsMemoryMax)\nMemoryWarningGraceSec=300ms\n"
    }

    /// Runs `body` off the pool (its test requires root: only root starts processes of another uid).
    private func withRoot(_ body: @escaping @Sendable () throws -> Void) async throws {
        try await offThePool(body)
    }

    /// Runs `body` off the pool with a cgroup2 cgroup of the test's own (removed after, with whatever is left in
    /// it); its test requires one (`.requires(.cgroup(.unified))`, which needs root).
    private func withRootAndScratchCgroup(_ body: @escaping @Sendable (ScratchCgroup) throws -> Void) async throws {
        try await offThePool {
            let scratch = try ScratchCgroup(.unified)
            defer { scratch.close() }
            try body(scratch)
        }
    }

    /// A child of the python `app`, in its process group, running with the real, effective and saved `uids` when
    /// given; a pidfd of it for the test (it bounds its own lifetime by the app's, 60 s).
    private func child(of app: ChildProcess, uids: [uid_t]? = nil) throws -> PidFD {
        try app.send(uids.map { "child-as " + $0.map(String.init).joined(separator: " ") } ?? "child")
        let pid = pid_t(try number(after: "child", in: try app.waitForLine(startingWith: "child")))
        let pidFD = try PidFD.open(pid: pid)
        if let uids {
            let status = try ProcFS().read("\(pid)/status")
            let expected = "Uid:\t" + uids.map(String.init).joined(separator: "\t") + "\t"
            guard status.contains(expected) else { throw HarnessError("child \(pid) runs with other uids:\n\(status)") }
        }
        return pidFD
    }

    /// A process of `nobody` the test started (a `sleep` bounding its own lifetime).
    private func foreignSleeper() throws -> ChildProcess {
        let child = try ChildProcess([
            "setpriv", "--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", "sleep", "60",
        ])
        // Until setpriv has changed user and run sleep, the process is still root's (the test's): a test that moves
        // it into the app's cgroup before then gives the daemon a process of the app's own uid to find there.
        let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
        while true {
            let procFS = ProcFS()
            if let ids = try? procFS.userIDs(child.pid), ids.areAll(nobody),
                (try? procFS.stat(child.pid).command) == "sleep"
            {
                return child
            }
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("pid \(child.pid) did not become nobody's sleep within 30 s")
            }
            usleep(5_000)
        }
    }

    /// Kills a child of an app through its pidfd (whoever its parent is by now) and closes the pidfd.
    private func end(_ pidFD: PidFD) {
        try? pidFD.sendSignal(.kill)
        try? pidFD.close()
    }

    /// The daemon's log lines that contain `text`.
    private func logLines(_ daemon: DaemonHarness, containing text: String) -> [Substring] {
        daemon.log.split(separator: "\n").filter { $0.contains(text) }
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
