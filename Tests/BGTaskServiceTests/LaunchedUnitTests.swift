// Managed apps as the installed user service launches them: transient units of the contained systemd manager, with
// nothing of the daemon's sandbox, frozen and killed through their units' cgroups, and outliving the daemon's
// restarts.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// The python interpreter of the tests (the one with the `varlink` package), by its real path: a unit does not run
/// with the test's PATH.
private let interpreter: String = {
    let (status, output) =
        (try? runProgram(["/usr/bin/env", "python3", "-c", "import sys; print(sys.executable)"])) ?? (1, "")
    let path = output.trimmingCharacters(in: .whitespacesAndNewlines)
    return status == 0 && path.hasPrefix("/") ? path : "/usr/bin/python3"
}()

private let launchedApp = Products.packageRoot + "/Tests/Fixtures/launched_app.py"

/// A policy whose windows for what apps must do in time are wide, and whose daemon samples memory against a limit.
private let roomyPolicy = """
    [Policy]
    EnterBackgroundGraceSec=30s
    LaunchTimeoutSec=30s
    WillTerminateGraceSec=3s
    """

/// The sandbox of the system unit as installed under `prefix`, as lines of a `[Service]` drop-in for the installed
/// user service: the system unit's settings the user unit lacks (capabilities, mounts, devices, network, cgroups),
/// which the contained manager, running as root, applies as the system manager would. Three need the nodes systemd
/// mounts over inaccessible paths, which root's user services take from the host's `/run/systemd/inaccessible`,
/// missing from the contained manager's private `/run/systemd`: of `ProtectKernelTunables=` the part that matters
/// here is kept (`/sys` read-only, but for `/sys/fs/cgroup`, which systemd leaves to `ProtectControlGroups=`), and
/// `ProtectKernelLogs=` and `ProtectHome=` are left out. `PrivateTmp=` is left out too: it would hide the test's
/// scratch directory in `/tmp` (the installed daemon, the manager's socket, the configuration).
private func systemUnitSandbox(prefix: String) throws -> String {
    func settings(_ instance: String) throws -> [(key: String, value: String)] {
        let text = try String(
            contentsOfFile: prefix + "/lib/systemd/\(instance)/bgtaskd.service", encoding: .utf8)
        var section = ""
        var result: [(key: String, value: String)] = []
        for line in text.split(separator: "\n") {
            if line.hasPrefix("[") {
                section = String(line)
            } else if section == "[Service]", !line.hasPrefix("#"), let equals = line.firstIndex(of: "=") {
                result.append((String(line[..<equals]), String(line[line.index(after: equals)...])))
            }
        }
        return result
    }
    let user = Set(try settings("user").map(\.key))
    let system = try settings("system").filter { !user.contains($0.key) }
    let isCgroupTreeReadOnly = system.contains { $0.key == "ProtectControlGroups" && $0.value != "no" }
    var lines: [String] = []
    for (key, value) in system {
        switch key {
        case "ProtectKernelTunables" where value == "yes":
            lines.append("ReadOnlyPaths=/sys")
            if !isCgroupTreeReadOnly { lines.append("ReadWritePaths=/sys/fs/cgroup") }
        case "ProtectKernelLogs", "ProtectHome", "PrivateTmp":
            continue
        default:
            lines.append("\(key)=\(value)")
        }
    }
    return lines.joined(separator: "\n")
}

extension InstalledUserService {
    /// `bgtask --user ARGUMENTS` of the installed prefix, against this service.
    func bgtask(_ arguments: [String]) throws -> (status: Int32, output: String) {
        try runProgram(
            ["/usr/bin/env", "XDG_RUNTIME_DIR=\(systemd.runtimeDirectory)", prefix + "/bin/bgtask", "--user"]
                + arguments)
    }

    /// Launches `name` (the launched-app fixture with `arguments`) with `bgtask --user launch`; its app as listed.
    func launch(_ name: String, _ arguments: [String] = []) throws -> [String: JSONValue] {
        let (status, output) = try bgtask(
            ["launch", name, "--json", "--", interpreter, launchedApp, "--lifetime", "180"] + arguments)
        guard status == 0 else { throw HarnessError("bgtask launch \(name) failed (\(status)):\n\(output)\n\(log)") }
        // Launch answers once the program started; it registers a moment later.
        return try waitForApp(name, "registered") { $0["state"] == "active" }
    }

