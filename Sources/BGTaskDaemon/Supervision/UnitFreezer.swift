// Freezing, thawing and killing apps the service manager runs as units: through the manager (FreezeUnit, ThawUnit,
// KillUnit) where it can, else through the unit's cgroup files, and never leaving a unit frozen behind.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// How the daemon freezes, thaws and kills the cgroup of an app the service manager runs as a unit of its own.
///
/// **Freeze.** Through the manager's `FreezeUnit` where it supports it (systemd 246 and later on a pure cgroup2
/// host, where the manager then knows the unit frozen, and where the daemon's own unit may not write to the cgroup
/// tree at all), else by writing the unit cgroup's `cgroup.freeze`. The manager's refusal for good (`NotSupported`,
/// as systemd 252 answers on a hybrid hierarchy, or `UnknownMethod` before 246) is remembered: every freeze after
/// it writes the file at once. Any other failure falls back to the file for that freeze. Either way the freeze is
/// confirmed from `cgroup.events` (`ProcessTable`), and one that does not come in time falls back to SIGSTOP.
///
/// **Thaw.** Never skipped. A unit the manager froze (or may have: its freeze still unanswered, or adopted from a
/// daemon before a restart) is thawed with `ThawUnit`, once any call for it before has been answered; when the
/// manager refuses, fails or has not answered within `thawTimeout`, the daemon writes the file itself. A unit frozen
/// through the file is thawed through it. A freeze the manager carries out after the app was meant to run again is
/// undone at once. When the daemon stops, every unit the manager froze is thawed before the connection closes.
///
/// **Kill.** `cgroup.kill` (the whole cgroup at once, frozen or not, and done when the write returns), else, where
/// the cgroup cannot be written, `KillUnit(SIGKILL)` through the manager and SIGKILL to the app's own process
/// through its pidfd at once.
final class UnitFreezer {
    /// How long the manager has to answer `ThawUnit` before the daemon thaws the cgroup itself: the manager thaws in
    /// milliseconds (a cgroup2 freeze or thaw takes effect in 5–7 ms), so a manager silent for 2 s is stuck, and an
    /// app kept frozen that long while it should run is the most the daemon lets it cost.
    static let thawTimeout: Duration = .seconds(2)

    /// How a unit was frozen, the last time it was.
    enum Method: Equatable {
        /// By the service manager (`FreezeUnit`).
        case manager
        /// By the daemon, through the unit cgroup's `cgroup.freeze`.
        case cgroupFile
    }

    /// Whether the manager can freeze units, as far as it has said.
    enum Support: Equatable {
        /// Not asked yet: the next freeze tries `FreezeUnit`.
        case unknown
        /// It froze a unit.
        case supported
        /// It refused for good (why, for the report); freezes write the file.
        case unsupported(String)
    }

    /// What is known of one unit's freezer.
    private final class UnitState {
        let cgroup: CgroupDirectory
        /// Whether the daemon wants it frozen now.
        var wantsFrozen = false
        /// The manager's freezer for it, as far as the manager's answers say: nil when unknown (a call for it went
        /// unanswered, or it was adopted frozen from a daemon before a restart).
        var isFrozenByManager: Bool? = false
        /// Whether the daemon wrote `cgroup.freeze` 1 and has not written 0 since.
        var isFileFrozen = false
        /// Whether a `FreezeUnit` or `ThawUnit` for it is awaiting its answer.
        var isCallPending = false
        /// When the daemon thaws the file itself if the manager has not thawed the unit by then.
        var thawDeadline: MonotonicInstant?
        var lastMethod: Method?

        init(cgroup: CgroupDirectory) { self.cgroup = cgroup }
    }

    private let manager: UnitManagerClient
    private let clock: ManagerClock
    private let logger: Logger
    private var units: [String: UnitState] = [:]
    private var timer: ManagerTimer?
    private(set) var support: Support
    private var isStopped = false

    /// Freezes through `manager` (of major version `managerVersion`: `FreezeUnit` came in systemd 246).
    init(manager: UnitManagerClient, managerVersion: Int, clock: ManagerClock, logger: Logger) throws(Errno) {
        self.manager = manager
        self.clock = clock
        self.logger = logger
        support = managerVersion >= 246 ? .unknown : .unsupported("systemd \(managerVersion) has no FreezeUnit")
        timer = try clock.makeTimer(name: "unit-thaw", accuracy: .milliseconds(10)) { [unowned self] in
            self.thawDeadlinesReached()
        }
    }

    /// Whether freezes go to the manager first.
    var triesManager: Bool {
        if case .unsupported = support { return false }
        return !isStopped
    }

