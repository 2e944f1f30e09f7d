// The reclamation order: by band, memory-heaviest first within a band, with a stable tie-break.

/// An app that could be terminated to free memory, with what the ordering looks at.
public struct ReclamationCandidate: Hashable, Sendable {
    /// The registration.
    public var app: AppID
    /// Its name, for logs.
    public var name: String
    /// Its band: suspended, background without lease, background with leases, foreground.
    public var band: ReclamationBand
    /// Its memory reading.
    public var memoryBytes: UInt64
    /// When it was last in the foreground; among equal readings the one left longest ago goes first.
    public var lastForeground: MonotonicInstant

    /// Creates a candidate.
    public init(app: AppID, name: String, band: ReclamationBand, memoryBytes: UInt64, lastForeground: MonotonicInstant)
    {
        self.app = app
        self.name = name
        self.band = band
        self.memoryBytes = memoryBytes
        self.lastForeground = lastForeground
    }
}

/// The ordering rules, as pure functions over candidates.
public enum Reclamation {
    /// Orders candidates for reclamation: band by band (suspended, background without lease, background with
    /// leases, then foreground only when `includeForeground`), heaviest first within a band; ties go to the
    /// app that left the foreground longest ago, then to the older registration, so the order never depends
    /// on input order.
    public static func order(_ candidates: [ReclamationCandidate], includeForeground: Bool) -> [ReclamationCandidate] {
        candidates
            .filter { includeForeground || $0.band != .foreground }
            .sorted { lhs, rhs in
                if lhs.band != rhs.band { return lhs.band < rhs.band }
                if lhs.memoryBytes != rhs.memoryBytes { return lhs.memoryBytes > rhs.memoryBytes }
                if lhs.lastForeground != rhs.lastForeground { return lhs.lastForeground < rhs.lastForeground }
                return lhs.app < rhs.app
            }
    }

    /// The shortest prefix of `ordered` whose memory adds up to at least `bytesToFree` (all of it if it never
    /// does; none when nothing needs freeing).
    public static func victims(in ordered: [ReclamationCandidate], toFree bytesToFree: UInt64) -> [ReclamationCandidate]
    {
        guard bytesToFree > 0 else { return [] }
        var freed: UInt64 = 0
        var count = 0
        for candidate in ordered {
            count += 1
            freed = freed.addingReportingOverflow(candidate.memoryBytes).overflow ? .max : freed + candidate.memoryBytes
            if freed >= bytesToFree { break }
        }
        return Array(ordered.prefix(count))
    }
}

extension Lifecycle {
    /// The band an app would be reclaimed in, or nil if it cannot be reclaimed (not running, ended).
    public func reclamationBand(of id: AppID) -> ReclamationBand? {
        guard let app = apps[id], app.isRegistered else { return nil }
        switch app.state {
        case .suspended: return .suspended
        case .background: return app.openTasks.isEmpty ? .backgroundIdle : .backgroundWithTasks
        case .active, .inactive: return .foreground
        case .notRunning, .terminated: return nil
        }
    }

    /// Every reclaimable app with a reading, in reclamation order under the current policy.
    public func reclamationOrder(readings: [AppID: UInt64]) -> [ReclamationCandidate] {
        var candidates: [ReclamationCandidate] = []
        candidates.reserveCapacity(readings.count)
        for (id, bytes) in readings {
            guard let band = reclamationBand(of: id), let app = apps[id] else { continue }
            candidates.append(
                ReclamationCandidate(
                    app: id, name: app.name, band: band, memoryBytes: bytes, lastForeground: app.lastForeground))
        }
        return Reclamation.order(candidates, includeForeground: policy.reclaimForeground)
    }

    /// Memory reached the warning level: every registered app gets `memoryWarning` (queued, coalesced, for a
    /// suspended app); the apps that would be reclaimed to free `bytesToFree` get `likelyVictim: true` and
    /// their rank so they can shrink first.
    public mutating func memoryWarning(
        readings: [AppID: UInt64], bytesToFree: UInt64, now: MonotonicInstant
    ) -> [Action] {
        var actions: [Action] = []
        let ordered = reclamationOrder(readings: readings)
        let victims = Reclamation.victims(in: ordered, toFree: bytesToFree)
        var ranks: [AppID: Int] = [:]
        for (index, victim) in victims.enumerated() { ranks[victim.app] = index + 1 }
        for id in liveNames.values.sorted() where tracked(id).isRegistered {
            var event = makeEvent(.memoryWarning)
            event.likelyVictim = ranks[id] != nil
            event.rank = ranks[id]
            deliver(event, to: id, behavior: .coalesce, now: now, into: &actions)
            let band = reclamationBand(of: id)
            audit(.memoryWarning, id, now: now, into: &actions) {
                $0.rank = ranks[id]
                $0.memoryBytes = readings[id]
                $0.band = band
            }
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }

    /// Terminates an app to free memory (`memory-reclaim`): with no notice if suspended, else with
    /// `willTerminate` and the usual grace. The shell re-checks its trigger before calling this; `triggeredAt`
    /// (when the pressure episode began) makes the record carry the trigger-to-kill latency.
    public mutating func reclaim(
        _ id: AppID, memoryBytes: UInt64?, triggeredAt: MonotonicInstant? = nil, trigger: String? = nil,
        now: MonotonicInstant
    ) throws(LifecycleError) -> [Action] {
        guard let app = apps[id] else { throw .noSuchApp(id.description) }
        guard let band = reclamationBand(of: id) else {
            throw .invalidState(app: app.name, state: app.state)
        }
        var actions: [Action] = []
        terminate(id, reason: .memoryReclaim, now: now, into: &actions) {
            $0.band = band
            $0.memoryBytes = memoryBytes
            $0.latency = triggeredAt.map { now - $0 }
            $0.trigger = trigger
        }
        armTimerIfDeadlineMoved(&actions, now: now)
        return actions
    }
}
