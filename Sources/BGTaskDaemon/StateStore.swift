// The daemon's saved state: one JSON file in the runtime directory, written atomically, read back tolerantly.

import BGTaskCore
import BGTaskProtocol
import BGTaskSystem
import Foundation
import Glibc

/// Everything a restarted daemon needs to carry on where the last one stopped (DESIGN §8): the policy's state,
/// the processes behind the registrations (pid and start time, so a reused pid is never adopted, and what the
/// daemon had stopped of each), and the history.
struct DaemonState: Codable, Sendable {
    /// What the file is, so a foreign file is never read as state.
    static let formatName = "bgtaskd-state"
    /// The layout's version: a file of another version is set aside, never guessed at.
    static let currentVersion = 1

    var format = DaemonState.formatName
    var version = DaemonState.currentVersion
    /// The kernel's boot id: `CLOCK_MONOTONIC` instants, and pids, mean nothing after a reboot.
    var bootID: String
    /// When it was saved, on `CLOCK_MONOTONIC`.
    var savedAt: MonotonicInstant
    var lifecycle: SavedLifecycle
    var processes: [SavedProcess]
    var history: [SavedHistoryEntry]
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
    var pid: pid_t
    var uid: uid_t
    /// Its start time in clock ticks after boot (`/proc/PID/stat` field 22): with the pid, its identity.
    var startTime: UInt64
    /// What the daemon had stopped: nothing, the process (`stoppedGroup` nil), or the group `stoppedGroup`.
    var isStopped: Bool
    var stoppedGroup: pid_t?
    /// The registrations of it the policy tracks.
    var apps: [AppID]
    var memoryBytes: UInt64?
}

/// One history entry, as saved: the record (for who may see it) and what `History()` shows.
struct SavedHistoryEntry: Codable, Sendable {
    var record: AuditEntry
    var entry: HistoryEntry
}

/// What reading the state file found.
enum LoadedState {
    /// No file: a first start, or a start after a reboot cleared the runtime directory.
    case none
    /// A file that cannot be used, and why; the caller sets it aside.
    case unusable(String)
    case state(DaemonState)
}

/// The state file: `save` replaces it atomically (a temporary file in the same directory, `fsync`, `rename`,
/// `fsync` of the directory), so a crash at any moment leaves the old state or the new one, never half of one.
struct StateStore: Sendable {
    /// Where the state lives.
    let path: String
    /// The largest file read back: far above the state of thousands of apps, a bound on a corrupted one.
    static let sizeLimit = 256 << 20

    /// The kernel's boot id, or an empty text where it cannot be read.
    static func bootID(procFS: ProcFS) -> String {
        ((try? procFS.read("sys/kernel/random/boot_id")) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Reads the state back. A file of another format, version or boot, one saved in the future of this clock,
    /// or one that does not decode is `.unusable` with the reason; a missing file is `.none`.
    func load(bootID: String, now: MonotonicInstant) -> LoadedState {
        let data: [UInt8]
        do {
            let descriptor = try FileDescriptor.open(path, .readOnly)
            defer { try? descriptor.close() }
            data = try descriptor.readToEnd(limit: Self.sizeLimit + 1)
        } catch {
            if error == .noSuchFileOrDirectory { return .none }
            return .unusable("cannot read it: \(error)")
        }
        guard data.count <= Self.sizeLimit else { return .unusable("it is larger than \(Self.sizeLimit) bytes") }
        let decoder = JSONDecoder()
        let header: DaemonStateHeader
        do {
            header = try decoder.decode(DaemonStateHeader.self, from: Data(data))
        } catch {
            return .unusable("it is not a state file (\(Self.describe(error)))")
        }
        guard header.format == DaemonState.formatName else { return .unusable("it is a \(header.format) file") }
        guard header.version == DaemonState.currentVersion else {
            return .unusable(
                "it has version \(header.version); this bgtaskd reads version \(DaemonState.currentVersion)")
        }
        guard header.bootID == bootID else { return .unusable("it was saved before the machine last booted") }
        guard header.savedAt <= now else { return .unusable("it was saved at \(header.savedAt), after now (\(now))") }
        do {
            return .state(try decoder.decode(DaemonState.self, from: Data(data)))
        } catch {
            return .unusable("it does not decode (\(Self.describe(error)))")
        }
    }

    /// A decoding error in one line: what was wrong and where.
    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.dataCorrupted(let context), DecodingError.keyNotFound(_, let context),
            DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return context.debugDescription + (path.isEmpty ? "" : " at \(path)")
        default:
            return "\(error)"
        }
    }

    /// Moves an unusable file out of the way (`PATH.bad`, replacing an older one), so the next save does not
    /// destroy the evidence and the next start does not trip over it again. Returns where it went.
    func setAside() -> String? {
        let destination = path + ".bad"
        return rename(path, destination) == 0 ? destination : nil
    }

    /// Writes `state` atomically.
    func save(_ state: DaemonState) throws {
        let data = try JSONEncoder().encode(state)
        let temporary = path + ".tmp"
        let descriptor = try FileDescriptor.open(
            temporary, .writeOnly, options: [.create, .truncate, .noFollow], permissions: 0o600)
        do {
            try descriptor.writeAll(Array(data))
            try descriptor.synchronize()
            try descriptor.close()
        } catch {
            try? descriptor.close()
            unlink(temporary)
            throw error
        }
        guard rename(temporary, path) == 0 else {
            let error = Errno(rawValue: errno, operation: "rename(\(temporary), \(path))")
            unlink(temporary)
            throw error
        }
        // The rename is durable once the directory is; on tmpfs (the runtime directory) this costs nothing.
        if let directory = try? FileDescriptor.open(Self.directory(of: path), .readOnly, options: [.directory]) {
            try? directory.synchronize()
            try? directory.close()
        }
    }

    /// Removes the file (nothing is left to restore).
    func remove() {
        unlink(path)
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
