// Every method the daemon answers, as one table row and one handler; the decode-authorize-answer path is one
// generic function.

import BGTaskCore
import BGTaskJSON
import BGTaskProtocol
import BGTaskSystem

/// What a handler returns: the reply (nil when there is none to send: a stream, a oneway call, or a handler that
/// answered or closed the connection itself) and the actions the call caused, carried out after the reply is sent,
/// so a client learns a task's id before any event about it.
struct CallOutcome<Reply> {
    var reply: Reply?
    var actions: [Action] = []
}

/// How one method is served: its parameters decoded, the app it names authorized, its handler run, its reply
/// encoded. Built by `anyone` or `aboutApp`, which capture the method's types.
struct MethodHandler {
    let serve: (Manager, IncomingCall) -> Void

    /// A method any caller may make (the handler filters what it shows, or authorizes what it names itself).
    static func anyone<Parameters: VarlinkMethodCall>(
        _ type: Parameters.Type,
        _ handler: @escaping (Manager) -> (Parameters, IncomingCall) throws -> CallOutcome<Parameters.Reply>
    ) -> MethodHandler {
        MethodHandler { manager, call in
            manager.serve(call, as: type) { parameters in try handler(manager)(parameters, call) }
        }
    }

    /// A method about the app its parameters name at `app`, which the caller must be allowed to use as `caller`
    /// (an app call from the app's uid or root; a controller call also from `ControllerGroup`).
    static func aboutApp<Parameters: VarlinkMethodCall>(
        _ type: Parameters.Type, name app: KeyPath<Parameters, String>, as caller: LifecycleCaller,
        _ handler: @escaping (Manager) -> (Parameters, AppID, IncomingCall) throws -> CallOutcome<Parameters.Reply>
    ) -> MethodHandler {
        MethodHandler { manager, call in
            manager.serve(call, as: type) { parameters in
                let id = try manager.authorize(parameters[keyPath: app], as: caller, for: call)
                return try handler(manager)(parameters, id, call)
            }
        }
    }
}

/// A method the daemon answers: one of `org.varlink.service` or of `io.bgtask.Lifecycle`.
enum CallableMethod {
    case service(VarlinkServiceMethod)
    case lifecycle(LifecycleMethod)

    /// The method called; nil for an unknown interface or member.
    init?(_ name: VarlinkMethodName) {
        if name.interface == VarlinkServiceInterface.name, let method = VarlinkServiceMethod(rawValue: name.member) {
            self = .service(method)
        } else if let method = LifecycleMethod(name) {
            self = .lifecycle(method)
        } else {
            return nil
        }
    }

    /// Whether the method only reads: its calls change nothing the state file holds.
    var isReadOnly: Bool {
        switch self {
        case .service(.getInfo), .service(.getInterfaceDescription): true
        case .lifecycle(let method):
            switch method {
            case .backgroundTimeRemaining, .listApps, .getApp, .history, .watch, .getStatus, .listRequests: true
            case .register, .beginBackgroundTask, .endBackgroundTask, .acknowledge, .setState, .launch, .terminate,
                .post, .submitRequest, .cancelRequest, .setTaskCompleted:
                false
            }
        }
    }

    /// Whether the method streams and so must be called with `more`.
    var requiresMore: Bool {
        switch self {
        case .service: false
        case .lifecycle(let method): method.requiresMore
        }
    }

