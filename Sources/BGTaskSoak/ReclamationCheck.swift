// `heaviest-first`: each memory-reclaim kill judged against the bands of the other apps at that moment, their
// memory as the harness read it, and the apps' total against the target.

import BGTaskProtocol

extension SoakChecker {
    /// Each `terminated` entry with reason `memory-reclaim`: no other app was in a band reclaimed before the
    /// victim's (suspended, background without task, background with tasks, then foreground, and that only with
    /// `ReclaimForeground=yes`); no other app in its band was heavier by more than `memoryTolerance`; and the
    /// apps' total memory was over the target. Weights are the victim's `memoryBytes` (the daemon's reading at its
    /// decision) and, for the others, the lighter of the harness's last reading before the kill and its first
    /// after it (each within `readingWindow`), and the later victims' `memoryBytes`: see `MemoryReadings.lightest`.
    static func checkHeaviestFirst(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.heaviestFirst, limit: criteria.counterExampleLimit)
        let readings = MemoryReadings(evidence)
        let window = criteria.readingWindow
        var tracker = AppTracker(watchGaps: evidence.watchGaps)
        var partialTotals = 0
        // The listings after gaps, applied in time among the entries: the bands as the daemon had them.
        var listings = evidence.listingsAfterGaps[...]
        for observed in evidence.entries {
            while let listing = listings.first, listing.takenAt <= observed.observedAt {
                tracker.refresh(from: listing, backgroundTime: criteria.backgroundTime(of:))
                listings.removeFirst()
            }
            tracker.apply(observed)
            let entry = observed.entry
            guard entry.kind == .terminated, entry.reason == .memoryReclaim else { continue }
            let time = observed.observedAt
            let victim = entry.app
            log.checked()
            guard let band = entry.band else {
                log.violated(at: time, app: victim, "reclaimed at \(moment(time)) with no band recorded")
                continue
            }
            if band == .foreground && !criteria.reclaimsForeground {
                log.violated(
                    at: time, app: victim,
                    "reclaimed from the foreground at \(moment(time)) without ReclaimForeground=yes")
            }
            let weight = entry.memoryBytes ?? readings.largest(of: victim, in: (time - window)...(time + window))
            for (other, record) in tracker.apps.sorted(by: { $0.key < $1.key }) where other != victim {
                guard let otherBand = record.band else { continue }
                // The daemon reclaims only apps it has a reading of: a process that registered moments before, read
                // by nobody yet, is no candidate, in a band before the victim's or in its own (see `lightest`).
                let otherWeight = readings.lightest(of: other, around: time, within: window, since: record.registeredAt)
                if otherBand < band, otherWeight != nil {
                    log.violated(
                        at: time, app: victim,
                        "reclaimed from band \(band) at \(moment(time)) while \(other) was still in band \(otherBand)")
                } else if otherBand == band, let weight, let otherWeight,
                    Double(otherWeight) > Double(weight) * (1 + criteria.memoryTolerance)
                {
                    log.violated(
                        at: time, app: victim,
                        "reclaimed at \(moment(time)) with \(bytes(weight)) while \(other) in the same band \(band) "
                            + "had \(bytes(otherWeight))")
                }
            }
            // The total is judged only when the harness read every app live then (registered before the window):
            // after a restart, or while the daemon is down, its readings cover only some of them, and a partial
            // total proves nothing.
            let unread = tracker.apps.filter { app, record in
                record.band != nil && (record.registeredAt ?? .zero) < time - window
                    && readings.largest(of: app, in: (time - window)...time) == nil
            }
            if !unread.isEmpty {
                partialTotals += 1
            } else if let maximum = lowestMemoryLimit(in: (time - window)...time, evidence, criteria),
                let total = readings.total(in: (time - window)...time)
            {
                let target = Int(Double(maximum) * criteria.appsTargetFraction)
                // The daemon judges by its own readings (`memory.current` where an app has a cgroup, taken at its
                // own moments), the harness by PSS: the same tolerance as for the order.
                if Double(total) <= Double(target) * (1 - criteria.memoryTolerance) {
                    log.violated(
                        at: time, app: victim,
                        "reclaimed at \(moment(time)) while the apps used \(bytes(total)), not over the target of "
                            + "\(bytes(target)) (\(fixed(criteria.appsTargetFraction * 100, digits: 0))% of "
                            + "AppsMemoryMax \(bytes(maximum))) less the "
                            + "\(fixed(criteria.memoryTolerance * 100, digits: 0))% the readings may differ by")
                }
            }
        }
        log.measurements.append(
            Measurement(
                name: "kills whose total was not judged (the harness had not read every live app)",
                value: Double(partialTotals)))
        return log.result
    }

    /// The lowest `AppsMemoryMax` in force at any moment of `span` (the reload takes effect a little after it is
    /// asked for, so a kill is judged against the strictest limit it could have seen); nil without one.
    static func lowestMemoryLimit(
        in span: ClosedRange<Duration>, _ evidence: SoakEvidence, _ criteria: SoakCriteria
    ) -> Int? {
        guard var current = criteria.appsMemoryMax else { return nil }
        var lowest: Int?
        for change in evidence.memoryLimitChanges {
            if change.at <= span.lowerBound {
                current = change.appsMemoryMax
            } else if change.at <= span.upperBound {
                lowest = min(lowest ?? current, change.appsMemoryMax)
            }
        }
        return min(lowest ?? current, current)
    }
}

