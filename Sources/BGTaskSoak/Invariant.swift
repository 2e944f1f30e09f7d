// The invariants a soak run of bgtaskd is judged by, each with the stable name its reports use.

/// One property the daemon must keep over a soak run; the raw value is the name reports and scripts use.
public enum Invariant: String, CaseIterable, Codable, Hashable, Sendable {
    /// Every task that began ends exactly once, with a cause (a `taskEnded` entry carrying `taskEnd`).
    case taskEndsOnce = "task-ends-once"
    /// No app stays in background with a task open past its budget plus the grace.
    case budgetRespected = "budget-respected"
    /// An app the daemon reports suspended is stopped or frozen; one it reports running is neither.
    case suspendedMeansStopped = "suspended-means-stopped"
    /// No process stays stopped or frozen after its app ended or after the daemon stopped.
    case noStrayStops = "no-stray-stops"
    /// Reclamation kills bands in order and the heaviest first within a band, and only over target.
    case heaviestFirst = "heaviest-first"
    /// A restart loses no app, task or budget, and grants no fresh budget.
    case restartKeepsState = "restart-keeps-state"
    /// The watchdog restarts the daemon only when a hang was injected.
    case watchdogOnlyOnHang = "watchdog-only-on-hang"
    /// After the warm-up, the daemon's resident memory and open descriptors stay flat.
    case resourcesFlat = "resources-flat"
    /// A scheduled task starts only while the conditions it requires hold, and is told to stop and ends soon after
    /// one stops holding.
    case constraintRespected = "constraint-respected"
    /// No scheduled request has two tasks running at once.
    case requestRunsOnceAtATime = "request-runs-once-at-a-time"
    /// Every submitted request is run to completion, cancelled, refused at submit, or still held at the end.
    case requestNeverLost = "request-never-lost"

    /// What the invariant asserts, in one line, for reports.
    public var summary: String {
        switch self {
        case .taskEndsOnce: "every begun task ends exactly once, with a cause"
        case .budgetRespected: "no app stays in background with a task open past its budget plus the grace"
        case .suspendedMeansStopped: "suspended apps are stopped or frozen; running apps are neither"
        case .noStrayStops: "nothing stays stopped or frozen after its app ended or the daemon stopped"
        case .heaviestFirst: "reclamation goes band by band, heaviest first, and only over target"
        case .restartKeepsState: "a restart loses no app, task or budget, and no budget grows"
        case .watchdogOnlyOnHang: "watchdog restarts happen only after an injected hang"
        case .resourcesFlat: "resident memory and open descriptors grow less than the limit after the warm-up"
        case .constraintRespected:
            "scheduled tasks start only while their constraints hold, and stop soon after one stops holding"
        case .requestRunsOnceAtATime: "no scheduled request has two tasks running at once"
        case .requestNeverLost: "every submitted request is completed, cancelled, refused at submit or still held"
        }
    }
}