    /// The table: one row per method, each naming its parameters, who may call it about which app, and its
    /// handler. No `default`: a new method does not compile until it has a row.
    var handler: MethodHandler {
        switch self {
        case .service(.getInfo): .anyone(GetInfoParameters.self, Manager.getInfo)
        case .service(.getInterfaceDescription):
            .anyone(GetInterfaceDescriptionParameters.self, Manager.getInterfaceDescription)
        case .lifecycle(let method):
            switch method {
            case .register: .anyone(RegisterParameters.self, Manager.register)
            case .beginBackgroundTask:
                .aboutApp(BeginBackgroundTaskParameters.self, name: \.app, as: .app, Manager.beginBackgroundTask)
            case .endBackgroundTask:
                .aboutApp(EndBackgroundTaskParameters.self, name: \.app, as: .app, Manager.endBackgroundTask)
            case .backgroundTimeRemaining:
                .aboutApp(
                    BackgroundTimeRemainingParameters.self, name: \.app, as: .app, Manager.backgroundTimeRemaining)
            case .acknowledge: .aboutApp(AcknowledgeParameters.self, name: \.app, as: .app, Manager.acknowledge)
            case .listApps: .anyone(ListAppsParameters.self, Manager.listApps)
            case .getApp: .aboutApp(GetAppParameters.self, name: \.app, as: .controller, Manager.getApp)
            case .setState: .aboutApp(SetStateParameters.self, name: \.app, as: .controller, Manager.setState)
            case .launch: .anyone(LaunchParameters.self, Manager.launch)
            case .terminate: .aboutApp(TerminateParameters.self, name: \.app, as: .controller, Manager.terminate)
            case .post: .anyone(PostParameters.self, Manager.post)
            case .history: .anyone(HistoryParameters.self, Manager.history)
            case .watch: .anyone(WatchParameters.self, Manager.watch)
            case .getStatus: .anyone(GetStatusParameters.self, Manager.getStatus)
            // A request's owner may differ from the live app's (none may be live): authorized by the handler.
            case .submitRequest: .anyone(SubmitRequestParameters.self, Manager.submitRequest)
            case .cancelRequest: .anyone(CancelRequestParameters.self, Manager.cancelRequest)
            case .listRequests: .anyone(ListRequestsParameters.self, Manager.listRequests)
            case .setTaskCompleted:
                .aboutApp(SetTaskCompletedParameters.self, name: \.app, as: .app, Manager.setTaskCompleted)
            }
        }
    }
}

extension Manager {
    /// The one path every call takes: decode the parameters (`InvalidParameter` naming the one at fault), run the
    /// body (which authorizes and handles), send the reply unless the call is oneway, then carry out the actions.
    fileprivate func serve<Parameters: VarlinkMethodCall>(
        _ call: IncomingCall, as type: Parameters.Type,
        _ body: (Parameters) throws -> CallOutcome<Parameters.Reply>
    ) {
        let outcome: CallOutcome<Parameters.Reply>
        do {
            outcome = try body(try codec.decodeParameters(type, of: call.decoded))
        } catch {
            fail(call, error)
            return
        }
        if let answer = outcome.reply { reply(call, answer) }
        perform(outcome.actions)
    }

    // MARK: org.varlink.service

    func getInfo(_ parameters: GetInfoParameters, _ call: IncomingCall) -> CallOutcome<GetInfoReply> {
        CallOutcome(reply: .bgtaskd(version: Self.version, url: "man:bgtaskd(8)"))
    }

    func getInterfaceDescription(_ parameters: GetInterfaceDescriptionParameters, _ call: IncomingCall) throws
        -> CallOutcome<GetInterfaceDescriptionReply>
    {
        guard let description = GetInterfaceDescriptionReply.bgtaskd(interface: parameters.interface) else {
            throw VarlinkError.interfaceNotFound(interface: parameters.interface)
        }
        return CallOutcome(reply: description)
    }

    // MARK: io.bgtask.Lifecycle, app side

