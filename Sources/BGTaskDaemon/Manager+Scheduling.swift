// Scheduled work through the interface: requests submitted, cancelled, listed and completed; and the two inputs the
// core plans them with besides the conditions, the wall clock's offset and its settings.

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem

extension Manager {
    // MARK: Inputs

    /// Gives the core the wall clock's offset and the conditions as they stand, and watches for settings of the
    /// clock: at start, once the saved state is restored (a restored core knows neither).
    func startScheduling() throws(StartupError) {
        perform(core.wallClockChanged(offset: clock.wallClockOffset, now: now))
        if let monitor = conditionMonitor, monitor.isSettled {
            perform(core.conditionsChanged(monitor.conditions, now: now))
        }
        guard !clock.isManual else { return }
        do {
            wallClockWatch = try WallClockWatch(loop: loop) { [unowned self] offset in
                let previous = self.core.wallClockOffset
                let offset = Duration.nanoseconds(offset)
                self.logger.notice(
                    "the wall clock was set (moved by \(((offset - (previous ?? offset)).secondsValue)) s): "
                        + "scheduled requests are planned again")
                self.perform(self.core.wallClockChanged(offset: offset, now: self.now))
            }
        } catch {
            throw StartupError(description: "cannot watch the wall clock for settings: \(error)")
        }
    }

    /// The conditions as the monitor reports them once every source has answered; nil before.
    var settledConditions: Conditions? {
        conditionMonitor.flatMap { $0.isSettled ? $0.conditions : nil }
    }

    /// With no state of this boot to restore (none, set aside, or saved before the last boot), starts from the
    /// scheduled requests kept across reboots (`ScheduledStore`): each keeps its wall-clock times, and one that ran
    /// or was launching waits again with backoff, since its app ended with the boot.
    func restoreScheduledRequests() {
        guard let store = scheduledStore, let saved = store.load(), saved.requestCount > 0 || saved.ledgerCount > 0
        else { return }
        let offset = clock.wallClockOffset
        let wallNow = WallClockInstant(nanoseconds: now.nanoseconds) + offset
        do {
            core = try Lifecycle(
                restoring: SavedLifecycle(afterReboot: saved, wallClockNow: wallNow), policy: configuration.core,
                conditions: settledConditions, wallClockOffset: offset, now: now)
        } catch {
            logger.warning("not restoring the scheduled requests of \(store.path): \(error)")
            return
        }
        logger.notice(
            "no saved state of this boot: restored \(saved.requestCount) scheduled requests from \(store.path)")
        perform(core.restarted(now: now))
    }

    /// Hands the scheduled requests to their store when they changed (at most once a second; `ScheduledStore`).
    func saveScheduledRequests() {
        guard let store = scheduledStore else { return }
        store.save(core.savedScheduling, revision: core.schedulingRevision)
    }

    /// The wall-clock time now, as the core converts it.
    var wallClockNow: WallClockInstant {
        WallClockInstant(nanoseconds: now.nanoseconds) + (core.wallClockOffset ?? clock.wallClockOffset)
    }

    // MARK: Methods