/// The apps' memory over time: the harness's readings, and each reclaimed victim's reading from its entry.
struct MemoryReadings {
    private var byApp: [String: [(time: Duration, memoryBytes: Int)]] = [:]
    /// The harness's readings alone, in time order.
    private var harnessByApp: [String: [(time: Duration, memoryBytes: Int, pid: Int?)]] = [:]
    /// The victims' weights as the daemon recorded them at their kills.
    private var victimWeights: [String: [(time: Duration, memoryBytes: Int)]] = [:]
    /// When the harness itself read anything: a total is judged only where it did.
    private var harnessTimes: [Duration] = []
    /// What each process of each app logged of the memory it maps.
    private var allocations: [AllocationKey: AllocationTimeline] = [:]

    init(_ evidence: SoakEvidence) {
        for sample in evidence.memorySamples {
            byApp[sample.app, default: []].append((sample.takenAt, sample.memoryBytes))
            harnessByApp[sample.app, default: []].append((sample.takenAt, sample.memoryBytes, sample.pid))
            harnessTimes.append(sample.takenAt)
        }
        for app in harnessByApp.keys { harnessByApp[app]?.sort { $0.time < $1.time } }
        for change in evidence.allocationChanges {
            allocations[AllocationKey(app: change.app, pid: change.pid), default: AllocationTimeline()].changes.append(
                (change.at, change.allocatedBytes, change.isTouching))
        }
        for key in allocations.keys { allocations[key]?.changes.sort { $0.time < $1.time } }
        for observed in evidence.entries
        where observed.entry.kind == .terminated && observed.entry.reason == .memoryReclaim {
            if let memoryBytes = observed.entry.memoryBytes {
                byApp[observed.entry.app, default: []].append((observed.observedAt, memoryBytes))
                victimWeights[observed.entry.app, default: []].append((observed.observedAt, memoryBytes))
            }
        }
    }

