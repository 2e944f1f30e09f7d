// The state journal: what changed, appended after each loop iteration that changed anything, so saving a lease
// call costs one copy of what it touched into the mapped file, whatever the number of apps.

import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import Glibc

/// One line of the journal: what changed in one loop iteration, applied in order to the snapshot it follows.
struct JournalRecord: Codable, Sendable {
    /// When it was written, on `CLOCK_MONOTONIC`.
    var savedAt: MonotonicInstant
    /// The newest history entry it covers (see `DaemonState.historySerial`).
    var historySerial: Int
    var lifecycle: LifecycleChanges
    /// Processes added or changed, as they are now (each with its `serial`).
    var processes: [SavedProcess] = []
    /// The serials of processes no longer tracked.
    var endedProcesses: [Int] = []

    private enum CodingKeys: String, CodingKey {
        case savedAt, historySerial, lifecycle, processes, endedProcesses
    }

    init(
        savedAt: MonotonicInstant, historySerial: Int, lifecycle: LifecycleChanges, processes: [SavedProcess] = [],
        endedProcesses: [Int] = []
    ) {
        self.savedAt = savedAt
        self.historySerial = historySerial
        self.lifecycle = lifecycle
        self.processes = processes
        self.endedProcesses = endedProcesses
    }

    /// Absent lists are empty (the encoder leaves them out).
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        savedAt = try container.decode(MonotonicInstant.self, forKey: .savedAt)
        historySerial = try container.decode(Int.self, forKey: .historySerial)
        lifecycle = try container.decode(LifecycleChanges.self, forKey: .lifecycle)
        processes = try container.decodeIfPresent([SavedProcess].self, forKey: .processes) ?? []
        endedProcesses = try container.decodeIfPresent([Int].self, forKey: .endedProcesses) ?? []
    }
}

/// The journal file the daemon appends to: `state.journal.N` next to `state.json`, where `N` is the generation of
/// the snapshot it follows (`DaemonState.journal`).
///
/// Each record is one line. A record is acknowledged only once written whole, and a line a crash cut short is the
/// last one, which loading skips.
///
/// Records are copied into a window of the file mapped shared (`windowSize` bytes, reserved on disk with
/// `posix_fallocate` before it is mapped), with no system call: the bytes are in the page cache the moment they
/// are copied, as a `write` would leave them, so they outlive the daemon's end as written ones do (the state guards
/// against that, not against the kernel's; see `StateStore`). A record that does not fit in the window is written
/// with `pwrite`, and the window moves to the end of the records. The reserved space past the records reads as
/// NUL bytes, which no record holds (JSON text escapes them): loading stops at the first one. A failed `pwrite`
/// is cut off again (`ftruncate`) and thrown, as before: the caller then writes a snapshot. A failed reservation
/// only leaves the next record to `pwrite`. On a clean end the file is cut to its records.
///
/// Reserving first means a full disk is met by `posix_fallocate` or `pwrite`, as an error, never by a store
/// into the mapping (which would be `SIGBUS`). Only something that shrinks the file under the daemon (another
/// process with write access to the state directory, which is the daemon's own) could still raise one.
///
/// Used on the loop's thread only.
final class StateJournal {
    let generation: Int
    let path: String
    private let descriptor: FileDescriptor
    /// Bytes of records in the file.
    private(set) var size = 0
    /// The mapped window: `window.count` bytes of the file from `windowOffset`, reserved on disk; nil before the
    /// first record, after a failure, or where mapping failed (then every record takes `pwrite`).
    private var window: UnsafeMutableRawBufferPointer?
    private var windowOffset = 0

    /// The size of the mapped window: about 370 lease records (the window's pages count in the daemon's RSS).
    static let windowSize = 128 << 10

    /// Creates (or empties) the journal of `generation` beside `store`'s state file.
    init(store: StateStore, generation: Int) throws(Errno) {
        self.generation = generation
        path = store.journalPath(generation)
        descriptor = try FileDescriptor.open(
            path, .readWrite, options: [.create, .truncate, .noFollow], permissions: 0o600)
    }

    /// Appends a record's line. On failure the file is cut back to where it was, so no torn line is ever followed
    /// by another.
    func append(_ line: [UInt8]) throws(Errno) {
        if let window, size + line.count <= windowOffset + window.count {
            line.withUnsafeBytes { bytes in
                (window.baseAddress! + (size - windowOffset)).copyMemory(
                    from: bytes.baseAddress!, byteCount: bytes.count)
            }
            size += line.count
            return
        }
        unmapWindow()
        do {
            try descriptor.writeAll(line, at: size)
        } catch {
            _ = ftruncate(descriptor.rawValue, off_t(size))
            throw error
        }
        size += line.count
        mapWindow()
    }

    /// Reserves and maps a window from the page the records end in. Where that fails (a full disk, a file system
    /// that cannot map files), the next record is written with `pwrite`, which reports a full disk itself.
    private func mapWindow() {
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        let offset = size / pageSize * pageSize
        guard posix_fallocate(descriptor.rawValue, off_t(offset), off_t(Self.windowSize)) == 0 else { return }
        let address = mmap(nil, Self.windowSize, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor.rawValue, off_t(offset))
        guard let address, address != MAP_FAILED else { return }
        window = UnsafeMutableRawBufferPointer(start: address, count: Self.windowSize)
        windowOffset = offset
    }

    private func unmapWindow() {
        guard let window else { return }
        munmap(window.baseAddress, window.count)
        self.window = nil
    }

    deinit {
        unmapWindow()
        // The reserved space past the records goes: a journal left by a clean end holds its records alone.
        _ = ftruncate(descriptor.rawValue, off_t(size))
        try? descriptor.close()
    }
}

