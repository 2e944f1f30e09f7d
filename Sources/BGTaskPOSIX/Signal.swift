// Typed signal numbers, parsed from the spellings operators use ("TERM", "SIGTERM", "15").
import Glibc

/// A signal number (`SIGTERM` and friends), with its conventional name.
public struct Signal: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The signal number, 1 through 64 on Linux.
    public let rawValue: Int32

    /// Wraps a signal number; nil unless it is a valid Linux signal (1 through 64).
    public init?(rawValue: Int32) {
        guard rawValue >= 1 && rawValue <= Signal.highestNumber else { return nil }
        self.rawValue = rawValue
    }

    private init(unchecked rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// The highest signal number on Linux (`_NSIG - 1`).
    static let highestNumber: Int32 = 64

    /// `SIGHUP` (1): hang-up; the daemon reloads its configuration.
    public static let hangUp = Signal(unchecked: SIGHUP)
    /// `SIGINT` (2): interrupt from the keyboard.
    public static let interrupt = Signal(unchecked: SIGINT)
    /// `SIGQUIT` (3): quit with a core dump.
    public static let quit = Signal(unchecked: SIGQUIT)
    /// `SIGABRT` (6): abort.
    public static let abort = Signal(unchecked: SIGABRT)
    /// `SIGKILL` (9): kill; cannot be caught or blocked.
    public static let kill = Signal(unchecked: SIGKILL)
    /// `SIGUSR1` (10): user-defined.
    public static let user1 = Signal(unchecked: SIGUSR1)
    /// `SIGSEGV` (11): invalid memory access.
    public static let segmentationFault = Signal(unchecked: SIGSEGV)
    /// `SIGUSR2` (12): user-defined.
    public static let user2 = Signal(unchecked: SIGUSR2)
    /// `SIGPIPE` (13): write to a pipe or socket with no reader.
    public static let brokenPipe = Signal(unchecked: SIGPIPE)
    /// `SIGALRM` (14): timer.
    public static let alarm = Signal(unchecked: SIGALRM)
    /// `SIGTERM` (15): polite termination request.
    public static let terminate = Signal(unchecked: SIGTERM)
    /// `SIGCHLD` (17): a child changed state.
    public static let child = Signal(unchecked: SIGCHLD)
    /// `SIGCONT` (18): continue a stopped process.
    public static let `continue` = Signal(unchecked: SIGCONT)
    /// `SIGSTOP` (19): stop; cannot be caught or blocked (the suspension fallback without a freezer).
    public static let stop = Signal(unchecked: SIGSTOP)
    /// `SIGTSTP` (20): stop request from the terminal.
    public static let terminalStop = Signal(unchecked: SIGTSTP)

    /// Names of the standard signals by number (`kill -l` order); 1...31 on x86-64 and arm64.
    private static let names: [Int32: String] = [
        SIGHUP: "HUP", SIGINT: "INT", SIGQUIT: "QUIT", SIGILL: "ILL", SIGTRAP: "TRAP", SIGABRT: "ABRT",
        SIGBUS: "BUS", SIGFPE: "FPE", SIGKILL: "KILL", SIGUSR1: "USR1", SIGSEGV: "SEGV", SIGUSR2: "USR2",
        SIGPIPE: "PIPE", SIGALRM: "ALRM", SIGTERM: "TERM", SIGSTKFLT: "STKFLT", SIGCHLD: "CHLD",
        SIGCONT: "CONT", SIGSTOP: "STOP", SIGTSTP: "TSTP", SIGTTIN: "TTIN", SIGTTOU: "TTOU", SIGURG: "URG",
        SIGXCPU: "XCPU", SIGXFSZ: "XFSZ", SIGVTALRM: "VTALRM", SIGPROF: "PROF", SIGWINCH: "WINCH",
        SIGIO: "IO", SIGPWR: "PWR", SIGSYS: "SYS",
    ]

    /// Aliases accepted when parsing, beside the names above.
    private static let aliases: [String: Int32] = ["IOT": SIGABRT, "CLD": SIGCHLD, "POLL": SIGIO]

    /// The first real-time signal, as glibc reserves some for itself (`SIGRTMIN`, usually 34).
    private static var realTimeMinimum: Int32 { __libc_current_sigrtmin() }

    /// The conventional name: "SIGTERM", "SIGRTMIN+3" for real-time signals.
    public var name: String {
        if let name = Signal.names[rawValue] { return "SIG" + name }
        let minimum = Signal.realTimeMinimum
        if rawValue >= minimum { return rawValue == minimum ? "SIGRTMIN" : "SIGRTMIN+\(rawValue - minimum)" }
        return "SIG\(rawValue)"  // glibc-internal real-time signals (32, 33) have no public name.
    }

    public var description: String { name }

    /// Parses "TERM", "SIGTERM", "sigterm", "15", "RTMIN+2"; nil for anything else (empty, unknown,
    /// out of range, trailing garbage).
    public init?(_ text: String) {
        if let number = Int32(text) {
            self.init(rawValue: number)
            return
        }
        var name = text.uppercased()
        if name.hasPrefix("SIG") { name.removeFirst(3) }
        if let number = Signal.names.first(where: { $0.value == name })?.key ?? Signal.aliases[name] {
            self.init(unchecked: number)
            return
        }
        if name == "RTMIN" {
            self.init(rawValue: Signal.realTimeMinimum)
            return
        }
        if name.hasPrefix("RTMIN+"), let offset = Int32(name.dropFirst(6)), offset >= 0,
            offset <= Signal.highestNumber
        {
            self.init(rawValue: Signal.realTimeMinimum + offset)
            return
        }
        return nil
    }

    /// Blocks `signals` in the calling thread (`pthread_sigmask(SIG_BLOCK)`), so they stay pending until a
    /// signalfd (an event loop signal source) reads them.
    ///
    /// A signal sent to the whole process goes to any thread that does not block it, so a daemon blocks its
    /// signals in the main thread before starting any other thread (new threads inherit the mask).
    public static func block(_ signals: [Signal]) throws(Errno) {
        try changeMask(SIG_BLOCK, signals)
    }

    /// Unblocks `signals` in the calling thread (`pthread_sigmask(SIG_UNBLOCK)`); a pending one is then
    /// delivered with its default action.
    public static func unblock(_ signals: [Signal]) throws(Errno) {
        try changeMask(SIG_UNBLOCK, signals)
    }

    /// Whether `signal` is blocked in the calling thread.
    public static func isBlocked(_ signal: Signal) throws(Errno) -> Bool {
        var current = sigset_t()
        _ = try systemCall("pthread_sigmask", convention: .returnsErrorNumber) {
            pthread_sigmask(SIG_BLOCK, nil, &current)
        }
        return sigismember(&current, signal.rawValue) == 1
    }

    private static func changeMask(_ how: Int32, _ signals: [Signal]) throws(Errno) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal.rawValue) }
        _ = try systemCall(
            "pthread_sigmask(\(signals.map(\.name).joined(separator: ",")))",
            convention: .returnsErrorNumber
        ) {
            pthread_sigmask(how, &set, nil)
        }
    }
}
