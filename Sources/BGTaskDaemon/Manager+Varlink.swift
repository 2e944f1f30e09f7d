// The daemon's IPC surface: Varlink calls decoded, authorized from peer credentials, and answered.

import BGTaskCore
import BGTaskProtocol
import BGTaskSystem
import Foundation
import Glibc

/// One call being answered.
struct IncomingCall {
    let header: VarlinkCallHeader
    let message: Data
    let connection: ClientConnection
    var credentials: PeerCredentials { connection.credentials }
}

extension Manager {
    /// Longest app, task and notification name accepted, in UTF-8 bytes (names are used in logs, file names of
    /// per-app configuration and journal fields, and a suspended app's queue holds one per coalesced name).
    static let nameMaximumBytes = 255

    /// Handles one complete message from a client. A message that is not a well-formed call gets
    /// `InvalidMessage` and the connection stays usable: the NUL framing is intact, so the next call is still
    /// found (only a framing error, an oversized message, closes it).
    func handle(_ message: Data, from connection: ClientConnection) {
        let header: VarlinkCallHeader
        do {
            header = try codec.decodeCallHeader(message)
        } catch {
            if connection.loggedLimits.insert("InvalidMessage").inserted {
                logger.info(
                    "invalid message from pid \(connection.credentials.pid) uid \(connection.credentials.uid): "
                        + "\(error) (further ones from this connection are not logged)")
            }
            do {
                connection.send(try codec.encodeError(.invalidMessage(reason: error.description)))
            } catch {
                connection.close(because: "internal error encoding an error")
            }
            return
        }
        let call = IncomingCall(header: header, message: message, connection: connection)
        logger.debug(
            "call \(header.method.qualified) from pid \(connection.credentials.pid) uid \(connection.credentials.uid)"
                + " on connection \(connection.serial)")
        guard !header.upgrade else {
            fail(call, .methodNotImplemented(method: header.method.qualified))
            return
        }
        switch header.method.interface {
        case VarlinkServiceInterface.name:
            handleServiceCall(call)
        case LifecycleInterface.name:
            handleLifecycleCall(call)
        default:
            fail(call, .interfaceNotFound(interface: header.method.interface))
        }
    }

    // MARK: Replies

    func reply<Reply: Encodable>(_ call: IncomingCall, _ reply: Reply) {
        guard !call.header.oneway else { return }
        do {
            call.connection.send(try codec.encodeReply(reply, continues: false))
        } catch {
            logger.error("cannot encode the reply to \(call.header.method): \(error)")
            call.connection.close(because: "internal error encoding a reply")
        }
    }

    func fail(_ call: IncomingCall, _ error: VarlinkError) {
        guard !call.header.oneway else { return }
        do {
            call.connection.send(try codec.encodeError(error))
        } catch {
            call.connection.close(because: "internal error encoding an error")
        }
    }

    func fail(_ call: IncomingCall, _ error: BGTaskCore.LifecycleError) {
        if case .limitExceeded(let limit, let max) = error {
            refuse(call, limit: limit, max: max)
            return
        }
        fail(call, varlinkError(error))
    }

    /// Answers `LimitExceeded`, logging it once per connection and limit: a peer hammering a limit is logged,
    /// never silently refused, and never floods the journal.
    func refuse(_ call: IncomingCall, limit: String, max: Int) {
        if call.connection.loggedLimits.insert(limit).inserted {
            logger.notice(
                "refused \(call.header.method.member) from pid \(call.credentials.pid) uid \(call.credentials.uid): "
                    + "\(limit)=\(max) reached (further refusals on this connection are not logged)")
        }
        fail(call, VarlinkError.limitExceeded(limit: limit, max: max))
    }

