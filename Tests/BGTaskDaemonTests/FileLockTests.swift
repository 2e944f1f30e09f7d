// File locks found wherever the app holds them: an open file description lock (pid -1 in /proc/locks, traced
// through fdinfo) and a lock held by another process of the group the app leads.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

@Suite("File locks block suspension")
struct FileLockTests {
    /// Sends the app to background and expects the suspension to be put off, then the app terminated
    /// `suspended-holding-lock` after the lock grace.
    private func expectHeldLockTerminates(_ daemon: DaemonHarness, watch: WatchStream, app: ChildProcess, name: String)
        throws
    {
        try daemon.connect().lifecycle("SetState", ["app": .string(name), "state": "background"])
        try watch.waitFor("suspensionDeferred", app: name)
        #expect(try ProcFS().stat(app.pid).state != .stopped)
        try watch.waitFor("terminated", app: name, ["reason": "suspended-holding-lock"])
        try app.waitForLine(startingWith: "event willTerminate")
        #expect(try app.waitForExit() == .signaled(.kill))
    }

    @Test("an open file description lock (pid -1 in /proc/locks) is traced to the app through fdinfo")
    func openFileDescriptionLock() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let lockFile = try daemon.directory.write("ofd.lock", "")
            let app = try pythonApp(daemon, name: "ofd")
            try app.send("lock ofd \(lockFile)")
            _ = try app.waitForLine(startingWith: "locked")
            #expect(try ProcFS().locks().contains { $0.kind == .openFileDescription && $0.pid == -1 })
            try expectHeldLockTerminates(daemon, watch: watch, app: app, name: "ofd")
        }
    }

    @Test("a POSIX lock held by another process of the group the app leads")
    func lockHeldByGroupMember() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let lockFile = try daemon.directory.write("posix.lock", "")
            let app = try pythonApp(daemon, name: "family", newGroup: true)
            try app.send("child-lock posix \(lockFile)")
            let child = pid_t(try number(after: "child", in: try app.waitForLine(startingWith: "child")))
            // Opened now, while the child is alive and unreaped (its parent, the app, lives): by the end it may be
            // gone and its pid another process's, which a pid opened then would name.
            let childPidFD = try PidFD.open(pid: child)
            defer {
                try? childPidFD.sendSignal(.kill)
                try? childPidFD.close()
            }
            try expectHeldLockTerminates(daemon, watch: watch, app: app, name: "family")
        }
    }

    @Test("an app without locks whose group member holds none is suspended at once")
    func noLockNoDelay() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let watch = try WatchStream(daemon)
            let app = try pythonApp(daemon, name: "free", newGroup: true)
            try app.send("child")
            _ = try app.waitForLine(startingWith: "child")
            try daemon.connect().lifecycle("SetState", ["app": "free", "state": "background"])
            try watch.waitFor("stateChanged", app: "free", ["state": "suspended"])
            #expect(try waitForProcessState(app.pid) { $0 == .stopped } == .stopped)
            #expect(!watch.entries.contains { $0["kind"] == "suspensionDeferred" })
            try daemon.stop()
        }
    }
}
