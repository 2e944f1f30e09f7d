// The reclaim benchmark's figures: per backend, trigger → dead and trigger → freed, the daemon's own, the verdict.

import Foundation

/// The result of one reclaim benchmark run: one row per backend configuration.
public struct ReclaimReport: Sendable {
    /// One round as measured.
    public struct Round: Sendable {
        /// From the trigger (the crossing) to the victim's pidfd readable, in milliseconds.
        public var deadMilliseconds: Double
        /// From the trigger to the victim's memory back; nil when it was not seen back in time.
        public var freedMilliseconds: Double?
        /// The `latencyMs` the daemon recorded for the kill (its trigger → kill), when it recorded one.
        public var daemonMilliseconds: Double?
        /// How long the crossing touch took to cross the limit, from the foreground app's first page to the one
        /// that took the apps over it.
        public var crossingMilliseconds: Double
        /// How many bytes the foreground app touched to cross the limit.
        public var crossingBytes: UInt64
        /// Whether the apps' total stayed over the limit from the crossing until the daemon saw it over; a round in
        /// which it did not measured no crossing.
        public var heldOverLimit: Bool
        /// How the daemon had suspended the victim (`App.suspendedWith`).
        public var suspendedWith: String
        /// How the daemon measured the victim (`App.memoryBackend`).
        public var memoryBackend: String
        /// The band the daemon reclaimed the victim from.
        public var band: String
    }

    /// One backend configuration's rounds, and what its daemon said about itself.
    public struct Measurement: Sendable {
        /// Every round whose crossing held, in order.
        public var rounds: [Round]
        /// Rounds run again because the apps' total fell back to the limit before the daemon saw it over.
        public var redone: Int
        /// `GetStatus.backends`: the chains the daemon chose (`freeze`, `memory`, `kill`, the roots).
        public var daemonBackends: [String: String]
        /// The memory trigger the daemon reports (`backends.trigger`), `polling` when it reports none.
        public var trigger: String
        /// What "freed" read (`FreedMeasure`).
        public var freedMeasure: String
    }

    /// What came of one backend configuration.
    public enum Outcome: Sendable {
        /// Its rounds ran.
        case measured(Measurement)
        /// This host cannot run it, for the reason given.
        case unavailable(String)
        /// It could not be measured, for the reason given.
        case failed(String)
    }

    /// One row of the table.
    public struct Row: Sendable {
        /// The backend configuration's name.
        public var backend: String
        /// What came of it.
        public var outcome: Outcome
    }

    /// Rounds asked for per backend.
    public var rounds: Int
    /// One per backend configuration, in `ReclaimBenchmark.Backend` order.
    public var rows: [Row]

    /// The aim, from the issue: the median trigger → dead under this many milliseconds with a pressure trigger,
    /// measured from the moment the limit is crossed, grace excluded.
    public static let pressureAimMilliseconds = 10.0
    /// The same aim when the daemon polls.
    public static let pollingAimMilliseconds = 50.0

    /// The aim for a daemon reporting `trigger`. Only a usage threshold fires when the apps cross `AppsMemoryMax`;
    /// a PSI trigger fires on stalls, which an app growing past a limit with memory to spare does not cause, so
    /// without one the crossing is seen by polling.
    public static func aimMilliseconds(trigger: String) -> Double {
        trigger.contains("usage-threshold") ? pressureAimMilliseconds : pollingAimMilliseconds
    }

    /// Whether every backend this host has was measured, each for every round asked for.
    public var isComplete: Bool {
        rows.allSatisfy { row in
            switch row.outcome {
            case .measured(let measurement): measurement.rounds.count == rounds
            case .unavailable: true
            case .failed: false
            }
        }
    }

