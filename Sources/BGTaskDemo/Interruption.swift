// Ctrl-C, SIGTERM and SIGHUP during the demo: noted by a handler, acted on by the demo's next wait, which cleans up.
import BGTaskPOSIX
import Glibc
import Synchronization

/// The signals that stop the demo, and the check every wait makes.
///
/// The handler only records the signal: the demo waits in short slices and checks after each one, so it leaves
/// the scene it is in through the ordinary error path, and the same clean-up runs as at the end (apps killed,
/// daemon stopped, directory removed). SIGPIPE is ignored meanwhile, so a closed output (`bgtask demo | head`)
/// cannot kill bgtask before it cleans up.
enum Interruption {
    /// The signals that interrupt the demo.
    static let signals: [Signal] = [.interrupt, .terminate, .hangUp]

    /// The signal number received, or 0. An atomic, because the handler runs on whatever thread the signal
    /// interrupts and must not take a lock.
    static let received = Atomic<Int32>(0)

    /// Installs the handlers (the static is initialized here first, since a global's lazy initialization is not
    /// async-signal-safe).
    static func install() {
        received.store(0, ordering: .sequentiallyConsistent)
        for signal in signals {
            var action = sigaction()
            // A non-capturing closure: it touches only the static, as a C handler must.
            action.__sigaction_handler.sa_handler = { number in
                Interruption.received.store(number, ordering: .sequentiallyConsistent)
            }
            action.sa_flags = SA_RESTART
            sigemptyset(&action.sa_mask)
            // sigaction fails only for an invalid number or SIGKILL/SIGSTOP, which these are not.
            _ = sigaction(signal.rawValue, &action, nil)
        }
        Glibc.signal(SIGPIPE, SIG_IGN)
    }

    /// Restores the default actions.
    static func uninstall() {
        for signal in signals + [.brokenPipe] {
            Glibc.signal(signal.rawValue, SIG_DFL)
        }
    }

    /// The signal received so far, if any.
    static var signal: Signal? {
        Signal(rawValue: received.load(ordering: .sequentiallyConsistent))
    }

    /// Throws when a signal asked the demo to stop.
    static func check() throws(DemoFailure) {
        guard let signal else { return }
        throw DemoFailure("interrupted by \(signal.name)", signal: signal)
    }
}
