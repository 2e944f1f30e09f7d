// Each backend this host has, by name (docs/ARCHITECTURE.md, Backends): freeze confirmed, thaw confirmed, the kill
// of a frozen (or stopped) app completes, and the memory read matches what the app allocated within 10%.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@Suite("Backends")
struct BackendTests {
    private static let mebibyte = 1 << 20

    @Test(
        "cgroup2 freeze and cgroup.kill, v1 memory: frozen, thawed, a frozen app killed, memory within 10%",
        .requires(.cgroup(.unified)))
    func cgroup2FreezeAndKill() async throws {
        try await withLaunchFixture(.unified, configuration: "AppsMemoryMax=8G\n") {
            fixture in
            let status = try fixture.client.lifecycle("GetStatus").parameters
            let backends = try #require(status["backends"]?.objectValue)
            #expect(backends["freeze"]?.stringValue?.hasPrefix("cgroup2") == true, "\(backends)")
            #expect(backends["kill"]?.stringValue?.hasPrefix("cgroup.kill") == true, "\(backends)")
            if fixture.memory != nil { #expect(backends["memory"] == "cgroup1+pss", "\(backends)") }

            try checkMemoryReading(fixture, backend: fixture.memory == nil ? "pss" : "cgroup1")
            try checkFreezeThawKill(fixture, method: "cgroup2") { cgroup, frozen in
                try cgroup.waitUntil(frozen: frozen, timeout: .seconds(10))
            }
        }
    }

    @Test(
        "v1 freezer and v1 memory: FROZEN, THAWED, a frozen app killed (thawed after the kill)",
        .requires(.cgroup(.freezer), .cgroup(.memory)))
    func v1FreezerAndMemory() async throws {
        try await withLaunchFixture(.freezer, configuration: "AppsMemoryMax=8G\n") { fixture in
            let backends = try #require(
                try fixture.client.lifecycle("GetStatus").parameters["backends"]?.objectValue)
            #expect(backends["freeze"]?.stringValue?.hasPrefix("cgroup1") == true, "\(backends)")
            #expect(backends["kill"]?.stringValue?.hasPrefix("cgroup1") == true, "\(backends)")
            try checkMemoryReading(fixture, backend: "cgroup1")
            try checkFreezeThawKill(fixture, method: "cgroup1") { cgroup, frozen in
                try cgroup.waitUntilFreezer(frozen: frozen, timeout: .seconds(10))
            }
        }
    }

    @Test("without cgroups, SIGSTOP and PSS: stopped (T), continued, a stopped app killed, memory within 10%")
    func signalsAndPSS() async throws {
        try await withLaunchFixture(
            nil, withMemory: false, configuration: "AppsMemoryMax=8G\n"
        ) { fixture in
            let backends = try #require(
                try fixture.client.lifecycle("GetStatus").parameters["backends"]?.objectValue)
            #expect(backends["memory"] == "pss" && backends["cgroupRoot"] == "none", "\(backends)")
            try checkMemoryReading(fixture, backend: "pss")

            try fixture.launch("org.example.stopped", ["--state", "background"])
            let suspended = try fixture.waitForApp("org.example.stopped") { $0["state"] == "suspended" }
            let pid = pid_t(try #require(suspended["pid"]?.intValue))
            #expect(try waitForProcessState(pid) { $0 == .stopped } == .stopped)
            #expect(try fixture.client.app("org.example.stopped")["suspendedWith"] == "group")
            try fixture.client.lifecycle("SetState", ["app": "org.example.stopped", "state": "active"])
            #expect(try waitForProcessState(pid) { $0 != .stopped } != .stopped)
            try fixture.client.lifecycle("SetState", ["app": "org.example.stopped", "state": "background"])
            #expect(try waitForProcessState(pid) { $0 == .stopped } == .stopped)
            try fixture.client.lifecycle("Terminate", ["app": "org.example.stopped"])
            #expect(try PidFD.open(pid: pid).waitForExit(timeout: .seconds(10)), "the stopped app did not die")
            let ended = try fixture.waitForApp("org.example.stopped") { $0["state"] == "terminated" }
            #expect(ended["exitReason"] == "controller", "\(ended)")
        }
    }

    /// An active app allocates 150 MiB a few seconds after it starts: the daemon's reading grows by that much,
    /// within 10%, and says which backend measured it.
    private func checkMemoryReading(_ fixture: LaunchFixture, backend: String) throws {
        let name = "org.example.measured"
        try fixture.launch(name, ["--alloc", "150", "--alloc-delay", "8"])
        let before = try fixture.waitForApp(name) { $0["memoryBytes"]?.intValue != nil }
        #expect(!fixture.output(of: name).contains("allocated"), "the reading before came too late")
        #expect(before["memoryBackend"] == .string(backend), "\(before)")
        let baseline = try #require(before["memoryBytes"]?.intValue)
        try fixture.waitForOutput(name, "allocated")
        // A sample may catch the allocation halfway: wait for one within 10% below, then check it is not over.
        let after = try fixture.waitForApp(name, timeout: .seconds(30)) {
            ($0["memoryBytes"]?.intValue ?? 0) >= baseline + 135 * Self.mebibyte
        }
        let grown = try #require(after["memoryBytes"]?.intValue) - baseline
        #expect(
            abs(grown - 150 * Self.mebibyte) <= 15 * Self.mebibyte,
            "\(backend) measured \(grown / Self.mebibyte) MiB for 150 MiB allocated")
        try fixture.client.lifecycle("Terminate", ["app": .string(name)])
        try fixture.waitForApp(name) { $0["state"] == "terminated" }
    }

    /// A background app is frozen through its cgroup (confirmed by `isFrozen`, never SIGSTOPped), thawed in the
    /// foreground, frozen again and then terminated: its process dies and its cgroups go.
    private func checkFreezeThawKill(
        _ fixture: LaunchFixture, method: String, _ waitUntil: (CgroupDirectory, Bool) throws -> Bool
    ) throws {
        let name = "org.example.frozen"
        try fixture.launch(name, ["--state", "background", "--alloc", "20"])
        let app = try fixture.waitForApp(name) { $0["state"] == "suspended" }
        let cgroup = CgroupDirectory(path: try #require(app["cgroup"]?.stringValue))
        let pid = pid_t(try #require(app["pid"]?.intValue))
        #expect(try waitUntil(cgroup, true), "not frozen:\n\(fixture.daemon.log)")
        #expect(try ProcFS().stat(pid).state != .stopped, "SIGSTOPped instead of frozen")
        #expect(try fixture.client.app(name)["suspendedWith"] == .string(method))

        try fixture.client.lifecycle("SetState", ["app": .string(name), "state": "active"])
        #expect(try waitUntil(cgroup, false), "not thawed:\n\(fixture.daemon.log)")
        try fixture.waitForOutput(name, "event willEnterForeground")
        try fixture.client.lifecycle("SetState", ["app": .string(name), "state": "background"])
        #expect(try waitUntil(cgroup, true), "not frozen again:\n\(fixture.daemon.log)")

        // Killed while frozen: the kill completes (a v1-frozen task needs the thaw after it).
        let pidFD = try PidFD.open(pid: pid)
        defer { try? pidFD.close() }
        try fixture.client.lifecycle("Terminate", ["app": .string(name)])
        #expect(try pidFD.waitForExit(timeout: .seconds(10)), "the frozen app did not die:\n\(fixture.daemon.log)")
        let ended = try fixture.waitForApp(name) { $0["state"] == "terminated" }
        #expect(ended["exitReason"] == "controller", "\(ended)")
        #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
    }
}
