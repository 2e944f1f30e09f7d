// The daemon's Varlink server: its clients, admitted within the connection limits, their calls framed, decoded and
// served fairly, and the connections that stream (apps' events, `Watch`).

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Glibc

/// What the connection server needs of the daemon around it: the limits in force, the method table to hand calls
/// to, the way messages go out (held until the state they reflect is saved), and word of a closed connection.
/// `Manager` is one; a test's fake is another, so the server runs without a whole manager.
protocol ConnectionServerHost: AnyObject {
    /// `ConnectionsMax`, `ConnectionsPerUserMax` and `MessageSizeMax` as now configured (a reload may change them).
    var connectionLimits: DaemonConfiguration.Limits { get }
    /// Serves a well-formed call of a method the daemon answers.
    func dispatch(_ call: IncomingCall, to method: CallableMethod)
    /// Sends a message on a connection, or holds it until what it reflects is saved (`reflectsChange`) or until
    /// what went before it on that connection is sent.
    func transmit(_ message: [UInt8], on connection: ClientConnection, reflectsChange: Bool)
    /// A connection closed and the server let go of it; `app` is the app whose event stream it still was.
    func connectionClosed(_ connection: ClientConnection, endingStreamOf app: AppID?, because reason: String)
}

/// The daemon's clients, from `accept` to close (systemd's varlink server plays this part for its daemons).
///
/// Everything a peer can make it hold is bounded: connections by `ConnectionsMax` and, per uid,
/// `ConnectionsPerUserMax` (a refusal logged once until the count falls under the limit again); accepts per
/// readiness by 64; a connection's input, calls per turn and output by `ClientConnection`. Out of descriptors, the
/// listeners are turned off (a level-triggered listener would spin) until a descriptor frees up or a timer fires.
/// Complete calls past a turn's budget wait in the backlog, served one connection per loop iteration.
final class ConnectionServer {
    /// How long accepting waits after the system ran out of descriptors (`ENFILE`), which no close of the
    /// daemon's own signals; 1 s keeps the retry cheap while a client waits about as long as a slow start.
    static let acceptRetryDelay: Duration = .seconds(1)

    /// Encodes and decodes every message of every connection.
    let codec = VarlinkCodec()
    /// The daemon the calls are for; held weakly (the manager owns the server).
    weak var host: (any ConnectionServerHost)?
    private let loop: EventLoop
    private let clock: ManagerClock
    let logger: Logger
    /// The socket's path, where the server listens when no socket was passed to it.
    let socketPath: String
    private let readBuffer = ReadBuffer()
    /// The listening sockets systemd passed (`adoptListeningSocket(_:)`); none: the server makes its own.
    private var listenedSockets: [FileDescriptor] = []
    private var listeners: [IOSource] = []
    /// Why the listeners are off (descriptors exhausted), while they are.
    private var listenersPausedReason: String?
    private var acceptRetryTimer: ManagerTimer?
    /// Whether the server created the socket file (removed again on stop).
    private var ownsSocketFile = false
    private var isStopped = false
    /// The open connections by serial, and how many each uid holds.
    private(set) var connections: [Int: ClientConnection] = [:]
    private var connectionsPerUser: [uid_t: Int] = [:]
    /// Uids whose refused connections were logged, until their count falls under the limit again.
    private var refusedConnectionsLogged: Set<uid_t> = []
    private var isTotalConnectionRefusalLogged = false
    private var nextConnectionSerial = 1
    /// Connections with complete calls left after their turn's budget, served in order by `backlogSource`.
    private var backlog: [ClientConnection] = []
    private var backlogSource: EventSource?
    /// The connection carrying each registered app's event stream, and the `Watch` streams by serial.
    private(set) var eventStreams: [AppID: ClientConnection] = [:]
    private(set) var watchers: [Int: ClientConnection] = [:]
    /// Events for registrations a restarted daemon restored whose apps have not re-attached yet (no fd store kept
    /// their streams), oldest first: sent once the app registers again, rather than lost. Bounded per app by the
    /// caller's limit (`QueuedEventsPerAppMax`), and in apps by the registrations restored.
    private var heldEvents: [AppID: [AppEvent]] = [:]

    /// A server on `loop` for the socket at `socketPath`; nothing listens until `openListeners()`.
    init(loop: EventLoop, clock: ManagerClock, logger: Logger, socketPath: String) {
        self.loop = loop
        self.clock = clock
        self.logger = logger
        self.socketPath = socketPath
    }

    // MARK: Listening

    /// Makes the source that gives backlogged connections their turns; before any connection is admitted.
    func makeBacklogSource() throws(Errno) {
        backlogSource = try loop.addRepeatingDefer(name: "call-backlog") { [weak self] _ in
            self?.serveBacklog()
        }
    }

    /// A listening socket systemd passed: `openListeners()` listens on it instead of making one.
    func adoptListeningSocket(_ descriptor: FileDescriptor) {
        listenedSockets.append(descriptor)
    }

