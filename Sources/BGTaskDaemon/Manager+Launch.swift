// Managed apps, launched for a `Launch` call or for their scheduled requests: the launch checked against the one
// identity rule (`IdentityRule`), handed to the launch slots (`LaunchSlots`) in front of the supervisor
// (`AppSupervisor`), and the app taken on once its program has started.

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Glibc

extension Manager {
    /// The most arguments, and bytes of them in all, a launch takes (the message itself is under MessageSizeMax).
    static let launchArgumentsMax = 1024

    /// `Launch`: checks the call, then starts `argv` as the managed app `name` off the loop (`AppSupervisor`), as the
    /// user the identity rule gives (`IdentityRule`: the caller, or the user the name is pinned to). A launch that
    /// finds every slot taken waits for one (`LaunchSlots`). The reply waits until the program has started
    /// (`launchEnded`), and so do the calls after it on the connection; other connections are served meanwhile.
    func launch(_ parameters: LaunchParameters, _ call: IncomingCall) throws -> CallOutcome<LaunchReply> {
        let name = parameters.name
        guard Self.isValidName(name) else { throw VarlinkError.invalidParameter(parameter: "name") }
        let argv = parameters.argv
        guard let program = argv.first, !program.isEmpty, argv.count <= Self.launchArgumentsMax,
            argv.allSatisfy({ !$0.utf8.contains(0) })
        else { throw VarlinkError.invalidParameter(parameter: "argv") }
        let uid: uid_t
        switch identity.user(ofAppNamed: name, for: .caller(call.credentials.uid)) {
        case .success(let allowed):
            uid = allowed
        case .failure(let refusal):
            logger.notice("denied Launch of \(name) to uid \(call.credentials.uid): \(refusal)", [.app(name)])
            throw VarlinkError.permissionDenied()
        }
        settleExitedHolder(of: name)
        try core.canLaunch(name: name, uid: uid)
        guard let launchSlots, !isStopping else {
            logger.notice("cannot launch \(name) for uid \(call.credentials.uid): bgtaskd is stopping", [.app(name)])
            throw VarlinkError.launchFailed(app: name, reason: "bgtaskd is stopping")
        }
        guard !launchSlots.isLaunching(name) else { throw BGTaskCore.LifecycleError.appExists(name) }
        let request = LaunchRequest(
            name: name, argv: argv, uid: uid, changesUser: uid != geteuid(),
            exitsOnSuspend: parameters.exitsOnSuspend, logDirectory: logDirectory,
            socketPath: socketPath, oomScoreAdjust: configuration.launch.oomScoreAdjust(for: name))
        let timeout = configuration.core.appPolicy(for: name).launchTimeout
        // Held before it is handed over: a launch that cannot start at all is answered (and released) at once.
        call.connection.holdCalls()
        guard launchSlots.submit(PendingLaunch(request: request, origin: .call(call), timeout: timeout)) != .refused
        else {
            call.connection.releaseCalls()
            logger.notice(
                "cannot launch \(name) for uid \(call.credentials.uid): uid \(uid) has "
                    + "\(LaunchSlots.waitingPerUserMax) launches waiting for a slot (LaunchesWaitingPerUserMax)",
                [.app(name)])
            throw VarlinkError.limitExceeded(limit: "LaunchesWaitingPerUserMax", max: LaunchSlots.waitingPerUserMax)
        }
        return CallOutcome()
    }

