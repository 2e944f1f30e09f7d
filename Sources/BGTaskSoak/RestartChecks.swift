// `restart-keeps-state` and `watchdog-only-on-hang`: the apps just before and just after each restart.

import BGTaskProtocol

extension SoakChecker {
    /// Across each restart every app listed before is listed after, with every task it had open, and its
    /// remaining background time has gone down by at least the time elapsed (less `restartTolerance`), unless an
    /// entry received between the two snapshots explains the difference: the app ended, the task ended, or the
    /// app came to the foreground (which resets the budget).
    static func checkRestartKeepsState(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.restartKeepsState, limit: criteria.counterExampleLimit)
        let tolerance = criteria.restartTolerance
        var unverifiable = 0
        for restart in evidence.restarts {
            let span = restart.before.takenAt...(restart.after.takenAt + tolerance)
            var appsEnded: Set<String> = []
            var tasksEnded: Set<TaskKey> = []
            var appsForegrounded: Set<String> = []
            for observed in evidence.entries where span.contains(observed.observedAt) {
                let entry = observed.entry
                switch entry.kind {
                case .terminated, .processExited, .unregistered:
                    appsEnded.insert(entry.app)
                case .taskEnded:
                    if let id = entry.taskId { tasksEnded.insert(TaskKey(app: entry.app, taskId: id)) }
                case .stateChanged where entry.state?.isForeground == true:
                    appsForegrounded.insert(entry.app)
                default:
                    break
                }
            }
            /// Whether the Watch stream was followed throughout `span`: a task ended by its app in a gap leaves no
            /// entry History() keeps, so its disappearance is counted as unverifiable instead.
            func isWatched(_ span: ClosedRange<Duration>) -> Bool {
                guard evidence.watchGaps.contains(where: { $0.overlaps(span) }) else { return true }
                unverifiable += 1
                return false
            }
            let after = Dictionary(restart.after.apps.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
            let elapsed = restart.after.takenAt - restart.before.takenAt
            let time = restart.after.takenAt
            let which = "the \(restart.cause.rawValue) restart at \(moment(restart.stoppedAt))"
            for before in restart.before.apps where before.state != .terminated {
                let name = before.name
                log.checked()
                guard let current = after[name] else {
                    if !appsEnded.contains(name) {
                        log.violated(
                            at: time, app: name, "listed \(before.state.rawValue) before \(which), missing after it")
                    }
                    continue
                }
                let kept = Set(current.tasks.map(\.id))
                for task in before.tasks {
                    log.checked()
                    if !kept.contains(task.id) && !tasksEnded.contains(TaskKey(app: name, taskId: task.id))
                        && isWatched(span)
                    {
                        log.violated(
                            at: time, app: name,
                            "task \(task.id) was open before \(which) and is gone after it, with no taskEnded entry")
                    }
                }
                guard let remainingBefore = before.backgroundTimeRemaining, !appsForegrounded.contains(name),
                    current.state == .background || current.state == .suspended
                else { continue }
                log.checked()
                guard let remainingAfter = current.backgroundTimeRemaining else {
                    log.violated(
                        at: time, app: name,
                        "had \(fixed(remainingBefore, digits: 3))s of background time before \(which) and none "
                            + "counted (unlimited) after it, in state \(current.state.rawValue)")
                    continue
                }
                // The daemon reports a spent budget as zero, never less.
                let allowed = max(0, remainingBefore - elapsed.secondsValue) + tolerance.secondsValue
                if remainingAfter > allowed {
                    log.violated(
                        at: time, app: name,
                        "had \(fixed(remainingBefore, digits: 3))s of background time before \(which) and "
                            + "\(fixed(remainingAfter, digits: 3))s after it, \(seconds(elapsed)) later: its budget grew"
                    )
                }
            }
        }
        if !evidence.watchGaps.isEmpty {
            log.measurements.append(
                Measurement(
                    name: "tasks gone across a restart during a Watch gap (not judged)", value: Double(unverifiable)))
        }
        return log.result
    }

    /// Each restart the watchdog caused followed a hang the harness injected.
    static func checkWatchdogOnlyOnHang(_ evidence: SoakEvidence, _ criteria: SoakCriteria) -> InvariantResult {
        var log = ViolationLog(.watchdogOnlyOnHang, limit: criteria.counterExampleLimit)
        for restart in evidence.restarts {
            log.checked()
            if restart.cause == .watchdog && !restart.wasHangInjected {
                log.violated(
                    at: restart.stoppedAt, app: nil,
                    "the watchdog restarted the daemon at \(moment(restart.stoppedAt)) with no hang injected")
            }
        }
        return log.result
    }
}
