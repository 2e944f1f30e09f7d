// What the persistence reads of the rest of the daemon: the manager, or a test's fake.

import BGTaskCore

/// What the persistence reads of the rest of the daemon to save the state: the policy's state and changes, the
/// tracked processes, and the history. Implemented by the `Manager`; tests give a fake.
protocol PersistedStateSource: AnyObject {
    /// The policy's whole state, for a snapshot.
    var savedLifecycle: SavedLifecycle { get }
    /// What changed in the policy since the last call, for a journal record (an empty change set when the
    /// policy does not track changes).
    func takeLifecycleChanges() -> LifecycleChanges
    /// The tracked processes, as saved, by serial.
    var savedProcesses: [SavedProcess] { get }
    /// A tracked process as saved; nil once it is no longer tracked.
    func savedProcess(serial: Int) -> SavedProcess?
    /// The serial of the newest history entry.
    var lastHistorySerial: Int { get }
    /// The history entries added since the last call, to append to the history file.
    func takeUnsavedHistory() -> [SavedHistoryEntry]
    /// Every history entry kept, to rewrite the history file with, and how many are kept at most.
    var keptHistory: [SavedHistoryEntry] { get }
    var historyCapacity: Int { get }
    /// The time a save is stamped with (`CLOCK_MONOTONIC`, read when asked).
    var freshNow: MonotonicInstant { get }
    /// Whether the daemon is stopping: nothing more is saved but the final state (`saveFinalState()`).
    var isStopping: Bool { get }
}