    /// `Register`: validates, checks the pin and the peer's identity, registers (or re-attaches), starts tracking
    /// the process, and opens the event stream with the app as its first reply.
    func register(_ parameters: RegisterParameters, _ call: IncomingCall) throws -> CallOutcome<RegisterReply> {
        let name = parameters.name
        guard Self.isValidName(name) else { throw VarlinkError.invalidParameter(parameter: "name") }
        // No state asks for the usual start, in the foreground; a state a registration cannot start in is refused.
        guard let initialState = InitialState(parameters.state ?? .active) else {
            throw VarlinkError.invalidParameter(parameter: "state")
        }
        var backgroundTime: Duration?
        if let seconds = parameters.backgroundTimeSec {
            guard seconds.isFinite, seconds > 0, seconds < 1e9 else {
                throw VarlinkError.invalidParameter(parameter: "backgroundTimeSec")
            }
            backgroundTime = .nanoseconds(Int64(seconds * 1e9))
        }
        let credentials = call.credentials
        if let refusal = identity.registrationRefusal(ofAppNamed: name, by: credentials.uid) {
            logger.notice(
                "denied Register of \(name) to uid \(credentials.uid) (pid \(credentials.pid)): \(refusal) by "
                    + "apps.d/\(name).conf", [.app(name)])
            throw VarlinkError.permissionDenied()
        }
        // A holder whose process exited without the daemon having seen it yet ends first: re-attaching is only
        // ever to a live process. A launch of the name whose program has started is taken on first: that program
        // may be the one registering.
        settleExitedHolder(of: name)
        supervisor?.catchUp(with: name)
        let peer: PeerProcess
        do {
            peer = try identifyPeer(of: call.connection)
        } catch {
            logger.info("Register of \(name) from pid \(credentials.pid): the process is gone (\(error))")
            call.connection.close(because: "the registering process is gone")
            return CallOutcome()
        }
        let registration: RegistrationOutcome
        do {
            registration = try core.register(
                name: name, process: ProcessIdentity(pid: credentials.pid, uid: credentials.uid),
                exitsOnSuspend: parameters.exitsOnSuspend, initialState: initialState, backgroundTime: backgroundTime,
                now: now)
        } catch {
            try? peer.pidFD.close()
            throw error
        }
        let app = registration.app
        if let previous = eventStreams[app], previous !== call.connection {
            // The same process registered again on a new connection: the old stream no longer speaks for it.
            previous.stream = nil
            previous.close(because: "replaced by a new registration of the same process")
        }
        connectionServer.attachEventStream(call.connection, of: app)
        if processOfApp[app] == nil {
            track(app, peer: peer, uid: credentials.uid)
        } else {
            try? peer.pidFD.close()
        }
        guard processOfApp[app] != nil else {
            // Its exit could not be watched: the registration already ended.
            connectionServer.detachEventStream(of: app)
            call.connection.close(because: "the registering process cannot be watched")
            return CallOutcome()
        }
        storeStream(call.connection, of: app)
        // The first reply of the stream, so sent here with `continues` rather than as a final reply.
        if !call.header.oneway, let info = appInfo(app) {
            sendStreamed(RegisterReply(app: info, event: nil), on: call.connection)
        }
        // Re-attached after a restart: what was sent to it meanwhile follows, in order.
        let held = connectionServer.takeHeldEvents(of: app)
        for event in held {
            sendStreamed(EventReply(event), on: call.connection)
        }
        guard registration.isReattached, !held.isEmpty else { return CallOutcome(actions: registration.actions) }
        // The core tells a re-attaching app its tasks again (what a restart may have taken with it); what this
        // daemon held for it is on its way already.
        let actions = registration.actions.filter { action in
            guard case .send(let event, app) = action else { return true }
            return !held.contains { $0.kind == event.kind && $0.taskIDs == event.taskIDs && $0.name == event.name }
        }
        return CallOutcome(actions: actions)
    }

    func beginBackgroundTask(_ parameters: BeginBackgroundTaskParameters, _ app: AppID, _ call: IncomingCall) throws
        -> CallOutcome<BeginBackgroundTaskReply>
    {
        if let name = parameters.name, !name.isEmpty, !Self.isValidName(name) {
            throw VarlinkError.invalidParameter(parameter: "name")
        }
        let begun = try core.beginBackgroundTask(app, name: parameters.name, now: now)
        return CallOutcome(reply: BeginBackgroundTaskReply(taskId: Int(begun.task.rawValue)), actions: begun.actions)
    }

    func endBackgroundTask(_ parameters: EndBackgroundTaskParameters, _ app: AppID, _ call: IncomingCall) throws
        -> CallOutcome<EndBackgroundTaskReply>
    {
        let actions = try core.endBackgroundTask(app, task: TaskID(rawValue: Int64(parameters.taskId)), now: now)
        return CallOutcome(reply: EmptyReply(), actions: actions)
    }

    func backgroundTimeRemaining(
        _ parameters: BackgroundTimeRemainingParameters, _ app: AppID, _ call: IncomingCall
    ) throws -> CallOutcome<BackgroundTimeRemainingReply> {
        let remaining = try core.backgroundTimeRemaining(app, now: now)
        return CallOutcome(reply: BackgroundTimeRemainingReply(seconds: remaining?.secondsValue))
    }

