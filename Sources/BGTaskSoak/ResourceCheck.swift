// `resources-flat`: the daemon's resident memory and open descriptors after the warm-up, first third against last.

extension SoakChecker {
    /// For each daemon process (restarts start a new one), the samples after the first `warmUpFraction` of its
    /// time are cut into thirds; the floor of the last third (its lower quartile: what the daemon comes back to)
    /// may exceed the median of the first by less than `resourceGrowthLimit` (descriptors also by up to
    /// `descriptorSlack`). A leak raises the floor; a burst of work (a reclamation, a snapshot) raises a few
    /// samples and passes. CPU is not judged: the CPU seconds per operation over the judged samples are reported
    /// as a measurement.
    static func checkResourcesFlat(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.resourcesFlat, limit: criteria.counterExampleLimit)
        var processes: [Int: [ResourceSample]] = [:]
        var firstSeen: [Int] = []
        for sample in evidence.resourceSamples {
            if processes[sample.daemonPid] == nil { firstSeen.append(sample.daemonPid) }
            processes[sample.daemonPid, default: []].append(sample)
        }
        var cpuSeconds = 0.0
        var operations = 0
        for pid in firstSeen {
            let samples = (processes[pid] ?? []).sorted { $0.takenAt < $1.takenAt }
            guard let first = samples.first, let last = samples.last else { continue }
            let warmUpEnd = first.takenAt + (last.takenAt - first.takenAt) * criteria.warmUpFraction
            let judged = samples.filter { $0.takenAt >= warmUpEnd }
            guard judged.count >= max(3, criteria.minimumResourceSamples), let start = judged.first,
                let end = judged.last
            else { continue }
            cpuSeconds += end.cpuSeconds - start.cpuSeconds
            operations += end.operations - start.operations
            let third = judged.count / 3
            let early = Array(judged.prefix(third))
            let late = Array(judged.suffix(third))
            let span = "daemon pid \(pid), \(moment(start.takenAt)) to \(moment(end.takenAt))"

            log.checked()
            let rssBefore = median(early.map(\.residentBytes))
            let rssAfter = lowerQuartile(late.map(\.residentBytes))
            let rssGrowth = growth(from: rssBefore, to: rssAfter)
            if rssGrowth >= criteria.resourceGrowthLimit {
                log.violated(
                    at: end.takenAt, app: nil,
                    "resident memory grew \(percentage(rssGrowth)) after the warm-up (\(span)): median "
                        + "\(bytes(rssBefore)) in the first third, floor (lower quartile) \(bytes(rssAfter)) in the last"
                )
            }

            log.checked()
            let descriptorsBefore = median(early.map(\.openDescriptors))
            let descriptorsAfter = lowerQuartile(late.map(\.openDescriptors))
            let descriptorGrowth = growth(from: descriptorsBefore, to: descriptorsAfter)
            if descriptorGrowth >= criteria.resourceGrowthLimit
                && descriptorsAfter - descriptorsBefore > criteria.descriptorSlack
            {
                log.violated(
                    at: end.takenAt, app: nil,
                    "open descriptors grew \(percentage(descriptorGrowth)) after the warm-up (\(span)): median "
                        + "\(descriptorsBefore) in the first third, floor (lower quartile) \(descriptorsAfter) in the last"
                )
            }
        }
        if operations > 0 {
            log.measurements.append(
                Measurement(name: "CPU seconds per operation", value: cpuSeconds / Double(operations)))
        }
        log.measurements.append(Measurement(name: "CPU seconds after the warm-up", value: cpuSeconds))
        log.measurements.append(Measurement(name: "operations after the warm-up", value: Double(operations)))
        return log.result
    }

    /// The median (the lower of the middle two for an even count); 0 for none.
    static func median(_ values: [Int]) -> Int {
        guard !values.isEmpty else { return 0 }
        return values.sorted()[(values.count - 1) / 2]
    }

    /// The lower quartile (the value a quarter of the way up the sorted values); 0 for none.
    static func lowerQuartile(_ values: [Int]) -> Int {
        guard !values.isEmpty else { return 0 }
        return values.sorted()[(values.count - 1) / 4]
    }

    /// The growth from `before` to `after` as a fraction; any growth from zero counts as complete.
    static func growth(from before: Int, to after: Int) -> Double {
        guard before > 0 else { return after > 0 ? 1 : 0 }
        return Double(after - before) / Double(before)
    }
}
