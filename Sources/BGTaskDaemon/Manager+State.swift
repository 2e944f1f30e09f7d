// The manager's side of the saved state: what the persistence (`Persistence/StatePersistence.swift`) saves, and
// restoring it on start: a restart loses no lease, grants no fresh budget and strands no app (docs/SERVICE.md,
// Restarts lose nothing).

import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Glibc

extension Manager: PersistedStateSource {
    var savedLifecycle: SavedLifecycle { core.saved }

    func takeLifecycleChanges() -> LifecycleChanges { core.takeChanges() }

    var savedProcesses: [SavedProcess] { processes.values.sorted { $0.serial < $1.serial }.map(\.saved) }

    func savedProcess(serial: Int) -> SavedProcess? { processes[serial]?.saved }

    var lastHistorySerial: Int { trail.lastSerial }

    func takeUnsavedHistory() -> [SavedHistoryEntry] { trail.takeUnsaved() }

    var keptHistory: [SavedHistoryEntry] { trail.savedEntries }

    var historyCapacity: Int { trail.capacity }

    var freshNow: MonotonicInstant { clock.freshNow }
}

extension Manager {
    /// The processes changed since the journal was last written (each process notes its own changes).
    var processChanges: ProcessChangeLog { persistence.processChanges }

    /// Something the state holds changed: it is saved soon (`StatePersistence.stateChanged()`).
    func stateChanged() {
        persistence.stateChanged()
    }

    /// Runs `action` once the state as it is now is saved (`StatePersistence.whenStateSaved(_:)`).
    func whenStateSaved(_ action: @escaping () -> Void) {
        persistence.whenStateSaved(action)
    }

    /// Sends a message to a client once the state it reflects is saved (`StatePersistence.transmit`).
    func transmit(_ message: [UInt8], on connection: ClientConnection, reflectsChange: Bool = true) {
        persistence.transmit(message, on: connection, reflectsChange: reflectsChange)
    }

    /// Whether every change is saved and nothing waits for a write (for tests stepping the manager).
    public var isStateSettled: Bool { persistence.isSettled }

    /// Has the policy record its changes and writes the first snapshot (at start, after restoring).
    func startJournal() {
        guard persistence.isEnabled else { return }
        core.tracksChanges = true
        persistence.startJournal()
    }

    // MARK: Restoring

    /// Restores what the last daemon saved: the policy's state, the history, and the processes, each adopted only
    /// if its pid still names the process that registered (same start time); an app whose process is gone ends
    /// `exited`. Suspended apps are suspended again, and a deadline that passed meanwhile is acted on at once.
    /// A file that cannot be used is set aside and logged; the daemon starts empty then.
    func restoreState() {
        guard let state = persistence.loadSavedState(now: clock.freshNow) else {
            restoreScheduledRequests()
            return
        }
        let restored: Lifecycle
        do {
            // Queued payloads are sent as they are written (`EventReply`): each must be a JSON object.
            // Scheduled requests are judged from the start by the conditions and the wall clock as they are now.
            restored = try Lifecycle(
                restoring: state.lifecycle, policy: configuration.core,
                isValidPayload: { text in
                    if case .object? = try? JSONParser.parse(text.utf8) { return true }
                    return false
                }, conditions: settledConditions, wallClockOffset: clock.wallClockOffset, now: now)
        } catch {
            persistence.setAside(because: "its apps contradict themselves: \(error)")
            restoreScheduledRequests()
            return
        }
        core = restored
        trail.restore(persistence.loadHistory(upTo: state.historySerial), lastSerial: state.historySerial)
        var adopted = 0
        var gone = 0
        var exitedApps: [AppID] = []
        for saved in state.processes {
            let apps = saved.apps.filter { core.isWatchingProcess(of: $0) && processOfApp[$0] == nil }
            guard !apps.isEmpty else { continue }
            // Only cgroups this daemon would have made (under its roots, named app-*): a state file naming any other
            // directory is not trusted to say what to kill.
            var savedCgroups = AppCgroups(saved)
            if let cgroups = savedCgroups, supervisor?.trusts(cgroups, of: saved) != true {
                logger.warning(
                    "the state names cgroups \(cgroups.all.map(\.path)) outside CgroupRoot=/MemoryCgroupRoot=: "
                        + "not using them for pid \(saved.pid)")
                savedCgroups = nil
            }
            guard let pidFD = adoptableProcess(saved) else {
                gone += 1
                exitedApps += apps
                // A managed app that ended while no daemon ran: what is left of it ends too, and its cgroups go.
                if let savedCgroups { supervisor?.discard(savedCgroups) }
                continue
            }
            let process = newTrackedProcess(pidFD: pidFD, uid: saved.uid, startTime: saved.startTime)
            process.cgroups = savedCgroups
            process.memoryBytes = saved.memoryBytes
            guard watchExit(of: process) else {
                gone += 1
                exitedApps += apps
                continue
            }
            process.apps = Set(apps)
            // The old daemon's stop, if the process is still stopped or its cgroup still frozen (the service's
            // clean-up continues and thaws them), and only on a target this daemon would choose itself now.
            if let stop = trustedStop(of: saved, process: process), isStillStopped(stop, saved, process) {
                process.adoptStop(stop)
            }
            processTable.insert(process)
            process.unit = saved.unit
            supervisor?.adopted(process)
            adopted += 1
        }
        // The streams come back before the policy is given any input: every input catches it up (an app that
        // ended meanwhile below warns another whose deadline passed), and what it sends must reach the apps
        // whose streams the fd store kept, which never register again to be handed what was held for them.
        adoptStoredStreams()
        // A registration the policy watches a process for that no saved process names: nothing vouches for it.
        exitedApps += core.appsWatchingProcesses.filter { processOfApp[$0] == nil && !exitedApps.contains($0) }
        for app in exitedApps {
            logger.notice("\(appName(app))'s process ended while bgtaskd was not running", [.app(appName(app))])
            perform(core.processExited(app, how: .exited, now: now))
        }
        perform(core.restarted(now: now))
        // A process the last daemon left stopped whose apps are no longer all suspended must run.
        for process in processes.values where process.isStopped {
            guard process.apps.contains(where: { core.state(of: $0) != .suspended }) else { continue }
            do {
                try process.resume()
            } catch {
                if error != .noSuchProcess { logger.error("cannot resume pid \(process.pid): \(error)") }
            }
        }
        memoryMonitor?.appsChanged()
        logger.notice(
            "restored \(state.lifecycle.appCount) registrations (\(core.liveAppCount) live, \(core.openTaskCount) "
                + "tasks) from \(persistence.store?.path ?? "?"): \(adopted) processes adopted, \(gone) gone meanwhile")
        stateChanged()
    }

