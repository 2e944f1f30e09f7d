// The daemon's manager: owns the event loop, the policy core, the clients and the apps' processes.

import BGTaskConfig
import BGTaskCore
import BGTaskProtocol
import BGTaskSystem
import Foundation
import Glibc

/// Why the daemon could not start.
public struct StartupError: Error, CustomStringConvertible {
    /// What went wrong, for one log line.
    public var description: String
}

/// bgtaskd: wires the policy core (`Lifecycle`) to Linux.
///
/// Named event sources on one sd-event loop: the listening socket(s), one connection source per client, one
/// pidfd source per app process, the single policy timer, and SIGTERM/SIGINT/SIGHUP. Every input goes to the
/// core with the loop's monotonic time, and every action the core returns is carried out by `perform(_:)`.
/// No polling: nothing wakes the loop but an event, the policy's next deadline, or the watchdog.
public final class Manager {
    /// The daemon's version, reported by `GetStatus`, `GetInfo` and `--version`.
    public static let version = "0.1.0"

    let loop: EventLoop
    var core: Lifecycle
    var configuration: DaemonConfiguration
    let configurationPath: String
    /// The socket path when the daemon created the socket itself (removed again on stop).
    let socketPath: String
    let logger: Logger
    let notifier = ServiceNotifier()
    let codec = VarlinkCodec()
    let payloadDecoder = JSONDecoder()
    let payloadEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
    let procFS: ProcFS
    let trail: AuditTrail
    let startedAt: MonotonicInstant

    let readBuffer = ReadBuffer()
    /// Made in `start()`: it needs the manager.
    var memoryMonitor: MemoryMonitor?
    var listeners: [IOSource] = []
    var ownsSocketFile = false
    var timer: TimerSource?
    var connections: [Int: ClientConnection] = [:]
    var connectionsPerUser: [uid_t: Int] = [:]
    var nextConnectionSerial = 1
    var processes: [AppID: AppProcess] = [:]
    /// The connection carrying each registered app's event stream.
    var eventStreams: [AppID: ClientConnection] = [:]
    var watchers: [Int: ClientConnection] = [:]
    /// The gid of `ControllerGroup`, resolved at start and on reload.
    var controllerGroupID: gid_t?
    var isStopping = false
    /// The `STATUS=` text last sent, when, and the timer for a change held back by the rate limit.
    var sentStatus: String?
    var lastStatusTime: Int64?
    var statusTimer: TimerSource?
    var isStatusUpdatePending = false
    /// The least time between two `STATUS=` messages.
    static let statusInterval: Duration = .seconds(1)

    /// Inputs that arose while actions were being carried out, fed to the core once the current batch is done
    /// (a batch's `.armTimer` reflects the core as it was when the batch was made).
    private var pendingInputs: [() -> [Action]] = []
    private var isPerforming = false

    /// Creates a manager; nothing listens until `start()`.
    public init(
        configuration: DaemonConfiguration, configurationPath: String, socketPath: String, logger: Logger,
        procFS: ProcFS = ProcFS()
    ) throws(Errno) {
        loop = try EventLoop()
        core = Lifecycle(policy: configuration.core)
        self.configuration = configuration
        self.configurationPath = configurationPath
        self.socketPath = socketPath
        self.logger = logger
        self.procFS = procFS
        trail = AuditTrail(capacity: configuration.core.historySize, logger: logger)
        startedAt = MonotonicInstant(nanoseconds: MonotonicClock.now())
    }

    /// The loop's time for the current iteration, as the core's clock.
    var now: MonotonicInstant { MonotonicInstant(nanoseconds: loop.now) }

    // MARK: Start and stop

