// A command run the way `timeout(1)` runs one: in the supervisor's process group, signals forwarded, status reported.
import BGTaskPOSIX
import Glibc

/// Why a command could not be started.
public struct SupervisionError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The failing call, `posix_spawn` or the wait.
    public var errno: Errno
    /// The status a shell reports for it: 127 when the program was not found, 126 when it cannot be executed
    /// (`env(1)` and shells use the same).
    public var exitStatus: Int32

    public var description: String { errno.message }
}

/// A command the calling process runs and watches: it shares the caller's process group, which the caller leads
/// (`leadProcessGroup()`), so a signal for the command reaches its whole tree (a shell running a child in the
/// foreground defers its traps until the child ends), and whoever kills the caller's group kills the command too.
///
/// Termination signals sent to the caller (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2) are forwarded to the
/// command while it runs (`SignalForwarding`), so the caller outlives it and can report its status.
public final class SupervisedCommand: Sendable {
    /// The spawned command.
    public let process: SpawnedProcess

    /// The command's pid.
    public var pid: pid_t { process.pid }

    /// The terminal's foreground group before `leadProcessGroup()` took it, to give back.
    public struct TerminalOwner: Sendable {
        let group: pid_t?
    }

    /// Makes the calling process lead a process group of its own, if it does not already (it does when started
    /// from an interactive shell, which makes each job a group). When it was in the terminal's foreground group,
    /// the new group takes the foreground, so the command can still read the terminal; give it back with
    /// `restoreTerminal(_:)`.
    ///
    /// Call it before anything that decides from the caller's group (a daemon checks whether its client leads
    /// one), so that both see the same group.
    public static func leadProcessGroup() -> TerminalOwner {
        TerminalOwner(group: CommandGroup.lead())
    }

    /// Gives the terminal's foreground back to the group that had it before `leadProcessGroup()`.
    public static func restoreTerminal(_ owner: TerminalOwner) {
        CommandGroup.restoreTerminal(to: owner.group)
    }

    /// Starts forwarding signals, then spawns `command` (standard streams inherited); a signal that arrives in
    /// between is delivered once the command exists.
    public init(spawning command: [String]) throws(SupervisionError) {
        // Installed before the spawn, so a signal sent as soon as the command starts is not the caller's death.
        SignalForwarding.install()
        do {
            process = try ProcessSpawner.spawn(command, options: SpawnOptions(standardInput: .inherit))
        } catch {
            SignalForwarding.uninstall()
            throw SupervisionError(errno: error, exitStatus: error == .noSuchFileOrDirectory ? 127 : 126)
        }
        SignalForwarding.forward(to: process.pid)
    }

    /// The request to stop (SIGHUP, SIGINT, SIGQUIT or SIGTERM, from another process or the terminal) the caller
    /// received while the command ran, if any: the command was stopped before it was done.
    public var stopRequest: Signal? {
        let number = SignalForwarding.stopRequest.load(ordering: .sequentiallyConsistent)
        return number == 0 ? nil : Signal(rawValue: number)
    }

    /// Sends `signal` to the command's whole group (the caller's own copy is dropped); false when `kill` failed.
    @discardableResult
    public func send(_ signal: Signal) -> Bool {
        CommandGroup.send(signal.rawValue)
    }

    /// Waits at most `timeout` (nil: no limit) for the command to exit; returns whether it did.
    public func waitForExit(timeout: Duration?) throws(Errno) -> Bool {
        try process.pidFD.waitForExit(timeout: timeout)
    }

    /// Waits for the command to exit and reaps it: its exit status, or 128+N when signal N killed it (as shells
    /// report it). Forwarding stops first, since reaping frees the command's pid for reuse. Call it once.
    public func finish() throws(Errno) -> Int32 {
        try finishWithCause().status
    }

    /// `finish()`, also saying which signal killed the command, if one did.
    public func finishWithCause() throws(Errno) -> (status: Int32, killer: Signal?) {
        do {
            _ = try process.pidFD.waitForExit(timeout: nil)
        } catch {
            SignalForwarding.uninstall()
            throw error
        }
        SignalForwarding.uninstall()
        switch try process.waitForExit() {
        case .exited(let code): return (code, nil)
        case .signaled(let killer): return (128 + killer.rawValue, killer)
        }
    }
}
