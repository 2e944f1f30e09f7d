// How the programs of app units end: each unit of an app taken on is watched for the service manager's word
// (`ExecMainCode`, `ExecMainStatus`), which may come a little after the app's pidfd says it exited.

import BGTaskCore
import BGTaskSystem
import Glibc

/// The units of the apps `UnitSupervisor` took on, each watched (`PropertiesChanged`) for how its program ends, and
/// what waits for that word, each until a deadline the supervisor's timer keeps.
final class UnitExits {
    /// An app's unit, watched for how its program ends.
    private final class WatchedUnit {
        var subscription: UnitSignalSubscription?
        /// How the program ended, once the manager said.
        var exit: ProcessExit?
        /// What waits for that (the manager's handling of the app's exit), with when it stops waiting.
        var waiting: (deadline: MonotonicInstant, then: () -> Void)?
    }

    private let manager: UnitManagerClient
    private let logger: Logger
    private var units: [String: WatchedUnit] = [:]
    /// Told when a wait ended before its deadline: the supervisor's timer is re-armed.
    var onDeadlinesChanged: () -> Void = {}

    init(manager: UnitManagerClient, logger: Logger) {
        self.manager = manager
        self.logger = logger
    }

    /// The deadlines of what waits for the manager's word.
    var deadlines: [MonotonicInstant] { units.values.compactMap { $0.waiting?.deadline } }

    /// Whether `unit` is watched.
    func isFollowing(_ unit: String) -> Bool {
        units[unit] != nil
    }

    /// Starts watching `unit` for how its program ends.
    func follow(_ unit: String) {
        let watched = WatchedUnit()
        do {
            watched.subscription = try manager.watchProperties(of: unit) { [weak self, weak watched] signal in
                guard let self, let watched else { return }
                self.propertiesChanged(watched, signal)
            }
        } catch {
            logger.warning("cannot follow \(unit): \(error); how its program ends will not be known")
        }
        units[unit] = watched
    }

    private func propertiesChanged(_ watched: WatchedUnit, _ signal: PropertiesChangedSignal) {
        guard signal.interface == UnitInterface.service.rawValue else { return }
        let changed = UnitProperties(signal.changed)
        // The kernel's way of saying how a child ended (waitid's si_code): exited, killed, dumped core.
        guard let code = changed.execMainCode, code != 0 else { return }
        let status = changed.execMainStatus ?? 0
        watched.exit = code == Int32(CLD_EXITED) ? .status(status) : .signal(status)
        if let waiting = watched.waiting {
            watched.waiting = nil
            onDeadlinesChanged()
            waiting.then()
        }
    }

    /// Runs `then` once the manager says how `unit`'s program ended, or at `deadline`; false (nothing waits) when
    /// the unit is not watched or its end is known already.
    func awaitExit(of unit: String, until deadline: MonotonicInstant, then: @escaping () -> Void) -> Bool {
        guard let watched = units[unit], watched.exit == nil, watched.subscription != nil else { return false }
        watched.waiting = (deadline, then)
        return true
    }

    /// Runs what waited past its deadline (`waited`, for the log) without the manager's word.
    func expire(at current: MonotonicInstant, waited: Duration) {
        for (unit, watched) in units {
            guard let waiting = watched.waiting, waiting.deadline <= current else { continue }
            watched.waiting = nil
            logger.info("the service manager did not say how \(unit)'s program ended within \(waited)")
            waiting.then()
        }
    }

    /// Stops watching `unit`; how its program ended, if the manager said.
    @discardableResult
    func forget(_ unit: String) -> ProcessExit? {
        guard let watched = units.removeValue(forKey: unit) else { return nil }
        watched.subscription?.cancel()
        return watched.exit
    }

    /// Stops watching every unit.
    func stop() {
        for watched in units.values { watched.subscription?.cancel() }
        units = [:]
    }
}
