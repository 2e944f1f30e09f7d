// The units apps run in, as the service manager reports them: how a launched app's program ends (`ExecMainCode`,
// `ExecMainStatus`, which may come a little after its pidfd says it exited), and, for every app in a unit, whether
// the manager is stopping that unit and whether it has a watchdog, either of which forbids suspending the app.

import BGTaskCore
import BGTaskSystem
import Glibc

/// The units of the apps `UnitSupervisor` governs, each watched (`PropertiesChanged`) once, however many tracked
/// processes run in it.
///
/// **Stops.** The manager knows nothing of a freeze the daemon wrote to a unit's `cgroup.freeze`: its stop sends
/// SIGTERM to a process that cannot run, waits out the stop timeout and SIGKILLs it. So the moment a unit's
/// `ActiveState` leaves the running states (`deactivating`, `inactive`, `failed`: a `systemctl stop`, the
/// manager's shutdown, a logout), every process tracked in it is reported (`onExemption`, `unitStopping`), and the
/// policy thaws it at once: its SIGTERM, pending while it was frozen, is handled in its own time. The state is read
/// once after the subscription too, so a stop that began before it is not missed.
///
/// **Watchdogs.** A service with `WatchdogUSec` set must ping the manager: suspended, it would be killed for its
/// silence. Read once per unit; such a unit's processes are reported (`unitWatchdog`) and never suspended.
final class UnitWatch {
    /// One unit, watched.
    private final class WatchedUnit {
        var subscription: UnitSignalSubscription?
        /// Whether the unit is a launched app's, whose program's end is followed (`ExecMainCode`).
        var followsExit = false
        /// How the program ended, once the manager said.
        var exit: ProcessExit?
        /// What waits for that (the manager's handling of the app's exit), with when it stops waiting.
        var waiting: (deadline: MonotonicInstant, then: () -> Void)?
        /// The tracked processes (by serial) that run in it, told of its stop and its watchdog.
        var processes: Set<Int> = []
        /// Whether the manager is stopping it (or stopped it), once seen.
        var isStopping = false
        /// Its watchdog, once read (nil: none, or not read yet).
        var watchdog: Duration?
    }

    private let manager: UnitManagerClient
    private let logger: Logger
    private var units: [String: WatchedUnit] = [:]
    /// The unit of each tracked process in one.
    private var unitOfProcess: [Int: String] = [:]
    /// Told when a wait ended before its deadline: the supervisor's timer is re-armed.
    var onDeadlinesChanged: () -> Void = {}
    /// Told, for a tracked process (by serial), that its app must never be suspended, and why.
    var onExemption: (Int, SuspensionExemption) -> Void = { _, _ in }

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

    /// The unit the tracked process `serial` runs in, as far as the watch knows.
    func unit(ofProcess serial: Int) -> String? {
        unitOfProcess[serial]
    }

    /// Starts watching `unit` (once), for how its program ends when `followsExit` (a launched app's unit), and
    /// for its stop and its watchdog; its state is read once the subscription is in place.
    func follow(_ unit: String, followsExit: Bool = false) {
        if let watched = units[unit] {
            watched.followsExit = watched.followsExit || followsExit
            return
        }
        let watched = WatchedUnit()
        watched.followsExit = followsExit
        do {
            watched.subscription = try manager.watchProperties(of: unit) { [weak self, weak watched] signal in
                guard let self, let watched else { return }
                self.propertiesChanged(unit, watched, signal)
            }
        } catch {
            logger.warning(
                "cannot follow \(unit): \(error); how its program ends, and whether it is stopped, will not be known")
        }
        units[unit] = watched
        manager.unitState(of: unit) { [weak self, weak watched] result in
            guard let self, let watched, self.units[unit] === watched else { return }
            switch result {
            case .success(let reading):
                watched.watchdog = reading.watchdog
                if let interval = reading.watchdog {
                    self.report(unit, watched, .unitWatchdog(unit: unit, interval: interval))
                }
                if UnitStateReading.isStopping(reading.activeState) { self.stopping(unit, watched) }
            case .failure(let error) where error.busErrorName == .noSuchUnit:
                // Unloaded already: it stopped, and its processes are ending.
                self.stopping(unit, watched)
            case .failure(let error):
                self.logger.info("cannot read the state of \(unit): \(error)")
            }
        }
    }

    /// The tracked process `serial` runs in `unit`: it hears of the unit's stop and watchdog, at once if they are
    /// known already.
    func attach(process serial: Int, to unit: String) {
        follow(unit)
        guard let watched = units[unit] else { return }
        if let previous = unitOfProcess[serial], previous != unit { detach(process: serial) }
        unitOfProcess[serial] = unit
        watched.processes.insert(serial)
        if let interval = watched.watchdog { onExemption(serial, .unitWatchdog(unit: unit, interval: interval)) }
        if watched.isStopping { onExemption(serial, .unitStopping(unit: unit)) }
    }

    /// The tracked process `serial` ended or was let go: its unit is no longer watched for it (nor at all, unless a
    /// launched app's program is followed in it, or another process runs in it).
    func detach(process serial: Int) {
        guard let unit = unitOfProcess.removeValue(forKey: serial), let watched = units[unit] else { return }
        watched.processes.remove(serial)
        if watched.processes.isEmpty && !watched.followsExit { cancel(unit) }
    }

    private func propertiesChanged(_ unit: String, _ watched: WatchedUnit, _ signal: PropertiesChangedSignal) {
        let changed = UnitProperties(signal.changed)
        if signal.interface == UnitInterface.unit.rawValue {
            if let state = changed.activeState, UnitStateReading.isStopping(state) { stopping(unit, watched) }
            return
        }
        guard signal.interface == UnitInterface.service.rawValue, watched.followsExit else { return }
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

    /// The manager is stopping `unit`: every process in it is told, once.
    private func stopping(_ unit: String, _ watched: WatchedUnit) {
        guard !watched.isStopping else { return }
        watched.isStopping = true
        report(unit, watched, .unitStopping(unit: unit))
    }

    private func report(_ unit: String, _ watched: WatchedUnit, _ exemption: SuspensionExemption) {
        for serial in watched.processes.sorted() { onExemption(serial, exemption) }
    }

    /// Runs `then` once the manager says how `unit`'s program ended, or at `deadline`; false (nothing waits) when
    /// the unit is not watched or its end is known already.
    func awaitExit(of unit: String, until deadline: MonotonicInstant, then: @escaping () -> Void) -> Bool {
        guard let watched = units[unit], watched.followsExit, watched.exit == nil, watched.subscription != nil
        else { return false }
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

    /// A launched app's `unit` ended: its program is no longer followed, and it is no longer watched unless another
    /// process runs in it. How its program ended, if the manager said.
    @discardableResult
    func forget(_ unit: String) -> ProcessExit? {
        guard let watched = units[unit] else { return nil }
        watched.followsExit = false
        let exit = watched.exit
        watched.exit = nil
        watched.waiting = nil
        if watched.processes.isEmpty { cancel(unit) }
        return exit
    }

    private func cancel(_ unit: String) {
        guard let watched = units.removeValue(forKey: unit) else { return }
        watched.subscription?.cancel()
        for serial in watched.processes where unitOfProcess[serial] == unit { unitOfProcess[serial] = nil }
    }

    /// Stops watching every unit.
    func stop() {
        for watched in units.values { watched.subscription?.cancel() }
        units = [:]
        unitOfProcess = [:]
    }
}
