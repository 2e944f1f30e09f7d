// Everything the demo starts, owned in one place: the runtime directory, its cgroups, the daemon, its clients and
// the apps.
import BGTaskCLI
import BGTaskClient
import BGTaskPOSIX
import Foundation
import Glibc

/// The demo's resources, created as the scenes need them and all released by `tearDown()`, which runs whether
/// the demo finished, failed or was interrupted.
final class DemoStage {
    let transcript: Transcript
    let policy: DemoPolicy
    let products: DemoProducts
    /// The temporary runtime directory: socket, configuration, daemon log.
    private(set) var directory: String?
    private(set) var daemon: PrivateDaemon?
    private var controller: LifecycleClient?
    private var follower: AuditFollower?
    /// The demo's power_supply tree: one Mains adapter, `AC`, which the scheduled-work scene plugs in and unplugs.
    private(set) var powerSupplyPath: String?
    /// The cgroups made for the apps the daemon launches (as root, where the host has them).
    private(set) var cgroups: DemoCgroups?
    /// The apps the demo started, in order.
    private(set) var apps: [SampleAppProcess] = []
    /// The apps the daemon launched for the demo, in order.
    private(set) var launchedApps: [LaunchedApp] = []

    init(transcript: Transcript, policy: DemoPolicy, products: DemoProducts) {
        self.transcript = transcript
        self.policy = policy
        self.products = products
    }

    /// The controller's connection to the daemon (what a device shell or `bgtask` holds).
    var client: LifecycleClient {
        get throws(DemoFailure) {
            guard let controller else { throw DemoFailure("the demo's daemon is not running") }
            return controller
        }
    }

    /// The daemon's audit trail as followed since the start.
    var audit: AuditFollower {
        get throws(DemoFailure) {
            guard let follower else { throw DemoFailure("the demo is not following the daemon's audit trail") }
            return follower
        }
    }

    /// Makes the runtime directory and, as root, cgroups for the apps the daemon launches; writes the policy, starts
    /// the daemon and waits for `READY=1`, connects, and starts following the audit trail.
    func setUp(lifetime: Duration) throws(DemoFailure) {
        let directory: String
        do {
            directory = try TemporaryDirectory.make(prefix: "bgtask-demo", worldTraversable: false)
        } catch {
            throw DemoFailure("cannot create a temporary directory: \(error)")
        }
        self.directory = directory
        let socketPath = directory + "/io.bgtask.Lifecycle"
        guard socketPath.utf8.count <= UnixSocket.maximumPathLength else {
            throw DemoFailure(
                "the socket path \(socketPath) is longer than a Unix socket allows "
                    + "(\(UnixSocket.maximumPathLength) bytes): set TMPDIR to a shorter directory")
        }
        transcript.say("runtime directory \(directory) (socket, configuration, logs; removed at the end)")
        makeCgroups()
        let powerSupplyPath = directory + "/power_supply"
        self.powerSupplyPath = powerSupplyPath
        try setExternalPower(online: false)
        let configurationPath = directory + "/bgtaskd.conf"
        let configuration = policy.configuration(
            cgroupRoot: cgroups?.control?.path, memoryCgroupRoot: cgroups?.memory?.path,
            powerSupplyPath: powerSupplyPath)
        do {
            try Data(configuration.utf8).write(to: URL(fileURLWithPath: configurationPath))
        } catch {
            throw DemoFailure("cannot write \(configurationPath): \(error)")
        }
        // Whatever the umask: bgtaskd refuses a configuration file its group or others may write.
        guard chmod(configurationPath, 0o600) == 0 else {
            throw DemoFailure("cannot make \(configurationPath) private: \(String(cString: strerror(errno)))")
        }
        transcript.say("policy (bgtaskd.conf): \(policy.summary)")
        transcript.say(
            "starting bgtaskd under timeout(1), with a NOTIFY_SOCKET of the demo's own to learn when it is ready")
        // Power comes from the demo's own power_supply tree, never from a UPower the host may run: the daemon is
        // pointed at a system bus that is not there.
        let daemon = try PrivateDaemon(
            executable: products.daemon, directory: directory, configurationPath: configurationPath,
            lifetime: lifetime, environment: ["DBUS_SYSTEM_BUS_ADDRESS=unix:path=\(directory)/no-system-bus"])
        self.daemon = daemon
        let client = try daemonCall("connecting to \(daemon.socketPath)") { () throws(ClientError) in
            try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
        }
        controller = client
        let status = try daemonCall("GetStatus") { () throws(ClientError) in try client.getStatus() }
        let backends = status.backends.sorted { $0.key < $1.key }
            .map { "\($0.key)=\($0.value.stringValue ?? "?")" }.joined(separator: " ")
        transcript.say(
            "bgtaskd (pid \(daemon.pid)) sent READY=1 after \(Transcript.seconds(daemon.startUpTime)); GetStatus: "
                + "version \(status.version), backends \(backends)")
        follower = try AuditFollower(client: client, transcript: transcript)
        transcript.say("following the daemon's audit trail (Watch): its entries are quoted as \"bgtaskd | ...\"")
    }

