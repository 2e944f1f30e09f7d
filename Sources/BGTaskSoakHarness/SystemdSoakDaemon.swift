// The daemon as the installed units run it, under a contained systemd user manager: systemd restarts it after a
// kill, its watchdog aborts a hung one, and `systemctl restart` restarts it in order.

import BGTaskContainedSystemd
import BGTaskPOSIX
import Glibc

/// `scripts/install --prefix` of the built binaries, the user units linked into a `ContainedSystemd` with a
/// runtime drop-in (the soak's configuration, the log, `WatchdogSec=`), the socket and the service started.
final class SystemdSoakDaemon: SoakService {
    let socketPath: String
    /// The configuration the service reads, `$XDG_CONFIG_HOME/bgtaskd/bgtaskd.conf`, as a user configures an
    /// installed service; its directory is the configuration root.
    let configurationPath: String
    let configurationRoot: String
    private let systemd: ContainedSystemd
    private let logPath: String
    private var mainPID: pid_t?
    /// Automatic restarts the faults explain (kill and hang each add one to `NRestarts`).
    private var expectedRestarts = 0
    private var isStopped = false

    var daemonPID: pid_t? { mainPID }

    /// Installs, configures and starts the service; `executableDirectory` holds the built `bgtaskd` and `bgtask`,
    /// `environment` is added to the service's (`NAME=VALUE` each).
    init(
        configuration: String, environment: [String], executableDirectory: String, lifetime: Duration,
        log: @escaping (String) -> Void
    ) throws {
        if let reason = ContainedSystemd.unavailableReason { throw SoakError("--systemd: \(reason)") }
        guard let root = Self.packageRoot(from: executableDirectory) else {
            throw SoakError("--systemd: no scripts/install above \(executableDirectory) (run from a built checkout)")
        }
        systemd = try ContainedSystemd(dataHome: "prefix/share")
        let configHome = systemd.directory.path + "/config"
        configurationRoot = configHome + "/bgtaskd"
        configurationPath = configurationRoot + "/bgtaskd.conf"
        logPath = systemd.directory.path + "/bgtaskd.log"
        socketPath = systemd.runtimeDirectory + "/bgtaskd/io.bgtask.Lifecycle"
        do {
            let prefix = systemd.directory.path + "/prefix"
            try Self.run([root + "/scripts/install", "--prefix", prefix, "--from", executableDirectory])
            // Made as an administrator makes them: root's, 0755 and 0644, so the daemon trusts them. (systemd 252
            // also puts the unit's StateDirectory= there, and makes it 0700.)
            try ConfigurationFile.makeDirectory(configHome)
            try ConfigurationFile.makeDirectory(configurationRoot)
            try ConfigurationFile.write(configuration, to: configurationPath, root: configurationRoot)
            let variables = ["XDG_CONFIG_HOME=\(configHome)", "BGTASKD_LOG_LEVEL=notice"] + environment
            try systemd.directory.write(
                "run/systemd/user/bgtaskd.service.d/soak.conf",
                """
                [Service]
                \(variables.map { "Environment=\"\($0)\"" }.joined(separator: "\n"))
                StandardError=append:\(logPath)
                WatchdogSec=\(soakWatchdogInterval.components.seconds)s
                RuntimeMaxSec=\(lifetime.components.seconds)s
                """)
            try systemd.systemctlSucceeding([
                "link", "--runtime", prefix + "/lib/systemd/user/bgtaskd.socket",
                prefix + "/lib/systemd/user/bgtaskd.service",
            ])
            try systemd.systemctlSucceeding(["daemon-reload"])
            try systemd.systemctlSucceeding(["start", "bgtaskd.socket"])
            try systemd.systemctlSucceeding(["start", "bgtaskd.service"])
            mainPID = try waitForNewDaemon(replacing: nil)
            log("--systemd: bgtaskd.service runs as pid \(mainPID ?? 0) under a contained manager")
        } catch {
            systemd.close()
            throw error
        }
    }

    /// The directory above `directory` holding `scripts/install`.
    static func packageRoot(from directory: String) -> String? {
        var current = directory
        while current.count > 1 {
            if access(current + "/scripts/install", X_OK) == 0 { return current }
            current = SoakRunPaths.parent(of: current)
        }
        return nil
    }

