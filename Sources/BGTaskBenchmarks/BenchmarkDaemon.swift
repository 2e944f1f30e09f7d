// A private bgtaskd for a benchmark: its own socket and configuration, under timeout(1), ready on READY=1.

import BGTaskPOSIX
import BGTaskSupervision
import Foundation
import Glibc

/// A failure of a benchmark's own set-up or of a step the benchmark needs to work, with what went wrong.
public struct BenchmarkError: Error, CustomStringConvertible {
    /// What went wrong, for one line.
    public var description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}

/// A `bgtaskd` the benchmark started for itself, apart from any other daemon on the host.
///
/// It runs under `timeout(1)`, so even a benchmark killed outright leaves no daemon behind. Readiness comes from
/// the daemon: the benchmark listens on a `NOTIFY_SOCKET` of its own and returns once `READY=1` arrives, which
/// is sent only after the socket serves. The daemon's standard error goes to a log file in `directory`.
public final class BenchmarkDaemon: Sendable {
    /// The daemon's socket, in `directory`.
    public let socketPath: String
    /// The daemon's log (its standard error).
    public let logPath: String
    /// The daemon under `timeout(1)`.
    private let service: PrivateService
    /// Where the daemon saves its state: a directory of its own on a memory filesystem when there is one, as the
    /// runtime directory (`/run`, `$XDG_RUNTIME_DIR`) of a real service is; removed by `stop()`.
    public let stateDirectory: String

    /// The daemon's pid.
    public var pid: pid_t { service.pid }

    /// Starts `executable --socket DIRECTORY/io.bgtask.Lifecycle --config DIRECTORY/bgtaskd.conf` with
    /// `configuration` as the file's text and `arguments` after, under `timeout LIFETIME`, and waits at most 30 s
    /// for `READY=1`.
    public init(
        executable: String, directory: String, configuration: String, lifetime: Duration, arguments: [String] = []
    ) throws {
        socketPath = directory + "/io.bgtask.Lifecycle"
        logPath = directory + "/bgtaskd.log"
        let configurationPath = directory + "/bgtaskd.conf"
        try configuration.write(toFile: configurationPath, atomically: true, encoding: .utf8)
        // Whatever the umask: bgtaskd refuses a configuration file its group or others may write.
        guard chmod(configurationPath, 0o644) == 0 else {
            throw BenchmarkError("cannot chmod \(configurationPath): \(Errno(rawValue: errno, operation: "chmod"))")
        }
        stateDirectory = try makeScratchDirectory(prefix: "bgtask-bench-state", in: Self.memoryFileSystem)
        do {
            service = try PrivateService.start(
                [
                    executable, "--socket", socketPath, "--config", configurationPath, "--state-file",
                    stateDirectory + "/state.json",
                ] + arguments, lifetime: lifetime,
                environment: [
                    "BGTASKD_LOG_LEVEL=notice",
                    "PATH=\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")",
                ],
                notifyPath: directory + "/notify", logPath: logPath, readyTimeout: .seconds(30))
        } catch {
            try? FileManager.default.removeItem(atPath: stateDirectory)
            throw BenchmarkError("bgtaskd did not start: \(error); \(Self.tail(of: logPath))")
        }
    }

    /// A directory on a memory filesystem, as a service's runtime directory is: `$XDG_RUNTIME_DIR`, else
    /// `/dev/shm`; nil when neither exists (the state then goes beside the socket).
    public static var memoryFileSystem: String? {
        let candidates = [ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"], "/dev/shm"].compactMap { $0 }
        return candidates.first { path in
            var isDirectory: ObjCBool = false
            return path.hasPrefix("/") && FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
                && isDirectory.boolValue && access(path, W_OK) == 0
        }
    }

    /// The last lines of the log, on one line, for a failure message.
    static func tail(of logPath: String) -> String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        let lines = text.split(separator: "\n").suffix(3)
        return lines.isEmpty ? "its log is empty" : "its log ends: " + lines.joined(separator: " / ")
    }

    /// Whether the daemon is still running.
    public var isRunning: Bool { (try? service.service.hasExited) == false }

    /// Stops the daemon (SIGTERM: it resumes every app it stopped, closes its clients and removes its socket)
    /// and reaps `timeout`; SIGKILL to the group `timeout` leads if it has not stopped within 10 s. Never
    /// throws: this is the clean-up. Call once.
    public func stop() {
        _ = service.stop(timeout: .seconds(10))
        try? FileManager.default.removeItem(atPath: stateDirectory)
    }
}

/// A fresh directory under `$TMPDIR` (or `/tmp`), world-traversable (mode 0755) so that a process running as
/// another user can reach the socket and the executable copied into it.
public func makeScratchDirectory(prefix: String, in parent: String? = nil) throws -> String {
    do {
        return try TemporaryDirectory.make(prefix: prefix, in: parent)
    } catch {
        throw BenchmarkError("cannot make a scratch directory: \(error)")
    }
}
