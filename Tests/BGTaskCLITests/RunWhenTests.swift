// `bgtask run --when` against the real daemon reading the test's power_supply tree: the wait, the run, the signal
// when the adapter goes, a stop request while waiting, and a condition this host has no source for.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

/// A daemon that reads power from `tree` alone: no UPower can answer on a bus that does not exist.
private func daemon(reading tree: FakePowerSupplies, _ scratch: ScratchDirectory) throws -> DaemonHarness {
    try DaemonHarness(
        configuration: DaemonHarness.fastPolicy + "\n[Conditions]\nPowerSupplyPath=\(tree.path)\n",
        environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"])
}

/// The requests the daemon holds for `app`.
private func requests(of app: String, _ daemon: DaemonHarness) throws -> [[String: JSONValue]] {
    let reply = try daemon.connect().lifecycle("ListRequests", ["app": .string(app)])
    return (reply.parameters["requests"]?.arrayValue ?? []).compactMap(\.objectValue)
}

/// Waits (at most 20 s) until the daemon holds `app`'s request and `condition` holds for it.
private func waitForRequest(
    of app: String, _ daemon: DaemonHarness, _ condition: ([String: JSONValue]) -> Bool
) throws -> [String: JSONValue] {
    let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
    while true {
        if let request = try requests(of: app, daemon).first, condition(request) { return request }
        guard MonotonicClock.now() < deadline else {
            throw HarnessError("\(app)'s request never got there: \(try requests(of: app, daemon))\n\(daemon.log)")
        }
        usleep(20_000)
    }
}

@Suite("bgtask run --when with the real daemon", .serialized)
struct RunWhenTests {
    @Test("waits on battery, runs CMD once plugged, exits with its status; the request is gone")
    func waitsThenRuns() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "run-when")
            let daemon = try daemon(reading: tree, scratch)
            let run = try BGTaskProcess(
                ["run", "--when", "ac", "--app", "backup", "--", "sh", "-c", "echo ran; exit 3"],
                environment: ["BGTASK_SOCKET": daemon.socketPath], flags: .newProcessGroup)
            let waiting = try waitForRequest(of: "backup", daemon) { $0["state"] == "pending" }
            #expect(waiting["waitingOn"] == ["ac"] && waiting["kind"] == "refresh", "\(waiting)")
            #expect(try daemon.connect().app("backup")["state"] == "active")
            #expect(!(try run.waitForOutput(containing: "ran", timeout: .seconds(1), recordingTimeout: false)))

            try tree.set("AC", ["online": "1"])
            let result = try run.finish()
            #expect(result.status == .exited(3), "\(result.errors)")
            #expect(result.output == "ran\n")
            #expect(result.errors.contains("request run waits for ac"), "\(result.errors)")
            #expect(result.errors.contains("the conditions hold: task 1 began"), "\(result.errors)")
            #expect(try requests(of: "backup", daemon).isEmpty)
            #expect(daemon.log.contains("backup task 1 ended (ended)"))
        }
    }

    @Test("asked to stop while it waits: CMD never runs, the request is cancelled, and it exits 128+15")
    func stopRequestWhileWaiting() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "run-when-stop")
            let daemon = try daemon(reading: tree, scratch)
            let marker = scratch.path + "/ran"
            let run = try BGTaskProcess(
                ["run", "--when", "ac", "--processing", "--id", "sync", "--app", "waiter", "--", "touch", marker],
                environment: ["BGTASK_SOCKET": daemon.socketPath], flags: .newProcessGroup)
            let waiting = try waitForRequest(of: "waiter", daemon) { $0["state"] == "pending" }
            #expect(waiting["identifier"] == "sync" && waiting["kind"] == "processing", "\(waiting)")
            try run.send(.terminate)
            let result = try run.finish()
            #expect(result.status == .exited(143), "\(result.errors)")
            #expect(result.errors.contains("asked to stop by SIGTERM before 'touch' ran"), "\(result.errors)")
            #expect(try requests(of: "waiter", daemon).isEmpty)
            #expect(!FileManager.default.fileExists(atPath: marker))
        }
    }

    @Test("terminated by a controller while it waits: it gives up before the daemon's kill, the request cancelled")
    func terminatedWhileWaiting() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "0"])
            let scratch = try ScratchDirectory(prefix: "run-when-terminate")
            let daemon = try daemon(reading: tree, scratch)
            let run = try BGTaskProcess(
                ["run", "--when", "ac", "--app", "doomed", "--", "true"],
                environment: ["BGTASK_SOCKET": daemon.socketPath], flags: .newProcessGroup)
            _ = try waitForRequest(of: "doomed", daemon) { $0["state"] == "pending" }
            try daemon.connect().lifecycle("Terminate", ["app": "doomed"])
            let result = try run.finish()
            // Its own exit, with the reason, not the daemon's SIGKILL after WillTerminateGraceSec.
            #expect(result.status == .exited(1), "\(result.errors)")
            #expect(result.errors.contains("bgtaskd ended app doomed before its task began"), "\(result.errors)")
            #expect(try requests(of: "doomed", daemon).isEmpty)
        }
    }

    @Test("unplugged while CMD runs: CMD gets the signal, and SIGKILL when the task ends with CMD ignoring it")
    func unpluggedWhileRunning() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "1"])
            let scratch = try ScratchDirectory(prefix: "run-when-unplug")
            let daemon = try daemon(reading: tree, scratch)
            // The first CMD leaves on the signal; the second ignores it (`exec` keeps the ignored disposition).
            let leaving = try BGTaskProcess(
                [
                    "run", "--when", "ac", "--on-expire", "INT", "--app", "leaving", "--", "sh", "-c",
                    "trap 'echo interrupted; exit 9' INT; echo running; while :; do sleep 0.1; done",
                ],
                environment: ["BGTASK_SOCKET": daemon.socketPath], flags: .newProcessGroup)
            try leaving.waitForOutput(containing: "running", timeout: .seconds(20))
            let ignoring = try BGTaskProcess(
                [
                    "run", "--when", "ac", "--app", "ignoring", "--", "sh", "-c",
                    "trap '' TERM; echo running; exec sleep 37",
                ],
                environment: ["BGTASK_SOCKET": daemon.socketPath], flags: .newProcessGroup)
            try ignoring.waitForOutput(containing: "running", timeout: .seconds(20))

            try tree.set("AC", ["online": "0"])
            let left = try leaving.finish()
            #expect(left.status == .exited(9), "\(left.errors)")
            #expect(left.output.contains("interrupted"))
            #expect(left.errors.contains("sent SIGINT"), "\(left.errors)")
            let killed = try ignoring.finish()
            #expect(killed.status == .exited(137), "\(killed.errors)")
            #expect(killed.errors.contains("sent SIGKILL"), "\(killed.errors)")
            #expect(try requests(of: "leaving", daemon).isEmpty && requests(of: "ignoring", daemon).isEmpty)
        }
    }

    @Test("a condition this host has no source for is refused at once, naming it, and nothing waits")
    func missingSourceIsRefused() async throws {
        try await offThePool {
            let tree = try FakePowerSupplies()
            try tree.set("AC", ["type": "Mains", "online": "1"])
            let scratch = try ScratchDirectory(prefix: "run-when-idle")
            // Idle comes only from logind, which cannot answer on a bus that does not exist.
            let daemon = try daemon(reading: tree, scratch)
            let result = try BGTaskProcess(
                ["run", "--when", "ac,idle", "--app", "idler", "--", "true"],
                environment: ["BGTASK_SOCKET": daemon.socketPath], flags: .newProcessGroup
            ).finish()
            #expect(result.status == .exited(1), "\(result.errors)")
            #expect(result.errors.contains("idle"), "\(result.errors)")
            #expect(try requests(of: "idler", daemon).isEmpty)
        }
    }
}