    /// Listens (or takes the socket systemd passed), installs the signal and timer sources, and tells the
    /// service manager it is ready. The socket serves before `READY=1` is sent.
    public func start() throws(StartupError) {
        do {
            for signal in [Signal.terminate, .interrupt] {
                try loop.addSignal(signal) { [unowned self] _, info in
                    self.stop(because: "\(info.signal.name) from pid \(info.senderPID)")
                }
            }
            try loop.addSignal(.hangUp) { [unowned self] _, _ in self.reloadConfiguration() }
            // A client that disappears mid-write must not kill the daemon.
            signal(SIGPIPE, SIG_IGN)
            try loop.addExit(name: "release-apps") { [unowned self] _ in self.releaseAllApps() }
            // Made now, disabled, so the loop's timer descriptor exists from the start and the daemon's
            // descriptor use does not grow with its first deadline.
            timer = try loop.addTimer(at: .max, name: "policy-deadline") { [unowned self] _ in
                self.perform(self.core.deadlineReached(now: self.now))
                self.updateStatus()
            }
            try timer?.setEnabled(false)
            _ = try loop.enableWatchdog()
        } catch {
            throw StartupError(description: "cannot set up the event loop: \(error)")
        }
        resolveControllerGroup()
        memoryMonitor = MemoryMonitor(manager: self, settings: configuration.memory)
        try openListeners()
        let appsLimit = configuration.memory.appsMemoryMaxBytes.map { "\($0) bytes" } ?? "infinity"
        logger.notice(
            "bgtaskd \(Self.version) listening on \(socketPath); backends: freeze=sigstop memory=pss kill=pidfd "
                + "(self-registered apps); memory trigger: polling, AppsMemoryMax=\(appsLimit)"
                + (configuration.memory.reclaimDryRun ? ", ReclaimDryRun" : ""))
        _ = try? notifier.ready()
        updateStatus()
    }

    /// Runs the loop until a stop; returns the exit status.
    public func run() throws(Errno) -> Int32 {
        let code = try loop.run()
        loop.cancelAllSources()
        return code
    }

