// The daemon under soak, behind one interface: run privately with the harness as its service manager, or as the
// installed units under a contained systemd manager.

import BGTaskPOSIX
import Glibc

/// A failure of the harness itself (not a violation by the daemon), with what went wrong.
public struct SoakError: Error, CustomStringConvertible {
    /// What went wrong, on one line.
    public var description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}

/// The daemon the soak runs against, and the faults that stop it.
protocol SoakService: AnyObject {
    /// The daemon's socket.
    var socketPath: String { get }
    /// The running daemon's pid; nil while it is down.
    var daemonPID: pid_t? { get }
    /// Asks the running daemon to reload its configuration (SIGHUP), through a pidfd of the daemon itself: never a
    /// signal by pid, which after a restart may name another process.
    func reload()
    /// Kills the daemon with SIGKILL and waits until a new one is ready; returns when it was sent.
    func killAndRestart() throws -> (stoppedAt: Int64, readyAt: Int64)
    /// Stops the daemon's loop with SIGSTOP and waits until the watchdog restarted it.
    func hangUntilWatchdog() throws -> (stoppedAt: Int64, readyAt: Int64)
    /// Restarts the daemon in order (SIGTERM, or `systemctl restart`).
    func restart() throws -> (stoppedAt: Int64, readyAt: Int64)
    /// A watchdog restart nobody injected a hang for, if one happened since the last call (its times).
    func unexpectedWatchdogRestarts() -> [(stoppedAt: Int64, readyAt: Int64)]
    /// Stops the daemon for good (SIGTERM); returns when it has exited.
    func stop()
}

/// The watchdog interval the soak gives the daemon: wide enough for a debug build on a busy 2-CPU machine
/// (it pings at half of it), short enough that a hang costs the run little.
let soakWatchdogInterval: Duration = .seconds(6)