    /// Runs a program to completion; fails unless it exits 0.
    static func run(_ arguments: [String]) throws {
        let process = try ProcessSpawner.spawn(arguments, options: SpawnOptions(standardOutput: .nullDevice))
        let status = try process.waitForExit()
        try? process.pidFD.close()
        guard status == .exited(0) else { throw SoakError("\(arguments.joined(separator: " ")) failed (\(status))") }
    }

    /// Waits until the service runs a daemon other than `pid`, active (READY=1 sent); its pid.
    private func waitForNewDaemon(replacing pid: pid_t?) throws -> pid_t {
        let values = try systemd.waitFor(
            "bgtaskd.service", ["MainPID", "ActiveState"], timeout: .seconds(60), what: "a new active daemon"
        ) { values in
            values["ActiveState"] == "active" && values["MainPID"] != "0" && values["MainPID"] != pid.map(String.init)
        }
        guard let text = values["MainPID"], let newPID = pid_t(text) else { throw SoakError("no MainPID: \(values)") }
        return newPID
    }

    private func replace(after stoppedAt: Int64) throws -> (stoppedAt: Int64, readyAt: Int64) {
        let newPID = try waitForNewDaemon(replacing: mainPID)
        mainPID = newPID
        return (stoppedAt, MonotonicClock.now())
    }

    /// A pidfd of the daemon `MainPID` names, once it is known to be in bgtaskd.service's cgroup: the pid was read
    /// a while ago, and a daemon restarted meanwhile leaves it free for any process to reuse. The pidfd holds the
    /// process it was opened on, so what is checked through it stays true.
    private func daemonPidFD() -> PidFD? {
        guard let pid = mainPID, let pidFD = try? PidFD.open(pid: pid) else { return nil }
        guard let cgroups = try? ProcFS().read("\(pid)/cgroup"),
            cgroups.split(separator: "\n").contains(where: { $0.hasSuffix("/bgtaskd.service") }),
            (try? pidFD.hasExited) == false
        else {
            try? pidFD.close()
            return nil
        }
        return pidFD
    }

    func reload() {
        guard let pidFD = daemonPidFD() else { return }
        try? pidFD.sendSignal(.hangUp)
        try? pidFD.close()
    }

    func killAndRestart() throws -> (stoppedAt: Int64, readyAt: Int64) {
        guard let pidFD = daemonPidFD() else { throw SoakError("no daemon to kill") }
        defer { try? pidFD.close() }
        let stoppedAt = MonotonicClock.now()
        try pidFD.sendSignal(.kill)
        expectedRestarts += 1
        return try replace(after: stoppedAt)
    }

    func hangUntilWatchdog() throws -> (stoppedAt: Int64, readyAt: Int64) {
        guard let pidFD = daemonPidFD() else { throw SoakError("no daemon to stop") }
        defer { try? pidFD.close() }
        let stoppedAt = MonotonicClock.now()
        try pidFD.sendSignal(.stop)
        expectedRestarts += 1
        return try replace(after: stoppedAt)
    }

    func restart() throws -> (stoppedAt: Int64, readyAt: Int64) {
        let stoppedAt = MonotonicClock.now()
        try systemd.systemctlSucceeding(["restart", "bgtaskd.service"])
        return try replace(after: stoppedAt)
    }

    func unexpectedWatchdogRestarts() -> [(stoppedAt: Int64, readyAt: Int64)] {
        guard !isStopped, let values = try? systemd.show("bgtaskd.service", ["NRestarts", "MainPID"]),
            let restarts = values["NRestarts"].flatMap({ Int($0) }), restarts > expectedRestarts
        else { return [] }
        let stoppedAt = MonotonicClock.now()
        expectedRestarts = restarts
        guard let times = try? replace(after: stoppedAt) else { return [] }
        return [times]
    }

    func stop() {
        guard !isStopped else { return }
        isStopped = true
        _ = try? systemd.systemctl(["stop", "bgtaskd.socket", "bgtaskd.service"])
        mainPID = nil
        systemd.close()
    }
}

/// Path helpers without Foundation.
enum SoakRunPaths {
    /// The directory above `path`.
    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }
}
