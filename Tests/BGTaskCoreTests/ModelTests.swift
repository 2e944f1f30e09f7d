// A seeded randomized model test: thousands of random operation sequences, invariants checked after every step.

import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskCore

#if canImport(Glibc)
    import Glibc
#endif

/// Drives one random sequence and checks the invariants of the policy after each step.
private struct ModelRun {
    let seed: UInt64
    var random: SeededGenerator
    let h: PolicyHarness
    let verbose: Bool
    var log: [String] = []
    var knownApps: [AppID] = []
    /// Tasks seen beginning, and how often each ended.
    var begun: Set<TaskID> = []
    var endings: [TaskID: Int] = [:]
    var processedActions = 0
    /// The last remaining time seen for apps continuously in background or suspended.
    var lastRemaining: [AppID: Duration] = [:]
    /// What a restart lost or changed, if anything.
    var restartProblem: String?
    /// With `checksChanges`: the state saved at the start, with every step's `takeChanges()` applied since (as
    /// the daemon's journal replays them), compared with the state after each step.
    var replica: SavedLifecycle?
    /// Records that carried leases alone (`LifecycleChanges.tasks`): the short form is exercised too.
    var taskOnlyRecords = 0
    /// Scheduled requests the model submitted and has not seen legitimately removed, by `app/identifier`.
    var expectedRequests: Set<String> = []
    /// Requests the current step may remove: one it cancelled, or one whose task it completed or ended.
    var removableRequests: Set<String> = []
    /// The task each request runs, as `runScheduledTask` events and task ends show it.
    var runningRequests: [String: TaskID] = [:]
    /// When a running scheduled task was first seen with a constraint it asked for not holding.
    var constraintLostSince: [TaskID: MonotonicInstant] = [:]
    /// The conditions the model reports: power and network have sources, idle has none.
    var conditions = Conditions(externalPower: true, network: true)
    /// Scheduled tasks begun, for the coverage tally.
    var scheduledRuns = 0

    static let names = ["a", "b", "c", "d", "e"]

    init(seed: UInt64, verbose: Bool, checksChanges: Bool = false) {
        self.seed = seed
        self.verbose = verbose
        random = SeededGenerator(seed: seed)
        var policy = CorePolicy()
        policy.defaultAppPolicy.backgroundTime = .milliseconds(Int64.random(in: 1_000...30_000, using: &random))
        policy.defaultAppPolicy.expirationWarning = .milliseconds(Int64.random(in: 0...6_000, using: &random))
        policy.defaultAppPolicy.enterBackgroundGrace = .milliseconds(Int64.random(in: 100...6_000, using: &random))
        policy.defaultAppPolicy.willTerminateGrace = .milliseconds(Int64.random(in: 0...6_000, using: &random))
        policy.defaultAppPolicy.launchTimeout = .milliseconds(Int64.random(in: 100...6_000, using: &random))
        policy.defaultAppPolicy.lockedSuspendGrace = .milliseconds(Int64.random(in: 0...3_000, using: &random))
        if random.chance(30) {
            policy.defaultAppPolicy.backgroundBudgetPerDay = .milliseconds(
                Int64.random(in: 500...40_000, using: &random))
        }
        policy.tasksPerAppMax = Int.random(in: 1...4, using: &random)
        policy.queuedEventsPerAppMax = Int.random(in: 1...3, using: &random)
        policy.historySize = Int.random(in: 1...4, using: &random)
        policy.reclaimForeground = random.chance(50)
        policy.scheduledRequestsPerAppMax = Int.random(in: 1...3, using: &random)
        policy.scheduledRequestsMax = Int.random(in: 2...8, using: &random)
        policy.scheduledTasksMax = Int.random(in: 1...3, using: &random)
        policy.scheduledTimePerDay =
            random.chance(50) ? .zero : .milliseconds(Int64.random(in: 1_000...60_000, using: &random))
        policy.refreshTaskTime = .milliseconds(Int64.random(in: 500...10_000, using: &random))
        policy.processingTaskTime = .milliseconds(Int64.random(in: 1_000...40_000, using: &random))
        conditions.externalPower = random.chance(50)
        h = PolicyHarness(policy: policy)
        h.setWallClockOffset(.seconds(1_700_000_000))
        h.setConditions(conditions)
        if checksChanges {
            h.startTrackingChanges()
            replica = h.core.saved
        }
    }

