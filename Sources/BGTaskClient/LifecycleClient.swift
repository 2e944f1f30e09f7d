// Typed calls of io.bgtask.Lifecycle and org.varlink.service, one method each, for bgtask and for apps.
import BGTaskJSON
import BGTaskPOSIX
import Synchronization

/// A client of bgtaskd: one method per call of `io.bgtask.Lifecycle` and `org.varlink.service`, usable from any
/// thread.
///
/// Plain calls share one connection and take turns on it (Varlink answers in order). When that connection breaks,
/// because the daemon restarted or a call timed out, the next call connects again; a call whose connection broke
/// while it was in flight is not repeated, since it may already have taken effect. `watch()` and `register` each
/// open a connection of their own, as streams need.
public final class LifecycleClient: Sendable {
    /// The daemon's socket path.
    public let socketPath: String
    /// How long a plain call waits for its reply; nil waits without limit.
    public let timeout: Duration?
    /// The largest reply accepted, in bytes.
    public let maximumMessageSize: Int

    private let connection: Mutex<VarlinkConnection?>

    /// Connects to the daemon at `socketPath` (see `DaemonSocket.path(explicit:user:environment:)`).
    ///
    /// Connecting at once reports a daemon that is not running here, with advice on starting it.
    public init(
        socketPath: String,
        timeout: Duration? = .seconds(30),
        maximumMessageSize: Int = VarlinkConnection.defaultMaximumMessageSize
    ) throws(ClientError) {
        self.socketPath = socketPath
        self.timeout = timeout
        self.maximumMessageSize = maximumMessageSize
        connection = Mutex(try VarlinkConnection(socketPath: socketPath, maximumMessageSize: maximumMessageSize))
    }

    /// Closes the shared connection; a later call connects again. Streams keep their own connections.
    public func close() {
        let current = connection.withLock { (connection: inout VarlinkConnection?) -> VarlinkConnection? in
            defer { connection = nil }
            return connection
        }
        current?.close()
    }

    /// Calls any method on the shared connection: the typed methods below are built on this.
    public func call<M: VarlinkMethodCall>(_ parameters: M) throws(ClientError) -> M.Reply {
        let current = try usableConnection()
        do throws(ClientError) {
            return try current.call(parameters, timeout: timeout)
        } catch {
            if error.isTransportFailure { discard(current) }
            throw error
        }
    }

    // MARK: App side

    /// Registers the calling process as the app `name` on a connection of its own and returns its event stream,
    /// the first reply (the app) already read. Closing the stream ends the registration and the app's leases.
    ///
    /// `backgroundTime` asks for a shorter background time budget than the daemon's `BackgroundTimeSec`.
    public func register(
        name: String, exitsOnSuspend: Bool? = nil, state: AppState? = nil, backgroundTime: Duration? = nil
    ) throws(ClientError) -> Registration {
        let dedicated = try VarlinkConnection(socketPath: socketPath, maximumMessageSize: maximumMessageSize)
        do throws(ClientError) {
            let stream = try dedicated.callStreaming(
                RegisterParameters(
                    name: name, exitsOnSuspend: exitsOnSuspend, state: state,
                    backgroundTimeSec: backgroundTime.map {
                        Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18
                    }))
            guard let first = try stream.next(timeout: timeout) else {
                throw ClientError.protocolViolation("Register ended without a reply")
            }
            guard let app = first.app else {
                throw ClientError.protocolViolation("the first reply of Register carries no app")
            }
            return Registration(app: app, stream: stream)
        } catch {
            dedicated.close()
            throw error
        }
    }

    /// Begins a background-task lease for `app` and returns the daemon's task id.
    public func beginBackgroundTask(app: String, name: String? = nil) throws(ClientError) -> Int {
        try call(BeginBackgroundTaskParameters(app: app, name: name)).taskId
    }

    /// Ends the lease `taskId` of `app`.
    public func endBackgroundTask(app: String, taskId: Int) throws(ClientError) {
        _ = try call(EndBackgroundTaskParameters(app: app, taskId: taskId))
    }