    func acknowledge(_ parameters: AcknowledgeParameters, _ app: AppID, _ call: IncomingCall) throws
        -> CallOutcome<AcknowledgeReply>
    {
        let actions = try core.acknowledge(app, event: EventID(rawValue: Int64(parameters.eventId)), now: now)
        return CallOutcome(reply: EmptyReply(), actions: actions)
    }

    // MARK: io.bgtask.Lifecycle, controller side

    /// `ListApps`: live apps and the terminated ones still remembered, those the caller may see.
    func listApps(_ parameters: ListAppsParameters, _ call: IncomingCall) -> CallOutcome<ListAppsReply> {
        let apps = core.snapshots(now: now, includeEnded: true)
            .filter { mayControl(uid: $0.uid, call.connection) }
            .compactMap { appInfo($0.id) }
        memoryMonitor?.refreshForDisplay()
        return CallOutcome(reply: ListAppsReply(apps: apps))
    }

    func getApp(_ parameters: GetAppParameters, _ app: AppID, _ call: IncomingCall) throws
        -> CallOutcome<GetAppReply>
    {
        guard let info = appInfo(app) else { throw VarlinkError.noSuchApp(app: parameters.app) }
        memoryMonitor?.refreshForDisplay()
        return CallOutcome(reply: GetAppReply(app: info))
    }

    /// `SetState`: the app as it is after the move (the core has moved it; its events follow the reply).
    func setState(_ parameters: SetStateParameters, _ app: AppID, _ call: IncomingCall) throws
        -> CallOutcome<SetStateReply>
    {
        guard let requested = RequestedState(parameters.state) else {
            throw VarlinkError.invalidParameter(parameter: "state")
        }
        let actions = try core.setState(app, to: requested, now: now)
        guard let info = appInfo(app) else { throw VarlinkError.noSuchApp(app: parameters.app) }
        return CallOutcome(reply: SetStateReply(app: info), actions: actions)
    }

    func terminate(_ parameters: TerminateParameters, _ app: AppID, _ call: IncomingCall) throws
        -> CallOutcome<TerminateReply>
    {
        CallOutcome(reply: EmptyReply(), actions: try core.terminate(app, now: now))
    }

    /// `Post`: to the app named (a controller call about it), to every app for a privileged caller, or to the
    /// caller's own apps for anyone else.
    func post(_ parameters: PostParameters, _ call: IncomingCall) throws -> CallOutcome<PostReply> {
        guard Self.isValidName(parameters.name) else { throw VarlinkError.invalidParameter(parameter: "name") }
        var payloadJSON: String?
        if let payload = parameters.payload {
            guard let encoded = try? JSONValue.object(payload).jsonText() else {
                throw VarlinkError.invalidParameter(parameter: "payload")
            }
            let limit = configuration.limits.postPayloadSizeMaxBytes
            guard encoded.count <= limit else {
                throw VarlinkError.limitExceeded(limit: "PostPayloadSizeMax", max: limit)
            }
            payloadJSON = String(decoding: encoded, as: UTF8.self)
        }
        let targets: [AppID?]
        if let name = parameters.app {
            targets = [try authorize(name, as: .controller, for: call)]
        } else if isPrivileged(call.connection) {
            targets = [nil]
        } else {
            // An unprivileged broadcast reaches the caller's own apps only.
            targets = core.snapshots(now: now)
                .filter { $0.uid == call.credentials.uid && $0.isRegistered && $0.state != .notRunning }
                .map(\.id)
        }
        var outcome = CallOutcome(reply: PostReply(delivered: 0, queued: 0))
        for target in targets {
            do {
                let result = try core.post(
                    name: parameters.name, payloadJSON: payloadJSON, behavior: parameters.behavior ?? .default,
                    to: target, now: now)
                outcome.reply?.delivered += result.delivered
                outcome.reply?.queued += result.queued
                outcome.actions += result.actions
            } catch {
                // What the posts before this one did is done in the core: carry it out before failing.
                perform(outcome.actions)
                throw error
            }
        }
        return outcome
    }