    /// Nil when the replica, with this step's changes applied, saves as the policy's state does.
    mutating func checkChanges() -> String? {
        guard var replica else { return nil }
        let changes = h.takeChanges()
        if changes.tasks != nil { taskOnlyRecords += 1 }
        // Written in their Encodable form (the journal's writer, in the daemon, is checked against it there), read
        // back as a restart reads them, then applied.
        do {
            let written = try JSONEncoder().encode(changes)
            try replica.apply(try JSONDecoder().decode(LifecycleChanges.self, from: written))
        } catch {
            return "the changes written do not read back: \(error)"
        }
        self.replica = replica
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        guard let expected = try? encoder.encode(h.core.saved), let replayed = try? encoder.encode(replica) else {
            return "the state does not encode"
        }
        guard expected == replayed else {
            return """
                the saved state with the changes applied differs from the state:
                \(String(decoding: replayed, as: UTF8.self))
                expected
                \(String(decoding: expected, as: UTF8.self))
                """
        }
        return nil
    }

    /// Runs `steps` random operations; returns the first invariant violation, if any.
    mutating func run(steps: Int) -> String? {
        for step in 0..<steps {
            let before = h.core.snapshots(now: h.now, includeEnded: true)
            let requestsBefore = h.core.scheduledRequests()
            removableRequests = []
            let description: String
            var failed = false
            do {
                description = try performRandomOperation()
            } catch {
                description = "refused: \(error)"
                failed = true
            }
            if verbose { print("[\(seed):\(step)] @\(h.now) \(description)") }
            log.append("@\(h.now) \(description)")
            if failed,
                h.core.snapshots(now: h.now, includeEnded: true) != before
                    || h.core.scheduledRequests() != requestsBefore
            {
                return "step \(step): a refused request changed the state (\(description))"
            }
            if let violation = checkInvariants() ?? checkChanges() {
                return "step \(step) (\(description)): \(violation)"
            }
        }
        return nil
    }

    /// Mostly an app holding its name, sometimes any app ever seen (ended ones exercise the refusals).
    mutating func randomApp() -> AppID? {
        let live = knownApps.filter { h.core.apps[$0]?.holdsName == true }
        if !live.isEmpty && random.chance(85) { return live.randomElement(using: &random) }
        return knownApps.randomElement(using: &random)
    }

    /// Adds what this run's audit trail shows to the coverage tally.
    func tally(into coverage: inout [String: Int]) {
        coverage["scheduled runs", default: 0] += scheduledRuns
        for case .audit(let entry) in h.actions {
            coverage["kind \(entry.kind)", default: 0] += 1
            if entry.kind == .terminated, let reason = entry.reason {
                coverage["reason \(reason.rawValue)", default: 0] += 1
            }
            if entry.kind == .stateChanged, let state = entry.state {
                coverage["state \(state)", default: 0] += 1
            }
            if entry.kind == .taskEnded, let end = entry.taskEnd {
                coverage["task end \(end.rawValue)", default: 0] += 1
            }
        }
    }

    /// The request a scheduled task runs, if it runs one.
    func requestKey(runningAs task: TaskID) -> String? {
        h.core.scheduledRequests().first { $0.state.task == task }.map {
            "\($0.request.appName)/\($0.request.identifier)"
        }
    }