    /// Seconds of background time `app` has left; nil while it is in the foreground, where time is unlimited.
    public func backgroundTimeRemaining(app: String) throws(ClientError) -> Double? {
        try call(BackgroundTimeRemainingParameters(app: app)).seconds
    }

    /// Acknowledges the event `eventId` sent to `app`.
    public func acknowledge(app: String, eventId: Int) throws(ClientError) {
        _ = try call(AcknowledgeParameters(app: app, eventId: eventId))
    }

    // MARK: Controller side

    /// Every app the daemon knows, live and remembered, in the order they registered or were launched.
    public func listApps() throws(ClientError) -> [AppInfo] {
        try call(ListAppsParameters()).apps
    }

    /// The app named `app`.
    public func getApp(_ app: String) throws(ClientError) -> AppInfo {
        try call(GetAppParameters(app: app)).app
    }

    /// Moves `app` to `state` (active, inactive or background) and returns it after the move.
    public func setState(_ app: String, to state: AppState) throws(ClientError) -> AppInfo {
        try call(SetStateParameters(app: app, state: state)).app
    }

    /// Starts `argv` as the managed app `name`; it must register under that name within `LaunchTimeoutSec`.
    public func launch(name: String, argv: [String], exitsOnSuspend: Bool? = nil) throws(ClientError) -> AppInfo {
        try call(LaunchParameters(name: name, argv: argv, exitsOnSuspend: exitsOnSuspend)).app
    }

    /// Terminates `app`: `willTerminate`, a grace period, then SIGKILL.
    public func terminate(_ app: String) throws(ClientError) {
        _ = try call(TerminateParameters(app: app))
    }

    /// Posts the notification `name` to `app`, or to every registered app when nil.
    public func post(
        name: String, payload: [String: JSONValue]? = nil, behavior: DeliveryBehavior? = nil, app: String? = nil
    ) throws(ClientError) -> PostReply {
        try call(PostParameters(name: name, payload: payload, behavior: behavior, app: app))
    }

    /// The most recent `limit` history entries (all kept when nil), oldest first.
    public func history(limit: Int? = nil) throws(ClientError) -> [HistoryEntry] {
        try call(HistoryParameters(limit: limit)).entries
    }

    /// The daemon's version, uptime, backends and counts.
    public func getStatus() throws(ClientError) -> GetStatusReply {
        try call(GetStatusParameters())
    }

    /// Streams history entries as the daemon records them, on a connection of its own; with `history`, the newest
    /// `history` kept entries come first (`WatchStream.nextReply`: replayed), with no entry lost between the two.
    public func watch(history: Int? = nil) throws(ClientError) -> WatchStream {
        let dedicated = try VarlinkConnection(socketPath: socketPath, maximumMessageSize: maximumMessageSize)
        do throws(ClientError) {
            return WatchStream(stream: try dedicated.callStreaming(WatchParameters(history: history)))
        } catch {
            dedicated.close()
            throw error
        }
    }

    // MARK: Scheduled work

    /// Submits a scheduled request for `app` (`BGTaskScheduler.submit`): it runs once it is due (`earliestBegin`,
    /// seconds since the Unix epoch; nil: now) and every one of `requires` holds. Replaces a request of `app` with
    /// the same identifier.
    public func submitRequest(
        app: String, identifier: String, kind: ScheduledTaskKind? = nil, earliestBegin: Double? = nil,
        requires: [Constraint]? = nil
    ) throws(ClientError) -> RequestInfo {
        try call(
            SubmitRequestParameters(
                app: app, identifier: identifier, kind: kind, earliestBegin: earliestBegin, requires: requires)
        ).request
    }

    /// Cancels the request `identifier` of `app` (`BGTaskScheduler.cancel`); a running one's task ends at once.
    public func cancelRequest(app: String, identifier: String) throws(ClientError) {
        _ = try call(CancelRequestParameters(app: app, identifier: identifier))
    }

    /// The scheduled requests the caller may see, of `app` alone or of every app when nil.
    public func listRequests(app: String? = nil) throws(ClientError) -> [RequestInfo] {
        try call(ListRequestsParameters(app: app)).requests
    }