    /// `.launch`: the policy asks for `name` to be started for the scheduled requests of `owner`, with the command
    /// `apps.d/NAME.conf` gives (`ExecStart=`), as that user and no other (after the identity rule: refused when the
    /// name is now pinned to another user, or the daemon is not root and `owner` is not its own uid), through the
    /// same launch slots and supervisor as `Launch` (a unit of the service manager where there is one). The app
    /// starts in background when it registers. A launch that cannot be made is told to the core at once: the owner's
    /// requests wait again, with backoff.
    func launchForScheduledWork(_ name: String, owner: UInt32?) {
        guard let owner else { return scheduledLaunchFailed(name, owner: nil, "its requests have no owner") }
        guard let argv = configuration.launch.appCommands[name] else {
            return scheduledLaunchFailed(name, owner: owner, "apps.d/\(name).conf has no ExecStart=")
        }
        let uid: uid_t
        switch identity.user(ofAppNamed: name, for: .owner(owner)) {
        case .success(let allowed): uid = allowed
        case .failure(let refusal): return scheduledLaunchFailed(name, owner: owner, "\(refusal)")
        }
        guard let launchSlots, !isStopping else {
            return scheduledLaunchFailed(name, owner: owner, "bgtaskd is stopping")
        }
        guard !launchSlots.isLaunching(name) else {
            return scheduledLaunchFailed(name, owner: owner, "a launch of \(name) is already under way")
        }
        settleExitedHolder(of: name)
        do {
            try core.canLaunch(name: name, uid: uid)
        } catch {
            return scheduledLaunchFailed(name, owner: owner, "\(error)")
        }
        let request = LaunchRequest(
            name: name, argv: argv, uid: uid, changesUser: uid != geteuid(), exitsOnSuspend: nil,
            logDirectory: logDirectory, socketPath: socketPath,
            oomScoreAdjust: configuration.launch.oomScoreAdjust(for: name))
        let timeout = configuration.core.appPolicy(for: name).launchTimeout
        guard launchSlots.submit(PendingLaunch(request: request, origin: .scheduledWork, timeout: timeout)) != .refused
        else {
            let limit = "LaunchesWaitingPerUserMax=\(LaunchSlots.waitingPerUserMax)"
            return scheduledLaunchFailed(name, owner: owner, "uid \(uid) has \(limit) launches waiting for a slot")
        }
        logger.info("launching \(name) as uid \(uid) for its scheduled requests", [.app(name)])
    }

    /// A launch for the scheduled requests of `owner` was not made, or its app not taken on: logged, and the core
    /// told.
    private func scheduledLaunchFailed(_ name: String, owner: UInt32?, _ reason: String) {
        logger.notice(
            "cannot launch \(name) for its scheduled requests of \(owner.map { "uid \($0)" } ?? "no owner"): \(reason)",
            [.app(name)])
        feedLater { [unowned self] in self.core.scheduledLaunchFailed(app: name, owner: owner, now: self.now) }
    }

    /// Why `request`, asked for by `origin`, may no longer run as its user: the identity rule, asked again, gives
    /// another user or none (a reload changed a pin since the launch was asked for). Nil when it may.
    func identityRefusal(for request: LaunchRequest, origin: LaunchOrigin) -> IdentityRefusal? {
        let requester: IdentityRequester =
            switch origin {
            case .call(let call): .caller(call.credentials.uid)
            case .scheduledWork: .owner(request.uid)
            }
        switch identity.user(ofAppNamed: request.name, for: requester) {
        case .success(let uid) where uid == request.uid:
            return nil
        case .success(let uid):
            return IdentityRefusal(description: "\(request.name) would now run as uid \(uid), not uid \(request.uid)")
        case .failure(let refusal):
            return refusal
        }
    }

    /// A launch never handed to the supervisor (`LaunchSlots`): no slot came in time, the identity rule no longer
    /// allows it, or the supervisor refused it. A `Launch` call is answered, a launch for scheduled work told to the
    /// core.
    func launchNotStarted(_ launch: PendingLaunch, because reason: LaunchNotStarted) {
        let name = launch.request.name
        defer { updateStatus() }
        guard case .call(let call) = launch.origin else {
            return scheduledLaunchFailed(name, owner: launch.request.uid, "\(reason)")
        }
        logger.notice("cannot launch \(name) for uid \(call.credentials.uid): \(reason)", [.app(name)])
        switch reason {
        case .denied: fail(call, VarlinkError.permissionDenied())
        case .noSlot, .refused: fail(call, VarlinkError.launchFailed(app: name, reason: "\(reason)"))
        }
        call.connection.releaseCalls()
    }