    /// How `unit` was frozen the last time it was; nil when never.
    func lastMethod(of unit: String) -> Method? {
        units[unit]?.lastMethod
    }

    private func state(of unit: String, cgroup: CgroupDirectory) -> UnitState {
        if let state = units[unit], state.cgroup == cgroup { return state }
        let state = UnitState(cgroup: cgroup)
        units[unit] = state
        return state
    }

    // MARK: Freezing and thawing

    /// Freezes `unit`, whose cgroup is `cgroup`: asks the manager, or writes the file. Throws only when the file
    /// was the way and its write failed.
    func freeze(_ unit: String, cgroup: CgroupDirectory) throws(Errno) {
        let state = state(of: unit, cgroup: cgroup)
        state.wantsFrozen = true
        state.thawDeadline = nil
        if triesManager {
            state.lastMethod = .manager
            drive(unit, state)
            return
        }
        state.lastMethod = .cgroupFile
        try cgroup.requestFreeze(true)
        state.isFileFrozen = true
    }

    /// Thaws `unit`: through the manager where it froze the unit (or may have), bounded by `thawTimeout`, and
    /// through the file where the daemon wrote it (or may have). Throws only when the file was the only way and
    /// its write failed.
    func thaw(_ unit: String, cgroup: CgroupDirectory) throws(Errno) {
        let state = state(of: unit, cgroup: cgroup)
        state.wantsFrozen = false
        let mayBeFrozenByManager = state.isFrozenByManager != false || state.isCallPending
        // Frozen through the file, or maybe (how is unknown, or was never recorded), or frozen by a manager that
        // cannot be asked now (it refused for good, or the daemon stops): the file is thawed.
        var fileError: Errno?
        if state.isFileFrozen || state.isFrozenByManager == nil || state.lastMethod == nil
            || (mayBeFrozenByManager && !triesManager)
        {
            do {
                try cgroup.requestFreeze(false)
                state.isFileFrozen = false
            } catch {
                fileError = error
            }
        }
        if mayBeFrozenByManager && triesManager {
            state.thawDeadline = clock.now + Self.thawTimeout
            armTimer()
            drive(unit, state)
            return
        }
        if mayBeFrozenByManager { state.isFrozenByManager = false }
        if let fileError { throw fileError }
    }

    /// Sends the call that brings the manager's freezer for `unit` to what the daemon wants, unless one is out.
    private func drive(_ unit: String, _ state: UnitState) {
        guard !state.isCallPending, triesManager else { return }
        if state.wantsFrozen && state.isFrozenByManager != true {
            state.isCallPending = true
            manager.freezeUnit(unit) { [weak self] result in self?.freezeAnswered(unit, state, result) }
        } else if !state.wantsFrozen && state.isFrozenByManager != false {
            state.isCallPending = true
            manager.thawUnit(unit) { [weak self] result in self?.thawAnswered(unit, state, result) }
        }
    }

    private func freezeAnswered(_ unit: String, _ state: UnitState, _ result: Result<Void, ServiceManagerError>) {
        state.isCallPending = false
        switch result {
        case .success:
            support = .supported
            state.isFrozenByManager = true
        case .failure(let error):
            learn(from: error, doing: "FreezeUnit")
            // A call that went unanswered may still have frozen it.
            state.isFrozenByManager = error == .disconnected ? nil : false
            if state.wantsFrozen && units[unit] === state {
                logger.info("the service manager did not freeze \(unit) (\(error)); freezing its cgroup instead")
                state.lastMethod = .cgroupFile
                do {
                    try state.cgroup.requestFreeze(true)
                    state.isFileFrozen = true
                } catch {
                    // The freeze is not confirmed, and SIGSTOP replaces it (ProcessTable.confirmFreeze).
                    logger.error("cannot freeze \(state.cgroup): \(error)")
                }
            }
        }
        guard units[unit] === state else { return }
        // Meant to run again meanwhile: the freeze the manager carried out is undone at once.
        drive(unit, state)
        if !state.wantsFrozen && state.isFrozenByManager == nil { thawFile(unit, state) }
        clearThawDeadlineIfThawed(state)
    }

    private func thawAnswered(_ unit: String, _ state: UnitState, _ result: Result<Void, ServiceManagerError>) {
        state.isCallPending = false
        switch result {
        case .success:
            state.isFrozenByManager = false
        case .failure(let error):
            learn(from: error, doing: "ThawUnit")
            if !state.wantsFrozen {
                logger.warning("the service manager did not thaw \(unit) (\(error)); thawing its cgroup instead")
                thawFile(unit, state)
            }
            // Whatever the manager holds, the cgroup itself was thawed (or cannot be): asking again would loop.
            state.isFrozenByManager = false
        }
        guard units[unit] === state else { return }
        drive(unit, state)
        clearThawDeadlineIfThawed(state)
    }

