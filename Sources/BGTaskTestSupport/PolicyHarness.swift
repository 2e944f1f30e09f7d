// Drives the policy core the way the daemon does, over a manual event loop, and logs what it was told to do.

import BGTaskCore
import Foundation

/// Runs a `Lifecycle` as the daemon would: one timer armed on a `ManualEventLoop` wherever the core asks,
/// `deadlineReached` when it fires, and `.suspend` refused for apps the test marks as holding a file lock.
///
/// Everything the core asks for is appended to `effects` as a readable line, so a test reads as a timeline:
/// "enter background, advance 595 s, expect `mail ← backgroundTaskExpiring [1]`".
public final class PolicyHarness {
    /// The policy under test.
    public private(set) var core: Lifecycle
    /// The loop whose clock drives the test.
    public let loop: ManualEventLoop
    /// Every action returned by the core, in order.
    public private(set) var actions: [Action] = []
    /// Readable lines for the effects not yet taken with `takeEffects()`.
    private var pendingEffects: [String] = []
    /// Apps the test says hold a file lock: their suspension is refused.
    public var lockHolders: Set<AppID> = []
    /// Apps currently stopped by the shell.
    public private(set) var frozen: Set<AppID> = []
    /// Apps whose suspension was refused (a lock) and the core not told yet: the refusal is an input fed after the
    /// batch, as the daemon's lock check answers later. A resume or kill meanwhile drops it, as the daemon's
    /// process table drops the pending check, and the core never hears it.
    private var pendingRefusals: Set<AppID> = []
    /// Apps whose processes were killed.
    public private(set) var killed: Set<AppID> = []
    /// Registrations the policy forgot while their processes may live on (`.forget`).
    public private(set) var forgotten: Set<AppID> = []
    /// App names the policy asked to launch for their scheduled requests (`.launch`), in order, with the owner each
    /// launch is for.
    public private(set) var launchRequests: [(app: String, owner: UInt32?)] = []
    /// The instant the shell's single timer is armed at.
    public private(set) var armedDeadline: MonotonicInstant?
    /// Shell-side contract breaches seen while executing actions (an event sent to a frozen app, a resume of an
    /// app that was not stopped, a suspend of one already stopped).
    public private(set) var violations: [String] = []
    /// Events sent to each app, in order.
    public private(set) var delivered: [AppID: [AppEvent]] = [:]
    private var timer: ManualEventLoop.Timer?

    /// Creates a harness with `policy`, its clock at `start`.
    public init(policy: CorePolicy = CorePolicy(), start: MonotonicInstant = .seconds(1000)) {
        core = Lifecycle(policy: policy)
        loop = ManualEventLoop(start: start)
    }

    /// A harness whose policy is restored from `saved` (a daemon starting on a saved state, perhaps after a
    /// reboot: `start` is the new boot's monotonic time), given the conditions and wall clock its shell reads at
    /// start; the restart's actions are carried out.
    public init(
        restoring saved: SavedLifecycle, policy: CorePolicy = CorePolicy(), start: MonotonicInstant,
        conditions: Conditions?, wallClockOffset: Duration?
    ) throws {
        core = try Lifecycle(
            restoring: saved, policy: policy, conditions: conditions, wallClockOffset: wallClockOffset, now: start)
        loop = ManualEventLoop(start: start)
        execute(core.restarted(now: start))
    }

    /// The current time.
    public var now: MonotonicInstant { loop.now }

    /// Returns the effect lines since the last call, and forgets them.
    public func takeEffects() -> [String] {
        defer { pendingEffects.removeAll() }
        return pendingEffects
    }

    /// Moves time forward, firing the policy's deadlines on the way.
    public func advance(by duration: Duration) {
        loop.advanceTime(by: duration)
    }

    // MARK: Inputs

    /// Registers an app whose process id is derived from its name.
    @discardableResult
    public func register(
        _ name: String, pid: Int32? = nil, uid: UInt32 = 1000, exitsOnSuspend: Bool? = nil,
        initialState: InitialState = .active, backgroundTime: Duration? = nil
    ) throws(LifecycleError) -> AppID {
        let registration = try core.register(
            name: name, process: ProcessIdentity(pid: pid ?? Self.pid(for: name), uid: uid),
            exitsOnSuspend: exitsOnSuspend, initialState: initialState, backgroundTime: backgroundTime, now: now)
        execute(registration.actions)
        return registration.app
    }

