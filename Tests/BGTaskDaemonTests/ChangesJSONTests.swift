// The journal's hand-written JSON against the synthesized Encodable form: for the strings a peer chooses, for lease
// records, and for the changes of random sequences of the policy.

import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskCore
@testable import BGTaskDaemon

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

    @Test("scheduled requests, their ledgers and last-foreground times are in the record, and replay to the same state")
    func scheduledRecords() throws {
        // The hand-written record once left these out: an acknowledged SubmitRequest was in no file until the next
        // snapshot, and a daemon killed before it came back without the request.
        let h = PolicyHarness()
        h.setWallClockOffset(.seconds(1_700_000_000))
        h.setConditions(Conditions(externalPower: false, batteryNotLow: true))
        let app = try h.register("app")
        h.startTrackingChanges()
        var replica = h.core.saved
        func record() throws -> LifecycleChanges {
            let changes = try writtenAndReadBack(h.takeChanges())
            try replica.apply(changes)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            #expect(try encoder.encode(replica) == encoder.encode(h.core.saved))
            return changes
        }
        try h.setState(app, .active)
        try h.submit(
            ScheduledRequest(
                appName: "app", identifier: "sync", kind: .refresh, earliestBegin: WallClockInstant(nanoseconds: 0),
                constraints: [.externalPower]))
        var changes = try record()
        #expect(changes.scheduledRequests?.map(\.name) == ["app/sync"])
        #expect(changes.lastForeground?.map(\.name) == ["app"])
        // Power on: it runs; its lease and its running phase are in the record.
        h.setConditions(Conditions(externalPower: true, batteryNotLow: true))
        changes = try record()
        #expect(changes.scheduledRequests?.first?.value?.runningTask != nil)
        h.advance(by: .seconds(1))
        try h.cancel(app: "app", identifier: "sync")
        changes = try record()
        #expect(
            changes.scheduledRequests?.map(\.name) == ["app/sync"] && changes.scheduledRequests?.first?.value == nil)
        #expect(changes.scheduledLedgers?.map(\.name) == ["app"])
        #expect(replica.scheduling?.requests.isEmpty == true)
    }

    @Test(
        "400 random sequences: each step's changes written by hand equal their Encodable form, and read back and applied they give the state after it"
    )
    func randomSequences() async throws {
        try await offThePool(computing: true) { try randomSequencesBody() }
    }

    private func randomSequencesBody() throws {
        // What the records carried: whole apps, and leases alone (the short form).
        var recordsWithApps = 0
        var leaseRecords = 0
        for seed in 0..<400 {
            var random = SeededGenerator(seed: UInt64(seed) &* 0x9E37_79B9 &+ 1)
            var policy = CorePolicy()
            policy.defaultAppPolicy.backgroundTime = .seconds(Int64.random(in: 1...30, using: &random))
            policy.tasksPerAppMax = Int.random(in: 1...4, using: &random)
            policy.queuedEventsPerAppMax = Int.random(in: 1...3, using: &random)
            policy.historySize = Int.random(in: 1...4, using: &random)
            let h = PolicyHarness(policy: policy)
            h.startTrackingChanges()
            var replica = h.core.saved
            var apps: [AppID] = []
            var tasks: [AppID: [TaskID]] = [:]
            let names = ["a", "b", "c", "q\"uote", "line\nfeed"]
            for step in 0..<60 {
                let app = apps.randomElement(using: &random)
                do {
                    switch Int.random(in: 0..<13, using: &random) {
                    case 0, 1:
                        let name = names.randomElement(using: &random)!
                        apps.append(try h.register(name, pid: Int32(100 + step), uid: 1000))
                    case 2:
                        apps.append(
                            try h.launch(
                                names.randomElement(using: &random)!, pid: Int32(500 + step),
                                forScheduledWork: random.next() % 2 == 0))
                    case 3, 4:
                        guard let app else { continue }
                        tasks[app, default: []].append(try h.begin(app, random.next() % 2 == 0 ? nil : "t\(step)"))
                    case 5:
                        guard let app, let task = tasks[app]?.popLast() else { continue }
                        try h.end(app, task)
                    case 6:
                        guard let app else { continue }
                        let states: [RequestedState] = [.active, .inactive, .background]
                        try h.setState(app, states.randomElement(using: &random)!)
                    case 7:
                        guard let app, h.events(of: app).contains(where: { $0.kind == .didEnterBackground }) else {
                            continue
                        }
                        try h.acknowledgeLast(.didEnterBackground, of: app)
                    case 8:
                        guard let app else { continue }
                        try h.terminate(app)
                    case 9:
                        guard let app else { continue }
                        if random.next() % 2 == 0 { h.closeRegistration(app) } else { h.processExited(app) }
                    case 10:
                        guard let app else { continue }
                        try h.reclaim(app, memoryBytes: random.next() % 2 == 0 ? nil : 1 << 20)
                    case 11:
                        guard let app else { continue }
                        h.exempt(
                            app,
                            random.next() % 2 == 0
                                ? .unitStopping(unit: "app-\(step).service")
                                : .unitWatchdog(unit: "q\"uote.service", interval: .milliseconds(1500)))
                    default:
                        h.advance(by: .milliseconds(Int64.random(in: 100...40_000, using: &random)))
                    }
                } catch {
                    // A refused request is part of the sequence: it changes nothing, and the record says so.
                }
                let changes = try writtenAndReadBack(h.takeChanges())
                if !changes.apps.isEmpty { recordsWithApps += 1 }
                if changes.tasks != nil { leaseRecords += 1 }
                try replica.apply(changes)
                let encoder = JSONEncoder()
                encoder.outputFormatting = .sortedKeys
                #expect(
                    try encoder.encode(replica) == encoder.encode(h.core.saved),
                    "seed \(seed), step \(step): the replayed state differs from the state")
            }
        }
        #expect(
            recordsWithApps > 0 && leaseRecords > 0, "\(recordsWithApps) records of apps, \(leaseRecords) of leases")
    }
}
