// Encoding snapshots of the state, each app and process re-encoded only when it changed, and putting them in
// place in the order of their generations.

import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import Synchronization

/// The state's fields but the policy's and the processes (see `StateEncoder`).
private struct DaemonStateHead: Encodable {
    var format: String
    var version: Int
    var bootID: String
    var savedAt: MonotonicInstant
    var historySerial: Int
    var journal: Int?
}

/// Encodes states one after another, keeping each app's and each process's encoding until it changes: a write
/// after one call encodes what that call changed, not every app (the JSON encoder is the bulk of a write's cost).
/// Used by one thread at a time (the state writer's).
final class StateEncoder: @unchecked Sendable {
    /// The size of the last state encoded, in bytes (0 before the first): read by the loop to size the journal's
    /// compaction threshold (a journal is compacted once it outgrows the last snapshot).
    let lastEncodedSize = Atomic<Int>(0)
    private let encoder = JSONTextEncoder(sortsKeys: true, writesAbsentOptionals: false)
    private var cache: [AppID: (revision: UInt64, bytes: [UInt8])] = [:]
    private var processCache: [SavedProcess: [UInt8]] = [:]

    // Keys sorted: "apps" then comes first in the policy's object, where the apps are put. Absent optionals left
    // out, as Foundation's encoder does (files written by earlier versions read the same).
    init() {}

    /// The state as JSON, equal to what `JSONEncoder` makes of it (as a JSON value; the key order differs).
    func encode(_ state: DaemonState) throws -> [UInt8] {
        let head = Array(
            try encoder.encode(
                DaemonStateHead(
                    format: state.format, version: state.version, bootID: state.bootID, savedAt: state.savedAt,
                    historySerial: state.historySerial, journal: state.journal)))
        let rest = Array(try encoder.encode(state.lifecycle.withoutApps))
        let emptyApps = Array(#"{"apps":[]"#.utf8)
        guard head.last == UInt8(ascii: "}"), rest.starts(with: emptyApps) else {
            let whole = try encoder.encode(state)
            lastEncodedSize.store(whole.count, ordering: .relaxed)
            return whole
        }
        var bytes = head.dropLast() + Array(#","processes":["#.utf8)
        var keptProcesses: [SavedProcess: [UInt8]] = [:]
        keptProcesses.reserveCapacity(state.processes.count)
        for (index, process) in state.processes.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            let encoded = try processCache[process] ?? Array(encoder.encode(process))
            keptProcesses[process] = encoded
            bytes += encoded
        }
        processCache = keptProcesses
        bytes += Array(#"],"lifecycle":{"apps":["#.utf8)
        var kept: [AppID: (revision: UInt64, bytes: [UInt8])] = [:]
        kept.reserveCapacity(state.lifecycle.appCount)
        for (index, app) in state.lifecycle.savedApps.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            let encoded: [UInt8]
            if let revision = app.revision, let cached = cache[app.id], cached.revision == revision {
                encoded = cached.bytes
            } else {
                encoded = Array(try encoder.encode(app))
            }
            if let revision = app.revision { kept[app.id] = (revision, encoded) }
            bytes += encoded
        }
        cache = kept
        bytes.append(UInt8(ascii: "]"))
        bytes += rest[emptyApps.count...]
        bytes.append(UInt8(ascii: "}"))
        lastEncodedSize.store(bytes.count, ordering: .relaxed)
        return Array(bytes)
    }
}

/// The generation of the newest snapshot put in place, so that an older one, written by a thread that finished
/// late (the writer a stop did not wait for), never replaces a newer one.
final class SnapshotFence: Sendable {
    private let newest = Mutex<Int?>(nil)

    /// Runs `install` if `generation` is newer than every snapshot installed so far, else `drop`; whether it
    /// installed. The check and the install are one step: no other install runs between them.
    func install(generation: Int, _ install: () throws -> Void, dropping drop: () -> Void) throws -> Bool {
        try newest.withLock { newest in
            if let newest, generation <= newest {
                drop()
                return false
            }
            try install()
            newest = generation
            return true
        }
    }
}
