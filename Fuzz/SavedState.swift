// libFuzzer target: a saved policy state (the `lifecycle` of bgtaskd's state file) with journal records after it,
// restored and run.
//
// The input's first line is a `SavedLifecycle`; each further line that decodes as a record of changes
// (`LifecycleChanges`, as the journal holds them) is applied to it in order, as a restart replays the journal.
// Asserts that whatever results is either refused whole by `Lifecycle(restoring:policy:)` (its typed error) or
// restored into a policy that runs without trapping: `restarted(now:)`, every deadline it reaches in order, the
// snapshots, and every app's process exiting; that the state it then holds saves and restores again (a state the
// policy reaches from a consistent one is consistent); and that the changes it recorded meanwhile, written by
// hand as the journal writes them and read back, turn the state it restored into the state it holds. Read and
// written as the daemon reads and writes its files: `JSONParser` and `JSONValueDecoder`, `JSONTextEncoder`.
import BGTaskCore
import BGTaskJSON
import BGTaskProtocol

@testable import BGTaskDaemon

private let decoder = JSONValueDecoder()
private let encoder = JSONTextEncoder(sortsKeys: true, writesAbsentOptionals: false)

/// The state `text` holds; throws when it holds none.
private func decodeState<Bytes: Collection>(_ text: Bytes) throws -> SavedLifecycle where Bytes.Element == UInt8 {
    try decoder.decode(SavedLifecycle.self, from: JSONParser.parse(text))
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSavedState(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let lines = UnsafeBufferPointer(start: start, count: count).split(separator: UInt8(ascii: "\n"))
    guard let first = lines.first, let saved = try? decodeState(first) else { return 0 }
    var replay = SavedLifecycle.Replay(saved)
    for line in lines.dropFirst() {
        guard let tree = try? JSONParser.parse(line),
            let changes = try? decoder.decode(LifecycleChanges.self, from: tree)
        else { continue }
        // A record naming a registration the state does not hold is refused, as a restart refuses it.
        try? replay.apply(changes)
    }
    var core: Lifecycle
    do throws(SavedStateError) {
        core = try Lifecycle(restoring: replay.state, policy: CorePolicy())
    } catch {
        return 0
    }
    core.tracksChanges = true
    var replica = core.saved
    var now = MonotonicInstant(nanoseconds: 1 << 50)
    _ = core.restarted(now: now)
    for _ in 0..<16 {
        guard let deadline = core.nextDeadline else { break }
        now = max(now, deadline)
        _ = core.deadlineReached(now: now)
    }
    let snapshots = core.snapshots(now: now, includeEnded: true)
    for snapshot in snapshots where snapshot.state != .terminated {
        _ = core.processExited(snapshot.id, how: .exited, now: now)
    }
    do {
        let again = try decodeState(encoder.encode(core.saved))
        _ = try Lifecycle(restoring: again, policy: CorePolicy())
    } catch {
        preconditionFailure("a state the policy reached does not restore: \(error)")
    }
    do {
        var writer = ChangesJSONWriter { try encoder.encode($0) }
        var record: [UInt8] = []
        try writer.write(core.takeChanges(), to: &record)
        try replica.apply(try decoder.decode(LifecycleChanges.self, from: JSONParser.parse(record)))
        let expected = try encoder.encode(core.saved)
        let replayed = try encoder.encode(replica)
        precondition(
            replayed == expected,
            "the recorded changes do not turn the restored state into the state reached")
    } catch {
        preconditionFailure("the recorded changes do not read back: \(error)")
    }
    return 0
}
