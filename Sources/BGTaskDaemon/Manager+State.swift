// Saving the daemon's state as it changes and restoring it on start: a restart loses no lease, grants no fresh
// budget and strands no app (DESIGN §8).

import BGTaskCore
import BGTaskProtocol
import BGTaskSystem
import Glibc

/// A state write for the writer thread, and what came of it.
struct StateWrite: Sendable {
    let store: StateStore
    let state: DaemonState
    /// The history entries kept since the last write, or the whole history (added when it is handed over).
    var history: HistoryUpdate = .none
    /// The change it covers (`Manager.stateGeneration` when it was taken).
    let generation: Int
}

/// What came of a state write: the change it covered, and why it failed, if it did.
struct StateWriteOutcome: Sendable {
    let generation: Int
    let failure: String?
}

extension Manager {
    /// The state as it is now.
    func currentState() -> DaemonState {
        DaemonState(
            bootID: bootID, savedAt: clock.freshNow, lifecycle: core.saved,
            processes: processes.values.sorted { $0.serial < $1.serial }.map(\.saved),
            historySerial: trail.lastSerial)
    }

    // MARK: Saving

    /// Something the state file holds changed: it is saved soon, once for everything that changes meanwhile (one
    /// write per loop iteration at most, however many calls the iteration served). The write itself (encoding,
    /// `rename`) happens on the writer thread, so its cost, which grows with the apps, never blocks the
    /// loop; writes never overlap, and the last state always gets written.
    func stateChanged() {
        guard stateStore != nil, !isStopping else { return }
        stateGeneration += 1
        isStateDirty = true
        guard stateSaveSource == nil else { return }
        do {
            stateSaveSource = try loop.addDefer(name: "save-state") { [unowned self] in
                self.stateSaveSource = nil
                self.saveState()
            }
        } catch {
            logger.error("cannot schedule saving the state: \(error); saving it at once")
            saveState()
        }
    }

    /// Hands the current state to the writer, or keeps it for when the write in flight is done.
    private func saveState() {
        guard isStateDirty, let stateStore, !isStopping else { return }
        isStateDirty = false
        let write = StateWrite(store: stateStore, state: currentState(), generation: stateGeneration)
        if isStateWriteInFlight {
            pendingStateWrite = write
        } else {
            submitStateWrite(write)
        }
    }

    /// The largest state (as last encoded) written on the loop itself rather than by the writer thread: a write
    /// of a few apps costs the loop tens of microseconds, less than the two thread hand-offs it saves every call
    /// (the reply waits for the write either way); a larger one would hold the loop up for what it costs.
    static let inlineStateWriteLimit = 64 * 1024

    /// Does a state write and what comes of it, on whichever thread calls it.
    static func perform(_ write: StateWrite) -> StateWriteOutcome {
        do {
            try write.store.save(write.state, history: write.history)
            return StateWriteOutcome(generation: write.generation, failure: nil)
        } catch {
            return StateWriteOutcome(generation: write.generation, failure: "\(error)")
        }
    }

    private func submitStateWrite(_ write: StateWrite) {
        var write = write
        write.history = takeHistoryUpdate()
        if write.store.encoder.lastEncodedSize.load(ordering: .relaxed) <= Self.inlineStateWriteLimit {
            // Nothing is in flight (the caller checked): the encoder is this thread's for the write.
            record(Self.perform(write))
            releaseHeld()
            return
        }
        guard let stateWriter, stateWriter.submit(write) else {
            // Only one write is ever queued, so the writer cannot be full; a stopped one writes at stop.
            return
        }
        isStateWriteInFlight = true
    }

    /// Takes note of a finished write: what it saved, and whether it failed.
    private func record(_ outcome: StateWriteOutcome) {
        // A failed write releases what waited on it too: held forever, clients would hang on a full disk; the
        // failure is logged, and a restart would lose that change.
        savedGeneration = max(savedGeneration, outcome.generation)
        if let failure = outcome.failure {
            // The lines it was to append may be missing: the next write rewrites the history whole.
            historyNeedsRewrite = true
            if !isStateSaveFailureLogged {
                isStateSaveFailureLogged = true
                logger.error("cannot save the state to \(stateStore?.path ?? "?"): \(failure); a restart would lose it")
            }
        } else if isStateSaveFailureLogged {
            isStateSaveFailureLogged = false
            logger.notice("the state is saved again")
        }
    }