    /// The value at `fraction` of `values` by nearest rank (0.5: the median); nil for none.
    static func percentile(_ values: [Double], _ fraction: Double) -> Double? {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return nil }
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[min(sorted.count - 1, max(0, rank - 1))]
    }

    /// The report as printed, one line per item.
    public var lines: [String] {
        let limitMiB = ReclaimBenchmark.appsMemoryMaxBytes >> 20
        var lines = [
            "reclaim: \(rounds) rounds per backend: a suspended \(ReclaimBenchmark.victimBytes >> 20) MiB app "
                + "reclaimed once a foreground app takes the apps over AppsMemoryMax=\(limitMiB)M "
                + "(MemoryWarningGraceSec=0); milliseconds from the crossing",
            pad("backend", 28, left: true) + pad("rounds", 7) + pad("dead p50", 10) + pad("dead p99", 10)
                + pad("dead max", 10)
                + pad("freed p50", 11) + pad("freed max", 11) + pad("daemon p50", 12) + "  "
                + pad("trigger", 9, left: true) + pad("aim", 15, left: true) + "verdict",
        ]
        var notes: [String] = []
        for row in rows {
            let name = pad(row.backend, 28, left: true)
            switch row.outcome {
            case .unavailable(let reason):
                lines.append(name + "not available here: \(reason)")
            case .failed(let reason):
                lines.append(name + "failed: \(reason)")
            case .measured(let measurement):
                let rounds = measurement.rounds
                let dead = rounds.map(\.deadMilliseconds)
                let freed = rounds.compactMap(\.freedMilliseconds)
                let daemon = rounds.compactMap(\.daemonMilliseconds)
                let aim = Self.aimMilliseconds(trigger: measurement.trigger)
                let deadMedian = Self.percentile(dead, 0.5)
                let verdict = deadMedian.map { $0 < aim ? "meets" : "misses" } ?? "no round"
                lines.append(
                    name + pad(String(rounds.count), 7) + pad(format(deadMedian), 10)
                        + pad(format(Self.percentile(dead, 0.99)), 10) + pad(format(dead.max()), 10)
                        + pad(format(Self.percentile(freed, 0.5)), 11)
                        + pad(format(freed.max()), 11) + pad(format(Self.percentile(daemon, 0.5)), 12) + "  "
                        + pad(measurement.trigger, 9, left: true) + pad("dead p50 <\(format(aim))", 15, left: true)
                        + verdict)
                notes.append(note(row.backend, measurement))
            }
        }
        lines += notes
        lines += [
            "the crossing: CLOCK_MONOTONIC right after the foreground app touched the page that took the apps over the "
                + "limit as the daemon reads them; dead: the victim's pidfd readable; freed: as each backend says above, "
                + "read every \(ReclaimBenchmark.freedPollInterval.nanosecondCount / 1000) µs",
            "p50, p99: by nearest rank over the rounds (under 100 rounds, the p99 is the max)",
            "daemon p50: the latencyMs History records, from the daemon's first sample over the limit to its kill: it "
                + "leaves out the wait for that sample",
        ]
        return lines
    }

    /// What a measured row's daemon chose, and how precise its crossings were.
    private func note(_ backend: String, _ measurement: Measurement) -> String {
        let chains = ["freeze", "memory", "kill"].compactMap { key in
            measurement.daemonBackends[key].map { "\(key)=\($0)" }
        }
        let rounds = measurement.rounds
        let suspended = Set(rounds.map(\.suspendedWith)).sorted().joined(separator: ",")
        let measured = Set(rounds.map(\.memoryBackend)).sorted().joined(separator: ",")
        let bands = Set(rounds.map(\.band)).sorted().joined(separator: ",")
        let touch = Self.percentile(rounds.map(\.crossingMilliseconds), 0.5)
        let crossingMiB = Self.percentile(rounds.map { Double($0.crossingBytes) / Double(1 << 20) }, 0.5)
        let missingFreed = rounds.count - rounds.compactMap(\.freedMilliseconds).count
        let redone = measurement.redone
        return "\(backend): daemon \(chains.joined(separator: " ")); victims suspended with \(suspended), "
            + "measured by \(measured), reclaimed from band \(bands); the crossing p50 \(format(touch)) ms into a "
            + "touch, after \(format(crossingMiB)) MiB; freed: \(measurement.freedMeasure)"
            + (redone > 0
                ? "; \(redone) round(s) run again: the apps' total fell back to the limit before the daemon saw it over"
                : "")
            + (missingFreed > 0 ? "; memory not seen back in \(missingFreed) round(s)" : "")
    }

    private func pad(_ text: String, _ width: Int, left: Bool = false) -> String {
        guard text.count < width else { return text + " " }
        let padding = String(repeating: " ", count: width - text.count)
        return left ? text + padding : padding + text
    }

    private func format(_ value: Double?) -> String {
        guard let value else { return "-" }
        if value == value.rounded() && abs(value) < 1e9 { return String(Int(value)) }
        if abs(value) >= 100 { return String(format: "%.0f", value) }
        if abs(value) >= 10 { return String(format: "%.1f", value) }
        return String(format: "%.2f", value)
    }
}