    /// What the state file says the last daemon stopped of `saved`, if it passes the checks a live stop gets
    /// (`SavedStop.trusted`); nil, logged, for a stop it names on anything else.
    private func trustedStop(of saved: SavedProcess, process: TrackedProcess) -> StopTarget? {
        let verdict = SavedStop.trusted(
            saved, launchedInto: process.cgroups?.control, currentCgroup: { currentCgroup(of: process) })
        switch verdict {
        case .success(let target):
            return target
        case .failure(let refusal):
            logger.warning(refusal.description, process.apps.sorted().map { .app(appName($0)) })
            return refusal.fallback
        }
    }

    /// Whether what the old daemon stopped (`stop`, checked by `trustedStop`) is still stopped (the service's
    /// clean-up continues and thaws what it stopped), and may stay so. A cgroup the app sits in that the old daemon
    /// froze but that no longer qualifies to be frozen whole (`ownCgroup(of:)`: a process of another uid or one
    /// that does not descend from the app moved in while no daemon ran, or a child cgroup was made) is thawed
    /// instead: it is the old daemon's freeze, undone, and the app, still suspended, is stopped again with signals.
    private func isStillStopped(_ stop: StopTarget, _ saved: SavedProcess, _ process: TrackedProcess) -> Bool {
        guard case .cgroup(let cgroup) = stop else { return (try? procFS.stat(saved.pid).state) == .stopped }
        guard (try? cgroup.isFrozen()) == true else { return false }
        if cgroup.path == process.cgroups?.control?.path || ownCgroup(of: process)?.path == cgroup.path { return true }
        let fields = process.apps.sorted().map { LogField.app(appName($0)) }
        do {
            try cgroup.setFrozen(false)
            logger.notice(
                "thawed \(cgroup.path), frozen for pid \(process.pid): it no longer holds only the app's processes",
                fields)
        } catch {
            logger.error(
                "cannot thaw \(cgroup.path) (it no longer holds only pid \(process.pid)'s processes): \(error)", fields)
        }
        return false
    }

    /// The pidfd of a saved process if its pid still names it: alive, with the saved start time.
    ///
    /// And of the saved uid, as a registration's peer credentials gave it (its effective uid): the state file is not
    /// trusted to say whose a process is, which decides who may act as the app and whose processes its signals may
    /// reach. An unreadable uid is not adopted (fail closed: the app ends `exited`).
    private func adoptableProcess(_ saved: SavedProcess) -> PidFD? {
        guard let pidFD = try? PidFD.open(pid: saved.pid) else { return nil }
        if let stat = try? procFS.stat(saved.pid), stat.startTime == saved.startTime, (try? pidFD.hasExited) == false {
            if let ids = try? procFS.userIDs(saved.pid), ids.effective == saved.uid, (try? pidFD.hasExited) == false {
                return pidFD
            }
            logger.warning(
                "the state says pid \(saved.pid) is uid \(saved.uid)'s, which /proc does not confirm: not adopting it")
        }
        try? pidFD.close()
        return nil
    }
}
