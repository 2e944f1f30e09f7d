// The manager's clients: listening, admitting within the connection limits, and serving pipelined calls fairly.

import BGTaskCore
import BGTaskPOSIX
import Glibc

extension Manager {
    /// How long accepting waits after the system ran out of descriptors (`ENFILE`), which no close of the
    /// daemon's own signals; 1 s keeps the retry cheap while a client waits about as long as a slow start.
    static let acceptRetryDelay: Duration = .seconds(1)

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
                    try loop.addIO(fd: descriptor, events: .readable, name: "listener") { [unowned self] source, _ in
                        self.acceptClients(on: source.fileDescriptor)
                    })
            } catch {
                throw StartupError(description: "cannot watch the listening socket: \(error)")
            }
        }
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
                    [unowned self] in
                    self.resumeListeners()
                }
            }
            try acceptRetryTimer?.rearm(at: now + Self.acceptRetryDelay)
        } catch {
            // Without the timer, the next closed connection or exited process still turns them back on.
            logger.warning("cannot schedule accepting again: \(error)")
        }
    }

    /// Turns the listeners back on after a pause (a descriptor was freed, or the retry timer fired). If the
    /// descriptors are still exhausted, the next accept pauses them again (logged once per episode).
    func resumeListeners() {
        guard let reason = listenersPausedReason, !isStopping else { return }
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
        let totalLimit = configuration.limits.connectionsMax
        if connections.count >= totalLimit {
            if !isTotalConnectionRefusalLogged {
                isTotalConnectionRefusalLogged = true
                logger.warning(
                    "refusing connections: ConnectionsMax=\(totalLimit) reached (first refused: uid "
                        + "\(credentials.uid), pid \(credentials.pid))")
            }
            try? descriptor.close()
            return nil
        }
        let userLimit = configuration.limits.connectionsPerUserMax
        if connectionsPerUser[credentials.uid, default: 0] >= userLimit {
            if refusedConnectionsLogged.insert(credentials.uid).inserted {
                logger.warning(
                    "refusing connections from uid \(credentials.uid) (pid \(credentials.pid)): "
                        + "ConnectionsPerUserMax=\(userLimit) reached")
            }
            try? descriptor.close()
            return nil
        }
        let connection = ClientConnection(
            serial: nextConnectionSerial, descriptor: descriptor, credentials: credentials,
            acceptedAtTicks: BootClock.nowTicks(), maximumMessageSize: configuration.limits.messageSizeMaxBytes,
            readBuffer: readBuffer)
        nextConnectionSerial += 1
        do {
            connection.groups = try UnixSocket.peerGroups(of: descriptor)
        } catch {
            logger.warning("cannot read the groups of pid \(credentials.pid): \(error); ControllerGroup will not apply")
        }
        connection.onMessage = { [unowned self] connection, message in self.handle(message, from: connection) }
        connection.onClose = { [unowned self] connection, reason in self.connectionClosed(connection, reason) }
        connection.onBacklog = { [unowned self] connection in self.addToBacklog(connection) }
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
        if connectionsPerUser[uid, default: 0] < configuration.limits.connectionsPerUserMax {
            refusedConnectionsLogged.remove(uid)
        }
        if connections.count < configuration.limits.connectionsMax { isTotalConnectionRefusalLogged = false }
        logger.debug("connection \(connection.serial) of pid \(connection.credentials.pid) closed: \(reason)")
        unstoreStream(connection)
        switch connection.stream {
        case .registration(let app) where eventStreams[app] === connection:
            eventStreams[app] = nil
            logger.debug("event stream of \(appName(app)) closed: \(reason)")
            // The daemon closing every stream as it stops is not the app leaving: its registration, leases and
            // all, waits in the state file for the app to re-attach to the next daemon.
            guard !isStopping else { break }
            perform(core.registrationClosed(app, now: now))
            pruneProcess(of: app)
        case .watch:
            watchers[connection.serial] = nil
        case .registration, nil:
            break
        }
        // A descriptor came free: if accepting was paused for want of one, try again.
        resumeListeners()
        updateStatus()
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
