// The daemon's saved state, as it is written: the snapshot, its processes and history entries, and what a
// write or a read of them does.

import BGTaskCore
import BGTaskProtocol
import Glibc

/// Everything a restarted daemon needs to carry on where the last one stopped (docs/SERVICE.md, Restarts lose
/// nothing): the policy's state, the processes behind the registrations (pid and start time, so a reused pid is
/// never adopted, and what the daemon had stopped of each), and how far the history goes. The history itself lives
/// in a file of its own that each write appends to (`StateStore.historyPath`): rewriting hundreds of entries on
/// every change would cost more than everything else together.
///
/// The file is a snapshot: what changed after it is in the journal it names (`journal`, see `StateJournal`),
/// and the state is the snapshot with the journal applied.
struct DaemonState: Codable, Sendable {
    /// What the file is, so a foreign file is never read as state.
    static let formatName = "bgtaskd-state"
    /// The layout's version: a file of another version is set aside, never guessed at.
    static let currentVersion = 4
    /// The versions read: 3 is 4 without lease records in its journal (`LifecycleChanges.tasks`), 2 is 3 without a
    /// journal. A daemon reading at most 3 sets a file of version 4 aside rather than miss the leases in its
    /// journal.
    static let readableVersions = 2...4

    var format = DaemonState.formatName
    var version = DaemonState.currentVersion
    /// The kernel's boot id: `CLOCK_MONOTONIC` instants, and pids, mean nothing after a reboot.
    var bootID: String
    /// When it was saved, on `CLOCK_MONOTONIC`.
    var savedAt: MonotonicInstant
    var lifecycle: SavedLifecycle
    var processes: [SavedProcess]
    /// The serial of the newest history entry this state covers: entries past it in the history file belong to a
    /// state that was never saved, and are not restored.
    var historySerial: Int
    /// The generation of the journal that follows this snapshot (`StateStore.journalPath(_:)`); nil: none.
    var journal: Int?
}

/// The first fields of the file, read before the rest so a file of another format or version is named as such.
struct DaemonStateHeader: Decodable {
    var format: String
    var version: Int
    var bootID: String
    var savedAt: MonotonicInstant
}

/// A process behind registrations, as saved.
struct SavedProcess: Codable, Sendable, Hashable {
    /// The daemon's serial for it, which the journal's records name it by; nil in files of version 2.
    var serial: Int? = nil
    var pid: pid_t
    var uid: uid_t
    /// Its start time in clock ticks after boot (`/proc/PID/stat` field 22): with the pid, its identity.
    var startTime: UInt64
    /// What the daemon had stopped: nothing, the process (`stoppedGroup` nil), or the group `stoppedGroup`.
    var isStopped: Bool
    var stoppedGroup: pid_t?
    /// The cgroup2 cgroup the daemon froze it through (its path), when it froze rather than stopped it.
    var frozenCgroup: String?
    /// The registrations of it the policy tracks.
    var apps: [AppID]
    var memoryBytes: UInt64?
    /// For a managed app: the cgroups the daemon made for it (freeze-and-kill, and v1 memory), which the next
    /// daemon goes on using and removes once the app is gone.
    var controlCgroup: String? = nil
    var memoryCgroup: String? = nil
    /// For a managed app the service manager started: its unit, which the next daemon goes on governing it through.
    var unit: String? = nil
}

/// One history entry, as saved (a line of the history file): its serial, the record (for who may see it) and what
/// `History()` shows.
struct SavedHistoryEntry: Codable, Sendable {
    var serial: Int
    var record: AuditEntry
    var entry: HistoryEntry
}

/// What a state write does to the history file.
enum HistoryUpdate: Sendable {
    /// Leaves it as it is.
    case none
    /// Appends these entries, a line each.
    case append([SavedHistoryEntry])
    /// Replaces it with these entries (after a restore, a failed write, or once it has grown to twice the history
    /// it keeps).
    case rewrite([SavedHistoryEntry])
}

/// What reading the state file found.
enum LoadedState {
    /// No file: a first start, or a start after a reboot cleared the runtime directory.
    case none
    /// A file that cannot be used, and why; the caller sets it aside.
    case unusable(String)
    /// The snapshot with its journals applied.
    case state(ReplayedState)
}