    private func openListeners() throws(StartupError) {
        var descriptors: [FileDescriptor] = []
        do {
            descriptors = try ServiceNotifier.listenedDescriptors().map(\.fileDescriptor)
        } catch {
            throw StartupError(description: "cannot read the sockets passed by systemd: \(error)")
        }
        if descriptors.isEmpty {
            let directory = (socketPath as NSString).deletingLastPathComponent
            if !directory.isEmpty && !FileManager.default.fileExists(atPath: directory) {
                do {
                    try FileManager.default.createDirectory(
                        atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
                } catch {
                    throw StartupError(description: "cannot create \(directory): \(error.localizedDescription)")
                }
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

    /// Stops cleanly: `STOPPING=1`, every stopped app resumed, clients closed, the socket file removed.
    func stop(because reason: String) {
        guard !isStopping else { return }
        isStopping = true
        logger.notice("stopping: \(reason)")
        _ = try? notifier.stopping()
        for listener in listeners {
            listener.cancel()
            try? listener.fileDescriptor.close()
        }
        listeners = []
        if ownsSocketFile { unlink(socketPath) }
        for connection in Array(connections.values) { connection.close(because: "the daemon is stopping") }
        releaseAllApps()
        try? loop.exit(code: 0)
    }

    /// Resumes every app the daemon stopped and lets go of their processes: no app may stay stopped once
    /// the daemon no longer tracks it.
    func releaseAllApps() {
        for process in processes.values {
            do {
                try process.resume()
            } catch {
                if error != .noSuchProcess {
                    logger.error("cannot resume pid \(process.pid): \(error)", [.app(appName(process.app))])
                }
            }
            process.release()
        }
        processes = [:]
    }

    func reloadConfiguration() {
        let result = ConfigurationLoader(path: configurationPath).load()
        for diagnostic in result.diagnostics {
            logger.log(diagnostic.severity == .error ? .error : .warning, "\(diagnostic)")
        }
        configuration = result.configuration
        core.updatePolicy(configuration.core)
        memoryMonitor?.update(configuration.memory)
        trail.capacity = configuration.core.historySize
        resolveControllerGroup()
        logger.notice("configuration reloaded from \(configurationPath)")
    }

    private func resolveControllerGroup() {
        controllerGroupID = nil
        guard let group = configuration.access.controllerGroup else { return }
        if let gid = gid_t(group) {
            controllerGroupID = gid
        } else {
            do {
                controllerGroupID = try UserDatabase.groupID(named: group)
                if controllerGroupID == nil { logger.warning("ControllerGroup=\(group): no such group") }
            } catch {
                logger.warning("ControllerGroup=\(group): cannot look it up: \(error)")
            }
        }
    }

    /// `STATUS=` for `systemctl status`: at most once per `statusInterval`, only when the text changed, and the
    /// last change always sent when the interval ends. A burst of calls must not flood the service manager
    /// (a full queue would block `sd_notify`), and building the text counts apps, so it happens only when a
    /// message may go out, not on every call.
    func updateStatus() {
        guard notifier.isSupervised, !isStatusUpdatePending else { return }
        let current = loop.now
        if let lastStatusTime, current - lastStatusTime < Self.statusInterval.nanosecondCount {
            let due = lastStatusTime + Self.statusInterval.nanosecondCount
            do {
                if let statusTimer {
                    try statusTimer.rearm(at: due)
                } else {
                    statusTimer = try loop.addTimer(at: due, name: "status") { [unowned self] _ in
                        self.isStatusUpdatePending = false
                        self.updateStatus()
                    }
                }
                isStatusUpdatePending = true
            } catch {
                logger.warning("cannot schedule a status update: \(error)")
            }
            return
        }
        let text =
            "\(core.liveAppCount) apps, \(core.suspendedAppCount) suspended, \(core.openTaskCount) tasks, "
            + "\(connections.count) clients"
        guard text != sentStatus else { return }
        lastStatusTime = current
        sentStatus = text
        _ = try? notifier.status(text)
    }

    func appName(_ app: AppID) -> String {
        core.snapshot(of: app, now: now)?.name ?? app.description
    }

    // MARK: Clients

    private func acceptClients(on listener: FileDescriptor) {
        while true {
            let descriptor: FileDescriptor?
            do {
                descriptor = try UnixSocket.accept(listener)
            } catch {
                // EMFILE and friends: log and wait for the next readiness rather than spin.
                logger.error("accept failed: \(error)")
                return
            }
            guard let descriptor else { return }
            admit(descriptor)
        }
    }

    private func admit(_ descriptor: FileDescriptor) {
        let credentials: PeerCredentials
        do {
            credentials = try UnixSocket.peerCredentials(of: descriptor)
        } catch {
            logger.warning("dropping a client whose credentials cannot be read: \(error)")
            try? descriptor.close()
            return
        }
        let limit = configuration.limits.connectionsPerUserMax
        if connectionsPerUser[credentials.uid, default: 0] >= limit {
            logger.warning(
                "refusing a connection from uid \(credentials.uid) (pid \(credentials.pid)): "
                    + "ConnectionsPerUserMax=\(limit) reached")
            try? descriptor.close()
            return
        }
        let connection = ClientConnection(
            serial: nextConnectionSerial, descriptor: descriptor, credentials: credentials,
            maximumMessageSize: configuration.limits.messageSizeMaxBytes, readBuffer: readBuffer)
        nextConnectionSerial += 1
        connection.peerPidFD = try? UnixSocket.peerPidFD(of: descriptor)
        do {
            connection.groups = try UnixSocket.peerGroups(of: descriptor)
        } catch {
            logger.warning("cannot read the groups of pid \(credentials.pid): \(error); ControllerGroup will not apply")
        }
        connection.onMessage = { [unowned self] connection, message in self.handle(message, from: connection) }
        connection.onClose = { [unowned self] connection, reason in self.connectionClosed(connection, reason) }
        do {
            try connection.attach(to: loop)
        } catch {
            logger.error("cannot watch a client socket: \(error)")
            connection.close(because: "cannot watch it")
            return
        }
        connections[connection.serial] = connection
        connectionsPerUser[credentials.uid, default: 0] += 1
    }

    private func connectionClosed(_ connection: ClientConnection, _ reason: String) {
        connections[connection.serial] = nil
        let uid = connection.credentials.uid
        connectionsPerUser[uid, default: 1] -= 1
        if connectionsPerUser[uid] == 0 { connectionsPerUser[uid] = nil }
        switch connection.stream {
        case .registration(let app) where eventStreams[app] === connection:
            eventStreams[app] = nil
            logger.debug("event stream of \(appName(app)) closed: \(reason)")
            perform(core.registrationClosed(app, now: now))
        case .watch:
            watchers[connection.serial] = nil
        case .registration, nil:
            break
        }
        updateStatus()
    }

    // MARK: App processes

    /// Starts tracking the process of a newly registered app; returns false if it is already gone.
    func trackProcess(of app: AppID, connection: ClientConnection) -> Bool {
        if let existing = processes[app], existing.pid == connection.credentials.pid { return true }
        let pidFD: PidFD
        do {
            if let peer = connection.peerPidFD {
                pidFD = PidFD(fileDescriptor: try peer.fileDescriptor.duplicate(), pid: peer.pid)
            } else {
                pidFD = try PidFD.open(pid: connection.credentials.pid)
            }
        } catch {
            logger.warning("cannot open a pidfd for pid \(connection.credentials.pid): \(error)")
            return false
        }
        let process = AppProcess(app: app, pidFD: pidFD)
        do {
            process.exitSource = try loop.addIO(fd: pidFD.fileDescriptor, events: .readable, name: "pidfd") {
                [unowned self] _, _ in
                self.processExited(app)
            }
        } catch {
            logger.error("cannot watch pid \(pidFD.pid): \(error)")
            process.release()
            return false
        }
        processes[app] = process
        memoryMonitor?.appsChanged()
        return true
    }

    private func processExited(_ app: AppID) {
        guard let process = processes.removeValue(forKey: app) else { return }
        process.release()
        perform(core.processExited(app, how: .exited, now: now))
        memoryMonitor?.victimExited(app)
        memoryMonitor?.appsChanged()
        if let stream = eventStreams.removeValue(forKey: app) {
            stream.close(because: "the app's process exited")
        }
        updateStatus()
    }

    // MARK: Carrying out the core's actions

    /// Carries out actions in order; inputs that arise meanwhile are fed to the core afterwards.
    func perform(_ actions: [Action]) {
        pendingInputs.append { actions }
        guard !isPerforming else { return }
        isPerforming = true
        defer { isPerforming = false }
        while !pendingInputs.isEmpty {
            let batch = pendingInputs.removeFirst()()
            for action in batch { execute(action) }
        }
    }

    private func execute(_ action: Action) {
        switch action {
        case .send(let event, let app):
            sendEvent(event, to: app)
        case .suspend(let app):
            suspend(app)
        case .resume(let app):
            guard let process = processes[app] else { return }
            do {
                try process.resume()
            } catch {
                if error != .noSuchProcess { logger.error("cannot resume \(appName(app)): \(error)") }
            }
        case .kill(let app, let reason):
            guard let process = processes[app] else { return }
            do {
                try process.kill()
            } catch {
                if error != .noSuchProcess {
                    logger.error("cannot kill \(appName(app)) (\(reason.rawValue)): \(error)", [.app(appName(app))])
                }
            }
        case .armTimer(let instant):
            armTimer(at: instant)
        case .record(let record):
            guard let entry = trail.record(record, isWatched: !watchers.isEmpty) else { return }
            for watcher in watchers.values where isVisible(record, to: watcher) {
                sendStreamed(WatchReply(entry: entry), on: watcher)
            }
        }
    }

    private func suspend(_ app: AppID) {
        guard let process = processes[app] else { return }
        let holdsLock: Bool
        do {
            holdsLock = try process.holdsFileLock(procFS)
        } catch {
            logger.warning("cannot read file locks, suspending \(appName(app)) anyway: \(error)")
            holdsLock = false
        }
        if holdsLock {
            pendingInputs.append { [unowned self] in self.core.suspensionRefused(app, now: self.now) }
            return
        }
        do {
            try process.stop()
        } catch {
            // Gone already: its pidfd reports the exit and the core hears of it then.
            if error != .noSuchProcess { logger.error("cannot suspend \(appName(app)): \(error)") }
        }
    }

    private func armTimer(at instant: MonotonicInstant?) {
        guard let instant else {
            try? timer?.setEnabled(false)
            return
        }
        do {
            // Safe: made in start(), before any input can reach the core.
            try timer!.rearm(at: instant.nanoseconds)
        } catch {
            // Without its timer the policy would miss deadlines: that is fatal for a supervised daemon.
            logger.error("cannot arm the policy timer: \(error)")
            stop(because: "the policy timer failed")
        }
    }

    private func sendEvent(_ event: AppEvent, to app: AppID) {
        guard let stream = eventStreams[app] else { return }
        sendStreamed(RegisterReply(app: nil, event: EventInfo(event, decoder: payloadDecoder)), on: stream)
    }

    /// Sends one reply of a stream (`continues: true`).
    func sendStreamed<Reply: Encodable>(_ reply: Reply, on connection: ClientConnection) {
        do {
            connection.send(try codec.encodeReply(reply, continues: true))
        } catch {
            logger.error("cannot encode a reply: \(error)")
        }
    }
}