    /// Records a launch of a managed app as `uid` (`forScheduledWork`: one the policy asked for with `.launch`).
    @discardableResult
    public func launch(
        _ name: String, pid: Int32? = nil, uid: UInt32 = 0, forScheduledWork: Bool = false
    ) throws(LifecycleError) -> AppID {
        let launched = try core.appLaunched(
            name: name, process: ProcessIdentity(pid: pid ?? Self.pid(for: name), uid: uid),
            forScheduledWork: forScheduledWork, now: now)
        execute(launched.actions)
        return launched.app
    }

    /// `SetState`.
    public func setState(_ app: AppID, _ state: RequestedState) throws(LifecycleError) {
        execute(try core.setState(app, to: state, now: now))
    }

    /// `BeginBackgroundTask`.
    @discardableResult
    public func begin(_ app: AppID, _ name: String? = nil) throws(LifecycleError) -> TaskID {
        let begun = try core.beginBackgroundTask(app, name: name, now: now)
        execute(begun.actions)
        return begun.task
    }

    /// `EndBackgroundTask`.
    public func end(_ app: AppID, _ task: TaskID) throws(LifecycleError) {
        execute(try core.endBackgroundTask(app, task: task, now: now))
    }

    /// `Acknowledge` of a specific event.
    public func acknowledge(_ app: AppID, _ event: EventID) throws(LifecycleError) {
        execute(try core.acknowledge(app, event: event, now: now))
    }

    /// Acknowledges the last event of `kind` delivered to `app`.
    public func acknowledgeLast(_ kind: EventKind, of app: AppID) throws(LifecycleError) {
        guard let event = delivered[app]?.last(where: { $0.kind == kind }) else {
            preconditionFailure("no \(kind) was delivered to \(app)")
        }
        try acknowledge(app, event.id)
    }

    /// `Post`.
    @discardableResult
    public func post(
        _ name: String, payload: String? = nil, behavior: DeliveryBehavior = .coalesce, to app: AppID? = nil
    ) throws(LifecycleError) -> (delivered: Int, queued: Int) {
        let result = try core.post(name: name, payloadJSON: payload, behavior: behavior, to: app, now: now)
        execute(result.actions)
        return (result.delivered, result.queued)
    }

    /// `Terminate` from a controller.
    public func terminate(_ app: AppID) throws(LifecycleError) {
        execute(try core.terminate(app, now: now))
    }

    /// The app's event stream closed.
    public func closeRegistration(_ app: AppID) {
        execute(core.registrationClosed(app, now: now))
    }

    /// The app's process ended. Like the daemon, the shell first releases whatever it held for the app: a
    /// stopped app's freeze (other processes of its group or cgroup must not stay stopped).
    public func processExited(_ app: AppID, how: ProcessEnd = .exited) {
        frozen.remove(app)
        execute(core.processExited(app, how: how, now: now))
    }

    /// The shell learned that `app` must never be suspended (its unit is stopping, or has a watchdog).
    public func exempt(_ app: AppID, _ exemption: SuspensionExemption) {
        execute(core.suspensionExempted(app, because: exemption, now: now))
    }

    /// Memory warning with readings.
    public func memoryWarning(readings: [AppID: UInt64], bytesToFree: UInt64) {
        execute(core.memoryWarning(readings: readings, bytesToFree: bytesToFree, now: now))
    }

    /// Reclaims an app.
    public func reclaim(_ app: AppID, memoryBytes: UInt64? = nil) throws(LifecycleError) {
        execute(try core.reclaim(app, memoryBytes: memoryBytes, now: now))
    }

    /// Submits a scheduled request.
    public func submit(_ request: ScheduledRequest, isLaunchable: Bool = false) throws(SchedulingError) {
        execute(try core.submit(request, isLaunchable: isLaunchable, now: now))
    }

    /// Cancels a scheduled request.
    public func cancel(app name: String, identifier: String) throws(SchedulingError) {
        execute(try core.cancelScheduledRequest(app: name, identifier: identifier, now: now))
    }