    /// The lightest `app` can have weighed when the daemon chose the victim of a kill seen at `time`: the lighter
    /// of the harness's last reading before the kill and its first reading after it (each within `window`; the one
    /// after counts only beside one before), that reading before moved by what the app's own log says it freed
    /// since (at its least in the `window` before the kill), and its weight as a victim of the same round (the
    /// daemon's reading, within `window`).
    ///
    /// The harness reads every app about once a second and the daemon weighs them at one instant in between; an
    /// app maps and frees memory as it likes meanwhile (the soak's apps change theirs every 0.3 to 2.5 s), so
    /// neither one reading nor the two around the decision say what it weighed then: an app can free a chunk after
    /// one reading and map a larger one before the next. Judging by the reading before alone, and then by the two
    /// around the kill, blamed the daemon for sparing such an app (seeds 3831752957692394277 and
    /// 8360582566104785993: soak-37 read 7.8 MiB before the kill and 18.7 MiB after, the daemon had weighed it at
    /// 6.1 MiB in between, and rightly). The app's log of its own changes fills the gap: what it held mapped at the
    /// reading before, and the least it held in the window before the kill, are its weight then less the memory
    /// that stays (the runtime, its libraries). The window is as wide as the one readings are taken from: the
    /// daemon weighs the apps of a round at its start, and a weighing older than that would itself be a fault.
    ///
    /// Only what was read of the app's current registration counts (`since`, when it registered): the name's
    /// earlier process, reclaimed or ended, weighed nothing of the new one (seed 3831752957692394277 under two busy
    /// loops: soak-24 was reclaimed at 14.1 MiB, registered again 0.3 s later from a fresh process, and the daemon
    /// was blamed for sparing that newcomer on the dead process's weight).
    func lightest(of app: String, around time: Duration, within window: Duration, since: Duration? = nil) -> Int? {
        let earliest = max(time - window, since ?? time - window)
        guard earliest <= time else { return nil }
        let harness = harnessByApp[app] ?? []
        let before = harness.last { (earliest...time).contains($0.time) }
        let after = harness.first { $0.time > time && $0.time <= time + window }
        let asVictim =
            victimWeights[app]?.filter { (earliest...(time + window)).contains($0.time) }.map(\.memoryBytes) ?? []
        // A reading after the kill alone is no evidence: it may be heavier only for memory shared with the victims.
        var readings = before.map { [$0.memoryBytes] + (after.map { [$0.memoryBytes] } ?? []) } ?? []
        if let before, let pid = before.pid,
            let mapped = allocations[AllocationKey(app: app, pid: pid)]?.allocated(at: before.time),
            let least = allocations[AllocationKey(app: app, pid: pid)]?.least(in: (time - window)...time)
        {
            readings.append(max(0, before.memoryBytes - mapped + least))
        }
        return (readings + asVictim).min()
    }

    /// The heaviest reading of `app` in `span`: the most it can have weighed then.
    func largest(of app: String, in span: ClosedRange<Duration>) -> Int? {
        byApp[app]?.filter { span.contains($0.time) }.map(\.memoryBytes).max()
    }

    /// The apps' total at its largest in `span`, each app's heaviest reading summed; nil when the harness read
    /// nothing in `span` (the total would rest on the daemon's word alone).
    func total(in span: ClosedRange<Duration>) -> Int? {
        guard harnessTimes.contains(where: { span.contains($0) }) else { return nil }
        return byApp.keys.compactMap { largest(of: $0, in: span) }.reduce(0, +)
    }
}

/// One process of an app.
private struct AllocationKey: Hashable {
    var app: String
    var pid: Int
}

/// What one process logged of the memory it maps, in time order. While it touches a new chunk's pages it holds
/// anything from what it held before to what it will hold once done: a reading taken then (seed
/// 8360582566104785993 under two busy loops: soak-21 read 18.1 MiB while its log still said nothing mapped, and
/// the daemon had weighed it before) is judged with the most it may hold, and the least it held counts only
/// touched chunks.
private struct AllocationTimeline {
    var changes: [(time: Duration, bytes: Int, isTouching: Bool)] = []

    /// The most it held at `time` (a chunk being touched counted whole); nil before its first line (the log does
    /// not go back that far).
    func allocated(at time: Duration) -> Int? {
        changes.last { $0.time <= time }?.bytes
    }

    /// The least it held at any moment of `span` (chunks being touched not counted); nil when the log does not
    /// reach back to its start.
    func least(in span: ClosedRange<Duration>) -> Int? {
        let held = changes.filter { !$0.isTouching }
        guard let atStart = held.last(where: { $0.time <= span.lowerBound })?.bytes else { return nil }
        return held.filter { span.contains($0.time) }.map(\.bytes).reduce(atStart, min)
    }
}
