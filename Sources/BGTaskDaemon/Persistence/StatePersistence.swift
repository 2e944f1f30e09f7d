// Saving the daemon's state as it changes: a record appended to the journal per loop iteration that changed
// anything, a snapshot now and then on the writer thread, and the final state on stopping (docs/SERVICE.md,
// Restarts lose nothing).

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// What came of a snapshot: its journal generation, and why it failed, if it did.
struct StateWriteOutcome: Sendable {
    let journal: Int?
    let failure: String?
}

/// The state saved for the next daemon: the journal changes are appended to, the snapshots it is compacted into,
/// the history file, and the output held until the state it reflects is saved (`StatePersistence+Held.swift`).
///
/// Saves are coalesced: `stateChanged()` marks the state dirty and schedules one save on the loop, which appends
/// one record of everything changed meanwhile. Used on the loop's thread only; the snapshots of a compaction are
/// written on a thread of its own (`stateWriter`). Without a store (`store` nil) nothing is saved and nothing is
/// held.
final class StatePersistence {
    /// Where the state is saved for the next daemon; nil keeps nothing across restarts.
    let store: StateStore?
    /// The kernel's boot id, which the state file must match.
    let bootID: String
    /// Where what is saved comes from (the manager).
    weak var source: (any PersistedStateSource)?
    /// The processes changed since the journal was last written, noted by the processes themselves.
    let processChanges = ProcessChangeLog()
    /// The least journal size compacted (tests lower it to compact at every record).
    var journalCompactionFloor = 1 << 20
    /// How long a stop waits for a snapshot the writer thread is writing before saving the final state beside it
    /// (a disk that slow is failing; systemd's stop timeout is 90 s by default). Tests shorten it.
    var stateWriterStopTimeout: Duration = .seconds(10)

    private let loop: EventLoop
    let logger: Logger
    /// The state changed since it was last handed to the writer; a save is scheduled (`saveSource`).
    private(set) var isDirty = false
    private var saveSource: EventSource?
    /// Dispatches since the state last changed with the change unsaved (`countDispatch()`).
    private var dispatchesSinceChange = 0
    /// The thread that encodes and writes snapshots of the state, one at a time (see `compactJournal()`).
    private(set) var stateWriter: BackgroundWorker<StateWrite, StateWriteOutcome>?
    private(set) var isSnapshotInFlight = false
    /// The journal changes are appended to; nil before the first snapshot, and after a failed append until a
    /// snapshot is saved again.
    private var journal: StateJournal?
    /// The newest generation used: the journal's, or that of the snapshot written without one.
    private(set) var journalGeneration = 0
    private let journalEncoder = JournalEncoder()
    /// What the journal holds of each process, by serial.
    private var journaledProcesses: [Int: SavedProcess] = [:]
    /// The size of the last snapshot written: the journal is compacted once it outgrows it (see
    /// `journalCompactionSize`).
    private var lastSnapshotSize = 0
    private var isSaveFailureLogged = false
    private(set) var isFinalStateSaved = false
    /// Counts changes of the saved state, and the change the last finished write covers: output and stops of a
    /// newer change wait in `heldUntilSaved` (see `whenStateSaved`).
    private(set) var stateGeneration = 0
    private(set) var savedGeneration = 0
    var heldUntilSaved: [(generation: Int, output: HeldOutput)] = []
    /// Lines in the history file, and whether it must be rewritten whole at the next write (at first: it may hold
    /// a previous daemon's entries past the state it restored).
    private var historyLinesInFile = 0
    private var historyNeedsRewrite = true

    /// The persistence of the state at `store` (nil: none), on `loop`.
    init(store: StateStore?, bootID: String, loop: EventLoop, logger: Logger) {
        self.store = store
        self.bootID = bootID
        self.loop = loop
        self.logger = logger
    }

    /// Whether the state is kept across restarts.
    var isEnabled: Bool { store != nil }

    /// Starts the writer thread and the loop's source for its outcomes (with a store only).
    func startWriter() throws(StartupError) {
        guard store != nil else { return }
        do {
            let writer = try BackgroundWorker<StateWrite, StateWriteOutcome>(name: "bgtaskd-state", capacity: 2) {
                StatePersistence.perform($0)
            }
            stateWriter = writer
            try loop.addIO(fd: writer.outcomesReady, events: .readable, name: "state-writer") { [weak self] _, _ in
                self?.stateWritesFinished()
            }
        } catch {
            throw StartupError(description: "cannot start the state writer thread: \(error)")
        }
    }

    /// Stops the writer thread after its last write (the loop has ended).
    func stopWriter() {
        stateWriter?.stop(timeout: stateWriterStopTimeout)
    }

