// Launch: managed apps started by the daemon in cgroups of their own, with the memory pressure protocol,
// the launch timeout, their real exit status, their output captured, and their cgroups removed when they end.

import BGTaskConfig
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@Suite("Launch", .requires(.cgroup(.unified)))
struct LaunchTests {
    @Test("a launched app runs in its own cgroups, sees MEMORY_PRESSURE_WATCH and arms a trigger on it")
    func runsInItsCgroup() async throws {
        try await withLaunchFixture { fixture in
            let reply = try fixture.launch("org.example.launched", ["--arm-pressure"])
            let launched = try #require(reply.parameters["app"]?.objectValue, "\(reply)")
            #expect(launched["state"] == "notRunning" && launched["managed"] == true, "\(launched)")
            let cgroup = try #require(launched["cgroup"]?.stringValue)
            #expect(cgroup.hasPrefix(try #require(fixture.control).cgroup.path + "/app-"), "\(cgroup)")
            let pid = try #require(launched["pid"]?.intValue)

            // The app armed a trigger on its own cgroup's memory.pressure, as sd-event or GLib would.
            let armed = try fixture.waitForOutput("org.example.launched", "armed ")
            #expect(armed == "armed \(cgroup)/memory.pressure")
            try fixture.waitForOutput("org.example.launched", "registered active")
            let app = try fixture.waitForApp("org.example.launched") { $0["state"] == "active" }
            #expect(app["pid"]?.intValue == pid && app["uid"]?.intValue == Int(getuid()))

            // The usual soft descriptor limit, not the one the daemon raised for itself.
            let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
            let files = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }
            let soft = files.flatMap { $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first }
            #expect(soft.flatMap { Int($0) }.map { $0 <= 1024 } == true, "\(files ?? "")")

            // It is in the cgroups the daemon made, alone.
            let own = try CgroupHierarchies.probe().cgroups(of: pid_t(pid))
            #expect(own.unified?.path == cgroup || own.freezer?.path == cgroup)
            #expect(try CgroupDirectory(path: cgroup).processes() == [pid_t(pid)])
            if let memory = fixture.memory {
                #expect(own.memory?.path.hasPrefix(memory.cgroup.path + "/app-") == true, "\(own)")
                #expect(app["memoryBackend"] == "cgroup1", "\(app)")
            }

            // Terminated by a controller: gone, its cgroups removed.
            try fixture.client.lifecycle("Terminate", ["app": "org.example.launched"])
            let ended = try fixture.waitForApp("org.example.launched") { $0["state"] == "terminated" }
            #expect(ended["exitReason"] == "controller", "\(ended)")
            #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
        }
    }

    @Test("an app that never registers is killed with launch-timeout, and its cgroups go")
    func launchTimeout() async throws {
        // The app never registers: the timeout is the daemon's countdown alone, and short.
        try await withLaunchFixture(policy: DaemonHarness.fastPolicy("LaunchTimeoutSec", "1s")) { fixture in
            let watch = try WatchStream(fixture.daemon)
            try fixture.launch("org.example.silent", ["--no-register"])
            try fixture.waitForOutput("org.example.silent", "started")
            try watch.waitFor("terminated", app: "org.example.silent", ["reason": "launch-timeout"])
            let app = try fixture.waitForApp("org.example.silent") { $0["exitSignal"]?.stringValue != nil }
            #expect(app["exitReason"] == "launch-timeout" && app["exitSignal"] == "SIGKILL", "\(app)")
            #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
        }
    }

    @Test("crashed with the signal for an app killed by SIGSEGV; exited with the status otherwise")
    func exitStatus() async throws {
        try await withLaunchFixture { fixture in
            try fixture.launch("org.example.crash", ["--crash"])
            try fixture.launch("org.example.exit3", ["--exit", "3"])
            let crashed = try fixture.waitForApp("org.example.crash") { $0["state"] == "terminated" }
            #expect(crashed["exitReason"] == "crashed" && crashed["exitSignal"] == "SIGSEGV", "\(crashed)")
            #expect(crashed["exitStatus"] == .null, "\(crashed)")
            let exited = try fixture.waitForApp("org.example.exit3") { $0["state"] == "terminated" }
            #expect(exited["exitReason"] == "exited" && exited["exitStatus"]?.intValue == 3, "\(exited)")
            #expect(exited["exitSignal"] == .null, "\(exited)")
            // Output captured, and the daemon says how each ended.
            #expect(fixture.output(of: "org.example.exit3").contains("registered active"))
            #expect(fixture.daemon.log.contains("was killed by SIGSEGV"), "\(fixture.daemon.log)")
            #expect(fixture.daemon.log.contains("exited with status 3"), "\(fixture.daemon.log)")
            #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
        }
    }

    @Test(
        "a launched app outlives a daemon killed with SIGKILL: the next one adopts it with its cgroups, and removes them"
    )
    func adoptedAfterRestart() async throws {
        try await withLaunchFixture { fixture in
            try fixture.launch("org.example.kept", ["--state", "background"])
            let suspended = try fixture.waitForApp("org.example.kept") { $0["state"] == "suspended" }
            let cgroup = try #require(suspended["cgroup"]?.stringValue)
            let pid = pid_t(try #require(suspended["pid"]?.intValue))
            // Frozen (the state says suspended before the freeze is made): it cannot see the daemon go.
            #expect(try CgroupDirectory(path: cgroup).waitUntil(frozen: true, timeout: .seconds(10)))
            try fixture.restartDaemon()
            let adopted = try fixture.waitForApp("org.example.kept") { $0["state"] == "suspended" }
            #expect(adopted["cgroup"]?.stringValue == cgroup && adopted["pid"]?.intValue == Int(pid), "\(adopted)")
            #expect(try CgroupDirectory(path: cgroup).isFrozen(), "not frozen under the new daemon")
            // Handled through its cgroups still: killed whole, and they go.
            let pidFD = try PidFD.open(pid: pid)
            defer { try? pidFD.close() }
            try fixture.client.lifecycle("Terminate", ["app": "org.example.kept"])
            #expect(try pidFD.waitForExit(timeout: .seconds(10)), "\(fixture.daemon.log)")
            #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
        }
    }

    @Test("root launches a name apps.d pins to a user as that user, in its groups, its cgroups given to it")
    func launchedAsThePinnedUser() async throws {
        try await withLaunchFixture(
            policy: "[Policy]\nLaunchTimeoutSec=60s\n",
            files: ["apps.d/org.example.pinned.conf": "[Access]\nUser=nobody\n"]
        ) { fixture in
            // A copy of the app any user can read (the source tree may sit under a home only root can enter), run
            // by the system's python3 (the first in PATH may sit there too); it never registers, so needs no package.
            let copy = try ScratchDirectory(prefix: "bgtaskd-launch-app")
            fixture.script = try copy.write(
                "launched_app.py", try String(contentsOfFile: fixture.script, encoding: .utf8))
            fixture.interpreter = "/usr/bin/python3"
            let reply = try fixture.launch("org.example.pinned", ["--no-register"])
            let app = try #require(reply.parameters["app"]?.objectValue, "\(reply)")
            #expect(app["uid"]?.intValue == 65534, "\(app)")
            try fixture.waitForOutput("org.example.pinned", "started")
            let pid = pid_t(try #require(app["pid"]?.intValue))
            let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
            #expect(status.contains("Uid:\t65534\t65534\t65534\t65534"), "\(status)")
            #expect(status.contains("Gid:\t65534\t65534\t65534\t65534"), "\(status)")
            let cgroup = try #require(app["cgroup"]?.stringValue)
            var owner = stat()
            #expect(stat(cgroup + "/cgroup.procs", &owner) == 0 && owner.st_uid == 65534, "cgroup.procs not given")
            try fixture.client.lifecycle("Terminate", ["app": "org.example.pinned"])
            try fixture.waitForApp("org.example.pinned") { $0["state"] == "terminated" }
            #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
        }
    }

    @Test(
        "a forked app gets its argv exactly: no $ or % expanded, a backslash kept; an apps.d ExecStart= means its words, $$ and %% read as $ and %"
    )
    func argvExactly() async throws {
        try await offThePool {
            let words = ["$HOME", "${X}", "$X", "%n", "back\\slash", "$$", "%%"]
            let reports = try ScratchDirectory(prefix: "bgtaskd-argv")
            let scheduledReport = reports.path + "/scheduled.argv"
            let script = Products.packageRoot + "/Tests/Fixtures/launched_app.py"
            let scheduledArguments = ["--lifetime", "90", "--report-argv", scheduledReport, "--"] + words
            let execStart = CommandLineWords.join(["python3", script] + scheduledArguments)
            #expect(execStart.contains("$$HOME") && execStart.contains("%%n"), "\(execStart)")
            let fixture = try LaunchFixture(
                files: ["apps.d/org.example.scheduled.conf": "[Launch]\nExecStart=\(execStart)\n"],
                environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(reports.path)/no-bus"])
            defer { fixture.close() }
            func report(_ path: String) throws -> [String] {
                let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
                while !FileManager.default.fileExists(atPath: path) {
                    guard MonotonicClock.now() < deadline else {
                        throw HarnessError("no \(path)\n\(fixture.daemon.log)")
                    }
                    usleep(20_000)
                }
                return try JSONDecoder().decode([String].self, from: Data(contentsOf: URL(fileURLWithPath: path)))
            }
            // Launch: the words of the call.
            let launchedReport = reports.path + "/launched.argv"
            let arguments = ["--lifetime", "90", "--report-argv", launchedReport, "--"] + words
            let reply = try fixture.client.lifecycle(
                "Launch",
                ["name": "org.example.argv", "argv": .array((["python3", script] + arguments).map { .string($0) })])
            #expect(reply.errorName == nil, "\(reply)")
            #expect(try report(launchedReport) == [script] + arguments)
            // A launch for a scheduled request: the words apps.d gives.
            let submitted = try fixture.client.lifecycle(
                "SubmitRequest", ["app": "org.example.scheduled", "identifier": "argv"])
            #expect(submitted.errorName == nil, "\(submitted)")
            #expect(try report(scheduledReport) == [script] + scheduledArguments)
        }
    }

    @Test("refusals start nothing: an unknown program, a live name, an empty argv")
    func refusals() async throws {
        try await withLaunchFixture { fixture in
            let missing = try fixture.client.lifecycle(
                "Launch", ["name": "org.example.none", "argv": .array([.string("no-such-program-\(getpid())")])])
            #expect(missing.errorName == "io.bgtask.Lifecycle.LaunchFailed", "\(missing)")
            #expect(missing.parameters["reason"]?.stringValue?.contains("no executable") == true, "\(missing)")
            let empty = try fixture.client.lifecycle("Launch", ["name": "org.example.none", "argv": []])
            #expect(empty.errorName == "org.varlink.service.InvalidParameter", "\(empty)")

            try fixture.launch("org.example.once")
            try fixture.waitForApp("org.example.once") { $0["state"] == "active" }
            let again = try fixture.launch("org.example.once")
            #expect(again.errorName == "io.bgtask.Lifecycle.AppExists", "\(again)")
            // One app, one set of cgroups: the refusals made none.
            #expect(fixture.appCgroups.count == (fixture.memory == nil ? 1 : 2), "\(fixture.appCgroups)")
        }
    }

    @Test("a forked app gets its own oom_score_adj (apps.d OOMScoreAdjust=, else 0), never the daemon's")
    func ownOOMScoreAdjust() async throws {
        try await withLaunchFixture(
            files: [
                "apps.d/org.example.spared.conf": "[Launch]\nOOMScoreAdjust=-200\n",
                "apps.d/org.example.first.conf": "[Launch]\nOOMScoreAdjust=700\n",
            ]
        ) { fixture in
            // The daemon's own, which its children inherit: raised here (the installed unit lowers it to -500,
            // which needs CAP_SYS_RESOURCE, as lowering it again below the value inherited does).
            let daemon = "/proc/\(fixture.daemon.pid)/oom_score_adj"
            try "500".write(toFile: daemon, atomically: false, encoding: .utf8)
            #expect(try String(contentsOfFile: daemon, encoding: .utf8) == "500\n")
            let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
            let capabilities =
                status.split(separator: "\n").first { $0.hasPrefix("CapEff:") }
                .flatMap { UInt64($0.dropFirst(7).trimmingCharacters(in: .whitespaces), radix: 16) } ?? 0
            let mayLower = capabilities & (1 << 24) != 0  // CAP_SYS_RESOURCE
            // Where the kernel will not go below the floor the daemon inherited (without CAP_SYS_RESOURCE), the
            // nearest value it allows: above -200, and never the daemon's 500.
            let cases: [(name: String, allowed: ClosedRange<Int>)] = [
                ("org.example.plain", 0...0), ("org.example.first", 700...700),
                ("org.example.spared", mayLower ? -200...(-200) : -199...499),
            ]
            for (name, allowed) in cases {
                let report = fixture.logDirectory + "/\(name).sandbox"
                let reply = try fixture.launch(name, ["--report-sandbox", report])
                let pid = try #require(reply.parameters["app"]?.objectValue?["pid"]?.intValue, "\(reply)")
                let text = try String(contentsOfFile: "/proc/\(pid)/oom_score_adj", encoding: .utf8)
                let actual = try #require(Int(text.trimmingCharacters(in: .whitespacesAndNewlines)), "\(text)")
                #expect(allowed.contains(actual), "\(name): \(actual)")
                try fixture.waitForApp(name) { $0["state"] == "active" }
                // Written just after registering.
                let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
                while !FileManager.default.fileExists(atPath: report), MonotonicClock.now() < deadline {
                    usleep(20_000)
                }
                let lines = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n")
                #expect(lines.contains("oom_score_adj \(actual)"), "\(name): \(lines)")
            }
            // Below the floor it inherits, without CAP_SYS_RESOURCE: the app keeps what it inherits, said.
            let note = "org.example.spared runs with oom_score_adj"
            #expect(fixture.daemon.log.contains(note) == !mayLower, "\(fixture.daemon.log)")
            #expect(!fixture.daemon.log.contains("org.example.plain runs with"), "\(fixture.daemon.log)")
        }
    }
}
