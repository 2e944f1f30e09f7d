// Saving the daemon's state as it changes and restoring it on start: a restart loses no lease, grants no fresh
// budget and strands no app (docs/SERVICE.md, Restarts lose nothing).

import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Glibc

/// A snapshot for the writer thread. It leaves the history file alone: the saves that replace the history (after a
/// restore, or a failed write) run on the loop through `StateStore.save`.
struct StateWrite: Sendable {
    let store: StateStore
    let state: DaemonState
}

/// What came of a snapshot: its journal generation, and why it failed, if it did.
struct StateWriteOutcome: Sendable {
    let journal: Int?
    let failure: String?
}

extension Manager {
    /// The state as it is now, as a snapshot followed by the journal of `journal`.
    func currentState(journal: Int?) -> DaemonState {
        DaemonState(
            bootID: bootID, savedAt: clock.freshNow, lifecycle: core.saved,
            processes: processes.values.sorted { $0.serial < $1.serial }.map(\.saved),
            historySerial: trail.lastSerial, journal: journal)
    }

    // MARK: Saving

    /// Something the state holds changed: it is saved soon, once for everything that changes meanwhile. In a
    /// handler of the loop, that is when the loop has served everything ready and is about to sleep
    /// (`saveChanges()`), or after `dispatchesPerSave` dispatches if it does not fall idle; anywhere else (at
    /// start, in the idle work itself, on a manual clock's timer), it is the loop's next turn.
    ///
    /// The save appends what changed to the journal with one `write` (`saveState()`); now and then the whole state
    /// is written as a snapshot on the writer thread and the journal starts afresh (`compactJournal()`).
    func stateChanged() {
        guard stateStore != nil, !isStopping else { return }
        stateGeneration += 1
        isStateDirty = true
        guard stateSaveSource == nil, !loop.isDispatching || loop.whenIdle == nil else { return }
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

    /// Under a sustained load the loop may not fall idle for a while: what changed is saved after this many
    /// dispatches at most, so replies held for the save are not held behind an unbounded run of other work.
    static let dispatchesPerSave = 64

    /// Saves what the loop's handlers changed since the last save: the loop is about to sleep.
    func saveChanges() {
        guard isStateDirty else { return }
        saveState()
    }

    /// Counts a dispatch with changes unsaved, and saves them at the `dispatchesPerSave`-th.
    func countDispatch() {
        guard isStateDirty else { return }
        dispatchesSinceChange += 1
        if dispatchesSinceChange >= Self.dispatchesPerSave { saveState() }
    }

    /// Saves what changed: a record appended to the journal, or, without a journal (a failed append), a snapshot.
    private func saveState() {
        guard isStateDirty, let stateStore, !isStopping else { return }
        dispatchesSinceChange = 0
        guard let journal else {
            saveSnapshot()
            return
        }
        isStateDirty = false
        let generation = stateGeneration
        var entry = JournalRecord(
            savedAt: clock.freshNow, historySerial: trail.lastSerial, lifecycle: core.takeChanges())
        takeProcessChanges(into: &entry)
        var outcome = StateWriteOutcome(journal: journal.generation, failure: nil)
        do {
            // The history first: a record never names history entries that are not in the file.
            try stateStore.updateHistory(takeHistoryUpdate())
            try journal.append(try journalEncoder.line(entry))
        } catch {
            // The changes taken are in no file now: the next save writes the whole state.
            outcome = StateWriteOutcome(journal: journal.generation, failure: "\(error)")
            self.journal = nil
        }
        record(outcome, covering: generation)
        releaseHeld()
        if self.journal != nil, journal.size > journalCompactionSize { compactJournal() }
    }

    /// The journal is replaced by a snapshot once it holds more than the snapshot (and `journalCompactionFloor`,
    /// 1 MiB): a restart
    /// then replays at most about one state's worth of records, and the journal's disk use stays bounded.
    var journalCompactionSize: Int { max(journalCompactionFloor, lastSnapshotSize) }

    /// The processes changed since the last record, as the record carries them.
    private func takeProcessChanges(into record: inout JournalRecord) {
        for serial in processChanges.take().sorted() {
            if let process = processes[serial] {
                let saved = process.saved
                guard journaledProcesses[serial] != saved else { continue }
                journaledProcesses[serial] = saved
                record.processes.append(saved)
            } else if journaledProcesses.removeValue(forKey: serial) != nil {
                record.endedProcesses.append(serial)
            }
        }
    }

    /// Writes the whole state as the snapshot of a new generation, on the loop, then starts its journal (at
    /// start, and after a failed append). While the writer thread writes a snapshot it waits: an older snapshot
    /// must never replace a newer one.
    private func saveSnapshot(startingJournal: Bool = true) {
        guard let stateStore else { return }
        guard !isSnapshotInFlight else { return }
        isStateDirty = false
        let generation = stateGeneration
        let journalGeneration = self.journalGeneration + 1
        let state = takeWholeState(journal: journalGeneration)
        var failure: String?
        do {
            try stateStore.save(state, history: takeHistoryUpdate())
            lastSnapshotSize = stateStore.encoder.lastEncodedSize.load(ordering: .relaxed)
            self.journalGeneration = journalGeneration
            stateStore.removeJournals(before: journalGeneration)
            if startingJournal {
                do {
                    journal = try StateJournal(store: stateStore, generation: journalGeneration)
                } catch {
                    // The snapshot holds everything so far; the next save tries a snapshot again.
                    logger.warning("cannot create \(stateStore.journalPath(journalGeneration)): \(error)")
                }
            }
        } catch {
            failure = "\(error)"
        }
        record(StateWriteOutcome(journal: journalGeneration, failure: failure), covering: generation)
        releaseHeld()
    }

    /// The whole state for a snapshot, the changes so far counted in it: the journal after it starts from here.
    private func takeWholeState(journal: Int) -> DaemonState {
        _ = core.takeChanges()
        _ = processChanges.take()
        let state = currentState(journal: journal)
        journaledProcesses = Dictionary(
            state.processes.compactMap { process in process.serial.map { ($0, process) } },
            uniquingKeysWith: { first, _ in first })
        return state
    }

    /// Starts a new journal and has the writer thread save the whole state as the snapshot it follows. Until the
    /// snapshot is in place, a restart reads the old snapshot, its journal and the new one; once it is, the old
    /// journals go.
    private func compactJournal() {
        guard let stateStore, let stateWriter, !isSnapshotInFlight else { return }
        let generation = journalGeneration + 1
        let next: StateJournal
        do {
            next = try StateJournal(store: stateStore, generation: generation)
        } catch {
            logger.warning("cannot create \(stateStore.journalPath(generation)): \(error); compacting later")
            return
        }
        let state = takeWholeState(journal: generation)
        journal = next
        journalGeneration = generation
        guard stateWriter.submit(StateWrite(store: stateStore, state: state)) else { return }
        isSnapshotInFlight = true
    }

    /// Does a snapshot write and what comes of it, on the writer thread.
    static func perform(_ write: StateWrite) -> StateWriteOutcome {
        do {
            try write.store.save(write.state)
            return StateWriteOutcome(journal: write.state.journal, failure: nil)
        } catch {
            return StateWriteOutcome(journal: write.state.journal, failure: "\(error)")
        }
    }

    /// Takes note of a finished save covering the changes up to `generation`, and whether it failed.
    private func record(_ outcome: StateWriteOutcome, covering generation: Int) {
        // A failed write releases what waited on it too: held forever, clients would hang on a full disk; the
        // failure is logged, and a restart would lose that change.
        savedGeneration = max(savedGeneration, generation)
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

    /// The writer finished a snapshot: the journals before it go. A failed one leaves them, and the restart
    /// replays them all.
    func stateWritesFinished() {
        guard let stateWriter, let stateStore else { return }
        for outcome in stateWriter.takeOutcomes() {
            isSnapshotInFlight = false
            if let failure = outcome.failure {
                logger.warning(
                    "cannot save a snapshot of the state to \(stateStore.path): \(failure); keeping its journals")
            } else {
                lastSnapshotSize = stateStore.encoder.lastEncodedSize.load(ordering: .relaxed)
                if let generation = outcome.journal { stateStore.removeJournals(before: generation) }
            }
        }
        // A save that waited for the snapshot (no journal) goes now.
        if journal == nil, isStateDirty { saveState() }
    }

    /// Writes the first snapshot, at start (after restoring), and starts recording changes for the journal. The
    /// generation is above every journal present, so a stale one is never read after it.
    func startJournal() {
        guard let stateStore else { return }
        // A daemon that died while writing a snapshot left its temporary file.
        stateStore.removeTemporaryFiles()
        journalGeneration = max(journalGeneration, stateStore.journalGenerations().last ?? 0)
        core.tracksChanges = true
        isStateDirty = true
        saveSnapshot()
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
        heldUntilSaved.append((stateGeneration, .action(action)))
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
        heldUntilSaved.append((stateGeneration, .message(message, connection)))
    }

    /// What waits for a write: a message for a client (`transmit`), or anything else (`whenStateSaved`).
    enum HeldOutput {
        case message([UInt8], ClientConnection)
        case action(() -> Void)
    }

    /// Runs what waited for writes that have finished, in order.
    func releaseHeld() {
        var released = 0
        while released < heldUntilSaved.count, heldUntilSaved[released].generation <= savedGeneration {
            released += 1
        }
        guard released > 0 else { return }
        let ready: ArraySlice<(generation: Int, output: HeldOutput)>
        if released == heldUntilSaved.count {
            // All of it, as after a lease call: nothing to move down.
            ready = heldUntilSaved[...]
            heldUntilSaved = []
        } else {
            ready = heldUntilSaved.prefix(released)
            heldUntilSaved.removeFirst(released)
        }
        for (_, output) in ready {
            switch output {
            case .message(let message, let connection):
                connection.sendHeld(message)
            case .action(let action):
                action()
            }
        }
    }

    /// Whether every change is saved and nothing waits for a write (for tests stepping the manager).
    public var isStateSettled: Bool {
        !isStateDirty && !isSnapshotInFlight && heldUntilSaved.isEmpty
    }

    /// Saves the state on the spot, after the writer's last write: the daemon is stopping, with every stopped app
    /// already continued. Once only (the exit handler runs the release again, with nothing left to save).
    ///
    /// A writer thread still writing a snapshot after `stateWriterStopTimeout` (a hung disk) is left to finish on
    /// its own: the final state is then encoded with an encoder of its own and written to a temporary file of its
    /// own generation, and the store puts snapshots in place in generation order, so the writer's older snapshot,
    /// whenever it finishes, never replaces the final one.
    func saveFinalState() {
        guard var stateStore, !isFinalStateSaved else { return }
        if let stateWriter, !stateWriter.stop(timeout: stateWriterStopTimeout) {
            logger.warning(
                "the state writer did not finish its snapshot within \(stateWriterStopTimeout): saving the final "
                    + "state beside it (the older snapshot will not replace it)")
            stateStore = stateStore.withOwnEncoder()
        }
        isSnapshotInFlight = false
        let generation = journalGeneration + 1
        do {
            try stateStore.save(takeWholeState(journal: generation), history: takeHistoryUpdate())
            journalGeneration = generation
            journal = nil
            stateStore.removeJournals(before: generation)
        } catch {
            // The last snapshot and its journals stay: a restart loses only what changed since the last record.
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
            state = loaded.state
            journalGeneration = loaded.lastGeneration
            if loaded.tornLines > 0 {
                logger.notice("the journal's last record was cut short (never acknowledged); restoring the rest")
            }
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
            processes[process.serial] = process
            process.unit = saved.unit
            supervisor?.adopted(process)
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

    private func setAsideState(_ store: StateStore, because reason: String) {
        let destination = store.setAside()
        logger.warning(
            "not restoring \(store.path): \(reason); "
                + (destination.map { "set aside as \($0)" } ?? "removing it")
                + ", starting with no apps")
        if destination == nil { store.remove() }
    }
}
