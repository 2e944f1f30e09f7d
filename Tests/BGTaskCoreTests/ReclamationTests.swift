// Table-driven tests of the reclamation order: bands, heaviest first, ties, empty bands, foreground protection.

import BGTaskCore
import BGTaskTestSupport
import Testing

/// One candidate in a table row: name, band, MiB, and when it last was in the foreground (seconds).
private struct Row: CustomTestStringConvertible, Sendable {
    var label: String
    var candidates: [(String, ReclamationBand, UInt64, Int64)]
    var includeForeground: Bool
    var expected: [String]

    var testDescription: String { label }
}

private func candidates(_ rows: [(String, ReclamationBand, UInt64, Int64)]) -> [ReclamationCandidate] {
    rows.enumerated().map { index, row in
        ReclamationCandidate(
            app: AppID(rawValue: Int64(index + 1)), name: row.0, band: row.1, memoryBytes: row.2 << 20,
            lastForeground: .seconds(row.3))
    }
}

@Suite("Reclamation order")
struct ReclamationTests {
    private static let orderRows: [Row] = [
        Row(label: "no candidates", candidates: [], includeForeground: false, expected: []),
        Row(
            label: "bands before weight: a small suspended app goes before a huge background one",
            candidates: [("huge-bg", .backgroundIdle, 900, 0), ("small-susp", .suspended, 1, 0)],
            includeForeground: false, expected: ["small-susp", "huge-bg"]),
        Row(
            label: "heaviest first within a band",
            candidates: [("a", .suspended, 10, 0), ("b", .suspended, 30, 0), ("c", .suspended, 20, 0)],
            includeForeground: false, expected: ["b", "c", "a"]),
        Row(
            label: "all four bands in order, foreground allowed",
            candidates: [
                ("fg", .foreground, 500, 0), ("tasks", .backgroundWithTasks, 400, 0), ("idle", .backgroundIdle, 300, 0),
                ("susp", .suspended, 200, 0),
            ],
            includeForeground: true, expected: ["susp", "idle", "tasks", "fg"]),
        Row(
            label: "foreground protected by default",
            candidates: [("fg", .foreground, 500, 0), ("idle", .backgroundIdle, 1, 0)],
            includeForeground: false, expected: ["idle"]),
        Row(
            label: "only foreground apps and protection on: nothing to reclaim",
            candidates: [("fg1", .foreground, 500, 0), ("fg2", .foreground, 600, 0)],
            includeForeground: false, expected: []),
        Row(
            label: "ReclaimForeground=yes: foreground last, heaviest first",
            candidates: [
                ("fg1", .foreground, 500, 0), ("fg2", .foreground, 600, 0), ("t", .backgroundWithTasks, 1, 0),
            ],
            includeForeground: true, expected: ["t", "fg2", "fg1"]),
        Row(
            label: "empty middle bands are skipped",
            candidates: [("fg", .foreground, 5, 0), ("s", .suspended, 5, 0)],
            includeForeground: true, expected: ["s", "fg"]),
        Row(
            label: "tie on memory: the app that left the foreground longest ago first",
            candidates: [("recent", .suspended, 50, 900), ("old", .suspended, 50, 100), ("mid", .suspended, 50, 500)],
            includeForeground: false, expected: ["old", "mid", "recent"]),
        Row(
            label: "full tie: the older registration first, whatever the input order",
            candidates: [
                ("first", .suspended, 50, 100), ("second", .suspended, 50, 100), ("third", .suspended, 50, 100),
            ],
            includeForeground: false, expected: ["first", "second", "third"]),
        Row(
            label: "zero-byte readings still ordered, last in their band",
            candidates: [("zero", .backgroundIdle, 0, 0), ("some", .backgroundIdle, 1, 0)],
            includeForeground: false, expected: ["some", "zero"]),
    ]

