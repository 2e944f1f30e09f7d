// bgtask run and its command as one process group: signals reach the command's whole tree, and so does a kill.
import Glibc

/// `bgtask run` leads a process group and runs the command in it.
///
/// Signals for the command go to the whole group, so a shell running a child in the foreground (which defers
/// its traps until the child ends) and the child both get them, as with `timeout(1)`. And when bgtaskd kills
/// the app (bgtask), it kills bgtask's group because bgtask leads it: the command goes too, instead of running
/// on without a lease. bgtask's own copy of each signal it sends is recognised by `SignalForwarding`'s handler
/// (the sender is bgtask itself) and dropped.
enum CommandGroup {
    /// Makes bgtask lead a process group of its own, if it does not already (it does when started from an
    /// interactive shell, which makes each job a group). When bgtask was in the terminal's foreground group, the
    /// new group takes the foreground, so the command can still read the terminal; the group that had it is
    /// returned, for `restoreTerminal(to:)`.
    static func lead() -> pid_t? {
        guard getpgrp() != getpid() else { return nil }
        let terminal: Int32 = 0
        let wasForeground = isatty(terminal) == 1 && tcgetpgrp(terminal) == getpgrp()
        let oldGroup = getpgrp()
        guard setpgid(0, 0) == 0, wasForeground else { return nil }
        withIgnored(SIGTTOU) { _ = tcsetpgrp(terminal, getpid()) }
        return oldGroup
    }

    /// Gives the terminal's foreground back to `group`, which had it before `lead()`.
    static func restoreTerminal(to group: pid_t?) {
        guard let group else { return }
        withIgnored(SIGTTOU) { _ = tcsetpgrp(0, group) }
    }

    /// Sends `signal` to bgtask's group, the command's whole tree. Async-signal-safe (`sigaction`, `kill`).
    ///
    /// bgtask's own copy must never act on it: outside a handler the signal is ignored while it is sent, so the
    /// kernel discards that copy at once; inside `SignalForwarding`'s handler the signal is blocked, so the copy
    /// stays pending whatever the action, and the handler drops it when it comes back (its sender is bgtask).
    @discardableResult
    static func send(_ signal: Int32, fromHandler: Bool = false) -> Bool {
        if fromHandler { return kill(-getpgrp(), signal) == 0 }
        var sent = false
        withIgnored(signal) { sent = kill(-getpgrp(), signal) == 0 }
        return sent
    }

    /// Runs `body` with `signal` ignored (a signal this process sends itself meanwhile is discarded at once),
    /// then restores the previous action.
    private static func withIgnored(_ signal: Int32, _ body: () -> Void) {
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        sigemptyset(&ignore.sa_mask)
        var previous = sigaction()
        _ = sigaction(signal, &ignore, &previous)
        body()
        _ = sigaction(signal, &previous, nil)
    }
}