/// Encodes journal records: the policy's changes by hand (`ChangesJSONWriter`), what is rare through the JSON
/// encoder. Used on the loop's thread only.
final class JournalEncoder {
    private let encoder = JSONTextEncoder(sortsKeys: true, writesAbsentOptionals: false)
    private var writer: ChangesJSONWriter
    /// The buffer lines are built in, kept from one record to the next.
    private var buffer: [UInt8] = []

    init() {
        let encoder = self.encoder
        writer = ChangesJSONWriter { try encoder.encode($0) }
    }

    /// The record as one line of JSON, newline included, as `JournalRecord`'s `Decodable` conformance reads it.
    func line(_ record: JournalRecord) throws -> [UInt8] {
        buffer.removeAll(keepingCapacity: true)
        ChangesJSONWriter.appendLiteral(#"{"savedAt":{"nanoseconds":"#, to: &buffer)
        ChangesJSONWriter.writeInteger(record.savedAt.nanoseconds, to: &buffer)
        ChangesJSONWriter.appendLiteral(#"},"historySerial":"#, to: &buffer)
        ChangesJSONWriter.writeInteger(record.historySerial, to: &buffer)
        ChangesJSONWriter.appendLiteral(#","lifecycle":"#, to: &buffer)
        try writer.write(record.lifecycle, to: &buffer)
        if !record.processes.isEmpty {
            buffer += Array(#","processes":"#.utf8)
            try encoder.write(record.processes, to: &buffer)
        }
        if !record.endedProcesses.isEmpty {
            buffer += Array(#","endedProcesses":["#.utf8)
            buffer += record.endedProcesses.map(String.init).joined(separator: ",").utf8
            buffer.append(UInt8(ascii: "]"))
        }
        ChangesJSONWriter.appendLiteral("}\n", to: &buffer)
        return buffer
    }
}

extension StateStore {
    /// The journal following the snapshot of `generation`.
    func journalPath(_ generation: Int) -> String {
        basePath + ".journal.\(generation)"
    }

    /// Removes the journals of generations before `generation`: the snapshot of `generation` holds all they do.
    func removeJournals(before generation: Int) {
        for older in journalGenerations() where older < generation { unlink(journalPath(older)) }
    }

    /// Applies the journals from `state.journal` on, each generation's in turn while the next exists: a snapshot
    /// still being written when the daemon stopped leaves its predecessor and the journals after it. Returns
    /// the state, the last generation read and the number of records and cut-short lines, or why it cannot be
    /// used.
    func replayJournals(onto state: DaemonState) -> Result<ReplayedState, JournalError> {
        guard let first = state.journal else { return .success(ReplayedState(state: state, lastGeneration: 0)) }
        var replay = SavedLifecycle.Replay(state.lifecycle)
        var processes: [Int: SavedProcess] = [:]
        for (index, process) in state.processes.enumerated() { processes[process.serial ?? -1 - index] = process }
        var result = ReplayedState(state: state, lastGeneration: first)
        let decoder = JSONValueDecoder()
        var generation = first
        while true {
            let data: [UInt8]
            do {
                let descriptor = try FileDescriptor.open(journalPath(generation), .readOnly)
                defer { try? descriptor.close() }
                data = try descriptor.readToEnd(limit: Self.sizeLimit + 1)
            } catch {
                // The chain ends at the first generation with no journal (a snapshot's journal is created
                // after it, so a crash between the two leaves none).
                if error == .noSuchFileOrDirectory { break }
                return .failure(JournalError("cannot read \(journalPath(generation)): \(error)"))
            }
            guard data.count <= Self.sizeLimit else {
                return .failure(JournalError("\(journalPath(generation)) is larger than \(Self.sizeLimit) bytes"))
            }
            // The records end at the first NUL: past them is space reserved for more, never written (a crash
            // leaves it), or what a crash left of a record being copied, never acknowledged.
            let records = data[..<(data.firstIndex(of: 0) ?? data.endIndex)]
            var lines = records.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            // The part after the last newline: empty, or a line a crash cut short (never acknowledged).
            if let torn = lines.popLast(), !torn.isEmpty { result.tornLines += 1 }
            for (number, line) in lines.enumerated() {
                let record: JournalRecord
                do {
                    record = try decoder.decode(JournalRecord.self, from: try JSONParser.parse(line))
                } catch {
                    return .failure(
                        JournalError("line \(number + 1) of \(journalPath(generation)) does not decode (\(error))"))
                }
                do {
                    try replay.apply(record.lifecycle)
                } catch {
                    return .failure(
                        JournalError("line \(number + 1) of \(journalPath(generation)) does not apply: \(error)"))
                }
                for serial in record.endedProcesses { processes[serial] = nil }
                for process in record.processes {
                    guard let serial = process.serial else {
                        return .failure(
                            JournalError(
                                "line \(number + 1) of \(journalPath(generation)) names a process without "
                                    + "its serial"))
                    }
                    processes[serial] = process
                }
                result.state.savedAt = record.savedAt
                result.state.historySerial = record.historySerial
                result.records += 1
            }
            result.lastGeneration = generation
            generation += 1
        }
        result.state.lifecycle = replay.state
        result.state.processes = processes.sorted { $0.key < $1.key }.map(\.value)
        return .success(result)
    }
}

/// A snapshot with its journals applied.
struct ReplayedState {
    var state: DaemonState
    /// The newest journal generation read (the next snapshot takes one above it).
    var lastGeneration: Int
    var records = 0
    var tornLines = 0
}

/// Why the journals cannot be used.
struct JournalError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
