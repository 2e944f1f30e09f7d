// bgtaskd as a real systemd user service, installed with scripts/install and run by a contained systemd manager:
// socket activation, readiness, status, the watchdog, and restarts that lose nothing.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// The state letter of `pid` in /proc, nil once it is gone.
func processState(_ pid: pid_t) -> ProcessState? {
    try? ProcFS().stat(pid).state
}

extension ChildProcess {
    /// Sends `command` and returns the next line starting with `prefix` (or with "error").
    func run(_ command: String, _ prefix: String) throws -> String {
        try send(command)
        return try waitForLine { $0.hasPrefix(prefix) || $0.hasPrefix("error") }
    }
}

/// Waits at most `timeout` for `condition`, checking every 50 ms; whether it came true.
func eventually(timeout: Duration = .seconds(20), _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    while try !condition() {
        guard MonotonicClock.now() < deadline else { return false }
        usleep(50_000)
    }
    return true
}

@Suite("bgtaskd as a systemd user service", .serialized, .requires(.containedSystemd))
struct UserServiceTests {
    @Test("socket activation, start after READY=1, live STATUS=, the watchdog's restart, and a clean exit")
    func serviceLifecycle() async throws {
        try await offThePool {
            let service = try InstalledUserService()
            var isClosed = false
            defer { if !isClosed { service.close() } }
            #expect(try service.service(["ActiveState"])["ActiveState"] == "inactive")

            // The first connection starts the daemon, and is answered.
            let client = try service.connect()
            let info = try client.call("org.varlink.service.GetInfo")
            #expect(info.parameters["product"] == "bgtaskd", "\(info)")
            #expect(try service.service(["ActiveState"])["ActiveState"] == "active")
            client.close()

            // `systemctl start` of a Type=notify service returns once READY=1 came: active, and serving.
            try service.systemd.systemctlSucceeding(["stop", "bgtaskd.service"])
            try service.systemd.systemctlSucceeding(["start", "bgtaskd.service"])
            let started = try service.service(["ActiveState", "SubState"])
            #expect(started["ActiveState"] == "active" && started["SubState"] == "running", "\(started)")
            #expect(try service.connect().call("io.bgtask.Lifecycle.GetStatus").errorName == nil)

            // STATUS= carries live counts.
            let app = try service.app("counted")
            defer { app.terminate() }
            try service.systemd.waitFor("bgtaskd.service", ["StatusText"], what: "a status with the app") {
                $0["StatusText"]?.hasPrefix("1 apps") == true
            }

            // A hung daemon: the watchdog (WatchdogSec=2s) aborts it, TimeoutAbortSec=3s later kills it, and the
            // service restarts it with its apps.
            let before = try service.service(["NRestarts"])["NRestarts"].flatMap(Int.init) ?? 0
            let hung = try #require(try service.mainPID())
            let hungPidFD = try PidFD.open(pid: hung)
            defer { try? hungPidFD.close() }
            let stoppedAt = MonotonicClock.now()
            try hungPidFD.sendSignal(.stop)
            try service.waitForNewDaemon(replacing: hung, restarts: before)
            let took = Double(MonotonicClock.now() - stoppedAt) / 1e9
            #expect(took < 2 + 3 + 0.5 + 6, "the watchdog took \(took) s to replace a hung daemon")
            print("serviceLifecycle: the watchdog replaced the hung daemon in \(took) s")
            #expect(try hungPidFD.hasExited)
            // The app's event stream came back from the fd store: the app never saw the daemon go, and events
            // reach it on the same stream.
            #expect(
                service.log.contains("took 1 of 1 apps' event streams back from the fd store"), "\(service.log)")
            let control = try service.connect()
            #expect(
                try control.lifecycle("GetApp", ["app": "counted"]).parameters["app"]?.objectValue?["state"] == "active"
            )
            #expect(try control.lifecycle("SetState", ["app": "counted", "state": "background"]).errorName == nil)
            let seen = try app.waitForLine { $0.hasPrefix("event didEnterBackground") || $0.hasPrefix("connection") }
            #expect(seen.hasPrefix("event didEnterBackground"), "the app saw the restart: \(seen)")
            control.close()

