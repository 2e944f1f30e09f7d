// The journal's hand-written JSON against the synthesized Encodable form, for the strings a peer chooses.

import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskCore

@Suite("Changes written by hand")
struct ChangesJSONTests {
    @Test(
        "a task name is escaped as a JSON encoder escapes it, and reads back the same",
        arguments: ["plain", "quote \" and backslash \\", "line\nfeed\ttab\r", "\u{1}\u{1F}\u{7F}", "é日本😀", ""])
    func taskNames(_ name: String) throws {
        let h = PolicyHarness()
        h.startTrackingChanges()
        let app = try h.register("app")
        _ = try h.begin(app, name)
        // With the registration: the whole app, its lease in it.
        let read = try writtenAndReadBack(h.takeChanges())
        #expect(read.apps.first?.openTasks.first?.name == name)
        // Alone: the lease only.
        _ = try h.begin(app, name)
        let lease = try writtenAndReadBack(h.takeChanges())
        #expect(lease.apps.isEmpty)
        #expect(lease.tasks?.first?.began.first?.name == name)
    }

    /// `changes` written by hand, checked against their synthesized form, and read back.
    func writtenAndReadBack(
        _ changes: LifecycleChanges, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> LifecycleChanges {
        var writer = ChangesJSONWriter { Array(try JSONEncoder().encode($0)) }
        var written: [UInt8] = []
        try writer.write(changes, to: &written)
        let byHand = try JSONSerialization.jsonObject(with: Data(written)) as? NSDictionary
        let synthesized = try JSONSerialization.jsonObject(with: JSONEncoder().encode(changes)) as? NSDictionary
        #expect(
            byHand != nil && byHand == synthesized, "\(String(decoding: written, as: UTF8.self))",
            sourceLocation: sourceLocation)
        return try JSONDecoder().decode(LifecycleChanges.self, from: Data(written))
    }

    @Test("a lease call on an app otherwise unchanged is recorded as the lease, and replays to the same state")
    func leaseOnlyRecords() throws {
        let h = PolicyHarness()
        let app = try h.register("app")
        let other = try h.register("other")
        let kept = try h.begin(app, "kept")
        h.startTrackingChanges()
        var replica = h.core.saved
        func record() throws -> LifecycleChanges {
            let changes = try writtenAndReadBack(h.takeChanges())
            try replica.apply(changes)
            #expect(replica.apps.map(\.openTasks.count) == h.core.saved.apps.map(\.openTasks.count))
            #expect(replica.nextTaskID == h.core.saved.nextTaskID)
            return changes
        }

        let begun = try h.begin(app, "sync")
        var changes = try record()
        #expect(changes.apps.isEmpty && changes.tasks?.count == 1)
        #expect(changes.tasks?.first?.app == app && changes.tasks?.first?.began.map(\.id) == [begun])

        try h.end(app, kept)
        changes = try record()
        #expect(changes.tasks?.first?.ended == [kept] && changes.tasks?.first?.began.isEmpty == true)

        // Begun and ended between two records: nothing of it is written.
        try h.end(app, try h.begin(app))
        changes = try record()
        #expect(changes.tasks == nil && changes.apps.isEmpty)

        // Another change of the app in the same record: the whole app, no lease record.
        _ = try h.begin(other)
        try h.setState(other, .background)
        changes = try record()
        #expect(changes.tasks == nil && changes.apps.map(\.id) == [other])
        #expect(replica.apps.first { $0.id == app }?.openTasks.map(\.id) == [begun])

        // A record for a registration the state does not hold is refused.
        var empty = h.core.saved
        empty.apps = []
        _ = try h.begin(app)
        #expect(throws: SavedLifecycle.ReplayError.self) { try empty.apply(h.takeChanges()) }
    }
}