    /// `setTaskCompleted` for a scheduled task.
    public func complete(_ app: AppID, _ task: TaskID, _ outcome: ScheduledTaskOutcome) throws(SchedulingError) {
        execute(try core.setTaskCompleted(app, task: task, outcome: outcome, now: now))
    }

    /// The host's conditions changed.
    public func setConditions(_ conditions: Conditions) {
        execute(core.conditionsChanged(conditions, now: now))
    }

    /// The wall clock's offset from the monotonic clock changed (or was read at start).
    public func setWallClockOffset(_ offset: Duration) {
        execute(core.wallClockChanged(offset: offset, now: now))
    }

    /// The shell could not launch `name` for the scheduled requests of `owner`.
    public func launchFailed(_ name: String, owner: UInt32? = nil) {
        execute(core.scheduledLaunchFailed(app: name, owner: owner, now: now))
    }

    /// The names `User=` pins to users changed (or were read at start).
    public func setPins(_ pins: [String: UInt32?]) {
        execute(core.pinsChanged(pins, now: now))
    }

    /// Restarts the policy as the daemon restarts: `restoreFromSavedState()`, then `resumeAfterRestart()`.
    @discardableResult
    public func restart() throws -> Data {
        let data = try restoreFromSavedState()
        resumeAfterRestart()
        return data
    }

    /// The first half of a restart: the policy's state saved as JSON and restored into a new `Lifecycle`, and the
    /// processes it had stopped continued meanwhile (as the service's clean-up does after a crash). Returns the
    /// saved bytes.
    ///
    /// The shell reads the host's conditions and the wall clock again as it starts: the restored policy is given
    /// those the old one had, or `wallClockOffset` when the restart is after a reboot (a new monotonic origin).
    @discardableResult
    public func restoreFromSavedState(wallClockOffset: Duration? = nil) throws -> Data {
        let data = try JSONEncoder().encode(core.saved)
        let saved = try JSONDecoder().decode(SavedLifecycle.self, from: data)
        core = try Lifecycle(
            restoring: saved, policy: core.policy, conditions: core.conditions,
            wallClockOffset: wallClockOffset ?? core.wallClockOffset, now: now)
        frozen = []
        pendingRefusals = []
        if let timer { loop.cancel(timer) }
        timer = nil
        armedDeadline = nil
        pendingEffects.append("restart")
        return data
    }

    /// Starts recording the policy's changes (`Lifecycle.tracksChanges`), as a daemon with a state file does.
    public func startTrackingChanges() {
        core.tracksChanges = true
    }

    /// The policy's changes since the last call (`Lifecycle.takeChanges()`).
    public func takeChanges() -> LifecycleChanges {
        core.takeChanges()
    }

    /// The second half of a restart: the restart's actions carried out (suspended apps suspended again, the
    /// timer armed).
    public func resumeAfterRestart() {
        execute(core.restarted(now: now))
    }

    /// Remaining background time.
    public func remaining(_ app: AppID) throws(LifecycleError) -> Duration? {
        try core.backgroundTimeRemaining(app, now: now)
    }

    /// The app's current state.
    public func state(_ app: AppID) -> AppState? {
        core.snapshot(of: app, now: now)?.state
    }

    /// The events delivered to `app` so far.
    public func events(of app: AppID) -> [AppEvent] {
        delivered[app] ?? []
    }

    // MARK: The shell's side

    private var depth = 0
    /// Inputs that arose while a batch was being carried out; fed to the core once the batch is done, since
    /// a batch's `.armTimer` reflects the core as it was when the batch was made.
    private var deferredInputs: [() -> [Action]] = []

