// `bgtask-bench core`: the policy core's cost per operation as the number of live leases grows.

import BGTaskCore

/// Measures the core alone (no I/O): begin+end of a lease, and one deadline firing with its re-arm, with
/// 100, 10,000 and 100,000 leases live. Each live lease belongs to its own background app, so the deadline
/// queue holds one entry per lease: the worst case for the queue.
struct CoreBenchmark {
    /// Live-lease populations to measure at.
    var populations = [100, 10_000, 100_000]
    /// Timed repetitions per measurement; the fastest is reported (the others include noise from the host).
    var repetitions = 5

    /// The costs at one population.
    struct Measurement {
        /// Live leases while measuring.
        var population: Int
        /// Nanoseconds per lease begin+end.
        var beginEndNanoseconds: Double
        /// Nanoseconds per deadline fired and re-armed.
        var deadlineNanoseconds: Double
    }

    /// What `run()` measured, and the lines it prints.
    struct Report {
        /// One per population, in the order of `populations`.
        var measurements: [Measurement]
        /// The table and the re-measured ratio.
        var lines: [String]
    }

    func run() throws(LifecycleError) -> Report {
        var lines = ["live leases   begin+end ns/op   deadline ns/op"]
        var measurements: [Measurement] = []
        var baseline: (Double, Double)?
        for population in populations {
            let beginEnd = try measureBeginEnd(liveLeases: population)
            let deadline = try measureDeadlines(liveLeases: population)
            measurements.append(
                Measurement(population: population, beginEndNanoseconds: beginEnd, deadlineNanoseconds: deadline))
            baseline = baseline ?? (beginEnd, deadline)
            lines.append(
                pad(String(population), 11) + pad(format(beginEnd), 18) + pad(format(deadline), 17))
        }
        if let baseline, let last = populations.last, populations.count > 1 {
            let beginEnd = try measureBeginEnd(liveLeases: last) / baseline.0
            let deadline = try measureDeadlines(liveLeases: last) / baseline.1
            lines.append(
                "ratio \(last) / \(populations[0]) (re-measured): begin+end \(format(beginEnd))x, deadline \(format(deadline))x"
            )
        }
        return Report(measurements: measurements, lines: lines)
    }

    /// A core with `count` apps in background, each holding one lease, their deadlines spread over a second.
    private func populatedCore(_ count: Int) throws(LifecycleError) -> (Lifecycle, [AppID], MonotonicInstant) {
        var policy = CorePolicy()
        policy.historySize = 16
        policy.tasksPerAppMax = 1_000
        // Every app is the same user's: room for all of them, past the default bound on one user's apps.
        policy.appsPerUserMax = max(policy.appsPerUserMax, count)
        var core = Lifecycle(policy: policy)
        var now = MonotonicInstant.zero
        var apps: [AppID] = []
        apps.reserveCapacity(count)
        let spacing = Duration.nanoseconds(max(1, 1_000_000_000 / Int64(count)))
        for index in 0..<count {
            let registration = try core.register(
                name: "app\(index)", process: ProcessIdentity(pid: Int32(index + 2), uid: 1000), now: now)
            _ = try core.beginBackgroundTask(registration.app, name: "work", now: now)
            _ = try core.setState(registration.app, to: .background, now: now)
            apps.append(registration.app)
            now = now + spacing
        }
        return (core, apps, now)
    }

    /// Nanoseconds per begin+end pair, on apps visited in a scattered order.
    private func measureBeginEnd(liveLeases: Int) throws(LifecycleError) -> Double {
        var (core, apps, now) = try populatedCore(liveLeases)
        let operations = 200_000
        var best = Double.infinity
        var index = 0
        for _ in 0..<repetitions {
            let clock = ContinuousClock()
            let start = clock.now
            for _ in 0..<operations {
                // A multiplicative stride scatters consecutive operations across the whole population.
                index = (index &+ 7_919) % apps.count
                let app = apps[index]
                let task = try core.beginBackgroundTask(app, name: nil, now: now).task
                _ = try core.endBackgroundTask(app, task: task, now: now)
            }
            best = min(best, nanoseconds(clock.now - start) / Double(operations))
            now = now + .nanoseconds(1)
        }
        return best
    }

    /// Nanoseconds per deadline: fire the earliest (an expiration warning), then send that app to the
    /// foreground and back so the population and the queue size stay constant.
    private func measureDeadlines(liveLeases: Int) throws(LifecycleError) -> Double {
        var (core, _, _) = try populatedCore(liveLeases)
        let operations = 100_000
        var best = Double.infinity
        for _ in 0..<repetitions {
            let clock = ContinuousClock()
            let start = clock.now
            for _ in 0..<operations {
                // Safe: every app holds a lease in background, so a deadline is always pending.
                let due = core.nextDeadline!
                for case .send(_, let app) in core.deadlineReached(now: due) {
                    _ = try core.setState(app, to: .inactive, now: due)
                    _ = try core.setState(app, to: .background, now: due)
                }
            }
            best = min(best, nanoseconds(clock.now - start) / Double(operations))
        }
        precondition(core.openTaskCount == liveLeases, "the population must stay constant")
        return best
    }

    private func nanoseconds(_ duration: Duration) -> Double {
        Double(duration.nanosecondCount)
    }
}

func format(_ value: Double) -> String {
    let rounded = (value * 10).rounded() / 10
    return String(rounded)
}

func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text + " " : String(repeating: " ", count: width - text.count) + text
}
