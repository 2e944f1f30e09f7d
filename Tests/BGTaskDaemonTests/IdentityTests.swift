// Who may hold a name: re-attaching needs the same live process and uid, a pinned name belongs to its
// user, and a process that reuses a dead app's pid gets a registration of its own, never the old one.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@Suite("Identity")
struct IdentityTests {
    static let nobody: UInt32 = 65534

    @Test("re-attaching a live name from another process, or from another uid, is refused")
    func reattachFromAnotherProcessOrUser() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let holder = try pythonApp(daemon, name: "org.example.held")
            // Another process of the same uid.
            let impostor = try ChildProcess([
                "python3", Products.packageRoot + "/Tests/Fixtures/python_app.py", "--socket", daemon.socketPath,
                "--name", "org.example.held", "--lifetime", "30",
            ])
            #expect(try impostor.waitForLine(startingWith: "error") == "error io.bgtask.Lifecycle.AppExists")
            impostor.terminate()
            // Another uid.
            let other = try OtherUser(uid: Self.nobody, gid: Self.nobody)
            let reply = try other.call(daemon, "Register", ["name": "org.example.held"], more: true)
            #expect(reply.errorName == "io.bgtask.Lifecycle.AppExists")
            // The holder kept its registration.
            let app = try daemon.connect().app("org.example.held")
            #expect(app["pid"] == .number(Double(holder.pid)))
            #expect(app["state"] == "active")
        }
    }

    @Test("a name pinned to a user by apps.d (User=) is refused to every other uid, root included")
    func pinnedName() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(files: ["apps.d/org.example.pinned.conf": "[Access]\nUser=nobody\n"])
            let root = try ChildProcess([
                "python3", Products.packageRoot + "/Tests/Fixtures/python_app.py", "--socket", daemon.socketPath,
                "--name", "org.example.pinned", "--lifetime", "30",
            ])
            #expect(try root.waitForLine(startingWith: "error") == "error io.bgtask.Lifecycle.PermissionDenied")
            root.terminate()
            #expect(daemon.log.contains("pinned to uid \(Self.nobody)"))
            let other = try OtherUser(uid: Self.nobody, gid: Self.nobody)
            let reply = try other.call(daemon, "Register", ["name": "org.example.pinned"], more: true)
            #expect(reply.errorName == nil, "\(reply)")
            #expect(reply.parameters["app"]?["uid"] == .number(Double(Self.nobody)))
            // Names that are not pinned stay open to everyone.
            let free = try pythonApp(daemon, name: "org.example.free")
            free.terminate()
        }
    }

    @Test(
        "a process reusing a dead app's pid gets a fresh registration: no leases, budget or name adopted",
        .requires(.root(for: "choosing a pid (ns_last_pid)")))
    func reusedPidIsNotAdopted() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            let first = try pythonApp(daemon, name: "org.example.reused")
            try first.send("begin upload")
            _ = try first.waitForLine(startingWith: "began")
            let pid = first.pid
            // The daemon is paused while the app dies and a new process takes its pid and registers the name, so
            // it sees the new registration before (or together with) the old process's exit.
            try daemon.daemonPidFD.sendSignal(.stop)
            var isDaemonStopped = true
            defer { if isDaemonStopped { try? daemon.daemonPidFD.sendSignal(.continue) } }
            try first.process.pidFD.sendSignal(.kill)
            _ = try first.waitForExit()
            let second = try ChildProcess([
                "python3", Products.packageRoot + "/Tests/Fixtures/spawn_with_pid.py", String(pid), "python3",
                Products.packageRoot + "/Tests/Fixtures/python_app.py", "--socket", daemon.socketPath, "--name",
                "org.example.reused", "--lifetime", "30",
            ])
            defer { second.terminate() }
            try daemon.daemonPidFD.sendSignal(.continue)
            isDaemonStopped = false
            let registered = try second.waitForLine(startingWith: "registered", timeout: .seconds(30))
            #expect(registered == "registered active pid=\(pid)", "the new process did not get the old pid")
            let app = try daemon.connect().app("org.example.reused")
            #expect(app["pid"] == .number(Double(pid)))
            #expect(app["tasks"] == .array([]), "the old process's lease was adopted")
            // The old registration ended with its process (its lease with it); the new one registered afresh after
            // that, and nothing re-attached.
            let history = try daemon.connect().lifecycle("History").parameters["entries"]?.arrayValue ?? []
            let entries = history.compactMap(\.objectValue).filter { $0["app"] == "org.example.reused" }
            let kinds = entries.compactMap { $0["kind"]?.stringValue }
            #expect(!kinds.contains("reattached"), "\(kinds)")
            #expect(kinds.filter { $0 == "registered" }.count == 2, "\(kinds)")
            let exited = try #require(kinds.firstIndex(of: "processExited"), "\(kinds)")
            #expect(kinds.lastIndex(of: "registered").map { $0 > exited } == true, "\(kinds)")
            #expect(entries.contains { $0["kind"] == "taskEnded" && $0["taskEnd"] == "app-ended" }, "\(kinds)")
        }
    }
}
