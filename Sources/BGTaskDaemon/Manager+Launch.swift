// Managed apps, launched for a `Launch` call or for their scheduled requests: the launch checked, handed to the
// supervisor (`AppSupervisor`), and the app taken on once its program has started.

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Glibc

extension Manager {
    /// The most arguments, and bytes of them in all, a launch takes (the message itself is under MessageSizeMax).
    static let launchArgumentsMax = 1024

    /// `Launch`: checks the call, then starts `argv` as the managed app `name` off the loop (`AppSupervisor`). The
    /// reply waits until the program has started (`launchEnded`), and so do the calls after it on the connection;
    /// other connections are served meanwhile.
    func launch(_ parameters: LaunchParameters, _ call: IncomingCall) throws -> CallOutcome<LaunchReply> {
        let name = parameters.name
        guard Self.isValidName(name) else { throw VarlinkError.invalidParameter(parameter: "name") }
        let argv = parameters.argv
        guard let program = argv.first, !program.isEmpty, argv.count <= Self.launchArgumentsMax,
            argv.allSatisfy({ !$0.utf8.contains(0) })
        else { throw VarlinkError.invalidParameter(parameter: "argv") }
        let uid = try launchUID(for: name, credentials: call.credentials)
        settleExitedHolder(of: name)
        try core.canLaunch(name: name, uid: uid)
        guard let supervisor, !isStopping else {
            logger.notice("cannot launch \(name) for uid \(call.credentials.uid): bgtaskd is stopping", [.app(name)])
            throw VarlinkError.launchFailed(app: name, reason: "bgtaskd is stopping")
        }
        guard !supervisor.isLaunching(name) else { throw BGTaskCore.LifecycleError.appExists(name) }
        let request = LaunchRequest(
            name: name, argv: argv, uid: uid, changesUser: uid != geteuid(),
            exitsOnSuspend: parameters.exitsOnSuspend, logDirectory: logDirectory,
            socketPath: socketPath, oomScoreAdjust: configuration.launch.oomScoreAdjust(for: name))
        let timeout = configuration.core.appPolicy(for: name).launchTimeout
        guard supervisor.submit(request, for: .call(call), timeout: timeout) else {
            throw VarlinkError.limitExceeded(limit: "LaunchesInFlightMax", max: ProcessTable.launchesInFlightMax)
        }
        call.connection.holdCalls()
        return CallOutcome()
    }

    /// `.launch`: the policy asks for `name` to be started for its scheduled requests, with the command
    /// `apps.d/NAME.conf` gives (`ExecStart=`), as the requests' owner, through the same supervisor as `Launch`
    /// (a unit of the service manager where there is one). The app starts in background when it registers. A
    /// launch that cannot be made is told to the core at once: the requests wait again, with backoff.
    func launchForScheduledWork(_ name: String) {
        guard let argv = configuration.launch.appCommands[name] else {
            return scheduledLaunchFailed(name, "apps.d/\(name).conf has no ExecStart=")
        }
        guard let uid = core.scheduledRequests(app: name).lazy.compactMap(\.request.ownerUID).first else {
            return scheduledLaunchFailed(name, "its requests have no owner")
        }
        guard canLaunchScheduledWork(as: uid) else {
            return scheduledLaunchFailed(name, "bgtaskd runs as uid \(geteuid()) and cannot start an app as uid \(uid)")
        }
        guard let supervisor, !isStopping else { return scheduledLaunchFailed(name, "bgtaskd is stopping") }
        guard !supervisor.isLaunching(name) else {
            return scheduledLaunchFailed(name, "a launch of \(name) is already under way")
        }
        settleExitedHolder(of: name)
        do {
            try core.canLaunch(name: name, uid: uid)
        } catch {
            return scheduledLaunchFailed(name, "\(error)")
        }
        let request = LaunchRequest(
            name: name, argv: argv, uid: uid, changesUser: uid != geteuid(), exitsOnSuspend: nil,
            logDirectory: logDirectory, socketPath: socketPath,
            oomScoreAdjust: configuration.launch.oomScoreAdjust(for: name))
        let timeout = configuration.core.appPolicy(for: name).launchTimeout
        guard supervisor.submit(request, for: .scheduledWork, timeout: timeout) else {
            return scheduledLaunchFailed(name, "LaunchesInFlightMax=\(ProcessTable.launchesInFlightMax) reached")
        }
        logger.info("launching \(name) as uid \(uid) for its scheduled requests", [.app(name)])
    }

    /// Whether the app of a request owned by `uid` can be launched for it: a daemon that is not root starts apps only
    /// as itself.
    func canLaunchScheduledWork(as uid: uid_t) -> Bool {
        uid == geteuid() || geteuid() == 0
    }

    /// A launch for scheduled work was not made, or its app not taken on: logged, and the core told.
    private func scheduledLaunchFailed(_ name: String, _ reason: String) {
        logger.notice("cannot launch \(name) for its scheduled requests: \(reason)", [.app(name)])
        feedLater { [unowned self] in self.core.scheduledLaunchFailed(app: name, now: self.now) }
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
            guard let call else { return scheduledLaunchFailed(name, reason) }
            logger.notice("cannot launch \(name) for uid \(call.credentials.uid): \(reason)", [.app(name)])
            fail(call, answer)
        }
        switch outcome {
        case .failed(let reason):
            refuse(reason, VarlinkError.launchFailed(app: name, reason: reason))
        case .started(let started):
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

    /// The uid a launch of `name` runs as: the caller's; for root, the user `apps.d/NAME.conf` pins the name to.
    /// A daemon that is not root launches only as itself.
    private func launchUID(for name: String, credentials: PeerCredentials) throws -> uid_t {
        var uid = credentials.uid
        if let pinned = pinnedUsers[name] {
            if credentials.uid == 0, let pinnedUID = pinned {
                uid = pinnedUID
            } else if pinned != credentials.uid {
                logger.notice(
                    "denied Launch of \(name) to uid \(credentials.uid): the name is pinned to "
                        + "\(pinned.map { "uid \($0)" } ?? "a user that cannot be resolved") by apps.d/\(name).conf",
                    [.app(name)])
                throw VarlinkError.permissionDenied()
            }
        }
        if uid != geteuid() && geteuid() != 0 {
            logger.notice("denied Launch of \(name) as uid \(uid): bgtaskd runs as uid \(geteuid())", [.app(name)])
            throw VarlinkError.permissionDenied()
        }
        return uid
    }
}

/// The daemon's environment, read once per lookup (`getenv`; the daemon never changes its own environment).
enum ProcessInfoEnvironment {
    static func value(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
