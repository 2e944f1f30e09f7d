// Where a frozen app meets its own unit's stop, under the contained systemd user manager with the installed units:
// the daemon thaws the app the moment the manager stops its unit (systemctl stop, the manager's own exit), so the
// app's SIGTERM handler runs and the stop ends in the app's own time; and a self-registered service with a watchdog
// is never suspended into a watchdog kill.

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

/// Wide windows for what apps must do in time: nothing here waits on the policy's clock.
private let roomyPolicy = """
    [Policy]
    EnterBackgroundGraceSec=30s
    LaunchTimeoutSec=30s
    """

/// The lines a `--sigterm-marker` file holds.
private func markerLines(_ path: String) -> [String] {
    ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
}

extension InstalledUserService {
    /// Launches `name` (the launched-app fixture, writing "sigterm PID" to `marker` on SIGTERM), moves it to
    /// background and waits until the daemon has frozen its unit's cgroup; the app as listed then.
    func launchAndFreeze(_ name: String, marker: String) throws -> [String: JSONValue] {
        let (status, output) = try bgtask(
            [
                "launch", name, "--json", "--", interpreter,
                Products.packageRoot + "/Tests/Fixtures/launched_app.py", "--lifetime", "180", "--sigterm-marker",
                marker,
            ])
        guard status == 0 else { throw HarnessError("bgtask launch \(name) failed (\(status)):\n\(output)\n\(log)") }
        try waitForApp(name, "registered") { $0["state"] == "active" }
        let moved = try connect().lifecycle("SetState", ["app": .string(name), "state": "background"])
        guard moved.errorName == nil else { throw HarnessError("SetState \(name) background: \(moved)") }
        let app = try waitForApp(name, "was frozen") { $0["state"] == "suspended" && $0["suspendedWith"] == "cgroup2" }
        guard let cgroup = app["cgroup"]?.stringValue, eventually(timeout: .seconds(20), { isFrozen(cgroup) }) else {
            throw HarnessError("\(name)'s cgroup never froze: \(app)\n\(log)")
        }
        return app
    }
}

@Suite("Frozen apps and their units' stops, under the contained manager", .serialized, .requires(.containedSystemd))
struct FrozenUnitStopTests {
    @Test(
        "systemctl --user stop of a frozen app's unit: the app is thawed, its SIGTERM handler runs, the stop is quick")
    func stopOfAFrozenUnit() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            let marker = service.systemd.directory.path + "/sigterm-stopped"
            let app = try service.launchAndFreeze("org.example.stopped", marker: marker)
            let unit = try #require(app["unit"]?.stringValue)
            let pid = try #require(app["pid"]?.intValue)