    @Test("order", arguments: orderRows)
    private func order(row: Row) {
        let input = candidates(row.candidates)
        let ordered = Reclamation.order(input, includeForeground: row.includeForeground)
        #expect(ordered.map(\.name) == row.expected)
        // The order never depends on the input order.
        let reversed = Reclamation.order(input.reversed(), includeForeground: row.includeForeground)
        #expect(reversed.map(\.name) == row.expected)
    }

    private static let victimRows: [(UInt64, [String])] = [
        (0, []), (1, ["a"]), (100, ["a"]), (101, ["a", "b"]), (150, ["a", "b"]), (151, ["a", "b", "c"]),
        (10_000, ["a", "b", "c"]),
    ]

    @Test("victims: the shortest prefix that frees enough", arguments: victimRows)
    func victims(mebibytesToFree: UInt64, expected: [String]) {
        let ordered = Reclamation.order(
            candidates([("a", .suspended, 100, 0), ("b", .suspended, 50, 0), ("c", .backgroundIdle, 70, 0)]),
            includeForeground: false)
        #expect(Reclamation.victims(in: ordered, toFree: mebibytesToFree << 20).map(\.name) == expected)
    }

    @Test("victims never overflow when readings are huge")
    func victimsSaturate() {
        let ordered = candidates([("a", .suspended, 0, 0), ("b", .suspended, 0, 0)]).map { candidate in
            var copy = candidate
            copy.memoryBytes = .max
            return copy
        }
        #expect(Reclamation.victims(in: ordered, toFree: .max).count == 1)
    }

    @Test("the core puts live apps in their bands and skips apps without a reading or a registration")
    func coreBandsFromState() throws {
        let h = PolicyHarness()
        let fg = try h.register("fg")
        let suspended = try h.register("suspended")
        let idle = try h.register("idle")
        let busy = try h.register("busy")
        let unread = try h.register("unread")
        let closed = try h.register("closed")
        try h.setState(suspended, .background)
        try h.acknowledgeLast(.didEnterBackground, of: suspended)
        try h.setState(idle, .background)
        _ = try h.begin(busy)
        try h.setState(busy, .background)
        try h.setState(unread, .background)
        h.closeRegistration(closed)
        let readings: [AppID: UInt64] = [fg: 900, suspended: 10, idle: 20, busy: 800, closed: 5000]
        #expect(h.core.reclamationOrder(readings: readings).map(\.name) == ["suspended", "idle", "busy"])
        #expect(h.core.reclamationBand(of: busy) == .backgroundWithTasks)
        #expect(h.core.reclamationBand(of: closed) == nil)

        var policy = CorePolicy()
        policy.reclaimForeground = true
        var core = h.core
        core.updatePolicy(policy)
        #expect(core.reclamationOrder(readings: readings).map(\.name) == ["suspended", "idle", "busy", "fg"])
    }

    @Test("memory warning: every app is warned, likely victims with their rank; suspended apps get it queued")
    func memoryWarningRanksVictims() throws {
        let h = PolicyHarness()
        let fg = try h.register("fg")
        let big = try h.register("big")
        let small = try h.register("small")
        for app in [big, small] {
            try h.setState(app, .background)
            try h.acknowledgeLast(.didEnterBackground, of: app)
        }
        let busy = try h.register("busy")
        _ = try h.begin(busy)
        try h.setState(busy, .background)
        _ = h.takeEffects()
        h.memoryWarning(readings: [fg: 500, big: 300, small: 100, busy: 50], bytesToFree: 350)
        #expect(h.takeEffects() == ["fg ← memoryWarning safe", "busy ← memoryWarning safe"])
        try h.setState(big, .active)
        #expect(
            h.takeEffects() == [
                "resume big", "big ← memoryWarning victim#1", "big ← willEnterForeground", "big ← didBecomeActive",
            ])
        try h.setState(small, .inactive)
        #expect(h.takeEffects() == ["resume small", "small ← memoryWarning victim#2", "small ← willEnterForeground"])
    }
}