    /// Reports how the scheduled task `taskId` of `app` went and ends it (`setTaskCompleted(success:)`); a failure
    /// with `retry` runs the request again after a backoff.
    public func setTaskCompleted(app: String, taskId: Int, success: Bool, retry: Bool? = nil) throws(ClientError) {
        _ = try call(SetTaskCompletedParameters(app: app, taskId: taskId, success: success, retry: retry))
    }

    // MARK: org.varlink.service

    /// Who implements the service and which interfaces it serves.
    public func getInfo() throws(ClientError) -> GetInfoReply {
        try call(GetInfoParameters())
    }

    /// The Varlink IDL text of `interface`, as the daemon serves it.
    public func getInterfaceDescription(_ interface: String) throws(ClientError) -> String {
        try call(GetInterfaceDescriptionParameters(interface: interface)).description
    }

    // MARK: Helpers

    /// The shared connection, connecting again when it is missing or the daemon hung up on it.
    ///
    /// The lock only guards the reference: checking the connection waits for a call in flight on it, and
    /// connecting takes a system call, so both happen outside, and `close()` never waits behind them.
    private func usableConnection() throws(ClientError) -> VarlinkConnection {
        let current = connection.withLock { $0 }
        if let current, current.isUsable { return current }
        let fresh = try VarlinkConnection(socketPath: socketPath, maximumMessageSize: maximumMessageSize)
        let (chosen, stale) = connection.withLock {
            (connection: inout VarlinkConnection?) -> (VarlinkConnection, VarlinkConnection?) in
            if let other = connection, other !== current {
                // Another thread replaced the broken connection first: use its replacement.
                return (other, fresh)
            }
            defer { connection = fresh }
            return (fresh, connection)
        }
        stale?.close()
        return chosen
    }

    /// Drops `broken` if it is still the shared connection, so the next call connects again.
    private func discard(_ broken: VarlinkConnection) {
        connection.withLock { (connection: inout VarlinkConnection?) in
            if connection === broken { connection = nil }
        }
        broken.close()
    }
}

/// An app's registration: the app as the daemon registered it, and its stream of events.
///
/// The registration lasts as long as the stream: `close()` ends it, and with it every lease of the app.
public final class Registration: Sendable {
    /// The app, from the first reply of `Register`.
    public let app: AppInfo
    private let stream: VarlinkReplyStream<RegisterReply>

    init(app: AppInfo, stream: VarlinkReplyStream<RegisterReply>) {
        self.app = app
        self.stream = stream
    }

    /// The next event, waiting at most `timeout` (nil: no limit); nil when the daemon ended the registration.
    ///
    /// `.timedOut` leaves the stream usable; `.disconnected` means the daemon went away or `close()` was called.
    public func nextEvent(timeout: Duration? = nil) throws(ClientError) -> EventInfo? {
        guard let reply = try stream.next(timeout: timeout) else { return nil }
        guard let event = reply.event else {
            stream.cancel()
            throw ClientError.protocolViolation("a reply of Register after the first carries no event")
        }
        return event
    }

    /// Ends the registration by closing its connection; a thread blocked in `nextEvent` returns `.disconnected`.
    public func close() {
        stream.cancel()
    }
}

/// The history entries `Watch` streams, as the daemon records them.
public final class WatchStream: Sendable {
    private let stream: VarlinkReplyStream<WatchReply>

    init(stream: VarlinkReplyStream<WatchReply>) {
        self.stream = stream
    }

    /// The next entry, waiting at most `timeout` (nil: no limit); nil when the daemon ended the stream.
    public func next(timeout: Duration? = nil) throws(ClientError) -> HistoryEntry? {
        try stream.next(timeout: timeout)?.entry
    }

    /// The next reply, waiting at most `timeout` (nil: no limit): its entry, and whether it is a kept entry sent
    /// at the start (`watch(history:)`) rather than a new one; nil when the daemon ended the stream.
    public func nextReply(timeout: Duration? = nil) throws(ClientError) -> (entry: HistoryEntry, isReplayed: Bool)? {
        try stream.next(timeout: timeout).map { ($0.entry, $0.replayed ?? false) }
    }

    /// Ends the stream by closing its connection.
    public func close() {
        stream.cancel()
    }
}