    /// Carries out actions as the daemon would; then feeds deferred inputs and, like a real loop, runs a timer
    /// that is already due.
    public func execute(_ batch: [Action]) {
        depth += 1
        defer {
            depth -= 1
            if depth == 0 {
                while !deferredInputs.isEmpty {
                    let input = deferredInputs.removeFirst()
                    execute(input())
                }
                loop.run()
            }
        }
        for action in batch {
            actions.append(action)
            switch action {
            case .send(let event, let app):
                if frozen.contains(app) { violations.append("sent \(event.kind) to frozen \(name(app))") }
                delivered[app, default: []].append(event)
                pendingEffects.append("\(name(app)) ← \(Self.describe(event))")
            case .suspend(let app):
                if lockHolders.contains(app) {
                    pendingEffects.append("suspend \(name(app)) refused: lock")
                    pendingRefusals.insert(app)
                    deferredInputs.append { [unowned self] in
                        guard self.pendingRefusals.remove(app) != nil else { return [] }
                        return self.core.suspensionRefused(app, now: self.now)
                    }
                } else {
                    if frozen.contains(app) { violations.append("suspended \(name(app)) twice") }
                    frozen.insert(app)
                    pendingEffects.append("suspend \(name(app))")
                }
            case .resume(let app):
                // A resume while the refusal of its suspension is still on its way: nothing was stopped, and the
                // refusal is dropped (the daemon's resume cancels the pending lock check).
                if pendingRefusals.remove(app) == nil, frozen.remove(app) == nil {
                    violations.append("resumed \(name(app)), which was not stopped")
                }
                pendingEffects.append("resume \(name(app))")
            case .kill(let app, let reason):
                frozen.remove(app)
                pendingRefusals.remove(app)
                killed.insert(app)
                pendingEffects.append("kill \(name(app)) (\(reason.rawValue))")
            case .forget(let app):
                forgotten.insert(app)
            case .launch(let name, let owner):
                launchRequests.append((name, owner))
                pendingEffects.append("launch \(name)" + (owner.map { " for uid \($0)" } ?? ""))
            case .armTimer(let instant):
                if let timer { loop.cancel(timer) }
                timer = nil
                armedDeadline = instant
                if let instant {
                    timer = loop.schedule(at: instant) { [unowned self] in
                        self.timer = nil
                        self.armedDeadline = nil
                        self.execute(self.core.deadlineReached(now: self.loop.now))
                    }
                }
            case .audit(let entry):
                switch entry.kind {
                case .terminated:
                    pendingEffects.append("\(entry.appName) terminated (\(entry.reason?.rawValue ?? "?"))")
                case .taskEnded where entry.taskEnd != .ended:
                    pendingEffects.append(
                        "\(entry.appName) \(entry.taskID?.description ?? "?") ended (\(entry.taskEnd?.rawValue ?? "?"))"
                    )
                case .suspensionDeferred:
                    pendingEffects.append("\(entry.appName) suspension deferred")
                case .suspensionExempted:
                    pendingEffects.append("\(entry.appName) never suspended: \(entry.trigger ?? "?")")
                case .eventsDropped:
                    pendingEffects.append("\(entry.appName) events dropped")
                case .requestCancelled:
                    pendingEffects.append(
                        "\(entry.appName) request \(entry.requestIdentifier ?? "?") cancelled: \(entry.trigger ?? "?")")
                default:
                    break
                }
            }
        }
    }

    private func name(_ app: AppID) -> String {
        core.snapshot(of: app, now: now)?.name ?? app.description
    }

    /// One readable line for an event: `kind`, its task ids, notification name, payload and count.
    public static func describe(_ event: AppEvent) -> String {
        var text = event.kind.rawValue
        if let tasks = event.taskIDs { text += " \(tasks.map(\.rawValue))" }
        if let name = event.name { text += "(\(name))" }
        if let payload = event.payloadJSON { text += " \(payload)" }
        if let count = event.count, count > 1 { text += " ×\(count)" }
        if let victim = event.likelyVictim { text += victim ? " victim#\(event.rank ?? 0)" : " safe" }
        return text
    }

    /// A stable fake process id for a name.
    public static func pid(for name: String) -> Int32 {
        var hash: UInt32 = 2_166_136_261
        for byte in name.utf8 { hash = (hash ^ UInt32(byte)) &* 16_777_619 }
        return Int32(hash % 1_000_000) + 100
    }
}

extension MonotonicInstant {
    /// An instant `seconds` after the origin, for test timelines.
    public static func seconds(_ seconds: Int64) -> MonotonicInstant {
        MonotonicInstant(nanoseconds: seconds * 1_000_000_000)
    }
}
