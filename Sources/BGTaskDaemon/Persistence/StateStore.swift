// The daemon's saved state: one JSON file in the runtime directory, written atomically, read back tolerantly.

import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import Glibc

/// The state file and its history file: `save` replaces the state atomically (a temporary file in the same
/// directory, then `rename`), so a crash at any moment leaves the old state or the new one, never half of one;
/// the history file is appended to, and replaced the same way now and then.
struct StateStore: Sendable {
    /// Where the state lives.
    let path: String
    /// Keeps the apps' encodings from one save to the next. Used by one thread at a time: the writer thread, or
    /// the loop while no snapshot is in flight (`withOwnEncoder()` gives the loop one of its own otherwise).
    let encoder: StateEncoder
    /// Orders the snapshots put in place, shared by every copy of the store.
    private let fence: SnapshotFence

    /// The store of the state at `path`.
    init(path: String) {
        self.path = path
        encoder = StateEncoder()
        fence = SnapshotFence()
    }

    private init(path: String, encoder: StateEncoder, fence: SnapshotFence) {
        self.path = path
        self.encoder = encoder
        self.fence = fence
    }

    /// The same store with an encoder of its own: for a save on the loop while the writer thread may still be
    /// encoding with the shared one (a stop that did not wait for it). The fence stays shared.
    func withOwnEncoder() -> StateStore {
        StateStore(path: path, encoder: StateEncoder(), fence: fence)
    }
    /// The largest file read back: far above the state of thousands of apps, a bound on a corrupted one.
    static let sizeLimit = 256 << 20

    /// The kernel's boot id, or an empty text where it cannot be read.
    static func bootID(procFS: ProcFS) -> String {
        String(((try? procFS.read("sys/kernel/random/boot_id")) ?? "").filter { !$0.isWhitespace })
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
        let snapshot: DaemonState
        switch Self.decodeSnapshot(data, bootID: bootID, now: now) {
        case .failure(let reason): return .unusable(reason.description)
        case .success(let decoded): snapshot = decoded
        }
        switch replayJournals(onto: snapshot) {
        case .failure(let error):
            return .unusable(error.description)
        case .success(let replayed):
            guard replayed.state.savedAt <= now else {
                return .unusable("its journal was written at \(replayed.state.savedAt), after now (\(now))")
            }
            return .state(replayed)
        }
    }

    /// The snapshot `data` holds, or why it cannot be used: not a state file, another format, version or boot,
    /// saved in the future of `now`, or a state that does not decode. The journals after it are not read.
    static func decodeSnapshot(_ data: [UInt8], bootID: String, now: MonotonicInstant) -> Result<DaemonState, Refusal> {
        let decoder = JSONValueDecoder()
        let tree: JSONValue
        let header: DaemonStateHeader
        do {
            tree = try JSONParser.parse(data)
            header = try decoder.decode(DaemonStateHeader.self, from: tree)
        } catch {
            return .failure(Refusal("it is not a state file (\(describe(error)))"))
        }
        guard header.format == DaemonState.formatName else { return .failure(Refusal("it is a \(header.format) file")) }
        guard DaemonState.readableVersions.contains(header.version) else {
            return .failure(
                Refusal(
                    "it has version \(header.version); this bgtaskd reads versions "
                        + "\(DaemonState.readableVersions.lowerBound) to \(DaemonState.readableVersions.upperBound)"))
        }
        guard header.bootID == bootID else { return .failure(Refusal("it was saved before the machine last booted")) }
        guard header.savedAt <= now else {
            return .failure(Refusal("it was saved at \(header.savedAt), after now (\(now))"))
        }
        do {
            return .success(try decoder.decode(DaemonState.self, from: tree))
        } catch {
            return .failure(Refusal("it does not decode (\(describe(error)))"))
        }
    }

