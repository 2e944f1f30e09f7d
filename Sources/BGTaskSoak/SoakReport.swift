// The verdict of a soak run: per invariant, how much was judged, how much failed, and the first counter-examples.

/// One violation, as the report shows it: when, which app, and what the evidence said.
public struct CounterExample: Hashable, Sendable {
    /// When it happened, on the harness's clock.
    public var at: Duration
    /// The app it concerns; nil when it concerns the daemon itself.
    public var app: String?
    /// What the evidence shows, in a sentence.
    public var evidence: String

    /// A counter-example.
    public init(at: Duration, app: String?, evidence: String) {
        self.at = at
        self.app = app
        self.evidence = evidence
    }
}

/// A figure measured while judging an invariant and reported without being judged (CPU per operation).
public struct Measurement: Hashable, Sendable {
    /// What was measured, with its unit.
    public var name: String
    /// The value.
    public var value: Double

    /// A measurement.
    public init(name: String, value: Double) {
        self.name = name
        self.value = value
    }
}

/// How one invariant fared.
public struct InvariantResult: Hashable, Sendable {
    /// The invariant.
    public var invariant: Invariant
    /// How many cases were judged (tasks, intervals, samples, kills, restarts, daemon processes).
    public var checkedCount: Int
    /// How many of them failed.
    public var violationCount: Int
    /// The earliest violations, at most `SoakCriteria.counterExampleLimit` of them.
    public var counterExamples: [CounterExample]
    /// Figures reported alongside.
    public var measurements: [Measurement]

    /// A result.
    public init(
        invariant: Invariant, checkedCount: Int, violationCount: Int, counterExamples: [CounterExample],
        measurements: [Measurement] = []
    ) {
        self.invariant = invariant
        self.checkedCount = checkedCount
        self.violationCount = violationCount
        self.counterExamples = counterExamples
        self.measurements = measurements
    }

    /// The verdict.
    public var verdict: Verdict {
        if violationCount > 0 { return .fail }
        return checkedCount == 0 ? .unexercised : .pass
    }
}

/// The verdict on one invariant.
public enum Verdict: String, Codable, Hashable, Sendable {
    /// Judged at least once, never violated.
    case pass
    /// Violated at least once.
    case fail
    /// Nothing in the evidence exercised it: no verdict, and the run should gather more.
    case unexercised
}

/// The report of a soak run: one result per invariant, in `Invariant.allCases` order.
public struct SoakReport: Hashable, Sendable {
    /// The results.
    public var results: [InvariantResult]

    /// A report.
    public init(results: [InvariantResult]) {
        self.results = results
    }

    /// Whether no invariant failed (unexercised ones do not fail the run; the report shows them).
    public var isPassing: Bool { results.allSatisfy { $0.verdict != .fail } }

    /// The invariants that failed.
    public var failedInvariants: [Invariant] { results.filter { $0.verdict == .fail }.map(\.invariant) }

    /// The result for `invariant`.
    public subscript(invariant: Invariant) -> InvariantResult? {
        results.first { $0.invariant == invariant }
    }
}

/// Gathers the cases one invariant judged and its violations, keeping the earliest counter-examples.
struct ViolationLog {
    let invariant: Invariant
    let limit: Int
    private(set) var checkedCount = 0
    private var violations: [CounterExample] = []
    var measurements: [Measurement] = []

    init(_ invariant: Invariant, limit: Int) {
        self.invariant = invariant
        self.limit = limit
    }

    /// One case was judged.
    mutating func checked(_ count: Int = 1) { checkedCount += count }

    /// One judged case failed.
    mutating func violated(at time: Duration, app: String?, _ evidence: String) {
        violations.append(CounterExample(at: time, app: app, evidence: evidence))
    }

    /// The result: the counter-examples sorted by time (stable, so equal times keep the order found).
    var result: InvariantResult {
        let earliest = violations.enumerated().sorted { lhs, rhs in
            lhs.element.at != rhs.element.at ? lhs.element.at < rhs.element.at : lhs.offset < rhs.offset
        }
        return InvariantResult(
            invariant: invariant, checkedCount: checkedCount, violationCount: violations.count,
            counterExamples: earliest.prefix(max(0, limit)).map(\.element), measurements: measurements)
    }
}