    mutating func performRandomOperation() throws -> String {
        let roll = Int.random(in: 0..<119, using: &random)
        let app = randomApp()
        switch roll {
        case 0..<10:
            let name = Self.names.randomElement(using: &random)!
            let pid: Int32? = random.chance(20) ? Int32.random(in: 1...3, using: &random) : nil
            let initial: InitialState = random.chance(20) ? .background : .active
            let exits: Bool? = random.chance(10) ? true : nil
            let id = try h.register(name, pid: pid, exitsOnSuspend: exits, initialState: initial)
            if !knownApps.contains(id) { knownApps.append(id) }
            return "register \(name) pid \(pid.map(String.init) ?? "default") \(initial) -> \(id)"
        case 10..<12:
            let name = Self.names.randomElement(using: &random)!
            let id = try h.launch(name)
            knownApps.append(id)
            return "launch \(name) -> \(id)"
        case 12..<27:
            guard let app else { return "no app" }
            let state = RequestedState.allCases.randomElement(using: &random)!
            try h.setState(app, state)
            return "setState \(app) \(state)"
        case 27..<37:
            guard let app else { return "no app" }
            let task = try h.begin(app, "t")
            return "begin \(app) -> \(task)"
        case 37..<47:
            guard let app else { return "no app" }
            let open = h.core.snapshot(of: app, now: h.now)?.tasks.map(\.id) ?? []
            let task =
                random.chance(80) && !open.isEmpty
                ? open.randomElement(using: &random)! : TaskID(rawValue: Int64.random(in: 1...40, using: &random))
            if let key = requestKey(runningAs: task) { removableRequests.insert(key) }
            try h.end(app, task)
            return "end \(app) \(task)"
        case 47..<55:
            guard let app else { return "no app" }
            let events = h.events(of: app)
            let event =
                random.chance(85) && !events.isEmpty
                ? events.last!.id : EventID(rawValue: Int64.random(in: -1...60, using: &random))
            try h.acknowledge(app, event)
            return "ack \(app) \(event)"
        case 55..<62:
            let behavior = DeliveryBehavior.allCases.randomElement(using: &random)!
            let target = random.chance(50) ? app : nil
            let name = ["x", "y"].randomElement(using: &random)!
            let result = try h.post(
                name, payload: "\(Int.random(in: 0...9, using: &random))", behavior: behavior, to: target)
            return "post \(name) \(behavior) to \(target?.description ?? "all") -> \(result)"
        case 62..<64:
            guard let app else { return "no app" }
            try h.terminate(app)
            return "terminate \(app)"
        case 64..<67:
            guard let app else { return "no app" }
            h.closeRegistration(app)
            return "close \(app)"
        case 67..<70:
            guard let app else { return "no app" }
            let how: ProcessEnd = random.chance(50) ? .exited : .crashed
            h.processExited(app, how: how)
            return "exit \(app) \(how)"
        case 70..<74:
            guard let app else { return "no app" }
            if h.lockHolders.remove(app) == nil { h.lockHolders.insert(app) }
            return "toggle lock \(app)"
        case 74..<76:
            var readings: [AppID: UInt64] = [:]
            for id in knownApps where random.chance(80) { readings[id] = UInt64.random(in: 0...100, using: &random) }
            h.memoryWarning(readings: readings, bytesToFree: UInt64.random(in: 0...150, using: &random))
            return "memory warning \(readings.count) readings"
        case 76..<78:
            guard let app else { return "no app" }
            try h.reclaim(app, memoryBytes: 10)
            return "reclaim \(app)"
        case 78..<80:
            // A daemon restart: everything the policy knew must survive it unchanged.
            let before = h.core.snapshots(now: h.now, includeEnded: true)
            let deadline = h.core.nextDeadline
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let savedBefore = try? encoder.encode(h.core.saved)
            do {
                try h.restoreFromSavedState()
            } catch {
                restartProblem = "the restart failed: \(error)"
                return "restart"
            }
            let after = h.core.snapshots(now: h.now, includeEnded: true)
            if (try? encoder.encode(h.core.saved)) != savedBefore {
                restartProblem = "the restored state saves differently from the state it was restored from"
            } else if after != before {
                restartProblem = "the restart changed the apps: \(before) became \(after)"
            } else if h.core.nextDeadline != deadline {
                restartProblem =
                    "the restart moved the next deadline from \(String(describing: deadline)) to "
                    + "\(String(describing: h.core.nextDeadline)), holding \(h.core.scheduledRequests())"
            }
            // A restarted daemon saves its whole state, then journals the changes after it.
            if replica != nil {
                h.startTrackingChanges()
                replica = h.core.saved
            }
            // Then the policy carries on: suspended apps are suspended again (a lock taken meanwhile defers it).
            h.resumeAfterRestart()
            return "restart"
        case 80..<90:
            guard let next = h.armedDeadline else { fallthrough }
            let target = random.chance(50) ? next : next - .nanoseconds(1)
            let step = target > h.now ? target - h.now : .zero
            h.advance(by: step)
            return "advance to deadline (\(step))"
        case 100..<106:
            let name = Self.names.randomElement(using: &random)!
            let identifier = ["r1", "r2", "r3"].randomElement(using: &random)!
            let kind = ScheduledTaskKind.allCases.randomElement(using: &random)!
            let due = h.wallNow + .milliseconds(Int64.random(in: -5_000...20_000, using: &random))
            let constraints = Set(
                [Constraint.externalPower, .network, .idle].filter { random.chance($0 == .idle ? 5 : 35) })
            let isLaunchable = random.chance(30)
            try h.submit(
                ScheduledRequest(
                    appName: name, identifier: identifier, kind: kind, earliestBegin: due, constraints: constraints),
                isLaunchable: isLaunchable)
            expectedRequests.insert("\(name)/\(identifier)")
            return
                "submit \(name)/\(identifier) \(kind) due \(due) needs \(constraints.sorted()) launchable \(isLaunchable)"
        case 106..<108:
            let name = Self.names.randomElement(using: &random)!
            let identifier = ["r1", "r2", "r3"].randomElement(using: &random)!
            removableRequests.insert("\(name)/\(identifier)")
            try h.cancel(app: name, identifier: identifier)
            return "cancel \(name)/\(identifier)"
        case 108..<112:
            let running = h.core.scheduledRequests().compactMap { snapshot -> (AppID, TaskID, String)? in
                guard case .running(let app, let task) = snapshot.state else { return nil }
                return (app, task, "\(snapshot.request.appName)/\(snapshot.request.identifier)")
            }
            let outcome: ScheduledTaskOutcome =
                [.success, .failure(retry: false), .failure(retry: true)].randomElement(using: &random)!
            guard let (app, task, key) = running.randomElement(using: &random), random.chance(90) else {
                guard let app else { return "no app" }
                let task = TaskID(rawValue: Int64.random(in: 1...40, using: &random))
                if let key = requestKey(runningAs: task) { removableRequests.insert(key) }
                try h.complete(app, task, outcome)
                return "complete \(app) \(task) \(outcome)"
            }
            removableRequests.insert(key)
            try h.complete(app, task, outcome)
            return "complete \(key) \(task) \(outcome)"
        case 112..<115:
            if random.chance(50) {
                conditions.externalPower?.toggle()
            } else {
                conditions.network?.toggle()
            }
            h.setConditions(conditions)
            return "conditions ac \(conditions.externalPower!) network \(conditions.network!)"
        case 115:
            let name = Self.names.randomElement(using: &random)!
            h.launchFailed(name)
            return "launch of \(name) failed"
        case 116..<118:
            guard let app else { return "no app" }
            let exemption: SuspensionExemption =
                random.chance(50)
                ? .unitStopping(unit: "app.service")
                : .unitWatchdog(unit: "app.service", interval: .seconds(Int64.random(in: 1...9, using: &random)))
            h.exempt(app, exemption)
            return "exempt \(app): \(exemption)"
        case 118:
            // The model's requests have no owner: a pin fits none of them, and cancels every one of its name.
            let name = Self.names.randomElement(using: &random)!
            for snapshot in h.core.scheduledRequests(app: name) {
                removableRequests.insert("\(name)/\(snapshot.request.identifier)")
            }
            let pin: UInt32? = random.chance(50) ? 1000 : nil
            h.setPins([name: pin])
            return "pin \(name) to \(pin.map { "uid \($0)" } ?? "nobody")"
        default:
            let step = Duration.milliseconds(Int64.random(in: 0...8_000, using: &random))
            h.advance(by: step)
            return "advance \(step)"
        }
    }