    /// Writes the demo adapter's `online` (and, the first time, its `type`), each file renamed into place, which the
    /// daemon's inotify watch reports as a change.
    func setExternalPower(online: Bool) throws(DemoFailure) {
        guard let powerSupplyPath else { throw DemoFailure("the demo has no power_supply tree") }
        let adapter = powerSupplyPath + "/AC"
        do {
            try FileManager.default.createDirectory(atPath: adapter, withIntermediateDirectories: true)
            if !FileManager.default.fileExists(atPath: adapter + "/type") {
                try Data("Mains\n".utf8).write(to: URL(fileURLWithPath: adapter + "/type"), options: .atomic)
            }
            try Data((online ? "1\n" : "0\n").utf8).write(
                to: URL(fileURLWithPath: adapter + "/online"), options: .atomic)
        } catch {
            throw DemoFailure("cannot write the demo's power supply in \(adapter): \(error)")
        }
    }

    /// As root, makes the cgroups the daemon will make launched apps' cgroups in, and says where; otherwise says in
    /// one line why there are none and what the daemon does instead.
    private func makeCgroups() {
        do throws(DemoCgroups.Unavailable) {
            let cgroups = try DemoCgroups.make()
            self.cgroups = cgroups
            var roots: [String] = []
            if let control = cgroups.control {
                let kind = cgroups.isUnified ? "cgroup2" : "v1 freezer"
                roots.append("CgroupRoot=\(control.path) (\(kind): to freeze and kill them)")
            }
            if let memory = cgroups.memory {
                roots.append("MemoryCgroupRoot=\(memory.path) (v1 memory: to measure them)")
            }
            transcript.say(
                "as root, the demo made cgroups for the apps its daemon launches (removed at the end): "
                    + roots.joined(separator: ", "))
        } catch {
            transcript.say(
                "\(error.reason): the apps the daemon launches run without a cgroup, stopped with SIGSTOP and "
                    + "measured by PSS")
        }
    }