    /// `GetApp(name)`.
    func appInfo(_ name: String) throws -> [String: JSONValue] {
        let reply = try connect().lifecycle("GetApp", ["app": .string(name)])
        guard let app = reply.parameters["app"]?.objectValue else { throw HarnessError("GetApp \(name): \(reply)") }
        return app
    }

    /// Waits (at most 30 s) until `GetApp(name)` satisfies `condition`; the app then.
    @discardableResult
    func waitForApp(
        _ name: String, _ what: String, _ condition: ([String: JSONValue]) -> Bool
    ) throws -> [String: JSONValue] {
        var last: [String: JSONValue] = [:]
        let met = eventually(timeout: .seconds(30)) {
            last = (try? appInfo(name)) ?? [:]
            return condition(last)
        }
        guard met else { throw HarnessError("\(name) never \(what): \(last)\n\(log)") }
        return last
    }

    /// The cgroup2 `cgroup.events` of the unit cgroup at `path` says frozen.
    func isFrozen(_ path: String) -> Bool {
        ((try? String(contentsOfFile: path + "/cgroup.events", encoding: .utf8)) ?? "").contains("frozen 1")
    }
}

@Suite("Apps launched as units of the service manager", .serialized, .requires(.containedSystemd))
struct LaunchedUnitTests {
    @Test("bgtask --user launch starts app-bgtask-NAME-*.service, with nothing of the daemon's sandbox")
    func launchedAsAUnit() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            let report = service.systemd.directory.path + "/sandbox"
            let app = try service.launch("org.example.unit", ["--report-sandbox", report])
            let unit = try #require(app["unit"]?.stringValue, "\(app)")
            #expect(unit.hasPrefix("app-bgtask-org.example.unit-") && unit.hasSuffix(".service"), "\(unit)")
            #expect(app["managed"] == true)
            let properties = try service.systemd.show(
                unit,
                [
                    "ActiveState", "Slice", "CollectMode", "StandardOutput", "SyslogIdentifier", "OOMScoreAdjust",
                    "MainPID", "ControlGroup",
                ])
            #expect(properties["ActiveState"] == "active", "\(properties)")
            #expect(properties["Slice"] == "app.slice")
            #expect(properties["CollectMode"] == "inactive-or-failed")
            #expect(properties["StandardOutput"] == "journal")
            #expect(properties["SyslogIdentifier"] == "org.example.unit")
            #expect(properties["OOMScoreAdjust"] == "0")
            #expect(properties["MainPID"] == app["pid"]?.intValue.map(String.init), "\(properties) \(app)")
            #expect(app["cgroup"]?.stringValue?.hasSuffix(properties["ControlGroup"] ?? "?") == true, "\(app)")