    /// The writer finished a write.
    func stateWritesFinished() {
        guard let stateWriter else { return }
        for outcome in stateWriter.takeOutcomes() {
            isStateWriteInFlight = false
            record(outcome)
        }
        if !isStateWriteInFlight, let next = pendingStateWrite {
            pendingStateWrite = nil
            submitStateWrite(next)
        }
        releaseHeld()
    }

    /// What the next write does to the history file: appends the entries kept since the last write, or rewrites
    /// the file whole when it must (see `historyNeedsRewrite`) or has grown to twice the history kept, so it
    /// stays bounded.
    private func takeHistoryUpdate() -> HistoryUpdate {
        let appended = trail.takeUnsaved()
        guard historyNeedsRewrite || historyLinesInFile + appended.count > 2 * trail.capacity + 64 else {
            historyLinesInFile += appended.count
            return .append(appended)
        }
        historyNeedsRewrite = false
        let entries = trail.savedEntries
        historyLinesInFile = entries.count
        return .rewrite(entries)
    }

    // MARK: Nothing acknowledged before it is saved

    /// Runs `action` once the state as it is now is saved: at once when nothing is waiting to be saved.
    ///
    /// Replies, events and `Watch` entries go out this way (`transmit`), and so do the stops of processes: a
    /// client never learns of a change (a task id, a state) that a crash right after could lose, and no process
    /// is stopped before the state file says so, since after a crash that file is how the service's clean-up
    /// finds what to continue. Writes are coalesced, so a burst of calls waits for one write.
    func whenStateSaved(_ action: @escaping () -> Void) {
        guard stateStore != nil, savedGeneration < stateGeneration, !isFinalStateSaved else {
            action()
            return
        }
        heldUntilSaved.append((stateGeneration, action))
    }

    /// Sends a reply, event or entry to a client once the state it reflects is saved, in order with what went
    /// before it on that connection. A reply that reflects no change (`reflectsChange` false: a read, an invalid
    /// message) waits only for what went before it.
    func transmit(_ message: [UInt8], on connection: ClientConnection, reflectsChange: Bool = true) {
        let isBehindUnsaved = reflectsChange && (savedGeneration < stateGeneration || !heldUntilSaved.isEmpty)
        guard stateStore != nil, isBehindUnsaved || connection.heldOutputBytes > 0, !isFinalStateSaved else {
            connection.send(message)
            return
        }
        connection.heldOutputBytes += message.count
        heldUntilSaved.append(
            (
                stateGeneration,
                {
                    connection.heldOutputBytes -= message.count
                    connection.send(message)
                    connection.updateInterest()
                }
            ))
    }

    /// Runs what waited for writes that have finished, in order.
    func releaseHeld() {
        var released = 0
        while released < heldUntilSaved.count, heldUntilSaved[released].generation <= savedGeneration {
            released += 1
        }
        guard released > 0 else { return }
        let ready = heldUntilSaved.prefix(released)
        heldUntilSaved.removeFirst(released)
        for (_, action) in ready { action() }
    }

    /// Whether every change is saved and nothing waits for a write (for tests stepping the manager).
    public var isStateSettled: Bool {
        !isStateDirty && !isStateWriteInFlight && pendingStateWrite == nil && heldUntilSaved.isEmpty
    }

    /// Saves the state on the spot, after the writer's last write: the daemon is stopping, with every stopped app
    /// already continued. Once only (the exit handler runs the release again, with nothing left to save).
    func saveFinalState() {
        guard let stateStore, !isFinalStateSaved else { return }
        stateWriter?.stop(timeout: .seconds(10))
        do {
            try stateStore.save(currentState(), history: takeHistoryUpdate())
        } catch {
            logger.error("cannot save the state to \(stateStore.path) on stopping: \(error)")
        }
        isFinalStateSaved = true
        savedGeneration = stateGeneration
        releaseHeld()
    }

    // MARK: Restoring

