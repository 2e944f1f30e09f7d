// libFuzzer target: a saved policy state (the `lifecycle` of bgtaskd's state file) restored and run.
//
// Asserts that whatever decodes as a `SavedLifecycle` is either refused whole by `Lifecycle(restoring:policy:)`
// (its typed error) or restored into a policy that runs without trapping: `restarted(now:)`, every deadline it
// reaches in order, the snapshots, and every app's process exiting; and that the state it then holds saves and
// restores again (a state the policy reaches from a consistent one is consistent). Read and written as the daemon
// reads and writes its state file: `JSONParser` and `JSONValueDecoder`, `JSONTextEncoder`.
import BGTaskCore
import BGTaskProtocol

private let decoder = JSONValueDecoder()
private let encoder = JSONTextEncoder(sortsKeys: true, writesAbsentOptionals: false)

/// The state `text` holds; throws when it holds none.
private func decodeState<Bytes: Collection>(_ text: Bytes) throws -> SavedLifecycle where Bytes.Element == UInt8 {
    try decoder.decode(SavedLifecycle.self, from: JSONParser.parse(text))
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSavedState(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    guard let saved = try? decodeState(UnsafeBufferPointer(start: start, count: count)) else { return 0 }
    var core: Lifecycle
    do throws(SavedStateError) {
        core = try Lifecycle(restoring: saved, policy: CorePolicy())
    } catch {
        return 0
    }
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
    return 0
}
