// libFuzzer target: a saved policy state (the `lifecycle` of bgtaskd's state file) restored and run.
//
// Asserts that whatever decodes as a `SavedLifecycle` is either refused whole by `Lifecycle(restoring:policy:)`
// (its typed error) or restored into a policy that runs without trapping: `restarted(now:)`, every deadline it
// reaches in order, the snapshots, and every app's process exiting; and that the state it then holds saves and
// restores again (a state the policy reaches from a consistent one is consistent).
import BGTaskCore
import Foundation

private let decoder = JSONDecoder()
private let encoder = JSONEncoder()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSavedState(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let data = Data(UnsafeBufferPointer(start: start, count: count))
    guard let saved = try? decoder.decode(SavedLifecycle.self, from: data) else { return 0 }
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
        let again = try decoder.decode(SavedLifecycle.self, from: encoder.encode(core.saved))
        _ = try Lifecycle(restoring: again, policy: CorePolicy())
    } catch {
        preconditionFailure("a state the policy reached does not restore: \(error)")
    }
    return 0
}
