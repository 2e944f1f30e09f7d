// The daemon's own account of the demo: its Watch stream, quoted as each entry is recorded.
import BGTaskCLI
import BGTaskClient
import Foundation

/// Follows the daemon's audit trail (`Watch`) on a thread of its own: every entry is quoted in the transcript as
/// `bgtaskd | APP KIND details` the moment it arrives, and kept for the narration to wait on.
final class AuditFollower {
    /// Every entry so far.
    let entries = Feed<HistoryEntry>()
    private let stream: WatchStream

    /// Opens the Watch stream on `client`'s daemon and starts quoting it.
    init(client: LifecycleClient, transcript: Transcript) throws(DemoFailure) {
        stream = try daemonCall("Watch") { () throws(ClientError) in try client.watch() }
        let entries = entries
        let stream = stream
        let thread = Thread {
            while let entry = try? stream.next() {
                transcript.quote("bgtaskd", Self.describe(entry))
                entries.append(entry)
            }
            entries.close()
        }
        thread.name = "bgtask-demo-watch"
        thread.start()
    }

    /// `uploader  stateChanged  state=suspended`: the entry as `bgtask watch` shows it, without the wall clock
    /// (the transcript stamps its own time).
    static func describe(_ entry: HistoryEntry) -> String {
        ([Formatting.printable(entry.app), entry.kind.rawValue] + Rendering.details(entry)).joined(separator: "  ")
    }

    /// Waits for the first entry after `mark` about `app` of `kind` that `matches`.
    @discardableResult
    func wait(
        for kind: AuditKind, of app: String, after mark: Int, timeout: Duration, transcript: Transcript,
        describedAs what: String? = nil, where matches: (HistoryEntry) -> Bool = { _ in true }
    ) throws(DemoFailure) -> (entry: HistoryEntry, next: Int) {
        let found = try entries.wait(
            after: mark, for: what ?? "the daemon's \(kind.rawValue) entry for \(app)", timeout: timeout,
            transcript: transcript
        ) { $0.app == app && $0.kind == kind && matches($0) }
        return (found.item, found.next)
    }

    /// Stops following: closes the stream, which ends the reading thread, and waits briefly for it.
    func stop() {
        stream.close()
        _ = entries.first(after: Int.max, within: .seconds(2)) { _ in false }
    }
}
