// Passes termination signals sent to `bgtask run` on to its command, so bgtask outlives CMD and reports its status.
import BGTaskPOSIX
import Glibc
import Synchronization

/// While installed, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 sent to bgtask are sent on to the
/// command's whole process group (see `CommandGroup`), and bgtask keeps waiting for it (as `timeout(1)` does).
///
/// Signals the kernel generates (Ctrl-C on a terminal, `si_code == SI_KERNEL`) are not forwarded once the command
/// runs: the terminal already sends them to the whole foreground process group, which includes the command, and a
/// second SIGINT would make many programs quit without cleaning up. A signal that arrives after `install()` but
/// before the command exists is kept and delivered by `forward(to:)`, so no signal is lost in between.
enum SignalForwarding {
    /// The signals forwarded.
    static let signals: [Int32] = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2]

    /// The process signals go to; 0 before the command exists. Atomics, because the handler reads them on
    /// whatever thread the signal interrupts and must not take a lock.
    static let target = Atomic<Int32>(0)
    /// A signal that arrived while `target` was 0, or 0; delivered exactly once by whichever of the handler and
    /// `forward(to:)` exchanges it for 0 first.
    static let pending = Atomic<Int32>(0)
    /// The last request to stop (SIGHUP, SIGINT, SIGQUIT or SIGTERM) bgtask received since `install()`, or 0:
    /// whether the command was stopped before it was done.
    static let stopRequest = Atomic<Int32>(0)
    /// The write end of `StopRequestWatch`'s pipe, or -1: the handler writes a byte to it on each stop request, so
    /// a thread waiting before any command runs wakes up.
    static let stopWake = Atomic<Int32>(-1)
    /// Whether the handler is installed: a second `install()` (a command started after a wait that was watched)
    /// keeps what the first recorded.
    static let isInstalled = Atomic<Bool>(false)

    /// Installs the handler, with no target yet (the statics are initialized here first, since a global's lazy
    /// initialization is not async-signal-safe).
    static func install() {
        guard !isInstalled.exchange(true, ordering: .sequentiallyConsistent) else { return }
        target.store(0, ordering: .sequentiallyConsistent)
        pending.store(0, ordering: .sequentiallyConsistent)
        stopRequest.store(0, ordering: .sequentiallyConsistent)
        for number in signals {
            var action = sigaction()
            // A non-capturing closure: it reads only the statics, as a C handler must.
            action.__sigaction_handler.sa_sigaction = { number, info, _ in
                // SI_USER (0), SI_QUEUE (-1) and SI_TKILL (-6) mean another process sent it; SI_KERNEL (0x80)
                // means the terminal or the kernel did.
                let isFromKernel = (info?.pointee.si_code ?? 0) > 0
                // bgtask's own copy of a signal it sent to its group (see `CommandGroup.send`): not an order.
                if !isFromKernel, info?.pointee._sifields._kill.si_pid == getpid() { return }
                if number != SIGUSR1 && number != SIGUSR2 {
                    SignalForwarding.stopRequest.store(number, ordering: .sequentiallyConsistent)
                    let wake = SignalForwarding.stopWake.load(ordering: .sequentiallyConsistent)
                    if wake >= 0 {
                        // `write` is async-signal-safe; the pipe does not block (a full pipe has woken its reader).
                        var byte: UInt8 = 1
                        _ = write(wake, &byte, 1)
                    }
                }
                if isFromKernel && SignalForwarding.target.load(ordering: .sequentiallyConsistent) > 0 { return }
                SignalForwarding.pending.store(number, ordering: .sequentiallyConsistent)
                let pid = SignalForwarding.target.load(ordering: .sequentiallyConsistent)
                guard pid > 0 else { return }
                let signal = SignalForwarding.pending.exchange(0, ordering: .sequentiallyConsistent)
                if signal != 0 { CommandGroup.send(signal, fromHandler: true) }
            }
            action.sa_flags = SA_SIGINFO | SA_RESTART
            sigemptyset(&action.sa_mask)
            // sigaction fails only for an invalid number or SIGKILL/SIGSTOP, which these are not.
            _ = sigaction(number, &action, nil)
        }
    }

    /// Starts forwarding to `pid`, delivering a signal that arrived before.
    ///
    /// `pid` must be an unreaped child: its pid cannot be reused until bgtask reaps it, so the handler's `kill`
    /// can only reach the command.
    static func forward(to pid: pid_t) {
        target.store(pid, ordering: .sequentiallyConsistent)
        let signal = pending.exchange(0, ordering: .sequentiallyConsistent)
        if signal != 0 { CommandGroup.send(signal) }
    }

    /// Forgets the target and ignores the signals from now on; call it before reaping the command.
    ///
    /// Ignored rather than restored to the default: bgtask only reports the command's status after this, and a
    /// copy of a signal it sent its own group may still be pending (every thread can have it blocked for a
    /// moment); with the default action that late copy would kill bgtask instead of being dropped.
    static func uninstall() {
        isInstalled.store(false, ordering: .sequentiallyConsistent)
        target.store(0, ordering: .sequentiallyConsistent)
        for number in signals {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = SIG_IGN
            sigemptyset(&action.sa_mask)
            _ = sigaction(number, &action, nil)
        }
    }
}