            // Shutting the manager down leaves nothing of it: no process, no cgroup, no directory.
            let cgroups = service.systemd.cgroups
            let processes = service.systemd.processesInCgroups()
            #expect(!processes.isEmpty)
            let scratch = service.systemd.directory.path
            let managerPID = service.systemd.manager.pid
            service.close()
            isClosed = true
            #expect(processState(managerPID) == nil, "the manager is left")
            for cgroup in cgroups { #expect(!FileManager.default.fileExists(atPath: cgroup), "\(cgroup) is left") }
            for pid in processes {
                #expect(processState(pid) == nil || processState(pid) == .zombie, "pid \(pid) is left")
            }
            #expect(!FileManager.default.fileExists(atPath: scratch))
        }
    }

    /// How the daemon goes down in `restartSurvival`.
    enum Outage: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case kill = "kill -9"
        case watchdog = "a watchdog abort"
        case restart = "systemctl restart"
        var testDescription: String { rawValue }
    }

    /// A scheduled task's warning that falls due while no daemon runs is sent by the next one as it restores, and
    /// reaches the app through the event stream the fd store kept. The new daemon's first input to the policy is
    /// the end of an app that died meanwhile, and that catches the scheduled work up: the warning used to be
    /// decided before the kept streams were taken back, held for a registration that never came (the app kept its
    /// stream and had no reason to register again), and never sent. The hour-long soak under systemd counted 46
    /// such warnings, every one at a restart.
    @Test("a scheduled task warned as the daemon restores, after another app's end, hears it on its kept stream")
    func scheduledWarningAfterRestore() async throws {
        try await offThePool {
            // The new daemon comes back 4 s after the kill (ExecStartPre=): past the task's warning, 2 s after its
            // begin, and before its end, 8 s after it.
            let service = try InstalledUserService(
                configuration: "[Policy]\nExpirationWarningSec=6s\n[Scheduling]\nRefreshTaskSec=8s\n",
                serviceSettings: "ExecStartPre=/bin/sleep 4")
            defer { service.close() }
            let worker = try service.app("worker")
            let doomed = try service.app("doomed")
            defer { for app in [worker, doomed] { app.terminate() } }
            #expect(try worker.run("handle fetch", "handling") == "handling fetch")
            let control = try service.connect()
            let submitted = try control.lifecycle("SubmitRequest", ["app": "worker", "identifier": "fetch"])
            #expect(submitted.parameters["request"]?["state"] == "running", "\(submitted)")
            let launched = try worker.waitForLine { $0.hasPrefix("launched fetch") }
            let taskId = try #require(launched.split(separator: "=").last.map(String.init))
            control.close()
            let oldPID = try #require(try service.mainPID())
            let restarts = try service.service(["NRestarts"])["NRestarts"].flatMap(Int.init) ?? 0
            let oldDaemon = try PidFD.open(pid: oldPID)
            defer { try? oldDaemon.close() }
            try oldDaemon.sendSignal(.kill)
            try doomed.process.pidFD.sendSignal(.kill)
            try service.waitForNewDaemon(replacing: oldPID, restarts: restarts)
            #expect(service.log.contains("doomed's process ended while bgtaskd was not running"), "\(service.log)")
            #expect(service.log.contains("apps' event streams back from the fd store"), "\(service.log)")
            let heard = try worker.waitForLine {
                $0.hasPrefix("scheduled-expired") || $0.hasPrefix("connection")
            }
            #expect(heard == "scheduled-expired \(taskId)", "worker was not warned: \(heard); \(service.log)")
        }
    }

    /// Leases and remaining time kept, suspended apps suspended again, dead apps exited, passed deadlines acted on;
    /// stopping the service for good leaves nothing stopped.
    @Test("scheduled requests go to the unit's StateDirectory, and come back from it when the runtime state is lost")
    func scheduledRequestsInStateDirectory() async throws {
        try await offThePool {
            let service = try InstalledUserService()
            defer { service.close() }
            let control = try service.connect()
            let tomorrow = JSONValue.number((Date().timeIntervalSince1970 + 86_400).rounded())
            let submitted = try control.lifecycle(
                "SubmitRequest", ["app": "backup", "identifier": "nightly", "earliestBegin": tomorrow])
            #expect(submitted.errorName == nil, "\(submitted)")
            control.close()
            // StateDirectory=bgtaskd of the user unit: systemd 252 puts it in $XDG_CONFIG_HOME, the contained
            // manager's own.
            let file = service.systemd.directory.path + "/config/bgtaskd/scheduled.json"
            #expect(
                eventually { ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").contains("nightly") },
                "no request in \(file); log:\n\(service.log)")
            // What a reboot does to the runtime directory: the service stopped, its state there gone. The socket
            // stays, and starts the daemon again on the next connection; the service manager's probe at its start
            // turns the loop before the restore (a write of the empty state then lost the requests).
            try service.systemd.systemctlSucceeding(["stop", "bgtaskd.service"])
            for name in try FileManager.default.contentsOfDirectory(atPath: service.runtimeDirectory)
            where name.hasPrefix("state") {
                try FileManager.default.removeItem(atPath: service.runtimeDirectory + "/" + name)
            }
            let after = try service.connect()
            defer { after.close() }
            let requests = try after.lifecycle("ListRequests").parameters["requests"]?.arrayValue ?? []
            #expect(requests.count == 1 && requests.first?["earliestBegin"] == tomorrow, "\(requests)")
            #expect(service.log.contains("restored 1 scheduled requests from \(file)"), "\(service.log)")
        }
    }

    @Test("a restart loses nothing, and stopping the service leaves nothing stopped", arguments: Outage.allCases)
    func restartSurvival(_ outage: Outage) async throws {
        try await offThePool {
            // A daemon slow to come back (ExecStartPre= waits 4 s: a loaded device), so that the deadline app's
            // whole background time passes while none runs. Connections made meanwhile wait in the socket. A hung
            // daemon still runs for a moment when the watchdog aborts it (systemd sends SIGCONT with SIGABRT, and
            // the Swift runtime's backtracer takes its time): there the deadline comes later, past the abort.
            let budget = outage == .watchdog ? 7 : 3
            let service = try InstalledUserService(
                configuration: "[Policy]\nBackgroundTimeSec=60s\n",
                files: ["apps.d/deadline.conf": "[Policy]\nBackgroundTimeSec=\(budget)s\nExpirationWarningSec=1s\n"],
                serviceSettings: "ExecStartPre=/bin/sleep 4")
            defer { service.close() }
            let worker = try service.app("worker")
            let idle = try service.app("idle")
            let doomed = try service.app("doomed")
            let deadline = try service.app("deadline")
            defer { for app in [worker, idle, doomed, deadline] { app.terminate() } }
            let control = try service.connect()
            #expect(try worker.run("begin upload", "began") == "began 1")
            #expect(try deadline.run("begin short", "began").hasPrefix("began"))
            for app in ["worker", "idle"] {
                #expect(
                    try control.lifecycle("SetState", ["app": .string(app), "state": "background"]).errorName == nil)
            }
            #expect(eventually { processState(idle.pid) == .stopped }, "idle was never suspended")
            let remainingBefore = try #require(
                try control.lifecycle("BackgroundTimeRemaining", ["app": "worker"]).parameters["seconds"]?.doubleValue)
            let restarts = try service.service(["NRestarts"])["NRestarts"].flatMap(Int.init) ?? 0
            let oldPID = try #require(try service.mainPID())
            let oldDaemon = try PidFD.open(pid: oldPID)
            defer { try? oldDaemon.close() }
            // The outage follows at once: the deadline app's warning must not come before it.
            #expect(try control.lifecycle("SetState", ["app": "deadline", "state": "background"]).errorName == nil)
            let deadlineDue = MonotonicClock.now() + Duration.seconds(Int64(budget)).nanosecondCount
            control.close()
            switch outage {
            case .kill:
                try oldDaemon.sendSignal(.kill)
                try doomed.process.pidFD.sendSignal(.kill)
                try service.waitForNewDaemon(replacing: oldPID, restarts: restarts)
            case .watchdog:
                try oldDaemon.sendSignal(.stop)
                try doomed.process.pidFD.sendSignal(.kill)
                try service.waitForNewDaemon(replacing: oldPID, restarts: restarts)
            case .restart:
                // The app dies once the old daemon is gone and before the new one runs.
                try service.systemd.systemctlSucceeding(["restart", "--no-block", "bgtaskd.service"])
                #expect(try oldDaemon.waitForExit(timeout: .seconds(20)), "the old daemon did not stop")
                try doomed.process.pidFD.sendSignal(.kill)
                try service.waitForNewDaemon(replacing: oldPID)
            }
            #expect(MonotonicClock.now() > deadlineDue, "the daemon came back before the deadline passed")
            let after = try service.connect()
            defer { after.close() }

            // The lease is the same task, and the time left did not grow.
            let workerApp = try after.app("worker")
            #expect(workerApp["tasks"]?.arrayValue?.first?.objectValue?["id"] == 1, "\(workerApp)")
            let remainingAfter = try #require(
                try after.lifecycle("BackgroundTimeRemaining", ["app": "worker"]).parameters["seconds"]?.doubleValue)
            #expect(remainingAfter <= remainingBefore, "remaining went from \(remainingBefore) to \(remainingAfter)")
            // The suspended app is suspended again, and runs again in the foreground.
            #expect(
                eventually { processState(idle.pid) == .stopped && (try? after.app("idle")["state"]) == "suspended" },
                "idle was not suspended again: \(service.log)")
            #expect(try after.lifecycle("SetState", ["app": "idle", "state": "active"]).errorName == nil)
            #expect(eventually { processState(idle.pid) != .stopped }, "idle stayed stopped in the foreground")
            // The app that died meanwhile ended exited.
            #expect(try after.app("doomed")["exitReason"] == "exited")
            // The deadline that passed meanwhile was acted on at once: its lease expired, the app was terminated.
            let history = try after.lifecycle("History").parameters["entries"]?.arrayValue ?? []
            #expect(
                history.contains {
                    $0.objectValue?["app"] == "deadline" && $0.objectValue?["kind"] == "terminated"
                        && $0.objectValue?["reason"] == "task-expired"
                }, "no expiry of the deadline app; the daemon logged:\n\(service.log)")
            // And the app was warned first, though its warning fell due while no daemon ran and was sent as the new
            // one caught up with the app that died meanwhile: before its stream came back from the fd store, that
            // warning was held for a registration that never came (the app kept its stream), and never sent.
            let warned = try deadline.waitForLine {
                $0.hasPrefix("event backgroundTaskExpiring") || $0.hasPrefix("event willTerminate")
            }
            #expect(warned.hasPrefix("event backgroundTaskExpiring"), "deadline was not warned: \(warned)")

            // After a crash or a watchdog abort the apps' event streams came back from the fd store: worker never
            // saw the daemon go. (A `systemctl restart` stops the service, and systemd 252 empties the fd store
            // then: those apps re-attached.)
            if outage != .restart {
                #expect(service.log.contains("apps' event streams back from the fd store"), "\(service.log)")
                #expect(try after.lifecycle("SetState", ["app": "worker", "state": "active"]).errorName == nil)
                let seen = try worker.waitForLine {
                    $0.hasPrefix("event willEnterForeground") || $0.hasPrefix("connection")
                }
                #expect(seen.hasPrefix("event willEnterForeground"), "worker saw the restart: \(seen)")
            }

            // Stopping the service for good with an app suspended leaves no process stopped.
            #expect(try after.lifecycle("SetState", ["app": "idle", "state": "background"]).errorName == nil)
            #expect(eventually { processState(idle.pid) == .stopped }, "idle was not suspended")
            try service.systemd.systemctlSucceeding(["stop", "bgtaskd.socket", "bgtaskd.service"])
            #expect(processState(idle.pid) != .stopped, "stopping the service left idle stopped")
            #expect(processState(worker.pid) != .stopped)
        }
    }
}