            let started = MonotonicClock.now()
            let stop = try service.systemd.systemctl(["stop", unit])
            let seconds = Double(MonotonicClock.now() - started) / 1e9
            print("systemctl --user stop of a frozen app's unit took \(seconds) s")
            #expect(stop.status == 0, "\(stop)")
            // Without the thaw the manager waits out its stop timeout (90 s) and SIGKILLs the app.
            #expect(seconds < 20, "the stop took \(seconds) s:\n\(service.log)")
            #expect(markerLines(marker) == ["sigterm \(pid)"], "the app's SIGTERM handler did not run")
            #expect(
                try service.systemd.show(unit, ["ActiveState"])["ActiveState"] != "active", "\(unit) still active")
            let ended = try service.waitForApp("org.example.stopped", "ended") { $0["state"] == "terminated" }
            #expect(ended["exitReason"] == "exited", "\(ended)")
            #expect(service.log.contains("\(unit) is stopping"), "the reason is not in the daemon's log")
        }
    }

    @Test("systemctl --user exit with three frozen apps: each app's SIGTERM handler runs, and everything is gone soon")
    func managerExitWithFrozenApps() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            var pids: [Int] = []
            var markers: [String] = []
            for index in 1...3 {
                let marker = service.systemd.directory.path + "/sigterm-\(index)"
                let app = try service.launchAndFreeze("org.example.frozen\(index)", marker: marker)
                pids.append(try #require(app["pid"]?.intValue))
                markers.append(marker)
            }
            let started = MonotonicClock.now()
            let exit = try service.systemd.systemctl(["exit"])
            #expect(exit.status == 0, "\(exit)")
            // The manager stops every unit (bgtaskd's and the apps'), then exits itself.
            let isGone = try service.systemd.manager.pidFD.waitForExit(timeout: .seconds(60))
            let seconds = Double(MonotonicClock.now() - started) / 1e9
            print("systemctl --user exit with three frozen apps: the manager was gone after \(seconds) s")
            #expect(isGone, "the manager did not exit within 60 s")
            #expect(seconds < 30, "the manager took \(seconds) s to exit")
            #expect(
                eventually(timeout: .seconds(10)) { service.systemd.processesInCgroups().isEmpty },
                "left in the manager's cgroups: \(service.systemd.processesInCgroups())")
            for (marker, pid) in zip(markers, pids) {
                #expect(markerLines(marker) == ["sigterm \(pid)"], "pid \(pid)'s SIGTERM handler did not run")
            }
        }
    }

    @Test("a self-registered service with WatchdogSec=5s left in background for 30 s is not killed by its watchdog")
    func watchdogServiceInBackground() async throws {
        try await offThePool {
            let service = try InstalledUserService(configuration: roomyPolicy)
            defer { service.close() }
            _ = try service.connect().lifecycle("GetStatus")
            let output = service.systemd.directory.path + "/pinger.out"
            let run = try runProgram(
                [
                    "/usr/bin/systemd-run", "--user", "--quiet", "--unit=pinger.service", "-p", "Type=notify",
                    "-p", "WatchdogSec=5s", "-p", "TimeoutAbortSec=2s", "-p", "StandardOutput=append:\(output)",
                    "--", interpreter, Products.packageRoot + "/Tests/Fixtures/python_app.py", "--socket",
                    service.socketPath, "--name", "org.example.pinger", "--background", "--stay", "--notify",
                    "--lifetime", "120",
                ], environment: service.systemd.environment)
            #expect(run.status == 0, "systemd-run failed: \(run.output)")
            let before = try service.systemd.show("pinger.service", ["MainPID", "ActiveState", "NRestarts"])
            #expect(before["ActiveState"] == "active", "\(before)")
            let exempt = try service.waitForApp("org.example.pinger", "was exempted") {
                $0["suspensionExemption"] != .null && $0["suspensionExemption"] != nil
            }
            #expect(
                exempt["suspensionExemption"]
                    == .string(
                        "its unit pinger.service has a watchdog (WatchdogSec=5s), which a suspended process cannot ping"
                    ),
                "\(exempt)")
            // Six watchdog intervals in background: it keeps pinging, and the manager keeps it.
            let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
            while MonotonicClock.now() < deadline {
                let unit = try service.systemd.show("pinger.service", ["MainPID", "ActiveState", "Result"])
                guard unit["ActiveState"] == "active", unit["MainPID"] == before["MainPID"] else {
                    Issue.record("pinger.service changed in background: \(unit)\n\(service.log)")
                    break
                }
                let app = try service.appInfo("org.example.pinger")
                guard app["state"] == "background" else {
                    Issue.record("the app left background: \(app)")
                    break
                }
                _ = try service.systemd.manager.pidFD.waitForExit(timeout: .seconds(1))
            }
            let after = try service.systemd.show("pinger.service", ["MainPID", "ActiveState", "NRestarts", "Result"])
            #expect(after["Result"] == "success" && after["MainPID"] == before["MainPID"], "\(after)")
            let pings = ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").components(separatedBy: "ping")
            #expect(pings.count > 10, "the service stopped pinging its watchdog")
            #expect(
                service.log.contains(
                    "org.example.pinger is not suspended from now on: its unit pinger.service has a watchdog"),
                "\(service.log)")
            try service.systemd.systemctlSucceeding(["stop", "pinger.service"])
        }
    }
}