    /// `SubmitRequest`: the request belongs to the name's user (`requestOwner`: the user the name is pinned to, else
    /// the live app's or the held requests' owner, else the caller), which the caller must be, or root.
    func submitRequest(_ parameters: SubmitRequestParameters, _ call: IncomingCall) throws
        -> CallOutcome<SubmitRequestReply>
    {
        let name = parameters.app
        guard Self.isValidName(name) else { throw VarlinkError.invalidParameter(parameter: "app") }
        guard ScheduledRequest.isValidIdentifier(parameters.identifier) else {
            throw VarlinkError.invalidParameter(parameter: "identifier")
        }
        var earliestBegin = wallClockNow
        if let seconds = parameters.earliestBegin {
            // From the epoch to the year 5000: anything else is a mistake, not a date.
            guard seconds.isFinite, seconds >= 0, seconds < 95_617_584_000 else {
                throw VarlinkError.invalidParameter(parameter: "earliestBegin")
            }
            earliestBegin = WallClockInstant(nanoseconds: Int64(seconds * 1e9))
        }
        let caller = call.credentials.uid
        let owner: UInt32
        switch requestOwner(ofAppNamed: name, caller: caller) {
        case .success(let allowed): owner = allowed
        case .failure(let refusal): throw deniedScheduling(call, name, refusal)
        }
        if let held = heldRequest(name, parameters.identifier), held.request.ownerUID != owner, caller != 0 {
            throw deniedScheduling(
                call, name, IdentityRefusal(description: "its request belongs to another user than uid \(owner)"))
        }
        let request = ScheduledRequest(
            appName: name, identifier: parameters.identifier, kind: parameters.kind ?? .refresh,
            earliestBegin: earliestBegin, constraints: Set(parameters.requires ?? []), ownerUID: owner)
        // An app with a command in apps.d (`ExecStart=`) is launched for its requests when it is not running, as their
        // owner; any other waits for its app to register.
        let isLaunchable =
            configuration.launch.appCommands[name] != nil && identity.canLaunch(name, forRequestsOf: owner)
        let actions: [Action]
        do {
            actions = try core.submit(request, isLaunchable: isLaunchable, now: now)
        } catch {
            throw varlinkError(error)
        }
        let requirements = request.constraints.sorted().map(\.rawValue).joined(separator: ",")
        logger.info(
            "\(name): request \(parameters.identifier.debugDescription) (\(request.kind.rawValue), requires "
                + "\(requirements.isEmpty ? "nothing" : requirements)) submitted by uid \(caller)", [.app(name)])
        guard let held = heldRequest(name, parameters.identifier) else {
            // The core holds what it accepted; were it gone, the caller must not be told it is held.
            throw VarlinkError.noSuchRequest(app: name, identifier: parameters.identifier)
        }
        return CallOutcome(reply: SubmitRequestReply(request: RequestInfo(held)), actions: actions)
    }

    /// `CancelRequest`: from the request's owner or root; a request the caller may not see is reported missing.
    func cancelRequest(_ parameters: CancelRequestParameters, _ call: IncomingCall) throws
        -> CallOutcome<CancelRequestReply>
    {
        let name = parameters.app
        let caller = call.credentials.uid
        guard let held = heldRequest(name, parameters.identifier), isVisible(held, to: call.connection) else {
            throw VarlinkError.noSuchRequest(app: name, identifier: parameters.identifier)
        }
        guard caller == 0 || held.request.ownerUID == caller else {
            throw deniedScheduling(call, name, IdentityRefusal(description: "the request belongs to another user"))
        }
        let actions: [Action]
        do {
            actions = try core.cancelScheduledRequest(app: name, identifier: parameters.identifier, now: now)
        } catch {
            throw varlinkError(error)
        }
        logger.info(
            "\(name): request \(parameters.identifier.debugDescription) cancelled by uid \(caller)", [.app(name)])
        return CallOutcome(reply: EmptyReply(), actions: actions)
    }

    /// `ListRequests`: every request for root and `ControllerGroup`, the caller's own for anyone else.
    func listRequests(_ parameters: ListRequestsParameters, _ call: IncomingCall) -> CallOutcome<ListRequestsReply> {
        let requests = core.scheduledRequests(app: parameters.app)
            .filter { isVisible($0, to: call.connection) }
            .map(RequestInfo.init)
        return CallOutcome(reply: ListRequestsReply(requests: requests))
    }

    /// `SetTaskCompleted`: an app call about its own scheduled task.
    func setTaskCompleted(_ parameters: SetTaskCompletedParameters, _ app: AppID, _ call: IncomingCall) throws
        -> CallOutcome<SetTaskCompletedReply>
    {
        let outcome: ScheduledTaskOutcome = parameters.success ? .success : .failure(retry: parameters.retry ?? false)
        do {
            let actions = try core.setTaskCompleted(
                app, task: TaskID(rawValue: Int64(parameters.taskId)), outcome: outcome, now: now)
            return CallOutcome(reply: EmptyReply(), actions: actions)
        } catch {
            throw varlinkError(error)
        }
    }

