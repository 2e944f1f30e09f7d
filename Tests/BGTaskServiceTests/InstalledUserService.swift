// bgtaskd installed with scripts/install into a scratch prefix and run as a user service under a contained
// systemd manager: the units as shipped, with a runtime drop-in for the test's configuration and log.

import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Glibc

/// The user units of a `scripts/install --prefix` linked into a `ContainedSystemd`, the socket unit started.
final class InstalledUserService {
    let systemd: ContainedSystemd
    let prefix: String
    /// Where the socket unit listens: `$XDG_RUNTIME_DIR/bgtaskd/io.bgtask.Lifecycle`.
    let socketPath: String
    /// The daemon's standard error (`StandardError=append:`), across restarts.
    let logPath: String
    /// The service's `$RUNTIME_DIRECTORY`, holding the state file.
    var runtimeDirectory: String { systemd.runtimeDirectory + "/bgtaskd" }

    /// Installs, writes `configuration` (bgtaskd.conf) and `files` (such as `apps.d/NAME.conf`) in the service's
    /// `XDG_CONFIG_HOME`, adds `serviceSettings` to the drop-in's `[Service]`, links the units and starts the
    /// socket.
    init(configuration: String = "", files: [String: String] = [:], serviceSettings: String = "") throws {
        systemd = try ContainedSystemd()
        do {
            prefix = systemd.directory.path + "/prefix"
            try Self.install(prefix: prefix)
            let configHome = systemd.directory.path + "/config"
            _ = try systemd.directory.write("config/bgtaskd/bgtaskd.conf", configuration)
            for (name, text) in files { _ = try systemd.directory.write("config/bgtaskd/" + name, text) }
            logPath = systemd.directory.path + "/bgtaskd.log"
            socketPath = systemd.runtimeDirectory + "/bgtaskd/io.bgtask.Lifecycle"
            // Runtime drop-in: the test's configuration and log, and a short watchdog.
            _ = try systemd.directory.write(
                "run/systemd/user/bgtaskd.service.d/test.conf",
                """
                [Service]
                Environment=XDG_CONFIG_HOME=\(configHome) BGTASKD_LOG_LEVEL=debug
                StandardError=append:\(logPath)
                WatchdogSec=2s
                \(serviceSettings)
                """)
            try systemd.systemctlSucceeding([
                "link", "--runtime", prefix + "/lib/systemd/user/bgtaskd.socket",
                prefix + "/lib/systemd/user/bgtaskd.service",
            ])
            try systemd.systemctlSucceeding(["daemon-reload"])
            try systemd.systemctlSucceeding(["start", "bgtaskd.socket"])
        } catch {
            systemd.close()
            throw error
        }
    }

    /// Runs a program to completion; fails with its output unless it exits 0.
    static func run(_ arguments: [String]) throws {
        let (status, text) = try runProgram(arguments)
        guard status == 0 else {
            throw HarnessError("\(arguments.joined(separator: " ")) failed (\(status)):\n\(text)")
        }
    }

    /// `scripts/install --prefix PREFIX` of the binaries built for the tests.
    static func install(prefix: String) throws {
        try run([Products.packageRoot + "/scripts/install", "--prefix", prefix, "--from", Products.directory])
    }

    /// The daemon's log so far.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The service's properties.
    func service(_ properties: [String]) throws -> [String: String] {
        try systemd.show("bgtaskd.service", properties)
    }

    /// The daemon's pid (MainPID), or nil when it is not running.
    func mainPID() throws -> pid_t? {
        guard let value = try service(["MainPID"])["MainPID"], let pid = pid_t(value), pid > 0 else { return nil }
        return pid
    }

    /// Waits until the service runs a new daemon (another MainPID) that is active; with `restarts`, one that the
    /// service restarted by itself (NRestarts past `restarts`; a `systemctl restart` does not count).
    func waitForNewDaemon(replacing pid: pid_t, restarts: Int? = nil, timeout: Duration = .seconds(40)) throws {
        try systemd.waitFor(
            "bgtaskd.service", ["NRestarts", "MainPID", "ActiveState"], timeout: timeout,
            what: "a new daemon (log:\n\(log))"
        ) { values in
            let counted = restarts.map { (values["NRestarts"].flatMap(Int.init) ?? 0) > $0 } ?? true
            return counted && values["MainPID"] != String(pid) && values["MainPID"] != "0"
                && values["ActiveState"] == "active"
        }
    }

    /// A connection to the daemon (starting it through the socket if it is not running).
    func connect() throws -> RawVarlinkClient {
        try RawVarlinkClient(path: socketPath)
    }

    /// A fixture app connected to this daemon, registered as `name`.
    func app(_ name: String) throws -> ChildProcess {
        let app = try ChildProcess([
            try Products.path("BGTaskFixtureApp"), "--socket", socketPath, "--lifetime", "120",
        ])
        _ = try app.waitForLine(startingWith: "ready")
        try app.send("register \(name)")
        let line = try app.waitForLine { $0.hasPrefix("registered") || $0.hasPrefix("error") }
        guard line.hasPrefix("registered") else { throw HarnessError("\(name) did not register: \(line)") }
        return app
    }

    func close() {
        systemd.close()
    }
}
