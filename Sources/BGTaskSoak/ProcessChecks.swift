// `suspended-means-stopped` and `no-stray-stops`: what the harness saw in /proc and cgroupfs, against what the
// daemon said and did.

import BGTaskProtocol

extension SoakChecker {
    /// A sample of an app the daemon reported suspended shows it stopped or frozen; one reported active, inactive
    /// or in background shows it neither. Samples within `settling` of a state change of the app, or of a
    /// restart (down until ready, then re-adopting), and samples of a dying process (`Z`, `X`) are not judged.
    static func checkSuspendedMeansStopped(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.suspendedMeansStopped, limit: criteria.counterExampleLimit)
        var changes: [String: [Duration]] = [:]
        for observed in evidence.entries where observed.entry.kind == .stateChanged {
            changes[observed.entry.app, default: []].append(observed.observedAt)
        }
        let restarts = evidence.restarts.map { $0.stoppedAt...($0.readyAt + criteria.settling) }
        for sample in evidence.processSamples {
            guard let reported = sample.reportedState, reported == .suspended || reported.isRunning else { continue }
            guard sample.stateLetter != "Z", sample.stateLetter != "X" else { continue }
            let time = sample.takenAt
            let isSettling = changes[sample.app, default: []].contains {
                abs(($0 - time).secondsValue) <= criteria.settling.secondsValue
            }
            guard !isSettling, !restarts.contains(where: { $0.contains(time) }) else { continue }
            log.checked()
            if reported == .suspended && !sample.isHeld {
                log.violated(
                    at: time, app: sample.app,
                    "reported suspended at \(moment(time)) but \(sample.seen): neither stopped nor frozen")
            } else if reported != .suspended && sample.isHeld {
                log.violated(
                    at: time, app: sample.app,
                    "reported \(reported.rawValue) at \(moment(time)) but \(sample.seen): it cannot run")
            }
        }
        return log.result
    }

    /// No sample taken `settling` or more after its app ended (and before the name registered again), or after
    /// the daemon's final stop, shows the process stopped or frozen. Restarts are not judged here: a killed
    /// daemon's processes stay frozen until `ExecStopPost=` thaws them and a hung one's until the watchdog
    /// fires, neither of which the harness times; the new daemon re-adopts them (`restart-keeps-state`).
    static func checkNoStrayStops(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.noStrayStops, limit: criteria.counterExampleLimit)
        // Per app, the times its registrations ended and began, in order.
        var lifetimes: [String: [(time: Duration, hasEnded: Bool)]] = [:]
        for observed in evidence.entries {
            switch observed.entry.kind {
            case .terminated: lifetimes[observed.entry.app, default: []].append((observed.observedAt, true))
            case .registered: lifetimes[observed.entry.app, default: []].append((observed.observedAt, false))
            default: break
            }
        }
        for sample in evidence.processSamples {
            let time = sample.takenAt
            if let stop = evidence.daemonStoppedAt, time >= stop + criteria.settling {
                log.checked()
                if sample.isHeld {
                    log.violated(
                        at: time, app: sample.app,
                        "\(sample.seen) at \(moment(time)), after the daemon stopped at \(moment(stop))")
                }
                continue
            }
            let last = lifetimes[sample.app, default: []].last { $0.time <= time }
            guard let last, last.hasEnded, time >= last.time + criteria.settling else { continue }
            log.checked()
            if sample.isHeld {
                log.violated(
                    at: time, app: sample.app,
                    "\(sample.seen) at \(moment(time)), after the app ended at \(moment(last.time))")
            }
        }
        return log.result
    }
}