    // MARK: Ownership

    /// The uid requests of `name` submitted by `caller` belong to, by the identity rule (`IdentityRule`): the user
    /// `apps.d/NAME.conf` pins the name to (for that user and root alone; a name pinned to a user that cannot be
    /// resolved is nobody's); else the live app's, else the owner of the name's requests held already, else
    /// `caller`, which the caller must be, or root.
    private func requestOwner(ofAppNamed name: String, caller: UInt32) -> Result<UInt32, IdentityRefusal> {
        let unpinned =
            core.owner(ofAppNamed: name)?.uid
            ?? core.scheduledRequests(app: name).lazy.compactMap(\.request.ownerUID).first ?? caller
        return identity.requestOwner(ofAppNamed: name, caller: caller, unpinnedOwner: unpinned)
    }

    /// Gives the core the pins as they are now (at start, once the saved requests are restored, and on every
    /// reload): it cancels the held requests that no longer fit (`pinsChanged`), each with its reason in the history.
    func applyPins() {
        perform(core.pinsChanged(identity.pins, now: now))
    }

    /// The request `identifier` of `name`, as held.
    private func heldRequest(_ name: String, _ identifier: String) -> ScheduledRequestSnapshot? {
        core.scheduledRequest(app: name, identifier: identifier)
    }

    /// Whether the caller may see the request: root and `ControllerGroup` see every one, anyone else their own.
    private func isVisible(_ snapshot: ScheduledRequestSnapshot, to connection: ClientConnection) -> Bool {
        isPrivileged(connection) || snapshot.request.ownerUID == connection.credentials.uid
    }

    /// `PermissionDenied` for a scheduling call about `name`, logged with why.
    private func deniedScheduling(_ call: IncomingCall, _ name: String, _ refusal: IdentityRefusal) -> VarlinkError {
        logger.notice(
            "denied \(call.header.method.member) on \(name) to uid \(call.credentials.uid) "
                + "(pid \(call.credentials.pid)): \(refusal)", [.app(name)])
        return .permissionDenied()
    }
}

extension RequestInfo {
    /// The wire form of a held request.
    init(_ snapshot: ScheduledRequestSnapshot) {
        let request = snapshot.request
        var state = RequestState.pending
        var due: Double?
        var waitingOn: [Constraint]?
        var taskId: Int?
        switch snapshot.state {
        case .pending(let dueAt, let unmet):
            due = Double(dueAt.nanoseconds) / 1e9
            waitingOn = unmet
        case .launching:
            state = .launching
        case .running(_, let task):
            state = .running
            taskId = Int(task.rawValue)
        }
        // Every request the daemon holds was submitted with its owner (`submitRequest`); 0 would only ever show a
        // request made without one, by a test of the core.
        self.init(
            app: request.appName, identifier: request.identifier, kind: request.kind,
            earliestBegin: Double(request.earliestBegin.nanoseconds) / 1e9, requires: request.constraints.sorted(),
            uid: Int(request.ownerUID ?? 0), state: state, due: due, waitingOn: waitingOn, taskId: taskId,
            failures: snapshot.failures, replaced: snapshot.hasReplacement)
    }
}

/// The typed Varlink error for a scheduling refusal of the policy core.
func varlinkError(_ error: SchedulingError) -> VarlinkError {
    switch error {
    case .invalidIdentifier: .invalidParameter(parameter: "identifier")
    case .missingSources(let conditions): .conditionUnavailable(conditions: conditions)
    case .limitExceeded(let limit, let max): .limitExceeded(limit: limit, max: max)
    case .noSuchRequest(let app, let identifier): .noSuchRequest(app: app, identifier: identifier)
    case .noSuchTask(let app, let task): .noSuchTask(app: app, taskId: Int(task.rawValue))
    }
}