    /// The invariants of scheduled work: no task runs on beyond its warning grace with a constraint it asked for
    /// not holding, no request runs twice at once, no more run than `ScheduledTasksMax`, every submitted request
    /// is held until the model removes it (cancel, completion, end) or it finishes, and nothing runnable waits.
    mutating func checkScheduling(_ newActions: ArraySlice<Action>) -> String? {
        let now = h.now
        // Apps that re-attached in this step: told their running tasks again.
        var reattached: Set<AppID> = []
        for action in newActions {
            switch action {
            case .audit(let entry) where entry.kind == .reattached:
                if let app = entry.app { reattached.insert(app) }
            case .send(let event, let app) where event.kind == .runScheduledTask:
                guard let name = h.core.apps[app]?.name, let identifier = event.name, let task = event.taskIDs?.first
                else { return "runScheduledTask without its app, identifier or task" }
                let key = "\(name)/\(identifier)"
                if let other = runningRequests[key] {
                    if other == task && reattached.contains(app) { continue }
                    return "\(key) runs as \(task) while it runs as \(other)"
                }
                runningRequests[key] = task
                scheduledRuns += 1
            case .audit(let entry) where entry.kind == .taskEnded:
                if let task = entry.taskID, let key = runningRequests.first(where: { $0.value == task })?.key {
                    runningRequests[key] = nil
                    constraintLostSince[task] = nil
                }
            default:
                break
            }
        }
        let held = h.core.scheduledRequests()
        var running: [String: TaskID] = [:]
        for snapshot in held {
            if case .running(_, let task) = snapshot.state {
                running["\(snapshot.request.appName)/\(snapshot.request.identifier)"] = task
            }
        }
        if running != runningRequests { return "running requests \(running) but the events say \(runningRequests)" }
        let scheduledLeases = h.core.apps.values.flatMap { $0.openTasks.filter { $0.isScheduled == true }.map(\.id) }
        if Set(scheduledLeases) != Set(running.values) || scheduledLeases.count != running.count {
            return "scheduled leases \(scheduledLeases.sorted()) but running requests \(running)"
        }
        let active = held.count { if case .pending = $0.state { false } else { true } }
        if active > h.core.policy.scheduledTasksMax {
            return "\(active) scheduled tasks running or launching, over ScheduledTasksMax"
        }
        if held.count > h.core.policy.scheduledRequestsMax { return "\(held.count) requests held, over the bound" }
        let warning = h.core.policy.defaultAppPolicy.expirationWarning
        for snapshot in held {
            guard case .running(_, let task) = snapshot.state else { continue }
            if conditions.satisfy(snapshot.request.constraints) { continue }
            let since = constraintLostSince[task] ?? now
            constraintLostSince[task] = since
            if now - since > warning {
                return "\(task) runs \(now - since) after a constraint it needs stopped holding"
            }
        }
        let present = Set(held.map { "\($0.request.appName)/\($0.request.identifier)" })
        for key in expectedRequests.subtracting(present) {
            guard removableRequests.contains(key) else { return "\(key) was lost" }
            expectedRequests.remove(key)
        }
        if let unknown = present.subtracting(expectedRequests).first { return "\(unknown) is held but never submitted" }
        // Nothing runnable waits: due, its constraints holding, its app running, a slot and its time free.
        if active < h.core.policy.scheduledTasksMax {
            for snapshot in held {
                guard case .pending(let due, let waitingOn) = snapshot.state, due <= h.wallNow, waitingOn.isEmpty,
                    let id = h.core.liveAppID(named: snapshot.request.appName), let app = h.core.apps[id],
                    app.isRegistered, app.state.isRunning || app.state == .suspended,
                    h.core.policy.scheduledTimePerDay == .zero
                else { continue }
                return "\(snapshot.request.appName)/\(snapshot.request.identifier) is runnable but waits"
            }
        }
        return nil
    }

