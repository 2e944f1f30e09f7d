// bgtaskd as its installed user units run it, under a contained systemd user manager: the reclaim benchmark's
// daemon for apps launched as transient units.

import BGTaskContainedSystemd
import BGTaskPOSIX
import BGTaskSystem
import Foundation
import Glibc

/// The daemon a benchmark measures, however it was started: where it listens, where it logs, how it ends.
protocol BenchmarkService: AnyObject {
    /// The daemon's Varlink socket.
    var socketPath: String { get }
    /// The daemon's standard error.
    var logPath: String { get }
    /// Stops the daemon and whatever was started for it; never throws (this is the clean-up); call once.
    func stop()
}

extension BenchmarkDaemon: BenchmarkService {}

/// `scripts/install --prefix` of the built `bgtaskd` and `bgtask` into a `ContainedSystemd`'s directory, the user
/// units linked with a runtime drop-in (the benchmark's configuration through `XDG_CONFIG_HOME`, the log,
/// `RuntimeMaxSec=`), and `bgtaskd.socket` started: the daemon itself starts on the benchmark's first connection
/// (socket activation), and launches apps as transient units of that manager, as it does for a user.
///
/// Everything the manager starts is bounded: the manager joins a v1 memory cgroup of the benchmark's own, limited to
/// `memoryLimitBytes` (on a host with no v1 memory hierarchy, its own cgroup2 cgroup gets `memory.max` where the
/// memory controller is enabled there), and runs under `timeout(1)`. `stop()` stops the service, has the manager
/// exit (killing what is left in its cgroups) and removes its cgroups, its directories and the memory cgroup.
final class BenchmarkUnitService: BenchmarkService {
    /// The most memory the manager, the daemon and the apps may use together: four times `AppsMemoryMax`, room for
    /// the apps past the limit and every process's own runtime, far under what the machines have.
    static let memoryLimitBytes: UInt64 = 1 << 30

    let socketPath: String
    let logPath: String
    /// The v1 memory cgroup around the manager and everything it starts, unknown to the daemon; nil where the host
    /// has no v1 memory hierarchy.
    var enclosingMemoryFile: String? { memory.map { $0.directory.path + "/memory.usage_in_bytes" } }
    private let systemd: ContainedSystemd
    private let memory: BenchmarkCgroup?
    private var isStopped = false

    /// Why this host cannot run the daemon under a contained manager, or nil when it can.
    static var unavailableReason: String? {
        ContainedSystemd.unavailableReason.map { "--systemd starts a contained systemd user manager: \($0)" }
    }

    /// Installs the executables of `executablesDirectory` (found with `scripts/install` above it), writes
    /// `configuration` as the service's `bgtaskd.conf`, and starts the socket; nothing lives longer than `lifetime`
    /// (the daemon, by `RuntimeMaxSec=`) and 30 s more (the manager). `name` names the memory cgroup.
    init(executablesDirectory: String, name: String, configuration: String, lifetime: Duration) throws {
        if let reason = Self.unavailableReason { throw BenchmarkError(reason) }
        guard let root = Self.packageRoot(from: executablesDirectory) else {
            throw BenchmarkError(
                "--systemd installs the units with scripts/install, and there is none above \(executablesDirectory) "
                    + "(run the bgtask-bench of a built checkout)")
        }
        var memory: BenchmarkCgroup?
        if CgroupHierarchies.probe().memory != nil {
            let cgroup = try BenchmarkCgroup(.memory, name: name)
            memory = cgroup
            do {
                try cgroup.directory.write("memory.limit_in_bytes", String(Self.memoryLimitBytes))
            } catch {
                cgroup.remove()
                throw BenchmarkError("cannot limit \(cgroup.directory.path): \(error)")
            }
        }
        self.memory = memory
        do {
            systemd = try ContainedSystemd(
                dataHome: "prefix/share", lifetime: lifetime + .seconds(30),
                joining: memory.map { [$0.directory.path] } ?? [])
        } catch {
            memory?.remove()
            throw BenchmarkError("the contained systemd manager did not start: \(error)")
        }
        do {
            if memory == nil { try Self.limitMemory(of: systemd) }
            let prefix = systemd.directory.path + "/prefix"
            try Self.run([root + "/scripts/install", "--prefix", prefix, "--from", executablesDirectory])
            let configHome = systemd.directory.path + "/config"
            try systemd.directory.write("config/bgtaskd/bgtaskd.conf", configuration)
            logPath = systemd.directory.path + "/bgtaskd.log"
            socketPath = systemd.runtimeDirectory + "/bgtaskd/io.bgtask.Lifecycle"
            try systemd.directory.write(
                "run/systemd/user/bgtaskd.service.d/bench.conf",
                """
                [Service]
                Environment=XDG_CONFIG_HOME=\(configHome) BGTASKD_LOG_LEVEL=notice
                StandardError=append:\(logPath)
                RuntimeMaxSec=\(lifetime.components.seconds)s
                """)
            try systemd.systemctlSucceeding([
                "link", "--runtime", prefix + "/lib/systemd/user/bgtaskd.socket",
                prefix + "/lib/systemd/user/bgtaskd.service",
            ])
            try systemd.systemctlSucceeding(["daemon-reload"])
            try systemd.systemctlSucceeding(["start", "bgtaskd.socket"])
        } catch {
            systemd.close()
            memory?.remove()
            throw error
        }
    }

