// The command line of a soak run: `bgtask-soak [--apps N] [--duration D] [--seed S | --explore] [--faults LIST]
// [--systemd] [--report PATH]`.

/// A fault the harness injects.
public enum SoakFault: String, CaseIterable, Codable, Sendable {
    /// SIGKILL of the daemon, then a restart.
    case kill
    /// SIGSTOP of the daemon past the watchdog interval: the watchdog aborts and restarts it.
    case hang
    /// An orderly restart: SIGTERM and a new daemon, or `systemctl restart`.
    case restart
    /// SIGKILL of a client in the middle of its calls.
    case clientKill = "client-kill"
    /// Floods and malformed input from a hostile client (as another user where the harness is root).
    case hostile
    /// The state file's filesystem full, then freed.
    case diskFull = "disk-full"

    /// Whether the fault restarts the daemon.
    var restartsDaemon: Bool { self == .kill || self == .hang || self == .restart }
}

/// A soak run's options.
public struct SoakOptions: Sendable {
    /// Synthetic apps alive at once.
    public var apps = 50
    /// How long the apps churn.
    public var duration: Duration = .seconds(60)
    /// The schedule's seed; random when not given (`--explore`).
    public var seed: UInt64?
    /// `--explore` was given: a fresh seed, and a failure says how its seed joins the gate's list.
    public var isExploring = false
    /// The faults to inject; nil for every one the host allows.
    public var faults: [SoakFault]?
    /// Run the installed units under a contained systemd manager.
    public var usesSystemd = false
    /// Where to write the report: PATH.md, PATH.json and the figures PATH-NAME.svg (a `.md` or `.json` ending is
    /// dropped first).
    public var reportPath: String?
    /// Print the help.
    public var wantsHelp = false

    /// Defaults.
    public init() {}

    /// The help text.
    public static let help = """
        usage: bgtask-soak [--apps N] [--duration D] [--seed S | --explore] [--faults LIST] [--systemd]
                           [--report PATH]

        Runs bgtaskd under a seeded random load of N synthetic apps (this program re-run as `bgtask-soak app`:
        launched through the daemon, self-registered, some in cgroups of their own) for D, with scheduled requests
        submitted and cancelled while a fake power adapter is pulled and plugged in, injects faults, gathers evidence
        outside the daemon (its Watch stream stamped on arrival, /proc and cgroup.events, memory, the daemon's RSS,
        descriptors and CPU, GetStatus timed twice a second) and judges it against the soak invariants. The seed is
        printed first; the same seed replays the same schedule.

        options:
          --apps N          synthetic apps alive at once (default 50)
          --duration D      how long the apps churn: 90s, 15min (default 60s)
          --seed S          replay the schedule of seed S
          --explore         draw a new seed (the default without --seed): the test suite runs a fixed list of
                            seeds (Tests/soak-gate-seeds.txt), and exploring is how new ones are found
          --faults LIST     comma-separated: kill, hang, restart, client-kill, hostile, disk-full, or none
                            (default: every one this host allows; disk-full needs root)
          --systemd         run the units scripts/install installs under a contained systemd user manager (root),
                            configured through its own bgtaskd.conf (scheduled work included): kill, hang and
                            restart are injected at least three times each
          --report PATH     write the report to PATH.md and PATH.json, and its figures over time beside them:
                            PATH-rss.svg and PATH-descriptors.svg (the daemon's, a line per daemon process),
                            PATH-warning-lateness.svg (each expiration warning against when it was due) and
                            PATH-status-latency.svg (GetStatus round trips; failures as gaps), with the
                            warm-ups shaded, restarts and faults marked, and the median of each minute drawn
          -h, --help        this help

        exit status: 0 every invariant held, 1 an invariant failed or the harness failed, 64 usage error
        """

    /// Parses the command line after the program name.
    public static func parse(_ arguments: [String]) throws(SoakError) -> SoakOptions {
        var options = SoakOptions()
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            func value() throws(SoakError) -> String {
                guard let value = remaining.popFirst() else { throw SoakError("\(argument) needs a value") }
                return value
            }
            switch argument {
            case "-h", "--help": options.wantsHelp = true
            case "--systemd": options.usesSystemd = true
            case "--explore": options.isExploring = true
            case "--apps":
                let text = try value()
                guard let count = Int(text), (1...2_000).contains(count) else {
                    throw SoakError("--apps takes a number from 1 to 2000, not \(text)")
                }
                options.apps = count
            case "--duration":
                let text = try value()
                guard let duration = parseDuration(text), duration >= .seconds(10) else {
                    throw SoakError("--duration takes a time of at least 10s (90s, 15min, 1h), not \(text)")
                }
                options.duration = duration
            case "--seed":
                let text = try value()
                guard let seed = UInt64(text) else { throw SoakError("--seed takes a whole number, not \(text)") }
                options.seed = seed
            case "--faults":
                let text = try value()
                if text == "none" {
                    options.faults = []
                    continue
                }
                var faults: [SoakFault] = []
                for name in text.split(separator: ",") {
                    guard let fault = SoakFault(rawValue: String(name)) else {
                        throw SoakError("unknown fault \(name) (kill, hang, restart, client-kill, hostile, disk-full)")
                    }
                    if !faults.contains(fault) { faults.append(fault) }
                }
                options.faults = faults
            case "--report": options.reportPath = try value()
            default: throw SoakError("unknown argument \(argument)")
            }
        }
        if options.isExploring, let seed = options.seed {
            throw SoakError("--explore draws a new seed; --seed \(seed) replays one: give one of them")
        }
        return options
    }

    /// `90s`, `500ms`, `15min`, `1h`, or plain seconds.
    static func parseDuration(_ text: String) -> Duration? {
        let units: [(String, Double)] = [("ms", 0.001), ("min", 60), ("s", 1), ("h", 3600)]
        for (suffix, scale) in units where text.hasSuffix(suffix) {
            guard let number = Double(text.dropLast(suffix.count)), number >= 0 else { return nil }
            return .milliseconds(Int64(number * scale * 1000))
        }
        return Double(text).map { .milliseconds(Int64($0 * 1000)) }
    }
}
