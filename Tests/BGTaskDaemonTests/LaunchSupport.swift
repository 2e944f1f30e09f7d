// A daemon whose managed apps get cgroups under scratch cgroups the test made, and the Python app it launches.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc

/// A daemon with `CgroupRoot=` (and, where the host has it, `MemoryCgroupRoot=`) pointing at cgroups the test
/// made, its launched apps' output in files (`--log-dir`). Everything is removed by `close()`: the daemon stopped,
/// whatever is left in the scratch cgroups killed, the cgroups removed.
final class LaunchFixture {
    /// Nil for a daemon without `CgroupRoot=` (launched apps then run without a cgroup).
    let control: ScratchCgroup?
    let memory: ScratchCgroup?
    private(set) var daemon: DaemonHarness
    private(set) var client: RawVarlinkClient
    let logDirectory: String
    private let configuration: String
    private let files: [String: String]
    private let environment: [String: String]
    /// The app's program: the fixture in the source tree (a test may point it at a copy another user can read).
    var script = Products.packageRoot + "/Tests/Fixtures/launched_app.py"
    /// The interpreter: the first python3 in PATH (the one with the varlink package), or one another user may run.
    var interpreter = "python3"

    init(
        _ hierarchy: ScratchCgroup.Hierarchy? = .unified, withMemory: Bool = true, configuration: String = "",
        policy: String = DaemonHarness.fastPolicy, files: [String: String] = [:], environment: [String: String] = [:]
    ) throws {
        control = try hierarchy.map { try ScratchCgroup($0) }
        memory = withMemory && ScratchCgroup.unavailableReason(.memory) == nil ? try ScratchCgroup(.memory) : nil
        var memorySection = "[Memory]\n"
        if let control { memorySection += "CgroupRoot=\(control.cgroup.path)\n" }
        if let memory { memorySection += "MemoryCgroupRoot=\(memory.cgroup.path)\n" }
        let logs = try ScratchDirectory(prefix: "bgtaskd-launch-logs")
        logDirectory = logs.path
        self.configuration = policy + "\n" + memorySection + configuration
        self.files = files
        self.environment = environment
        daemon = try DaemonHarness(
            configuration: self.configuration, files: files, arguments: Self.arguments(logs.path),
            environment: environment)
        client = try daemon.connect()
        scratchLogs = logs
    }

    /// The daemon's state is kept beside the apps' logs, so a restarted daemon finds it.
    private static func arguments(_ directory: String) -> [String] {
        ["--log-dir", directory, "--state-file", directory + "/state.json"]
    }

    /// Kills the daemon with SIGKILL and starts another on the same configuration and state.
    func restartDaemon() throws {
        try daemon.daemonPidFD.sendSignal(.kill)
        _ = try daemon.daemonPidFD.waitForExit(timeout: .seconds(10))
        daemon.terminate()
        client.close()
        daemon = try DaemonHarness(
            configuration: configuration, files: files, arguments: Self.arguments(logDirectory),
            environment: environment)
        client = try daemon.connect()
    }

    private let scratchLogs: ScratchDirectory

    /// `Launch`es the Python app as `name` with `arguments`; the reply.
    @discardableResult
    func launch(_ name: String, _ arguments: [String] = [], exitsOnSuspend: Bool? = nil) throws -> [String: JSONValue] {
        try client.lifecycle("Launch", launchParameters(name, arguments, exitsOnSuspend: exitsOnSuspend))
    }

    /// The parameters of a `Launch` of the Python app as `name` with `arguments`.
    func launchParameters(
        _ name: String, _ arguments: [String] = [], exitsOnSuspend: Bool? = nil
    ) -> [String: JSONValue] {
        var parameters: [String: JSONValue] = [
            "name": .string(name),
            "argv": .array(
                ([interpreter, script, "--lifetime", "90"] + arguments)
                    .map { .string($0) }),
        ]
        if let exitsOnSuspend { parameters["exitsOnSuspend"] = .bool(exitsOnSuspend) }
        return parameters
    }

    /// The app's output so far.
    func output(of name: String) -> String {
        (try? String(contentsOfFile: "\(logDirectory)/\(name).log", encoding: .utf8)) ?? ""
    }

    /// Waits (at most `timeout`) until the app's output has a line starting with `prefix`; that line.
    @discardableResult
    func waitForOutput(_ name: String, _ prefix: String, timeout: Duration = .seconds(20)) throws -> String {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            if let line = output(of: name).split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) {
                return String(line)
            }
            guard MonotonicClock.now() < deadline else {
                throw HarnessError(
                    "\(name) never printed \(prefix.debugDescription); it printed:\n\(output(of: name))\n"
                        + "daemon log:\n\(daemon.log)")
            }
            usleep(20_000)
        }
    }

    /// Polls `GetApp(name)` (at most `timeout`) until `condition` holds; the app then.
    @discardableResult
    func waitForApp(
        _ name: String, timeout: Duration = .seconds(20), _ condition: ([String: JSONValue]) -> Bool
    ) throws -> [String: JSONValue] {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            let app = try client.app(name)
            if condition(app) { return app }
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("\(name) never got there; it is \(app)\ndaemon log:\n\(daemon.log)")
            }
            usleep(50_000)
        }
    }

    /// The child cgroups of the scratch cgroups (the daemon's apps' cgroups still there).
    var appCgroups: [String] {
        [control?.cgroup, memory?.cgroup].compactMap { $0 }.flatMap { cgroup in
            ((try? FileManager.default.contentsOfDirectory(atPath: cgroup.path)) ?? [])
                .filter { $0.hasPrefix("app-") }.map { cgroup.path + "/" + $0 }
        }
    }

    /// Waits (at most 10 s) until no app cgroup is left; whether none is.
    func waitUntilCgroupsRemoved() -> Bool {
        let deadline = MonotonicClock.now() + Duration.seconds(10).nanosecondCount
        while !appCgroups.isEmpty {
            guard MonotonicClock.now() < deadline else { return false }
            usleep(20_000)
        }
        return true
    }

    /// Stops the daemon, then kills whatever is left in the app cgroups and removes them and the scratch cgroups.
    func close() {
        // A clean stop first: the daemon continues every app it stopped (a test that failed midway may leave one
        // suspended, with no cgroup to empty); SIGKILL only if it does not stop.
        _ = try? daemon.stop(timeout: .seconds(10))
        daemon.terminate()
        client.close()
        for path in appCgroups {
            let cgroup = CgroupDirectory(path: path)
            let deadline = MonotonicClock.now() + Duration.seconds(10).nanosecondCount
            while let pids = try? cgroup.processes(), !pids.isEmpty, MonotonicClock.now() < deadline {
                _ = try? cgroup.killEverything()
                usleep(10_000)
            }
            while (try? cgroup.remove()) == nil, MonotonicClock.now() < deadline { usleep(10_000) }
        }
        control?.close()
        memory?.close()
    }
}

/// Runs `body` off the pool with a `LaunchFixture` (closed after). A test using `hierarchy` says so with
/// `.requires(.cgroup(hierarchy))`, so that a host without it reports the test skipped.
func withLaunchFixture(
    _ hierarchy: ScratchCgroup.Hierarchy? = .unified, withMemory: Bool = true,
    configuration: String = "", policy: String = DaemonHarness.fastPolicy, files: [String: String] = [:],
    _ body: @escaping @Sendable (LaunchFixture) throws -> Void
) async throws {
    try await offThePool {
        let fixture = try LaunchFixture(
            hierarchy, withMemory: withMemory, configuration: configuration, policy: policy, files: files)
        defer { fixture.close() }
        try body(fixture)
    }
}