            // Inside the unit the app can reach the network, is free to gain privileges, has no seccomp filter,
            // and is not shielded from the kernel's OOM killer.
            #expect(eventually { FileManager.default.fileExists(atPath: report) }, "no report:\n\(service.log)")
            let lines = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n").map(String.init)
            #expect(lines.contains("inet ok"), "\(lines)")
            #expect(lines.contains { $0.hasPrefix("NoNewPrivs:") && $0.hasSuffix("\t0") }, "\(lines)")
            #expect(lines.contains { $0.hasPrefix("Seccomp:") && $0.hasSuffix("\t0") }, "\(lines)")
            let oom = lines.first { $0.hasPrefix("oom_score_adj ") }.flatMap { Int($0.dropFirst(14)) }
            #expect((oom ?? -1) >= 0, "\(lines)")
            // And the daemon itself runs with its own (the installed unit's hardening).
            let daemon = try #require(try service.mainPID())
            let status = try String(contentsOfFile: "/proc/\(daemon)/status", encoding: .utf8)
            #expect(status.contains("NoNewPrivs:\t1"), "the daemon's own sandbox is not in force")
        }
    }

    @Test("an app launched as a unit gets its argv exactly, as a forked one does: no $ or % expanded, a backslash kept")
    func argvExactlyAsAUnit() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            let report = service.systemd.directory.path + "/argv.json"
            let arguments = ["--report-argv", report, "--", "$HOME", "${X}", "$X", "%n", "back\\slash", "$$", "5$"]
            let app = try service.launch("org.example.argv", arguments)
            #expect(app["unit"]?.stringValue?.hasPrefix("app-bgtask-org.example.argv-") == true, "\(app)")
            #expect(eventually { FileManager.default.fileExists(atPath: report) }, "no report:\n\(service.log)")
            let argv = try JSONDecoder().decode([String].self, from: Data(contentsOf: URL(fileURLWithPath: report)))
            #expect(argv == [launchedApp, "--lifetime", "180"] + arguments)
        }
    }

    @Test("suspended, the app's unit is frozen through its cgroup and thawed on active; Terminate ends the unit")
    func frozenThroughTheUnit() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            let app = try service.launch("org.example.frozen")
            let unit = try #require(app["unit"]?.stringValue)
            let cgroup = try #require(app["cgroup"]?.stringValue)
            let pid = try #require(app["pid"]?.intValue)
            let control = try service.connect()
            let moved = try control.lifecycle("SetState", ["app": "org.example.frozen", "state": "background"])
            #expect(moved.errorName == nil, "\(moved)")
            let suspended = try service.waitForApp("org.example.frozen", "was suspended") {
                $0["state"] == "suspended" && $0["suspendedWith"] == "cgroup2"
            }
            #expect(suspended["cgroup"]?.stringValue == cgroup)
            #expect(eventually { service.isFrozen(cgroup) }, "\(cgroup) not frozen")
            #expect(processState(pid_t(pid)) != .stopped, "stopped with SIGSTOP rather than frozen")
            #expect(
                try control.lifecycle("SetState", ["app": "org.example.frozen", "state": "active"]).errorName == nil)
            #expect(eventually { !service.isFrozen(cgroup) }, "\(cgroup) not thawed")
            #expect(try control.lifecycle("Terminate", ["app": "org.example.frozen"]).errorName == nil)
            try service.waitForApp("org.example.frozen", "ended") { $0["state"] == "terminated" }
            #expect(
                eventually { (try? service.systemd.show(unit, ["ActiveState"])["ActiveState"]) != "active" },
                "\(unit) still active")
        }
    }

    @Test(
        "a due scheduled request of an app that is not running (apps.d ExecStart=) starts it as a unit, in background, and runs its task"
    )
    func scheduledRequestLaunchesAUnit() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "scheduled-unit")
            // The app's command (quoted as systemd quotes ExecStart=), and power from the test's tree: no UPower can
            // answer on a bus that does not exist.
            let command = [interpreter, launchedApp, "--lifetime", "180", "--complete-scheduled"]
                .map { "\"" + $0 + "\"" }.joined(separator: " ")
            let service = try InstalledUserService(
                configuration: roomyPolicy + "\n[Conditions]\nPowerSupplyPath=\(tree.path)\n",
                files: ["apps.d/org.example.nightly.conf": "[Launch]\nExecStart=\(command)\n"],
                serviceSettings: "Environment=DBUS_SYSTEM_BUS_ADDRESS=unix:path=\(scratch.path)/no-bus\n")
            defer { service.close() }
            let (status, output) = try service.bgtask([
                "schedule", "org.example.nightly", "backup", "--processing", "--requires", "ac",
            ])
            #expect(status == 0, "\(output)")
            #expect(throws: (any Error).self) { try service.appInfo("org.example.nightly") }

            // Plugged: the daemon asks the manager to start the app; it registers (in background, though it asked
            // for nothing), gets its task, completes it, and is suspended through its unit's cgroup.
            try tree.set("AC", ["online": "1"])
            let app = try service.waitForApp("org.example.nightly", "was launched, ran its task and was suspended") {
                $0["state"] == "suspended"
            }
            let unit = try #require(app["unit"]?.stringValue, "\(app)")
            #expect(unit.hasPrefix("app-bgtask-org.example.nightly-") && unit.hasSuffix(".service"), "\(unit)")
            #expect(app["managed"] == true)
            #expect(service.log.contains("launched org.example.nightly for its scheduled requests as pid"))
            #expect(service.log.contains("org.example.nightly task 1 ended (ended)"), "\(service.log)")
            let requests = try service.connect().lifecycle("ListRequests").parameters["requests"]?.arrayValue
            #expect(requests?.isEmpty == true, "\(String(describing: requests))")
            #expect(try service.systemd.show(unit, ["ActiveState"])["ActiveState"] == "active")
        }
    }

    @Test("in the system unit's sandbox, the daemon still freezes, thaws and kills an app through its unit's cgroup")
    func systemSandboxGovernsUnits() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            // The socket is up, the daemon not started yet: it starts inside the system unit's sandbox.
            let sandbox = try systemUnitSandbox(prefix: service.prefix)
            #expect(sandbox.contains("CapabilityBoundingSet="), "\(sandbox)")
            _ = try service.systemd.directory.write(
                "run/systemd/user/bgtaskd.service.d/system-sandbox.conf", "[Service]\n" + sandbox + "\n")
            try service.systemd.systemctlSucceeding(["daemon-reload"])
            let app = try service.launch("org.example.sandboxed")
            let unit = try #require(app["unit"]?.stringValue)
            let cgroup = try #require(app["cgroup"]?.stringValue)
            // The sandbox is in force: the three capabilities (CAP_DAC_READ_SEARCH 2, CAP_KILL 5, CAP_SYS_PTRACE 19)
            // are all the daemon may hold.
            let daemon = try #require(try service.mainPID())
            let status = try String(contentsOfFile: "/proc/\(daemon)/status", encoding: .utf8)
            #expect(
                status.contains("CapBnd:\t0000000000080024"), "the system unit's sandbox is not in force:\n\(status)")
            let control = try service.connect()
            for round in 1...2 {
                #expect(
                    try control.lifecycle("SetState", ["app": "org.example.sandboxed", "state": "background"])
                        .errorName == nil)
                try service.waitForApp("org.example.sandboxed", "was suspended (\(round))") {
                    $0["state"] == "suspended" && $0["suspendedWith"] == "cgroup2"
                }
                #expect(eventually { service.isFrozen(cgroup) }, "\(cgroup) not frozen:\n\(service.log)")
                guard round == 1 else { break }
                #expect(
                    try control.lifecycle("SetState", ["app": "org.example.sandboxed", "state": "active"])
                        .errorName == nil)
                #expect(eventually { !service.isFrozen(cgroup) }, "\(cgroup) not thawed:\n\(service.log)")
            }
            // Terminated while frozen: it is killed through the unit's cgroup, and the unit ends.
            #expect(try control.lifecycle("Terminate", ["app": "org.example.sandboxed"]).errorName == nil)
            let ended = try service.waitForApp("org.example.sandboxed", "ended") { $0["state"] == "terminated" }
            #expect(ended["exitReason"] == "controller", "\(ended)")
            #expect(
                eventually { (try? service.systemd.show(unit, ["ActiveState"])["ActiveState"]) != "active" },
                "\(unit) still active")
            for complaint in ["cannot suspend", "cannot kill", "cannot resume"] {
                #expect(!service.log.contains(complaint), "\(complaint):\n\(service.log)")
            }
        }
    }

    @Test("a daemon restart, kill -9 or watchdog abort leaves launched apps running, adopted with their tasks")
    func appsOutliveTheDaemon() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            let app = try service.launch("org.example.lasting", ["--task"])
            let pid = try #require(app["pid"]?.intValue)
            let unit = try #require(app["unit"]?.stringValue)
            try service.waitForApp("org.example.lasting", "began its task") { $0["tasks"]?.arrayValue?.count == 1 }
            for outage in ["restart", "kill", "watchdog"] {
                let daemon = try #require(try service.mainPID())
                let restarts = try service.service(["NRestarts"])["NRestarts"].flatMap(Int.init) ?? 0
                switch outage {
                case "restart":
                    try service.systemd.systemctlSucceeding(["restart", "bgtaskd.service"])
                case "kill":
                    kill(daemon, SIGKILL)
                default:
                    kill(daemon, SIGSTOP)
                }
                try service.waitForNewDaemon(replacing: daemon, restarts: outage == "restart" ? nil : restarts)
                let adopted = try service.waitForApp("org.example.lasting", "was adopted after \(outage)") {
                    $0["state"] == "active" && $0["pid"]?.intValue == pid
                }
                #expect(adopted["unit"]?.stringValue == unit, "after \(outage): \(adopted)")
                #expect(adopted["tasks"]?.arrayValue?.count == 1, "after \(outage): \(adopted)")
                #expect(processState(pid_t(pid)) != nil, "the app died with the daemon (\(outage))")
            }
            // Stopped from outside, the unit's app ends in the daemon.
            try service.systemd.systemctlSucceeding(["stop", unit])
            let ended = try service.waitForApp("org.example.lasting", "ended") { $0["state"] == "terminated" }
            #expect(["exited", "crashed"].contains(ended["exitReason"]?.stringValue ?? ""), "\(ended)")
        }
    }

    @Test("three launched apps over AppsMemoryMax: the heaviest suspended one is killed through its unit, which ends")
    func heaviestUnitReclaimed() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy + "\n[Memory]\nAppsMemoryMax=infinity\n")
            defer { service.close() }
            var units: [String: String] = [:]
            for (name, mebibytes) in [
                ("org.example.light", 30), ("org.example.heavy", 120), ("org.example.middle", 60),
            ] {
                let app = try service.launch(name, ["--alloc", String(mebibytes)])
                units[name] = try #require(app["unit"]?.stringValue)
                try service.waitForApp(name, "allocated") { ($0["memoryBytes"]?.intValue ?? 0) > mebibytes << 20 }
                #expect(
                    try service.connect().lifecycle("SetState", ["app": .string(name), "state": "background"])
                        .errorName == nil)
                try service.waitForApp(name, "was suspended") { $0["state"] == "suspended" }
            }
            // Under the apps' total: the heaviest alone must go (the episode aims at 90% of the limit).
            let total = try units.keys.map { try service.appInfo($0)["memoryBytes"]?.intValue ?? 0 }.reduce(0, +)
            let limit = total - (60 << 20)
            _ = try service.systemd.directory.write(
                "config/bgtaskd/bgtaskd.conf", roomyPolicy + "\n[Memory]\nAppsMemoryMax=\(limit)\n")
            try service.systemd.systemctlSucceeding(["reload", "bgtaskd.service"])
            let victim = try service.waitForApp("org.example.heavy", "was reclaimed") { $0["state"] == "terminated" }
            #expect(victim["exitReason"] == "memory-reclaim", "\(victim)")
            let unit = try #require(units["org.example.heavy"])
            #expect(
                eventually { (try? service.systemd.show(unit, ["ActiveState"])["ActiveState"]) != "active" },
                "\(unit) still active")
            for name in ["org.example.light", "org.example.middle"] {
                #expect(
                    try service.appInfo(name)["state"] == "suspended",
                    "\(name) was reclaimed too; the daemon's log:\n\(service.log)")
                let survivor = try #require(units[name])
                #expect(try service.systemd.show(survivor, ["ActiveState"])["ActiveState"] == "active")
            }
        }
    }

    @Test("an app started with systemd-run --user --scope that registers itself is frozen through its scope")
    func scopeFrozen() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            _ = try service.connect().lifecycle("GetStatus")
            let app = try ChildProcess(
                [
                    "/usr/bin/systemd-run", "--user", "--scope", "--quiet", "--", interpreter,
                    Products.packageRoot + "/Tests/Fixtures/python_app.py", "--socket", service.socketPath,
                    "--name", "org.example.scoped", "--lifetime", "120",
                ], environment: service.systemd.environment)
            defer { app.terminate() }
            _ = try app.waitForLine(startingWith: "registered")
            let registered = try service.appInfo("org.example.scoped")
            #expect(registered["managed"] == false && registered["unit"] == .null, "\(registered)")
            #expect(
                try service.connect().lifecycle("SetState", ["app": "org.example.scoped", "state": "background"])
                    .errorName == nil)
            let suspended = try service.waitForApp("org.example.scoped", "was suspended") {
                $0["state"] == "suspended" && $0["suspendedWith"] != .null
            }
            #expect(suspended["suspendedWith"] == "cgroup2", "\(suspended)")
            let cgroup = try #require(suspended["cgroup"]?.stringValue)
            #expect(cgroup.hasSuffix(".scope"), "\(cgroup)")
            #expect(eventually { service.isFrozen(cgroup) }, "\(cgroup) not frozen")
            #expect(processState(app.pid) != .stopped)
        }
    }
}