    /// The state as it is now, as a snapshot followed by the journal of `journal`.
    func currentState(journal: Int?) -> DaemonState? {
        source.map { state(journal: journal, from: $0) }
    }

    private func state(journal: Int?, from source: any PersistedStateSource) -> DaemonState {
        DaemonState(
            bootID: bootID, savedAt: source.freshNow, lifecycle: source.savedLifecycle,
            processes: source.savedProcesses, historySerial: source.lastHistorySerial, journal: journal)
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
        guard store != nil, source?.isStopping == false else { return }
        stateGeneration += 1
        isDirty = true
        guard saveSource == nil, !loop.isDispatching || loop.whenIdle == nil else { return }
        do {
            saveSource = try loop.addDefer(name: "save-state") { [weak self] in
                guard let self else { return }
                self.saveSource = nil
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
        guard isDirty else { return }
        saveState()
    }

    /// Counts a dispatch with changes unsaved, and saves them at the `dispatchesPerSave`-th.
    func countDispatch() {
        guard isDirty else { return }
        dispatchesSinceChange += 1
        if dispatchesSinceChange >= Self.dispatchesPerSave { saveState() }
    }

    /// Saves what changed: a record appended to the journal, or, without a journal (a failed append), a snapshot.
    private func saveState() {
        guard isDirty, let store, let source, !source.isStopping else { return }
        dispatchesSinceChange = 0
        guard let journal else {
            saveSnapshot()
            return
        }
        isDirty = false
        let generation = stateGeneration
        var entry = JournalRecord(
            savedAt: source.freshNow, historySerial: source.lastHistorySerial,
            lifecycle: source.takeLifecycleChanges())
        takeProcessChanges(into: &entry, from: source)
        var outcome = StateWriteOutcome(journal: journal.generation, failure: nil)
        do {
            // The history first: a record never names history entries that are not in the file.
            try store.updateHistory(takeHistoryUpdate(from: source))
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
    /// 1 MiB): a restart then replays at most about one state's worth of records, and the journal's disk use stays
    /// bounded.
    var journalCompactionSize: Int { max(journalCompactionFloor, lastSnapshotSize) }

    /// The processes changed since the last record, as the record carries them.
    private func takeProcessChanges(into record: inout JournalRecord, from source: any PersistedStateSource) {
        for serial in processChanges.take().sorted() {
            if let saved = source.savedProcess(serial: serial) {
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
    private func saveSnapshot() {
        guard let store, let source else { return }
        guard !isSnapshotInFlight else { return }
        isDirty = false
        let generation = stateGeneration
        let journalGeneration = self.journalGeneration + 1
        let state = takeWholeState(journal: journalGeneration, from: source)
        var failure: String?
        do {
            try store.save(state, history: takeHistoryUpdate(from: source))
            lastSnapshotSize = store.encoder.lastEncodedSize.load(ordering: .relaxed)
            self.journalGeneration = journalGeneration
            store.removeJournals(before: journalGeneration)
            do {
                journal = try StateJournal(store: store, generation: journalGeneration)
            } catch {
                // The snapshot holds everything so far; the next save tries a snapshot again.
                logger.warning("cannot create \(store.journalPath(journalGeneration)): \(error)")
            }
        } catch {
            failure = "\(error)"
        }
        record(StateWriteOutcome(journal: journalGeneration, failure: failure), covering: generation)
        releaseHeld()
    }

    /// The whole state for a snapshot, the changes so far counted in it: the journal after it starts from here.
    private func takeWholeState(journal: Int, from source: any PersistedStateSource) -> DaemonState {
        _ = source.takeLifecycleChanges()
        _ = processChanges.take()
        let state = state(journal: journal, from: source)
        journaledProcesses = Dictionary(
            state.processes.compactMap { process in process.serial.map { ($0, process) } },
            uniquingKeysWith: { first, _ in first })
        return state
    }

    /// Starts a new journal and has the writer thread save the whole state as the snapshot it follows. Until the
    /// snapshot is in place, a restart reads the old snapshot, its journal and the new one; once it is, the old
    /// journals go.
    private func compactJournal() {
        guard let store, let stateWriter, let source, !isSnapshotInFlight else { return }
        let generation = journalGeneration + 1
        let next: StateJournal
        do {
            next = try StateJournal(store: store, generation: generation)
        } catch {
            logger.warning("cannot create \(store.journalPath(generation)): \(error); compacting later")
            return
        }
        let state = takeWholeState(journal: generation, from: source)
        journal = next
        journalGeneration = generation
        guard stateWriter.submit(StateWrite(store: store, state: state)) else { return }
        isSnapshotInFlight = true
    }

    /// Does a snapshot write and what comes of it, on the writer thread.
    static func perform(_ write: StateWrite) -> StateWriteOutcome {
        // A snapshot's encoding and (the first one, at start) the parse of the state restored before it each peak
        // the heap for a moment and free it all: freed, it stays resident until trimmed, and a daemon restarted
        // with a larger state would show a larger RSS for as long as it runs. Trimmed here, off the loop (the trim
        // covers every arena, the loop's too).
        defer { Heap.trim() }
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
            if !isSaveFailureLogged {
                isSaveFailureLogged = true
                logger.error("cannot save the state to \(store?.path ?? "?"): \(failure); a restart would lose it")
            }
        } else if isSaveFailureLogged {
            isSaveFailureLogged = false
            logger.notice("the state is saved again")
        }
    }

    /// The writer finished a snapshot: the journals before it go. A failed one leaves them, and the restart
    /// replays them all.
    private func stateWritesFinished() {
        guard let stateWriter, let store else { return }
        for outcome in stateWriter.takeOutcomes() {
            isSnapshotInFlight = false
            if let failure = outcome.failure {
                logger.warning(
                    "cannot save a snapshot of the state to \(store.path): \(failure); keeping its journals")
            } else {
                lastSnapshotSize = store.encoder.lastEncodedSize.load(ordering: .relaxed)
                if let generation = outcome.journal { store.removeJournals(before: generation) }
            }
        }
        // A save that waited for the snapshot (no journal) goes now.
        if journal == nil, isDirty { saveState() }
    }

    /// Writes the first snapshot, at start (after restoring), and starts recording changes for the journal. The
    /// generation is above every journal present, so a stale one is never read after it. The caller has the policy
    /// track its changes first.
    func startJournal() {
        guard let store else { return }
        // A daemon that died while writing a snapshot left its temporary file.
        store.removeTemporaryFiles()
        journalGeneration = max(journalGeneration, store.journalGenerations().last ?? 0)
        isDirty = true
        saveSnapshot()
    }

    /// What the next write does to the history file: appends the entries kept since the last write, or rewrites
    /// the file whole when it must (see `historyNeedsRewrite`) or has grown to twice the history kept, so it
    /// stays bounded.
    private func takeHistoryUpdate(from source: any PersistedStateSource) -> HistoryUpdate {
        let appended = source.takeUnsavedHistory()
        guard historyNeedsRewrite || historyLinesInFile + appended.count > 2 * source.historyCapacity + 64 else {
            historyLinesInFile += appended.count
            return .append(appended)
        }
        historyNeedsRewrite = false
        let entries = source.keptHistory
        historyLinesInFile = entries.count
        return .rewrite(entries)
    }

    // MARK: Stopping

    /// Saves the state on the spot, after the writer's last write: the daemon is stopping, with every stopped app
    /// already continued. Once only (the exit handler runs the release again, with nothing left to save).
    ///
    /// A writer thread still writing a snapshot after `stateWriterStopTimeout` (a hung disk) is left to finish on
    /// its own: the final state is then encoded with an encoder of its own and written to a temporary file of its
    /// own generation, and the store puts snapshots in place in generation order, so the writer's older snapshot,
    /// whenever it finishes, never replaces the final one.
    func saveFinalState() {
        guard var store, let source, !isFinalStateSaved else { return }
        if let stateWriter, !stateWriter.stop(timeout: stateWriterStopTimeout) {
            logger.warning(
                "the state writer did not finish its snapshot within \(stateWriterStopTimeout): saving the final "
                    + "state beside it (the older snapshot will not replace it)")
            store = store.withOwnEncoder()
        }
        isSnapshotInFlight = false
        let generation = journalGeneration + 1
        do {
            try store.save(takeWholeState(journal: generation, from: source), history: takeHistoryUpdate(from: source))
            journalGeneration = generation
            journal = nil
            store.removeJournals(before: generation)
        } catch {
            // The last snapshot and its journals stay: a restart loses only what changed since the last record.
            logger.error("cannot save the state to \(store.path) on stopping: \(error)")
        }
        isFinalStateSaved = true
        savedGeneration = stateGeneration
        releaseHeld()
    }

    /// Goes on from the journals a restored state was read up to: the next snapshot's generation is above them.
    func continueAfterRestoring(generation: Int) {
        journalGeneration = generation
    }
}

/// A snapshot for the writer thread. It leaves the history file alone: the saves that replace the history (after a
/// restore, or a failed write) run on the loop through `StateStore.save`.
struct StateWrite: Sendable {
    let store: StateStore
    let state: DaemonState
}