    /// A launch ended: its program started (the app is tracked from now on, unless something changed meanwhile:
    /// then the child is ended) or it could not be. A `Launch` call is answered and its connection goes on; the core
    /// hears of a launch for scheduled work that failed.
    func launchEnded(_ launch: LaunchAttempt, _ outcome: LaunchOutcome) {
        let name = launch.request.name
        let call: IncomingCall? =
            switch launch.origin {
            case .call(let call): call
            case .scheduledWork: nil
            }
        defer {
            call?.connection.releaseCalls()
            updateStatus()
        }
        func refuse(_ reason: String, _ answer: any Error) {
            guard let call else { return scheduledLaunchFailed(name, owner: launch.request.uid, reason) }
            logger.notice("cannot launch \(name) for uid \(call.credentials.uid): \(reason)", [.app(name)])
            fail(call, answer)
        }
        switch outcome {
        case .failed(let reason):
            refuse(reason, VarlinkError.launchFailed(app: name, reason: reason))
        case .started(let started):
            if let refusal = identityRefusal(for: launch.request, origin: launch.origin) {
                // Started before a reload pinned the name to another user: not taken on, and ended.
                supervisor?.end(started)
                return refuse("\(refusal)", VarlinkError.permissionDenied())
            }
            switch adopt(started, of: launch.request, forScheduledWork: call == nil) {
            case .success(let launched):
                if let call {
                    if let info = appInfo(launched.app) {
                        reply(call, LaunchReply(app: info))
                    } else {
                        // Just launched, so known to the core: cannot happen.
                        fail(call, VarlinkError.noSuchApp(app: name))
                    }
                }
                perform(launched.actions)
            case .failure(let refusal):
                supervisor?.end(started)
                refuse(refusal.reason, refusal.answer)
            }
        }
    }

    /// Why a launched child that has exec'd is not taken on: the reason logged, and the error the caller gets.
    struct AdoptionRefusal: Error {
        let reason: String
        let answer: any Error
    }

    /// Makes the core and the manager take on a launched child that has exec'd: the app is recorded and its process
    /// tracked. Refused when the core no longer accepts it (the name registered meanwhile, `AppsPerUserMax` reached)
    /// or the daemon is stopping: the child is then the caller's to end.
    private func adopt(
        _ started: StartedApp, of request: LaunchRequest, forScheduledWork: Bool
    ) -> Result<(app: AppID, actions: [Action]), AdoptionRefusal> {
        let name = request.name
        guard !isStopping else {
            return .failure(
                AdoptionRefusal(
                    reason: "bgtaskd is stopping",
                    answer: VarlinkError.launchFailed(app: name, reason: "bgtaskd is stopping")))
        }
        settleExitedHolder(of: name)
        let launched: (app: AppID, actions: [Action])
        do {
            launched = try core.appLaunched(
                name: name, process: ProcessIdentity(pid: started.pid, uid: request.uid),
                exitsOnSuspend: request.exitsOnSuspend, forScheduledWork: forScheduledWork, now: now)
        } catch {
            let reason =
                switch error {
                case .appExists: "\(name) was registered while it started"
                case .limitExceeded(let limit, let max): "\(limit)=\(max) was reached while it started"
                default: "\(error)"
                }
            return .failure(AdoptionRefusal(reason: reason, answer: error))
        }
        guard processTable.trackLaunched(started, uid: request.uid, as: launched.app) else {
            // Fail closed: an app whose exit cannot be watched is not kept.
            perform(core.processExited(launched.app, how: .exited, now: now))
            let reason = "its exit cannot be watched"
            return .failure(
                AdoptionRefusal(reason: reason, answer: VarlinkError.launchFailed(app: name, reason: reason)))
        }
        stateChanged()
        memoryMonitor?.appsChanged()
        logger.notice(
            "launched \(name)\(forScheduledWork ? " for its scheduled requests" : "") as pid \(started.pid) "
                + "(uid \(request.uid))"
                + (started.unit.map { " as \($0)" } ?? "")
                + (started.cgroups?.control.map { " in \($0.path)" } ?? " without a cgroup")
                + ": \(request.argv.joined(separator: " "))",
            [.app(name)])
        if let note = request.oomScoreAdjustNote(pid: started.pid, procFS: procFS) { logger.notice(note, [.app(name)]) }
        return .success(launched)
    }
}

/// The daemon's environment, read once per lookup (`getenv`; the daemon never changes its own environment).
enum ProcessInfoEnvironment {
    static func value(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