    /// Drops the thaw deadline of a unit the manager has thawed with nothing more asked of it.
    private func clearThawDeadlineIfThawed(_ state: UnitState) {
        guard state.thawDeadline != nil, !state.wantsFrozen, !state.isCallPending, state.isFrozenByManager == false
        else { return }
        state.thawDeadline = nil
        armTimer()
    }

    /// Writes `cgroup.freeze` 0 for a unit the manager was asked to thaw but did not (yet).
    private func thawFile(_ unit: String, _ state: UnitState) {
        do {
            try state.cgroup.requestFreeze(false)
            state.isFileFrozen = false
        } catch {
            if error.rawValue != ENOENT { logger.error("cannot thaw \(unit) through \(state.cgroup): \(error)") }
        }
    }

    /// Remembers a refusal for good: freezes then go to the file without asking.
    private func learn(from error: ServiceManagerError, doing call: String) {
        guard let name = error.busErrorName, name == .notSupported || name == .unknownMethod else { return }
        guard support != .supported else { return }
        if case .unsupported = support { return }
        support = .unsupported("\(call): \(error)")
        logger.info("the service manager cannot freeze units (\(error)): freezing them through their cgroups")
    }

    private func thawDeadlinesReached() {
        let now = clock.now
        for (unit, state) in units {
            guard let deadline = state.thawDeadline, deadline <= now else { continue }
            state.thawDeadline = nil
            guard !state.wantsFrozen else { continue }
            logger.warning(
                "the service manager did not thaw \(unit) within \(Self.thawTimeout); thawing its cgroup instead")
            thawFile(unit, state)
        }
        armTimer()
    }

    private func armTimer() {
        do {
            try timer?.schedule(at: units.values.compactMap(\.thawDeadline).min())
        } catch {
            logger.error("cannot schedule the thaws of units: \(error)")
        }
    }

    // MARK: Killing

    /// Kills everything in `unit`'s cgroup: `cgroup.kill` (or SIGKILL to each of its processes where the kernel has
    /// none), else `KillUnit(SIGKILL)` through the manager and SIGKILL to `mainProcess` through its pidfd.
    func kill(_ unit: String, cgroup: CgroupDirectory, mainProcess: PidFD) throws(Errno) {
        do {
            _ = try cgroup.killEverything()
            return
        } catch let error as Errno where error.rawValue == ENOENT {
            // The cgroup is gone: so is whatever was in it.
            throw Errno.noSuchProcess
        } catch {
            logger.info("cannot kill \(unit) through \(cgroup) (\(error)); asking the service manager")
        }
        manager.killUnit(unit, signal: .kill) { [logger] result in
            if case .failure(let error) = result, error.busErrorName != .noSuchUnit {
                logger.error("the service manager did not kill \(unit): \(error)")
            }
        }
        try mainProcess.sendSignal(.kill)
    }

    // MARK: Lifetime

    /// Takes on `unit` from a daemon before a restart: frozen (`isFrozen`) by the manager or through the file,
    /// which its state does not say, so a thaw goes both ways.
    func adopt(_ unit: String, cgroup: CgroupDirectory, isFrozen: Bool) {
        let state = state(of: unit, cgroup: cgroup)
        guard isFrozen else { return }
        state.wantsFrozen = true
        state.isFrozenByManager = nil
        state.isFileFrozen = true
    }

    /// `unit` ended: nothing of it is left to freeze or thaw.
    func forget(_ unit: String) {
        units[unit] = nil
        armTimer()
    }

    /// The daemon stops: every unit the manager froze (or may have) is asked to thaw, and `settle` waits
    /// (briefly) for the answers; those not thawed by then are thawed through their files.
    func stop(settle: (() -> Bool) -> Void) {
        guard !isStopped else { return }
        var awaited: [String] = []
        for (unit, state) in units where state.isFrozenByManager != false || state.isCallPending {
            state.wantsFrozen = false
            awaited.append(unit)
            drive(unit, state)
        }
        if !awaited.isEmpty {
            settle {
                awaited.allSatisfy { units[$0].map { !$0.isCallPending && $0.isFrozenByManager == false } ?? true }
            }
        }
        isStopped = true
        timer?.disarm()
        for unit in awaited {
            guard let state = units[unit], state.isCallPending || state.isFrozenByManager != false else { continue }
            logger.warning("the service manager did not thaw \(unit) as the daemon stopped; thawing its cgroup")
            thawFile(unit, state)
            state.isFrozenByManager = false
        }
    }
}