    /// The invariants of the issue, plus the shell contract; nil when all hold.
    mutating func checkInvariants() -> String? {
        if let restartProblem { return restartProblem }
        let now = h.now
        if let violation = h.violations.first { return "shell contract: \(violation)" }
        // The live apps of each uid, as AppsPerUserMax counts them, are those holding a name.
        var liveByUID: [UInt32: Int] = [:]
        for id in h.core.liveNames.values { liveByUID[h.core.apps[id]?.uid ?? .max, default: 0] += 1 }
        for uid in Set(liveByUID.keys).union(h.core.liveCountByUID.keys)
        where h.core.liveAppCount(uid: uid) != liveByUID[uid] ?? 0 {
            return "uid \(uid) counted \(h.core.liveAppCount(uid: uid)) live apps, holds \(liveByUID[uid] ?? 0) names"
        }
        // Each task ends exactly once.
        let newActions = h.actions[processedActions...]
        processedActions = h.actions.count
        if let violation = checkScheduling(newActions) { return violation }
        var leftForeground: Set<AppID> = []
        for case .audit(let entry) in newActions {
            switch entry.kind {
            case .taskBegan:
                guard let task = entry.taskID, begun.insert(task).inserted else { return "task began twice" }
            case .taskEnded:
                guard let task = entry.taskID, begun.contains(task) else { return "unknown task ended" }
                endings[task, default: 0] += 1
                if endings[task]! > 1 { return "\(task) ended \(endings[task]!) times" }
            case .stateChanged
            where entry.state?.isForeground == true || entry.state == .terminated
                || entry.state == .notRunning:
                if let app = entry.app { leftForeground.insert(app) }
            default:
                break
            }
        }
        let open = Set(h.core.apps.values.flatMap(\.openTaskIDs))
        if open.count != h.core.openTaskCount {
            return "open task count \(h.core.openTaskCount) but \(open.count) open"
        }
        let expectedOpen = begun.filter { endings[$0] == nil }
        if open != expectedOpen {
            return "open tasks \(open.sorted()) but begun-and-not-ended \(expectedOpen.sorted())"
        }

        for app in h.core.apps.values {
            let id = app.id
            // A suspended app has no open task, no queued wake event, and is stopped; nothing else is.
            if app.state == .suspended {
                if !app.openTasks.isEmpty { return "suspended \(id) holds tasks \(app.openTaskIDs)" }
                if app.queue.entries.contains(where: { $0.behavior == .wake }) {
                    return "suspended \(id) has a wake event queued"
                }
                if !h.frozen.contains(id) { return "suspended \(id) is not stopped" }
                if app.queue.count > h.core.policy.queuedEventsPerAppMax {
                    return "suspended \(id) queues \(app.queue.count) events, over the bound"
                }
            } else if !app.queue.isEmpty {
                // A restored state holding one is refused whole (`Lifecycle(restoring:)`).
                return "\(id) has \(app.queue.count) events queued in state \(app.state)"
            } else if h.frozen.contains(id) {
                return "\(id) is stopped in state \(app.state)"
            }
            if app.state == .terminated && !app.openTasks.isEmpty { return "terminated \(id) holds tasks" }
            // An ended registration whose process is gone is its name's; one no name leads to is forgotten.
            if app.state == .terminated && app.isProcessGone && h.core.endedNames[app.name] != id {
                return "ended \(id) (\(app.name)) is remembered though its name leads elsewhere"
            }
            // An app exempted from suspension never is suspended again.
            if let exemption = app.suspensionExemption, app.state == .suspended {
                return "\(id) is suspended though \(exemption)"
            }
            // No app stays in background past its budget with an open lease (scheduled tasks have their own time).
            if app.state == .background && app.hasOrdinaryTasks {
                guard let end = app.budgetEnd, end > now else {
                    return "\(id) in background past its budget with tasks"
                }
            }
            // Remaining time never increases while in background.
            let remaining = h.core.remaining(of: app, now: now)
            if let remaining, !leftForeground.contains(id), let last = lastRemaining[id], remaining > last {
                return "\(id) remaining time rose from \(last) to \(remaining)"
            }
            lastRemaining[id] = remaining
        }
        // The armed deadline equals the earliest pending one, and nothing due is left pending.
        let earliest =
            (h.core.apps.values.compactMap { $0.deadlines.earliest?.order.instant }
            + [h.core.nextSchedulingDeadline].compactMap { $0 }).min()
        if h.armedDeadline != earliest {
            return "armed \(String(describing: h.armedDeadline)) but earliest \(String(describing: earliest))"
        }
        if h.core.nextDeadline != earliest {
            return "queue says \(String(describing: h.core.nextDeadline)) but earliest \(String(describing: earliest))"
        }
        if let earliest, earliest <= now { return "deadline \(earliest) left pending at \(now)" }
        if let planned = h.core.nextSchedulingDeadline, planned != h.core.plannedSchedulingDeadline(after: now),
            h.core.plannedSchedulingDeadline(after: now).map({ $0 < planned }) ?? false
        {
            return "scheduled work planned for \(planned), but something changes sooner"
        }
        if h.core.deadlines.count != h.core.apps.values.filter({ !$0.deadlines.isEmpty }).count {
            return "deadline queue holds \(h.core.deadlines.count) apps"
        }
        return nil
    }
}