    /// Starts the sample app `name` as the demo's own child, with `arguments` beyond its name, socket and lifetime.
    func spawn(_ name: String, _ arguments: [String], lifetime: Duration) throws(DemoFailure) -> SampleAppProcess {
        guard let daemon else { throw DemoFailure("the demo's daemon is not running") }
        let environment = [
            "PATH=\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")"
        ]
        let app = try SampleAppProcess(
            name: name, executable: products.sampleApp,
            arguments: [
                "--name", name, "--socket", daemon.socketPath,
                "--lifetime", String(Int(lifetime.inSeconds.rounded(.up))),
            ] + arguments,
            environment: environment, transcript: transcript)
        apps.append(app)
        return app
    }

    /// Asks the daemon to launch the sample app `name` (`Launch`), with `arguments` beyond its name, socket and
    /// lifetime, and starts following its output; returns it as launched (`notRunning`, with its pid and cgroup).
    func launchThroughDaemon(
        _ name: String, _ arguments: [String], lifetime: Duration
    ) throws(DemoFailure) -> LaunchedApp {
        guard let daemon, let controller else { throw DemoFailure("the demo's daemon is not running") }
        let argv =
            [
                products.sampleApp, "--name", name, "--socket", daemon.socketPath,
                "--lifetime", String(Int(lifetime.inSeconds.rounded(.up))),
            ] + arguments
        let info = try daemonCall("Launch(\(name))") { () throws(ClientError) in
            try controller.launch(name: name, argv: argv)
        }
        let app = try LaunchedApp(
            info, argv: argv, daemonPID: daemon.pid, logPath: daemon.appLogPath(for: name), transcript: transcript)
        launchedApps.append(app)
        return app
    }

    /// Stops everything the demo started, saying what it did: the apps the daemon launched (reaped by it), the
    /// audit stream, every app the demo started still running, the daemon, its cgroups, and the runtime directory.
    /// Never throws, and ignores interruptions: a second Ctrl-C must not leave half of it behind.
    func tearDown() {
        transcript.heading("Cleaning up")
        for app in launchedApps {
            endLaunched(app)
        }
        if let follower {
            follower.stop()
            transcript.say("stopped following the audit trail")
        }
        follower = nil
        for app in apps {
            switch app.end() {
            case .alreadyEnded(let status):
                transcript.say("\(app.name) (pid \(app.pid)) had ended: \(status)")
            case .ended(let status):
                transcript.say("\(app.name) (pid \(app.pid)): SIGTERM; \(status)")
            case .stillRunning:
                transcript.say(
                    "\(app.name) (pid \(app.pid)) could not be stopped; it exits by itself within its lifetime")
            }
        }
        controller?.close()
        controller = nil
        if let daemon {
            let (status, took) = daemon.stop()
            if let status {
                transcript.say(
                    "bgtaskd (pid \(daemon.pid)): SIGTERM; \(status) after \(Transcript.seconds(took))")
            } else {
                transcript.say("bgtaskd (pid \(daemon.pid)) could not be stopped; timeout(1) ends it")
            }
        }
        daemon = nil
        if let cgroups {
            let removal = cgroups.remove()
            let paths = cgroups.all.map(\.path).joined(separator: " and ")
            if removal.leftovers.isEmpty {
                transcript.say(
                    "removed the demo's cgroups \(paths)"
                        + (removal.killed > 0 ? " (killed \(removal.killed) process(es) left in them)" : ""))
            } else {
                transcript.say("could not remove \(removal.leftovers.joined(separator: ", "))")
            }
        }
        cgroups = nil
        if let directory {
            do {
                try FileManager.default.removeItem(atPath: directory)
                transcript.say("removed \(directory)")
            } catch {
                transcript.say("could not remove \(directory): \(error)")
            }
        }
        directory = nil
    }

    /// Ends an app the daemon launched, while the daemon still runs so that it reaps its child, and waits (at most
    /// 5 s) for the daemon's `processExited` entry: no zombie is left for init once the daemon is gone.
    private func endLaunched(_ app: LaunchedApp) {
        let mark = follower?.entries.mark
        let ending = app.end()
        let what = "\(app.name) (pid \(app.pid), launched by bgtaskd)"
        switch ending {
        case .alreadyEnded:
            transcript.say("\(what) had ended")
        case .ended(let signal):
            var reaped = ""
            if let follower, let mark {
                // No interruption check: this is the clean-up.
                let outcome = follower.entries.first(after: mark, within: .seconds(5)) {
                    $0.app == app.name && $0.kind == .processExited
                }
                if case .found = outcome { reaped = "; bgtaskd, its parent, reaped it" }
            }
            let signals = signal == .terminate ? "SIGTERM" : "SIGTERM, then \(signal.name)"
            transcript.say("\(what): \(signals)\(reaped)")
        case .stillRunning:
            transcript.say("\(what) could not be stopped; it exits by itself within its lifetime")
        }
    }
}