    /// Why a state file cannot be used, in words for the log.
    struct Refusal: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// A decoding error in one line: what was wrong and where.
    private static func describe(_ error: any Error) -> String {
        switch error {
        case let error as JSONParseError:
            return error.description
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
        _ = rename(historyPath, historyPath + ".bad")
        setAsideJournals()
        return rename(path, destination) == 0 ? destination : nil
    }

    /// The state file's path without `.json`: the other files' names start with it.
    var basePath: String {
        path.hasSuffix(".json") ? String(path.dropLast(5)) : path
    }

    /// The history file: `state.history.jsonl` next to `state.json`.
    var historyPath: String {
        basePath + ".history.jsonl"
    }

    /// Updates the history file, then writes `state` atomically. The history goes first: a crash between the two
    /// leaves entries past the state's `historySerial`, which loading ignores.
    ///
    /// Snapshots are put in place in the order of their journal generations, whichever thread writes them: a
    /// snapshot older than one already in place is dropped (its temporary file removed) and this returns false.
    /// Each is written to a temporary file of its own generation, so two writers never share one.
    @discardableResult
    func save(_ state: DaemonState, history: HistoryUpdate = .none) throws -> Bool {
        try updateHistory(history)
        let generation = state.journal ?? 0
        let bytes = try encoder.encode(state)
        let temporary = path + ".tmp-\(generation)"
        try FileReplacement.write(bytes, to: temporary)
        return try fence.install(generation: generation) {
            try FileReplacement.moveIntoPlace(temporary, over: path)
        } dropping: {
            unlink(temporary)
        }
    }

    /// Removes temporary files a daemon that died while writing left behind (`PATH.tmp`, `PATH.tmp-N`).
    func removeTemporaryFiles() {
        let directoryPath = Self.directory(of: path)
        let prefix = String(path.split(separator: "/").last ?? "") + ".tmp"
        guard let directory = opendir(directoryPath) else { return }
        defer { closedir(directory) }
        var stale: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == prefix || name.hasPrefix(prefix + "-") { stale.append(name) }
        }
        for name in stale { unlink(directoryPath + "/" + name) }
    }

    /// Appends to the history file, or replaces it.
    func updateHistory(_ history: HistoryUpdate) throws {
        switch history {
        case .none:
            break
        case .append(let entries):
            guard !entries.isEmpty else { break }
            let descriptor = try FileDescriptor.open(
                historyPath, .writeOnly, options: [.create, .append, .noFollow], permissions: 0o600)
            defer { try? descriptor.close() }
            try descriptor.writeAll(try Self.lines(entries))
        case .rewrite(let entries):
            try replace(historyPath, with: try Self.lines(entries))
        }
    }

    /// The entries as JSON lines.
    private static func lines(_ entries: [SavedHistoryEntry]) throws -> [UInt8] {
        let encoder = JSONTextEncoder(writesAbsentOptionals: false)
        var bytes: [UInt8] = []
        for entry in entries {
            bytes += try encoder.encode(entry)
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }

    /// Replaces the file at `target` with `bytes` atomically (`FileReplacement`).
    ///
    /// No `fsync`: the state guards against the daemon's end, not the kernel's. Written data is in the page cache
    /// the moment `write` returns, which a crash, a `kill -9` or a watchdog abort of the daemon does not touch;
    /// only a kernel crash or a power cut loses it, and after either the machine boots again, so the state (of
    /// another boot) would be set aside anyway. The runtime directory is a tmpfs besides, where `fsync` does
    /// nothing. Syncing a file on disk (`--state-file` elsewhere) would cost each write milliseconds for nothing.
    private func replace(_ target: String, with bytes: [UInt8]) throws {
        try FileReplacement.replace(target, with: bytes)
    }

    /// The history entries up to `serial` (the state's `historySerial`), oldest first, and how many lines could
    /// not be read (a line torn by a crash, or damage): those are skipped, never fatal. No file is no history.
    func loadHistory(upTo serial: Int) -> (entries: [SavedHistoryEntry], skipped: Int) {
        let data: [UInt8]
        do {
            let descriptor = try FileDescriptor.open(historyPath, .readOnly)
            defer { try? descriptor.close() }
            data = try descriptor.readToEnd(limit: Self.sizeLimit)
        } catch {
            return ([], error == .noSuchFileOrDirectory ? 0 : 1)
        }
        let decoder = JSONValueDecoder()
        var entries: [SavedHistoryEntry] = []
        var skipped = 0
        for line in data.split(separator: UInt8(ascii: "\n")) {
            guard let tree = try? JSONParser.parse(line),
                let entry = try? decoder.decode(SavedHistoryEntry.self, from: tree)
            else {
                skipped += 1
                continue
            }
            // In order, each once: anything else is not this state's history.
            guard entry.serial <= serial, entry.serial > (entries.last?.serial ?? 0) else { continue }
            entries.append(entry)
        }
        return (entries, skipped)
    }

    /// Removes the files (nothing is left to restore).
    func remove() {
        unlink(path)
        unlink(historyPath)
        for generation in journalGenerations() { unlink(journalPath(generation)) }
    }

    /// The generations of the journals present, oldest first.
    func journalGenerations() -> [Int] {
        let directoryPath = Self.directory(of: path)
        let prefix = String(journalPath(0).dropLast()).split(separator: "/").last.map(String.init) ?? ""
        guard let directory = opendir(directoryPath) else { return [] }
        defer { closedir(directory) }
        var generations: [Int] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name.hasPrefix(prefix), let generation = Int(name.dropFirst(prefix.count)), generation > 0 {
                generations.append(generation)
            }
        }
        return generations.sorted()
    }

    /// Moves the journals out of the way with the state (`.bad` appended).
    private func setAsideJournals() {
        for generation in journalGenerations() {
            _ = rename(journalPath(generation), journalPath(generation) + ".bad")
        }
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
