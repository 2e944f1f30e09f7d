// The daemon as the installed units run it, under a contained systemd user manager.

import BGTaskSystem
import Glibc

/// Placeholder until the contained manager is shared with the harness.
final class SystemdSoakDaemon: SoakService {
    let socketPath: String
    var daemonPID: pid_t? { nil }

    init(configuration: String, executableDirectory: String, lifetime: Duration, log: @escaping (String) -> Void)
        throws
    {
        throw SoakError("--systemd is not available in this build")
    }

    func killAndRestart() throws -> (stoppedAt: Int64, readyAt: Int64) { throw SoakError("unavailable") }
    func hangUntilWatchdog() throws -> (stoppedAt: Int64, readyAt: Int64) { throw SoakError("unavailable") }
    func restart() throws -> (stoppedAt: Int64, readyAt: Int64) { throw SoakError("unavailable") }
    func unexpectedWatchdogRestarts() -> [(stoppedAt: Int64, readyAt: Int64)] { [] }
    func stop() {}
}
