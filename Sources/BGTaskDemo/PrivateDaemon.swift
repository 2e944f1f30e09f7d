// The demo's own bgtaskd: started under timeout(1) on a private socket, ready when it says READY=1, stopped at the end.
import BGTaskPOSIX
import BGTaskSupervision
import Foundation
import Glibc

/// A `bgtaskd` the demo started for itself, apart from any other daemon on the host.
///
/// It runs under `timeout(1)`, so even if bgtask is killed outright (SIGKILL leaves no chance to clean up) the
/// daemon ends by itself. Readiness comes from the daemon: the demo listens on a `NOTIFY_SOCKET` of its own, as
/// systemd would, and returns once `READY=1` arrives — sent only after the socket serves.
final class PrivateDaemon {
    /// The daemon's socket.
    let socketPath: String
    /// The daemon's standard error: its log, shown if it fails.
    let logPath: String
    /// Where the daemon writes the output of the apps it launches (`--log-dir`): `NAME.log` each.
    let appLogDirectory: String
    /// The daemon under `timeout(1)`.
    private let service: PrivateService
    /// How long after the spawn `READY=1` came.
    let startUpTime: Duration
    private var exitStatus: ExitStatus?
    private var isStopped = false

    /// The daemon's pid.
    var pid: pid_t { service.pid }
    /// The daemon's pidfd.
    var daemon: PidFD { service.service }
    /// The `timeout` process the daemon runs under, leading its own process group.
    var wrapper: SpawnedProcess { service.wrapper }

    /// Makes `DIRECTORY/logs`, starts `executable --socket DIRECTORY/io.bgtask.Lifecycle --config CONFIGURATION
    /// --log-dir DIRECTORY/logs` under `timeout LIFETIME` and waits at most `readyTimeout` for `READY=1`.
    /// `environment` is added to the daemon's (`NAME=VALUE` each).
    init(
        executable: String, directory: String, configurationPath: String, lifetime: Duration,
        environment extra: [String] = [], readyTimeout: Duration = .seconds(30)
    ) throws(DemoFailure) {
        let socketPath = directory + "/io.bgtask.Lifecycle"
        let logPath = directory + "/bgtaskd.log"
        let appLogDirectory = directory + "/logs"
        self.socketPath = socketPath
        self.logPath = logPath
        self.appLogDirectory = appLogDirectory
        guard mkdir(appLogDirectory, 0o700) == 0 else {
            throw DemoFailure(
                "cannot create \(appLogDirectory): \(Errno(rawValue: errno, operation: "mkdir"))")
        }
        var environment = ["PATH=\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")"] + extra
        if let level = ProcessInfo.processInfo.environment["BGTASKD_LOG_LEVEL"] {
            environment.append("BGTASKD_LOG_LEVEL=\(level)")
        }
        let started = ContinuousClock.now
        do {
            service = try PrivateService.start(
                [
                    executable, "--socket", socketPath, "--config", configurationPath, "--log-dir", appLogDirectory,
                ], lifetime: lifetime,
                environment: environment, notifyPath: directory + "/notify", logPath: logPath, logPermissions: 0o600,
                readyTimeout: readyTimeout, check: Interruption.check)
        } catch {
            switch error {
            case .interrupted(let interruption as DemoFailure): throw interruption
            case .cannotStart(let what) where what.hasPrefix("cannot start timeout(1)"):
                throw DemoFailure("\(what); is coreutils installed?")
            case .notReady(let timeout):
                throw DemoFailure(
                    "bgtaskd sent no READY=1 within \(Transcript.seconds(timeout)): \(Self.tail(of: logPath))")
            default:
                throw DemoFailure("bgtaskd did not start: \(error): \(Self.tail(of: logPath))")
            }
        }
        startUpTime = ContinuousClock.now - started
    }

    /// The file the output of the app `name` goes to, as the daemon names it.
    func appLogPath(for name: String) -> String {
        appLogDirectory + "/" + name + ".log"
    }

    /// The last lines of the daemon's log, on one line, for a failure message.
    static func tail(of logPath: String) -> String {
        let lines = lastLines(of: logPath, count: 3)
        return lines.isEmpty ? "its log is empty" : "its log ends: " + lines.joined(separator: " / ")
    }

    /// The last `count` lines of the log at `logPath`.
    static func lastLines(of logPath: String, count: Int) -> [String] {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(count).map(String.init)
    }

    /// Stops the daemon (SIGTERM: it resumes every app it stopped, closes its clients and removes its socket)
    /// and reaps `timeout`; SIGKILL to the whole group if it has not stopped within `timeout`. Never throws:
    /// this is the clean-up; later calls return the first one's status.
    @discardableResult
    func stop(timeout: Duration = .seconds(10)) -> (status: ExitStatus?, took: Duration) {
        let started = ContinuousClock.now
        if isStopped { return (exitStatus, .zero) }
        isStopped = true
        exitStatus = service.stop(timeout: timeout)
        return (exitStatus, ContinuousClock.now - started)
    }
}