    /// Creates `path` and its missing parents, each mode 0755 (`mkdir -p`); what exists already is left as it is.
    static func makeDirectories(_ path: String) throws(Errno) {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            guard mkdir(prefix, 0o755) != 0 else { continue }
            let code = errno
            if code != EEXIST { throw Errno(rawValue: code, operation: "mkdir(\(prefix))") }
        }
    }

    /// Listens on the sockets passed, or on `socketPath` (created with its directory, mode 0666).
    func openListeners() throws(StartupError) {
        var descriptors = listenedSockets
        if descriptors.isEmpty {
            let directory = StateStore.directory(of: socketPath)
            do throws(Errno) {
                try Self.makeDirectories(directory)
            } catch {
                throw StartupError(description: "cannot create \(directory): \(error)")
            }
            do {
                descriptors = [try UnixSocket.listen(path: socketPath, mode: 0o666)]
                ownsSocketFile = true
            } catch {
                throw StartupError(description: "cannot listen on \(socketPath): \(error)")
            }
        }
        for descriptor in descriptors {
            do {
                try descriptor.setNonBlocking()
                listeners.append(
                    try loop.addIO(fd: descriptor, events: .readable, name: "listener") { [weak self] source, _ in
                        self?.acceptClients(on: source.fileDescriptor)
                    })
            } catch {
                throw StartupError(description: "cannot watch the listening socket: \(error)")
            }
        }
    }

    /// Stops listening (the socket file it made is removed) and closes every connection. The fd store's copies of
    /// the event streams stay open, for the next daemon to take them back.
    func stop() {
        isStopped = true
        for listener in listeners {
            listener.cancel()
            try? listener.fileDescriptor.close()
        }
        listeners = []
        if ownsSocketFile { unlink(socketPath) }
        for connection in connections.values { connection.shutsDownOnClose = false }
        for connection in Array(connections.values) { connection.close(because: "the daemon is stopping") }
    }

    // MARK: Accepting

    private func acceptClients(on listener: FileDescriptor) {
        // Bounded per readiness, so a connect flood cannot hold the loop; the listener stays readable for more.
        for _ in 0..<64 {
            let descriptor: FileDescriptor?
            do {
                descriptor = try UnixSocket.accept(listener)
            } catch {
                acceptFailed(error)
                return
            }
            guard let descriptor else { return }
            admit(descriptor)
        }
    }

    /// `accept` failed. Out of descriptors (`EMFILE`, `ENFILE`, or the kernel's `ENOBUFS`/`ENOMEM`), the
    /// pending connection stays queued and the level-triggered listener would fire again at once, forever: turn
    /// the listeners off until a descriptor of the daemon's frees up, or a timer, for descriptors freed elsewhere.
    private func acceptFailed(_ error: Errno) {
        switch error.rawValue {
        case EMFILE, ENFILE, ENOBUFS, ENOMEM:
            pauseListeners(because: "\(error)")
        default:
            // Anything else (a network error of one pending connection) concerns that connection only.
            logger.warning("accept failed: \(error)")
        }
    }

    private func pauseListeners(because reason: String) {
        guard listenersPausedReason == nil else { return }
        listenersPausedReason = reason
        logger.error("cannot accept connections (\(reason)); accepting again once descriptors free up")
        for listener in listeners { try? listener.setEnabled(false) }
        do {
            if acceptRetryTimer == nil {
                acceptRetryTimer = try clock.makeTimer(name: "accept-retry", accuracy: .milliseconds(100)) {
                    [weak self] in
                    self?.resumeListeners()
                }
            }
            try acceptRetryTimer?.rearm(at: clock.now + Self.acceptRetryDelay)
        } catch {
            // Without the timer, the next closed connection or exited process still turns them back on.
            logger.warning("cannot schedule accepting again: \(error)")
        }
    }

    /// Turns the listeners back on after a pause (a descriptor was freed, or the retry timer fired). If the
    /// descriptors are still exhausted, the next accept pauses them again (logged once per episode).
    func resumeListeners() {
        guard let reason = listenersPausedReason, !isStopped else { return }
        listenersPausedReason = nil
        acceptRetryTimer?.disarm()
        for listener in listeners { try? listener.setEnabled(true) }
        logger.debug("accepting connections again after: \(reason)")
    }

    /// Serves a new client within the connection limits; the connection, or nil when it was refused (and closed).
    @discardableResult
    func admit(_ descriptor: FileDescriptor) -> ClientConnection? {
        let credentials: PeerCredentials
        do {
            credentials = try UnixSocket.peerCredentials(of: descriptor)
        } catch {
            logger.warning("dropping a client whose credentials cannot be read: \(error)")
            try? descriptor.close()
            return nil
        }
        guard let limits = host?.connectionLimits else {
            try? descriptor.close()
            return nil
        }
        if connections.count >= limits.connectionsMax {
            if !isTotalConnectionRefusalLogged {
                isTotalConnectionRefusalLogged = true
                logger.warning(
                    "refusing connections: ConnectionsMax=\(limits.connectionsMax) reached (first refused: uid "
                        + "\(credentials.uid), pid \(credentials.pid))")
            }
            try? descriptor.close()
            return nil
        }
        if connectionsPerUser[credentials.uid, default: 0] >= limits.connectionsPerUserMax {
            if refusedConnectionsLogged.insert(credentials.uid).inserted {
                logger.warning(
                    "refusing connections from uid \(credentials.uid) (pid \(credentials.pid)): "
                        + "ConnectionsPerUserMax=\(limits.connectionsPerUserMax) reached")
            }
            try? descriptor.close()
            return nil
        }
        let connection = ClientConnection(
            serial: nextConnectionSerial, descriptor: descriptor, credentials: credentials,
            acceptedAtTicks: BootClock.nowTicks(), maximumMessageSize: limits.messageSizeMaxBytes,
            readBuffer: readBuffer)
        nextConnectionSerial += 1
        do {
            connection.groups = try UnixSocket.peerGroups(of: descriptor)
        } catch {
            logger.warning("cannot read the groups of pid \(credentials.pid): \(error); ControllerGroup will not apply")
        }
        connection.onMessage = { [weak self] connection, message in self?.handle(message, from: connection) }
        connection.onClose = { [weak self] connection, reason in self?.connectionClosed(connection, reason) }
        connection.onBacklog = { [weak self] connection in self?.addToBacklog(connection) }
        do {
            try connection.attach(to: loop)
        } catch {
            logger.error("cannot watch a client socket: \(error)")
            connection.close(because: "cannot watch it")
            return nil
        }
        connections[connection.serial] = connection
        connectionsPerUser[credentials.uid, default: 0] += 1
        return connection
    }

    private func connectionClosed(_ connection: ClientConnection, _ reason: String) {
        connections[connection.serial] = nil
        let uid = connection.credentials.uid
        connectionsPerUser[uid, default: 1] -= 1
        if connectionsPerUser[uid] == 0 { connectionsPerUser[uid] = nil }
        let limits = host?.connectionLimits ?? DaemonConfiguration.Limits()
        if connectionsPerUser[uid, default: 0] < limits.connectionsPerUserMax {
            refusedConnectionsLogged.remove(uid)
        }
        if connections.count < limits.connectionsMax { isTotalConnectionRefusalLogged = false }
        logger.debug("connection \(connection.serial) of pid \(connection.credentials.pid) closed: \(reason)")
        var endedStream: AppID?
        switch connection.stream {
        case .registration(let app) where eventStreams[app] === connection:
            eventStreams[app] = nil
            endedStream = app
        case .watch:
            watchers[connection.serial] = nil
        case .registration, nil:
            break
        }
        host?.connectionClosed(connection, endingStreamOf: endedStream, because: reason)
        // A descriptor came free: if accepting was paused for want of one, try again.
        resumeListeners()
    }

    // MARK: Streams

    /// Holds `event` for `app`, whose stream is not attached yet, keeping at most `limit` per app; false when the
    /// oldest held one was dropped to make room.
    func hold(_ event: AppEvent, for app: AppID, limit: Int) -> Bool {
        var held = heldEvents[app, default: []]
        held.append(event)
        let isOverLimit = held.count > max(limit, 1)
        if isOverLimit { held.removeFirst(held.count - max(limit, 1)) }
        heldEvents[app] = held
        return !isOverLimit
    }

    /// The events held for `app`, oldest first, now no longer held.
    func takeHeldEvents(of app: AppID) -> [AppEvent] {
        heldEvents.removeValue(forKey: app) ?? []
    }

    /// The connection becomes `app`'s event stream (a `Register` call, or a stream taken back from the fd store).
    func attachEventStream(_ connection: ClientConnection, of app: AppID) {
        connection.stream = .registration(app)
        eventStreams[app] = connection
    }

    /// `app`'s event stream no longer speaks for it: the connection streams nothing (the caller closes it, or
    /// lets it serve calls again); nil when the app has none.
    @discardableResult
    func detachEventStream(of app: AppID) -> ClientConnection? {
        guard let connection = eventStreams.removeValue(forKey: app) else { return nil }
        connection.stream = nil
        return connection
    }

    /// The connection streams audit entries from now on (`Watch`).
    func addWatcher(_ connection: ClientConnection) {
        connection.stream = .watch
        watchers[connection.serial] = connection
    }

    // MARK: Pipelined calls

    /// Queues a connection whose complete calls exceeded its turn's budget; `serveBacklog` gives it more turns.
    private func addToBacklog(_ connection: ClientConnection) {
        guard !connection.isBacklogged else { return }
        connection.isBacklogged = true
        backlog.append(connection)
        try? backlogSource?.setEnabled(true)
    }

    /// One turn for the first connection of the backlog (one per loop iteration, so other sources interleave):
    /// it processes up to its budget and rejoins the end of the backlog if calls remain.
    func serveBacklog() {
        guard !backlog.isEmpty else {
            try? backlogSource?.setEnabled(false)
            return
        }
        let connection = backlog.removeFirst()
        connection.isBacklogged = false
        if !connection.isClosed {
            connection.processMessages()
        }
        if backlog.isEmpty {
            try? backlogSource?.setEnabled(false)
        }
    }
}
