// Why an app whose work is done is not suspended: what the shell learned of its unit from the service manager.

/// A reason the policy never suspends an app, though it would: freezing it would make its service manager wait on a
/// process that cannot run (a stop), or kill it (a watchdog). Reported by the shell (`suspensionExempted`), kept for
/// the registration's life, shown in `GetApp` and recorded in the audit trail. Indirect: every tracked app holds an
/// optional one, which then costs a pointer rather than a unit name and a duration inline.
public indirect enum SuspensionExemption: Hashable, Sendable, Codable, CustomStringConvertible {
    /// The service manager is stopping the unit the app runs in (`systemctl stop`, its own shutdown, a logout): the
    /// app must run to handle its SIGTERM, and it ends when the manager's stop does.
    case unitStopping(unit: String)
    /// The unit the app runs in has a watchdog (`WatchdogUSec`, here `interval`): suspended, the app could not ping
    /// it, and the manager would kill it.
    case unitWatchdog(unit: String, interval: Duration)

    /// Whether a stop of the unit is under way: it outranks a watchdog (the app is ending either way).
    var isStopping: Bool {
        if case .unitStopping = self { return true }
        return false
    }

    /// Why, for people: "its unit app-mail.service is stopping".
    public var description: String {
        switch self {
        case .unitStopping(let unit):
            "its unit \(unit) is stopping"
        case .unitWatchdog(let unit, let interval):
            "its unit \(unit) has a watchdog (WatchdogSec=\(Self.seconds(interval))), which a suspended process "
                + "cannot ping"
        }
    }

    /// A duration as systemd writes whole seconds, else milliseconds: `5s`, `500ms`.
    private static func seconds(_ duration: Duration) -> String {
        let milliseconds = duration.nanosecondCount / 1_000_000
        return milliseconds % 1000 == 0 ? "\(milliseconds / 1000)s" : "\(milliseconds)ms"
    }
}
