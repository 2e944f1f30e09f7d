// The daemon's IPC surface: calls authorized from peer credentials and answered (the connection server decodes them).

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import Glibc

extension Manager {
    /// Longest app, task and notification name accepted, in UTF-8 bytes (names are used in logs, file names of
    /// per-app configuration and journal fields, and a suspended app's queue holds one per coalesced name).
    static let nameMaximumBytes = 255

    // MARK: Replies

    func reply<Reply: Encodable>(_ call: IncomingCall, _ reply: Reply) {
        guard !call.header.oneway else { return }
        do {
            transmit(
                try codec.encodeReply(reply, continues: false), on: call.connection,
                reflectsChange: call.changesState)
        } catch {
            logger.error("cannot encode the reply to \(call.header.method): \(error)")
            call.connection.close(because: "internal error encoding a reply")
        }
    }

    func fail(_ call: IncomingCall, _ error: VarlinkError) {
        guard !call.header.oneway else { return }
        do {
            transmit(try codec.encodeError(error), on: call.connection, reflectsChange: call.changesState)
        } catch {
            call.connection.close(because: "internal error encoding an error")
        }
    }

    /// Answers a handler's failure: a Varlink error as it is, a refusal of the core as its typed error (a limit
    /// logged once per connection).
    func fail(_ call: IncomingCall, _ error: any Error) {
        switch error {
        case let error as VarlinkError:
            if let lifecycle = BGTaskProtocol.LifecycleError(error), case .limitExceeded(let limit, let max) = lifecycle
            {
                refuse(call, limit: limit, max: max)
            } else {
                fail(call, error)
            }
        case let error as BGTaskCore.LifecycleError:
            fail(call, error)
        default:
            // Handlers throw only the two kinds above; anything else is a bug, and the peer cannot be answered.
            logger.error("internal error answering \(call.header.method): \(error)")
            call.connection.close(because: "internal error answering \(call.header.method)")
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

    // MARK: Authorization (per call, from the peer's credentials)

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
        // An entry about a request rather than a registration is its owner's.
        return (record.app.flatMap(core.uid(of:)) ?? record.ownerUID) == connection.credentials.uid
    }

    /// The app named `name` that the caller may use as `caller`; throws `NoSuchApp` or `PermissionDenied` (the
    /// denial logged).
    func authorize(_ name: String, as caller: LifecycleCaller, for call: IncomingCall) throws(VarlinkError) -> AppID {
        guard let (id, uid) = core.owner(ofAppNamed: name) else {
            throw .noSuchApp(app: name)
        }
        let isAllowed =
            switch caller {
            case .app: mayActAsApp(uid: uid, call.connection)
            case .controller: mayControl(uid: uid, call.connection)
            }
        guard isAllowed else {
            logger.notice(
                "denied \(call.header.method.member) on \(name) to uid \(call.credentials.uid) "
                    + "(pid \(call.credentials.pid))", [.app(name)])
            throw .permissionDenied()
        }
        return id
    }

    /// The wire form of an app, with its memory from the last sample (null when never measured or when the last
    /// read failed).
    func appInfo(_ id: AppID) -> AppInfo? {
        guard let snapshot = core.snapshot(of: id, now: now) else { return nil }
        var method: SuspensionMethod?
        let process = processOfApp[id]
        var cgroup = process?.cgroups?.control?.path
        switch process?.lastStopTarget {
        case .cgroup(let directory):
            method = directory.isV1Freezer ? .cgroup1 : .cgroup2
            if let unit = process?.unit, process?.unitFreezer?.lastMethod(of: unit) == .manager { method = .unit }
            cgroup = directory.path
        case .group: method = .group
        case .process: method = .process
        case nil: break
        }
        let memoryBackend = process.map { $0.cgroups?.memorySource?.backend ?? "pss" }
        return AppInfo(
            snapshot, memoryBytes: memoryBytes(of: id), now: now, suspendedWith: method, cgroup: cgroup,
            memoryBackend: memoryBackend, unit: process?.unit)
    }

    func memoryBytes(of app: AppID) -> Int? {
        guard let process = processOfApp[app], !process.isMemoryReadingStale else { return nil }
        return process.memoryBytes.map { Int(clamping: $0) }
    }

}
