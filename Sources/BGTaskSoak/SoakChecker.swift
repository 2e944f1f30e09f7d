// The soak test's invariant checker: evidence gathered outside the daemon in, one result per invariant out.

/// Judges a soak run's evidence against every `Invariant`; a pure function of the evidence and the criteria.
public enum SoakChecker {
    /// The report on `evidence`, one result per invariant in `Invariant.allCases` order.
    public static func check(_ evidence: SoakEvidence, criteria: SoakCriteria) -> SoakReport {
        SoakReport(results: Invariant.allCases.map { check($0, evidence, criteria) })
    }

    /// The result on one invariant.
    public static func check(_ invariant: Invariant, _ evidence: SoakEvidence, _ criteria: SoakCriteria)
        -> InvariantResult
    {
        switch invariant {
        case .taskEndsOnce: checkTaskEndsOnce(evidence, criteria)
        case .budgetRespected: checkBudgetRespected(evidence, criteria)
        case .suspendedMeansStopped: checkSuspendedMeansStopped(evidence, criteria)
        case .noStrayStops: checkNoStrayStops(evidence, criteria)
        case .heaviestFirst: checkHeaviestFirst(evidence, criteria)
        case .restartKeepsState: checkRestartKeepsState(evidence, criteria)
        case .watchdogOnlyOnHang: checkWatchdogOnlyOnHang(evidence, criteria)
        case .resourcesFlat: checkResourcesFlat(evidence, criteria)
        case .constraintRespected: checkConstraintRespected(evidence, criteria)
        case .requestRunsOnceAtATime: checkRequestRunsOnceAtATime(evidence, criteria)
        case .requestNeverLost: checkRequestNeverLost(evidence, criteria)
        }
    }
}