    /// Restores what the last daemon saved: the policy's state, the history, and the processes, each adopted only
    /// if its pid still names the process that registered (same start time); an app whose process is gone ends
    /// `exited`. Suspended apps are suspended again, and a deadline that passed meanwhile is acted on at once.
    /// A file that cannot be used is set aside and logged; the daemon starts empty then.
    func restoreState() {
        guard let stateStore else { return }
        let state: DaemonState
        switch stateStore.load(bootID: bootID, now: clock.freshNow) {
        case .none:
            return
        case .unusable(let reason):
            setAsideState(stateStore, because: reason)
            return
        case .state(let loaded):
            state = loaded
        }
        let restored: Lifecycle
        do {
            // Queued payloads are sent as they are written (`EventReply`): each must be a JSON object.
            restored = try Lifecycle(restoring: state.lifecycle, policy: configuration.core) { text in
                if case .object? = try? JSONParser.parse(text.utf8) { return true }
                return false
            }
        } catch {
            setAsideState(stateStore, because: "its apps contradict themselves: \(error)")
            return
        }
        core = restored
        let history = stateStore.loadHistory(upTo: state.historySerial)
        if history.skipped > 0 {
            logger.warning(
                "skipped \(history.skipped) unreadable lines of \(stateStore.historyPath); the rest of the history "
                    + "is restored")
        }
        trail.restore(history.entries, lastSerial: state.historySerial)
        var adopted = 0
        var gone = 0
        var exitedApps: [AppID] = []
        for saved in state.processes {
            let apps = saved.apps.filter { core.isWatchingProcess(of: $0) && processOfApp[$0] == nil }
            guard !apps.isEmpty else { continue }
            // Only cgroups this daemon would have made (under its roots, named app-*): a state file naming any other
            // directory is not trusted to say what to kill.
            var savedCgroups = AppCgroups(saved)
            if let cgroups = savedCgroups, !launchRoots.made(cgroups) {
                logger.warning(
                    "the state names cgroups \(cgroups.all.map(\.path)) outside CgroupRoot=/MemoryCgroupRoot=: "
                        + "not using them for pid \(saved.pid)")
                savedCgroups = nil
            }
            guard let pidFD = adoptableProcess(saved) else {
                gone += 1
                exitedApps += apps
                // A managed app that ended while no daemon ran: what is left of it ends too, and its cgroups go.
                if let savedCgroups { removeCgroups(savedCgroups) }
                continue
            }
            let process = TrackedProcess(
                serial: nextProcessSerial, pidFD: pidFD, uid: saved.uid, startTime: saved.startTime)
            nextProcessSerial += 1
            // The old daemon's stop, if the process is still stopped or its cgroup still frozen (the service's
            // clean-up continues and thaws them).
            let isStillStopped =
                if let path = saved.frozenCgroup {
                    (try? CgroupDirectory(path: path).isFrozen()) == true
                } else {
                    (try? procFS.stat(saved.pid).state) == .stopped
                }
            if isStillStopped { process.adoptStop(of: saved) }
            process.memoryBytes = saved.memoryBytes
            process.cgroups = savedCgroups
            guard watchExit(of: process) else {
                gone += 1
                exitedApps += apps
                continue
            }
            process.apps = Set(apps)
            processes[process.serial] = process
            for app in apps { processOfApp[app] = process }
            adopted += 1
        }
        // A registration the policy watches a process for that no saved process names: nothing vouches for it.
        exitedApps += core.appsWatchingProcesses.filter { processOfApp[$0] == nil && !exitedApps.contains($0) }
        for app in exitedApps {
            logger.notice("\(appName(app))'s process ended while bgtaskd was not running", [.app(appName(app))])
            perform(core.processExited(app, how: .exited, now: now))
        }
        // The streams come back before the policy catches up: what it sends now reaches the apps.
        adoptStoredStreams()
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
                + "tasks) from \(stateStore.path): \(adopted) processes adopted, \(gone) gone meanwhile")
        stateChanged()
    }

    /// The pidfd of a saved process if its pid still names it: alive, with the saved start time.
    private func adoptableProcess(_ saved: SavedProcess) -> PidFD? {
        guard let pidFD = try? PidFD.open(pid: saved.pid) else { return nil }
        if let stat = try? procFS.stat(saved.pid), stat.startTime == saved.startTime, (try? pidFD.hasExited) == false {
            return pidFD
        }
        try? pidFD.close()
        return nil
    }

    private func setAsideState(_ store: StateStore, because reason: String) {
        let destination = store.setAside()
        logger.warning(
            "not restoring \(store.path): \(reason); "
                + (destination.map { "set aside as \($0)" } ?? "removing it")
                + ", starting with no apps")
        if destination == nil { store.remove() }
    }
}
