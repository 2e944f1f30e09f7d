// Ctrl-C, SIGTERM and SIGHUP during a benchmark that owns cgroups or processes: noted by a handler, acted on
// between steps.

import BGTaskPOSIX
import Glibc
import Synchronization

/// The signals that stop a benchmark early, and the check its steps make.
///
/// The handler only records the signal: every wait of the benchmark is bounded and short, and it checks between
/// steps, so it leaves through its ordinary error path and the same clean-up runs as at the end (daemon stopped,
/// what is left in its cgroups killed, the cgroups removed).
public enum BenchmarkInterruption {
    /// The signals that interrupt.
    public static let signals: [Signal] = [.interrupt, .terminate, .hangUp]

    /// The signal number received, or 0. An atomic, because the handler runs on whatever thread the signal
    /// interrupts and must not take a lock.
    static let received = Atomic<Int32>(0)

    /// Installs the handlers (the static is initialized here first, since a global's lazy initialization is not
    /// async-signal-safe).
    public static func install() {
        received.store(0, ordering: .sequentiallyConsistent)
        for signal in signals {
            var action = sigaction()
            // A non-capturing closure: it touches only the static, as a C handler must.
            action.__sigaction_handler.sa_handler = { number in
                BenchmarkInterruption.received.store(number, ordering: .sequentiallyConsistent)
            }
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            // sigaction fails only for an invalid number or SIGKILL/SIGSTOP, which these are not.
            _ = sigaction(signal.rawValue, &action, nil)
        }
    }

    /// Restores the default actions.
    public static func uninstall() {
        for signal in signals {
            Glibc.signal(signal.rawValue, SIG_DFL)
        }
    }

    /// Throws when a signal asked the benchmark to stop.
    public static func check() throws {
        let number = received.load(ordering: .sequentiallyConsistent)
        guard number != 0 else { return }
        throw BenchmarkError("interrupted by \(Signal(rawValue: number)?.name ?? "signal \(number)")")
    }
}