    /// Where the manager's cgroup is a cgroup2 one with the memory controller (a pure cgroup2 host), its
    /// `memory.max`; elsewhere nothing (the daemon's `AppsMemoryMax` is then the bound).
    private static func limitMemory(of systemd: ContainedSystemd) throws {
        for cgroup in systemd.cgroups where access(cgroup + "/memory.max", W_OK) == 0 {
            do {
                try CgroupDirectory(path: cgroup).write("memory.max", String(memoryLimitBytes))
            } catch {
                throw BenchmarkError("cannot limit \(cgroup): \(error)")
            }
        }
    }

    /// The directory above `directory` holding `scripts/install`, or nil.
    static func packageRoot(from directory: String) -> String? {
        var current = directory
        while current.count > 1 {
            if access(current + "/scripts/install", X_OK) == 0 { return current }
            current = (current as NSString).deletingLastPathComponent
        }
        return nil
    }

    /// Runs a program to completion, its output to /dev/null; fails unless it exits 0.
    private static func run(_ arguments: [String]) throws {
        let process = try ProcessSpawner.spawn(
            arguments, options: SpawnOptions(standardOutput: .nullDevice, standardError: .nullDevice))
        let status = try process.waitForExit()
        try? process.pidFD.close()
        guard status == .exited(0) else {
            throw BenchmarkError("\(arguments.joined(separator: " ")) failed (\(status))")
        }
    }

    /// Waits (at most `timeout`) until the service is active: started by the socket and `READY=1` sent, which the
    /// daemon sends once it serves.
    func waitUntilServing(timeout: Duration = .seconds(60)) throws {
        do {
            try systemd.waitFor("bgtaskd.service", ["ActiveState", "MainPID"], timeout: timeout, what: "READY=1") {
                $0["ActiveState"] == "active" && $0["MainPID"] != "0"
            }
        } catch {
            throw BenchmarkError(
                "bgtaskd.service did not become active: \(error); \(BenchmarkDaemon.tail(of: logPath))")
        }
    }

    /// Waits (at most `timeout`) until `unit` is no longer active or deactivating (a collected unit is inactive).
    func waitUntilEnded(_ unit: String, timeout: Duration = .seconds(10)) throws {
        do {
            try systemd.waitFor(unit, ["ActiveState"], timeout: timeout, what: "its end") {
                !["active", "activating", "deactivating", "reloading"].contains($0["ActiveState"] ?? "")
            }
        } catch {
            throw BenchmarkError("\(error)")
        }
    }

    func stop() {
        guard !isStopped else { return }
        isStopped = true
        // The daemon thaws what it froze as it stops; the manager's exit then stops the apps' units.
        _ = try? systemd.systemctl(["stop", "bgtaskd.socket", "bgtaskd.service"])
        systemd.close()
        if let memory {
            let left = memory.remove()
            if !left.isEmpty { reportFailure("bgtask-bench: could not remove \(left.joined(separator: ", "))") }
        }
    }

    deinit { stop() }
}