extension PolicyHarness {
    /// The wall-clock time now, with the offset the model reports (it never changes it).
    fileprivate var wallNow: WallClockInstant {
        WallClockInstant(nanoseconds: 0) + .nanoseconds(now.nanoseconds) + .seconds(1_700_000_000)
    }
}

extension ScheduledRequestState {
    /// The task of a running request.
    fileprivate var task: TaskID? {
        if case .running(_, let task) = self { return task }
        return nil
    }
}

@Suite("Randomized model (seeded)")
struct ModelTests {
    /// `BGTASK_MODEL_SEED=N` replays one sequence verbosely; `BGTASK_MODEL_SEQUENCES=N` changes the count.
    static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    @Test("10,000 random sequences keep every invariant after every step")
    func randomSequences() async {
        await offThePool(computing: true) { randomSequencesBody() }
    }

    private func randomSequencesBody() {
        if let replay = Self.environment("BGTASK_MODEL_SEED").flatMap(UInt64.init) {
            var run = ModelRun(seed: replay, verbose: true)
            let failure = run.run(steps: 80)
            #expect(failure == nil, "seed \(replay): \(failure ?? "")")
            return
        }
        let count = Self.environment("BGTASK_MODEL_SEQUENCES").flatMap(Int.init) ?? 10_000
        var failures = 0
        var coverage: [String: Int] = [:]
        for index in 0..<count {
            let seed = 0x5EED_0000 + UInt64(index)
            var run = ModelRun(seed: seed, verbose: false)
            let steps = 20 + Int(seed % 61)
            let failure = run.run(steps: steps)
            run.tally(into: &coverage)
            if let failure {
                failures += 1
                Issue.record(
                    """
                    invariant broken with seed \(seed) (replay: BGTASK_MODEL_SEED=\(seed) swift test --filter ModelTests): \
                    \(failure)
                    last steps:
                    \(run.log.suffix(12).joined(separator: "\n"))
                    """)
                if failures >= 3 { break }
            }
        }
        // The sequences must reach every outcome, or the invariants above were checked on too little.
        let expected =
            TerminationReason.allCases.map { "reason \($0.rawValue)" } + AuditKind.allCases.map { "kind \($0)" }
            + AppState.allCases.filter { $0 != .notRunning }.map { "state \($0)" } + ["state notRunning"]
            + TaskEndCause.allCases.map { "task end \($0.rawValue)" } + ["scheduled runs"]
        let missing = expected.filter { coverage[$0] == nil }
        #expect(missing.isEmpty, "never reached: \(missing)")
        print(
            "model coverage: \(coverage.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))"
        )
    }

    @Test("400 random sequences: the state saved at the start plus each step's changes is the state after it")
    func changesReplayToTheState() async {
        await offThePool(computing: true) { changesReplayToTheStateBody() }
    }

    private func changesReplayToTheStateBody() {
        var failures = 0
        var journaledApps = 0
        var taskOnlyRecords = 0
        for index in 0..<400 {
            let seed = 0xC4A1_0000 + UInt64(index)
            var run = ModelRun(seed: seed, verbose: false, checksChanges: true)
            if let failure = run.run(steps: 20 + Int(seed % 61)) {
                failures += 1
                Issue.record(
                    """
                    changes lost with seed \(seed): \(failure)
                    last steps:
                    \(run.log.suffix(12).joined(separator: "\n"))
                    """)
                if failures >= 3 { break }
            }
            journaledApps += run.replica?.appCount ?? 0
            taskOnlyRecords += run.taskOnlyRecords
        }
        #expect(journaledApps > 0)
        #expect(taskOnlyRecords > 0)
    }
}