    /// `History`: the entries the caller may see.
    func history(_ parameters: HistoryParameters, _ call: IncomingCall) throws -> CallOutcome<HistoryReply> {
        if let limit = parameters.limit, limit < 0 { throw VarlinkError.invalidParameter(parameter: "limit") }
        let entries = trail.history(limit: parameters.limit, isVisible: historyVisibility(for: call))
        return CallOutcome(reply: HistoryReply(entries: entries))
    }

    /// Which kept entries the caller of `History` or `Watch(history:)` may read: every one for a privileged
    /// caller, else those about its own apps and requests.
    private func historyVisibility(for call: IncomingCall) -> (AuditEntry) -> Bool {
        let credentials = call.credentials
        let isPrivileged = isPrivileged(call.connection)
        return { [core] entry in
            isPrivileged || (entry.app.flatMap(core.uid(of:)) ?? entry.ownerUID) == credentials.uid
        }
    }

    /// `Watch`: the connection streams audit entries from now on, after the newest `history` kept entries the
    /// caller may see (replayed). Both in one turn of the loop: no entry is recorded between them.
    func watch(_ parameters: WatchParameters, _ call: IncomingCall) throws -> CallOutcome<WatchReply> {
        if let history = parameters.history, history < 0 {
            throw VarlinkError.invalidParameter(parameter: "history")
        }
        if let history = parameters.history, history > 0 {
            let entries = trail.history(limit: history, isVisible: historyVisibility(for: call))
            // Sent the way new entries are (held until the state they reflect is saved), so they keep their order.
            for entry in entries {
                let encoded = try codec.encodeReply(WatchReply(entry: entry, replayed: true), continues: true)
                call.connection.streamOutputAllowance += encoded.count
                transmit(encoded, on: call.connection)
            }
        }
        connectionServer.addWatcher(call.connection)
        return CallOutcome()
    }

    /// `GetStatus`: counts from the core, memory from the last sample (never a /proc read for the caller), and
    /// the loop's statistics.
    func getStatus(_ parameters: GetStatusParameters, _ call: IncomingCall) -> CallOutcome<GetStatusReply> {
        var memory: [String: JSONValue] = [
            "appsMemoryMax": configuration.memory.appsMemoryMaxBytes.map { .number(Double($0)) } ?? .null,
            "level": .string(memoryMonitor?.machine.level.description ?? "normal"),
            "trigger": .string(memoryMonitor?.triggers.description ?? "polling"),
            "sampleAgeSec": .null,
        ]
        let current = loop.now
        if let sample = memoryMonitor?.lastSample {
            memory["sampleAgeSec"] = .number(Double(max(0, current - sample.finishedAt)) / 1e9)
            if let info = sample.memoryInfo {
                memory["totalBytes"] = .number(Double(info.totalBytes))
                memory["availableBytes"] = .number(Double(info.availableBytes))
            }
            if let pressure = sample.pressure {
                memory["pressureSomeAvg10"] = .number(pressure.some.average10)
            }
        }
        if let appsBytes = memoryMonitor?.appsBytes {
            memory["appsBytes"] = .number(Double(appsBytes))
        }
        let statistics = loop.statistics
        let loopStatus: [String: JSONValue] = [
            "iterations": .number(Double(statistics.iterations)),
            "longestIterationMs": .number(Double(statistics.longestDispatchNanoseconds) / 1e6),
            "longestIterationSource": .string(statistics.longestDispatchSource),
            "iterationBoundsMs": .array(LoopStatistics.bucketBoundsNanoseconds.map { .number(Double($0) / 1e6) }),
            "iterationCounts": .array(statistics.dispatchCounts.map { .number(Double($0)) }),
        ]
        memoryMonitor?.refreshForDisplay()
        var conditionsStatus: [String: JSONValue] = [:]
        for constraint in Constraint.allCases {
            conditionsStatus[constraint.rawValue] = core.conditions?[constraint].map { .bool($0) } ?? .null
        }
        return CallOutcome(
            reply: GetStatusReply(
                version: Self.version, uptimeSec: (now - startedAt).secondsValue,
                backends: backendNames.mapValues { .string($0) }, apps: core.liveAppCount,
                suspended: core.suspendedAppCount, tasks: core.openTaskCount, memory: memory, loop: loopStatus,
                conditions: conditionsStatus, configuration: configurationSources.map(ConfigurationInfo.init)))
    }
}