    /// Whether `name` is acceptable as an app, task or notification name: 1 to 255 bytes, no control characters.
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= nameMaximumBytes
            && !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
    }

    /// The call's parameters, or nil after replying `InvalidParameter`.
    func parameters<Parameters: Decodable>(_ type: Parameters.Type, of call: IncomingCall) -> Parameters? {
        do {
            return try codec.decodeParameters(type, from: call.message)
        } catch {
            fail(call, error)
            return nil
        }
    }

    // MARK: Authorization (DESIGN §7)

    /// Root, or a member of `ControllerGroup` (by the primary or a supplementary group of the connecting
    /// process).
    func isPrivileged(_ connection: ClientConnection) -> Bool {
        if connection.credentials.uid == 0 { return true }
        guard let group = controllerGroupID else { return false }
        return connection.credentials.gid == group || connection.groups.contains(group)
    }

    /// Whether the caller may act as the app (app calls): its own uid, or root.
    func mayActAsApp(uid: UInt32, _ connection: ClientConnection) -> Bool {
        connection.credentials.uid == 0 || connection.credentials.uid == uid
    }

    /// Whether the caller may control or read the app (controller calls): root, `ControllerGroup`, or the
    /// app's own uid for its own apps.
    func mayControl(uid: UInt32, _ connection: ClientConnection) -> Bool {
        connection.credentials.uid == uid || isPrivileged(connection)
    }

    /// Whether an audit record may be shown to the caller.
    func isVisible(_ record: AuditEntry, to connection: ClientConnection) -> Bool {
        if isPrivileged(connection) { return true }
        return core.uid(of: record.app) == connection.credentials.uid
    }

    /// The app named `name` that the caller may use, or nil after replying the error.
    func authorizedApp(_ name: String, for call: IncomingCall, asApp: Bool) -> AppID? {
        guard let id = core.appID(named: name), let uid = core.uid(of: id) else {
            fail(call, .noSuchApp(app: name))
            return nil
        }
        let allowed = asApp ? mayActAsApp(uid: uid, call.connection) : mayControl(uid: uid, call.connection)
        guard allowed else {
            logger.notice(
                "denied \(call.header.method.member) on \(name) to uid \(call.credentials.uid) "
                    + "(pid \(call.credentials.pid))", [.app(name)])
            fail(call, .permissionDenied())
            return nil
        }
        return id
    }

    /// The wire form of an app, with its memory from the last sample (null when never measured or when the last
    /// read failed).
    func appInfo(_ id: AppID) -> AppInfo? {
        guard let snapshot = core.snapshot(of: id, now: now) else { return nil }
        return AppInfo(snapshot, memoryBytes: memoryBytes(of: id), now: now)
    }

    func memoryBytes(of app: AppID) -> Int? {
        guard let process = processOfApp[app], !process.isMemoryReadingStale else { return nil }
        return process.memoryBytes.map { Int(clamping: $0) }
    }

    // MARK: org.varlink.service

    private func handleServiceCall(_ call: IncomingCall) {
        switch VarlinkServiceMethod(rawValue: call.header.method.member) {
        case .getInfo:
            reply(call, GetInfoReply.bgtaskd(version: Self.version, url: "man:bgtaskd(8)"))
        case .getInterfaceDescription:
            guard let parameters = parameters(GetInterfaceDescriptionParameters.self, of: call) else { return }
            guard let description = GetInterfaceDescriptionReply.bgtaskd(interface: parameters.interface) else {
                fail(call, .interfaceNotFound(interface: parameters.interface))
                return
            }
            reply(call, description)
        case nil:
            fail(call, .methodNotFound(method: call.header.method.qualified))
        }
    }

    // MARK: io.bgtask.Lifecycle

    private func handleLifecycleCall(_ call: IncomingCall) {
        guard let method = LifecycleMethod(call.header.method) else {
            fail(call, .methodNotFound(method: call.header.method.qualified))
            return
        }
        if method.requiresMore && !call.header.more {
            fail(call, .expectedMore())
            return
        }
        switch method {
        case .register: register(call)
        case .beginBackgroundTask: beginBackgroundTask(call)
        case .endBackgroundTask: endBackgroundTask(call)
        case .backgroundTimeRemaining: backgroundTimeRemaining(call)
        case .acknowledge: acknowledge(call)
        case .listApps: listApps(call)
        case .getApp: getApp(call)
        case .setState: setState(call)
        case .launch: fail(call, .methodNotImplemented(method: method.qualifiedName))
        case .terminate: terminate(call)
        case .post: post(call)
        case .history: history(call)
        case .watch: watch(call)
        case .getStatus: getStatus(call)
        }
        updateStatus()
    }

    private func register(_ call: IncomingCall) {
        guard let parameters = parameters(RegisterParameters.self, of: call) else { return }
        let name = parameters.name
        guard Self.isValidName(name) else {
            fail(call, .invalidParameter(parameter: "name"))
            return
        }
        // No state asks for the usual start, in the foreground; a state a registration cannot start in is refused.
        let requestedState = parameters.state ?? .active
        guard let initialState = InitialState(requestedState) else {
            fail(call, .invalidParameter(parameter: "state"))
            return
        }
        var backgroundTime: Duration?
        if let seconds = parameters.backgroundTimeSec {
            guard seconds.isFinite, seconds > 0, seconds < 1e9 else {
                fail(call, .invalidParameter(parameter: "backgroundTimeSec"))
                return
            }
            backgroundTime = .nanoseconds(Int64(seconds * 1e9))
        }
        let credentials = call.credentials
        if let pinned = pinnedUsers[name], pinned != credentials.uid {
            logger.notice(
                "denied Register of \(name) to uid \(credentials.uid) (pid \(credentials.pid)): the name is pinned "
                    + "to \(pinned.map { "uid \($0)" } ?? "a user that cannot be resolved") by apps.d/\(name).conf",
                [.app(name)])
            fail(call, .permissionDenied())
            return
        }
        // A holder whose process exited without the daemon having seen it yet ends first: re-attaching is only
        // ever to a live process.
        settleExitedHolder(of: name)
        let peer: PeerProcess
        do {
            peer = try identifyPeer(of: call.connection)
        } catch {
            logger.info("Register of \(name) from pid \(credentials.pid): the process is gone (\(error))")
            call.connection.close(because: "the registering process is gone")
            return
        }
        let registration: RegistrationOutcome
        do {
            registration = try core.register(
                name: name, process: ProcessIdentity(pid: credentials.pid, uid: credentials.uid),
                exitsOnSuspend: parameters.exitsOnSuspend, initialState: initialState, backgroundTime: backgroundTime,
                now: now)
        } catch {
            try? peer.pidFD.close()
            fail(call, error)
            return
        }
        let app = registration.app
        if let previous = eventStreams[app], previous !== call.connection {
            // The same process registered again on a new connection: the old stream no longer speaks for it.
            previous.stream = nil
            previous.close(because: "replaced by a new registration of the same process")
        }
        call.connection.stream = .registration(app)
        eventStreams[app] = call.connection
        if processOfApp[app] == nil {
            track(app, peer: peer, uid: credentials.uid)
        } else {
            try? peer.pidFD.close()
        }
        guard processOfApp[app] != nil else {
            // Its exit could not be watched: the registration already ended.
            eventStreams[app] = nil
            call.connection.stream = nil
            call.connection.close(because: "the registering process cannot be watched")
            return
        }
        if !call.header.oneway, let info = appInfo(app) {
            sendStreamed(RegisterReply(app: info, event: nil), on: call.connection)
        }
        perform(registration.actions)
    }

    private func beginBackgroundTask(_ call: IncomingCall) {
        guard let parameters = parameters(BeginBackgroundTaskParameters.self, of: call) else { return }
        if let name = parameters.name, !name.isEmpty, !Self.isValidName(name) {
            fail(call, .invalidParameter(parameter: "name"))
            return
        }
        guard let app = authorizedApp(parameters.app, for: call, asApp: true) else { return }
        do {
            let begun = try core.beginBackgroundTask(app, name: parameters.name, now: now)
            reply(call, BeginBackgroundTaskReply(taskId: Int(begun.task.rawValue)))
            perform(begun.actions)
        } catch {
            fail(call, error)
        }
    }

    private func endBackgroundTask(_ call: IncomingCall) {
        guard let parameters = parameters(EndBackgroundTaskParameters.self, of: call),
            let app = authorizedApp(parameters.app, for: call, asApp: true)
        else { return }
        do {
            let actions = try core.endBackgroundTask(app, task: TaskID(rawValue: Int64(parameters.taskId)), now: now)
            reply(call, EmptyReply())
            perform(actions)
        } catch {
            fail(call, error)
        }
    }

    private func backgroundTimeRemaining(_ call: IncomingCall) {
        guard let parameters = parameters(BackgroundTimeRemainingParameters.self, of: call),
            let app = authorizedApp(parameters.app, for: call, asApp: true)
        else { return }
        do {
            let remaining = try core.backgroundTimeRemaining(app, now: now)
            reply(call, BackgroundTimeRemainingReply(seconds: remaining?.secondsValue))
        } catch {
            fail(call, error)
        }
    }

    private func acknowledge(_ call: IncomingCall) {
        guard let parameters = parameters(AcknowledgeParameters.self, of: call),
            let app = authorizedApp(parameters.app, for: call, asApp: true)
        else { return }
        do {
            let actions = try core.acknowledge(app, event: EventID(rawValue: Int64(parameters.eventId)), now: now)
            reply(call, EmptyReply())
            perform(actions)
        } catch {
            fail(call, error)
        }
    }

    private func listApps(_ call: IncomingCall) {
        guard parameters(ListAppsParameters.self, of: call) != nil else { return }
        // Live apps and the terminated ones still remembered (the interface's ListApps).
        let apps = core.snapshots(now: now, includeEnded: true)
            .filter { mayControl(uid: $0.uid, call.connection) }
            .map { AppInfo($0, memoryBytes: memoryBytes(of: $0.id), now: now) }
        reply(call, ListAppsReply(apps: apps))
        memoryMonitor?.refreshForDisplay()
    }

    private func getApp(_ call: IncomingCall) {
        guard let parameters = parameters(GetAppParameters.self, of: call),
            let app = authorizedApp(parameters.app, for: call, asApp: false),
            let info = appInfo(app)
        else { return }
        reply(call, GetAppReply(app: info))
        memoryMonitor?.refreshForDisplay()
    }

    private func setState(_ call: IncomingCall) {
        guard let parameters = parameters(SetStateParameters.self, of: call),
            let app = authorizedApp(parameters.app, for: call, asApp: false)
        else { return }
        guard let requested = RequestedState(parameters.state) else {
            fail(call, .invalidParameter(parameter: "state"))
            return
        }
        do {
            let actions = try core.setState(app, to: requested, now: now)
            perform(actions)
            if let info = appInfo(app) { reply(call, SetStateReply(app: info)) }
        } catch {
            fail(call, error)
        }
    }

    private func terminate(_ call: IncomingCall) {
        guard let parameters = parameters(TerminateParameters.self, of: call),
            let app = authorizedApp(parameters.app, for: call, asApp: false)
        else { return }
        do {
            let actions = try core.terminate(app, now: now)
            reply(call, EmptyReply())
            perform(actions)
        } catch {
            fail(call, error)
        }
    }

    private func post(_ call: IncomingCall) {
        guard let parameters = parameters(PostParameters.self, of: call) else { return }
        guard Self.isValidName(parameters.name) else {
            fail(call, .invalidParameter(parameter: "name"))
            return
        }
        var payloadJSON: String?
        if let payload = parameters.payload {
            do {
                payloadJSON = String(decoding: try payloadEncoder.encode(payload), as: UTF8.self)
            } catch {
                fail(call, .invalidParameter(parameter: "payload"))
                return
            }
            let limit = configuration.limits.postPayloadSizeMaxBytes
            if let payloadJSON, payloadJSON.utf8.count > limit {
                refuse(call, limit: "PostPayloadSizeMax", max: limit)
                return
            }
        }
        // Safe: the protocol's and the core's behaviours have the same raw values; a test compares them.
        let behavior = parameters.behavior ?? .default
        var targets: [AppID?]
        if let name = parameters.app {
            guard let app = authorizedApp(name, for: call, asApp: false) else { return }
            targets = [app]
        } else if isPrivileged(call.connection) {
            targets = [nil]
        } else {
            // An unprivileged broadcast reaches the caller's own apps only.
            targets = core.snapshots(now: now)
                .filter { $0.uid == call.credentials.uid && $0.isRegistered && $0.state != .notRunning }
                .map(\.id)
        }
        var delivered = 0
        var queued = 0
        for target in targets {
            do {
                let result = try core.post(
                    name: parameters.name, payloadJSON: payloadJSON, behavior: behavior, to: target, now: now)
                delivered += result.delivered
                queued += result.queued
                perform(result.actions)
            } catch {
                fail(call, error)
                return
            }
        }
        reply(call, PostReply(delivered: delivered, queued: queued))
    }

    private func history(_ call: IncomingCall) {
        guard let parameters = parameters(HistoryParameters.self, of: call) else { return }
        if let limit = parameters.limit, limit < 0 {
            fail(call, .invalidParameter(parameter: "limit"))
            return
        }
        let credentials = call.credentials
        let privileged = isPrivileged(call.connection)
        let entries = trail.history(limit: parameters.limit) { [core] record in
            privileged || core.uid(of: record.app) == credentials.uid
        }
        reply(call, HistoryReply(entries: entries))
    }

    private func watch(_ call: IncomingCall) {
        guard parameters(WatchParameters.self, of: call) != nil else { return }
        call.connection.stream = .watch
        watchers[call.connection.serial] = call.connection
    }

    /// `GetStatus`: counts from the core, memory from the last sample (never a /proc read for the caller), and
    /// the loop's statistics.
    private func getStatus(_ call: IncomingCall) {
        guard parameters(GetStatusParameters.self, of: call) != nil else { return }
        var memory: [String: JSONValue] = [
            "appsMemoryMax": configuration.memory.appsMemoryMaxBytes.map { .number(Double($0)) } ?? .null,
            "level": .string(memoryMonitor?.machine.level.description ?? "normal"),
            "trigger": "polling",
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
        reply(
            call,
            GetStatusReply(
                version: Self.version, uptimeSec: (now - startedAt).secondsValue,
                backends: ["freeze": "sigstop", "memory": "pss", "kill": "pidfd"], apps: core.liveAppCount,
                suspended: core.suspendedAppCount, tasks: core.openTaskCount, memory: memory, loop: loopStatus))
        memoryMonitor?.refreshForDisplay()
    }
}
