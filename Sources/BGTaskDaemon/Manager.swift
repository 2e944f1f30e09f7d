// The daemon's manager: owns the event loop, the policy core, the clients and the apps' processes.

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Glibc

/// Why the daemon could not start.
public struct StartupError: Error, CustomStringConvertible {
    /// What went wrong, for one log line.
    public var description: String
}

/// bgtaskd: wires the policy core (`Lifecycle`) to Linux.
///
/// Named event sources on one sd-event loop: the listening socket(s), one connection source per client, one
/// pidfd source per tracked process, the single policy timer, the memory monitor's timer, the inspection
/// worker's outcomes, the launcher's (and each launch's exec handshake), the backlog of pipelined calls, and
/// SIGTERM/SIGINT/SIGHUP. Every input goes to the core with the loop's monotonic time, and every action the core
/// returns is carried out by `perform(_:)`. Reads of `/proc` whose cost grows with the apps (memory, file locks) run
/// on the inspection worker's thread, and everything of a launch that may block (PATH, the user database, the home
/// directory, the clone) on the launcher's, never on the loop. No polling: nothing wakes the loop but an event, a
/// deadline, a sample due, or the watchdog.
public final class Manager {
    /// The daemon's version, reported by `GetStatus`, `GetInfo` and `--version`.
    public static let version = "0.1.0"

    let loop: EventLoop
    /// The time inputs carry and the timers run on: the loop's, or a manual clock in tests.
    let clock: ManagerClock
    var core: Lifecycle
    var configuration: DaemonConfiguration
    let configurationPath: String
    /// Where the configuration in force came from (files read and refused), for `GetStatus`; nil for a manager
    /// given a configuration it did not load (a test's).
    var configurationSources: ConfigurationSources?
    /// The socket path when the daemon created the socket itself (removed again on stop).
    let socketPath: String
    let logger: Logger
    /// The `STATUS=` line for `systemctl status`, rate-limited (`Service/StatusReporter.swift`).
    let statusReporter: StatusReporter
    let procFS: ProcFS
    /// The tracked processes and everything that acts on them (`ProcessTable`).
    let processTable: ProcessTable
    let trail: AuditTrail
    let startedAt: MonotonicInstant
    /// The state saved for the next daemon: the journal, its snapshots, the history file, and the output held
    /// until the state it reflects is saved (`Persistence/`).
    let persistence: StatePersistence
    /// The scheduled requests where they outlive a reboot (`--schedule-file`); nil: only in the runtime state.
    let scheduledStore: ScheduledStore?
    /// The apps' event streams a previous daemon kept in the fd store (taken back while restoring); see
    /// `Manager+FileDescriptorStore.swift`.
    let streamStore: StreamStore
    /// Where launched apps' output goes instead of the journal: `NAME.log` files in it (`--log-dir`, for tests).
    public var logDirectory: String?

    /// Made in `start()`: it needs the manager.
    var memoryMonitor: MemoryMonitor?
    /// The host's conditions and their sources (`Conditions/`), made in `start()`; it reports them to the core.
    var conditionMonitor: ConditionMonitor?
    /// Tells the core the wall clock's offset, at start and whenever the clock is set (`Manager+Scheduling.swift`).
    var wallClockWatch: WallClockWatch?
    /// The clients: listening, admitting, framing, the backlog of pipelined calls, the streams.
    let connectionServer: ConnectionServer
    /// The one timer of the policy, armed wherever the core asks (`.armTimer`).
    var policyTimer: ManagerTimer?
    /// The gid of `ControllerGroup`, resolved at start and on reload.
    var controllerGroupID: gid_t?
    var isStopping = false

    /// Inputs that arose while actions were being carried out, fed to the core once the current batch is done.
    ///
    /// Why a queue: carrying out an action can itself produce an input. Sending an event to a client whose socket
    /// fails closes the connection, and a closed event stream is the input `registrationClosed`; a lock check the
    /// worker cannot take is the input `suspensionRefused`. Fed at once, the new input's actions would run in the
    /// middle of the batch, before the batch's own later actions, and the batch's `.armTimer` (computed when the
    /// batch was made) would then re-arm the timer to a deadline the core has since moved. Queued, every batch
    /// runs whole and in order.
    private var pendingInputs: [() -> [Action]] = []
    private var isPerforming = false

    /// Creates a manager; nothing listens until `start()`. `statePath` is where the state is saved for the next
    /// daemon and restored from (nil: nothing is kept across restarts), `scheduledPath` where the scheduled requests
    /// are kept across reboots too (nil: only in the state), `procFS` is where `/proc` is read (a fake tree in
    /// tests), and `clock` where time comes from (a manual clock in tests). `configurationSources` are the files
    /// `configuration` was read from and the ones refused (`ConfigurationLoadResult.sources`): `GetStatus` reports them,
    /// and a reload (SIGHUP) checks files under the same root.
    public init(
        configuration: DaemonConfiguration, configurationPath: String,
        configurationSources: ConfigurationSources? = nil,
        socketPath: String, statePath: String? = nil, scheduledPath: String? = nil, logger: Logger,
        procFS: ProcFS = ProcFS(), clock: ManagerClockMode = .loop
    ) throws(Errno) {
        loop = try EventLoop()
        self.clock = ManagerClock(mode: clock, loop: loop)
        core = Lifecycle(policy: configuration.core)
        self.configuration = configuration
        self.configurationPath = configurationPath
        self.configurationSources = configurationSources
        self.socketPath = socketPath
        self.logger = logger
        connectionServer = ConnectionServer(loop: loop, clock: self.clock, logger: logger, socketPath: socketPath)
        self.procFS = procFS
        processTable = ProcessTable(loop: loop, clock: self.clock, logger: logger, procFS: procFS)
        trail = AuditTrail(capacity: configuration.core.historySize, logger: logger)
        startedAt = self.clock.freshNow
        persistence = StatePersistence(
            store: statePath.map(StateStore.init(path:)), bootID: StateStore.bootID(procFS: procFS), loop: loop,
            logger: logger)
        trail.gathersUnsaved = persistence.isEnabled
        if let scheduledPath {
            scheduledStore = ScheduledStore(path: scheduledPath, logger: logger, loop: loop, clock: self.clock)
        } else {
            scheduledStore = nil
        }
        statusReporter = StatusReporter(sink: ServiceNotifier(), clock: self.clock, logger: logger)
        streamStore = StreamStore(backend: ServiceNotifier(), logger: logger)
        persistence.source = self
        statusReporter.source = self
        processTable.host = self
        connectionServer.host = self
    }

    /// The time of the current loop iteration (or the manual clock's), as the core's clock.
    var now: MonotonicInstant { clock.now }

    // MARK: Start and stop

    /// Listens (or takes the socket systemd passed), installs the signal, timer and worker sources, and tells the
    /// service manager it is ready. The socket serves before `READY=1` is sent.
    ///
    /// `handlesSignals: false` leaves SIGTERM, SIGINT and SIGHUP alone, for a manager run inside another program
    /// (a test), which stops it with `stop(because:)`. `serviceManager` is the service manager that runs the daemon
    /// (systemd's system or user instance): managed apps are then launched as its units (`UnitSupervisor`); nil, or
    /// none answering there, and the daemon forks them itself (`ForkSupervisor`).
    public func start(handlesSignals: Bool = true, serviceManager: ServiceManagerScope? = nil) throws(StartupError) {
        try start(handlesSignals: handlesSignals, unitManager: serviceManager.map(UnitManagerChoice.probe))
    }

    /// `start(handlesSignals:serviceManager:)` with the service manager to launch managed apps through either
    /// probed or given (`UnitManagerChoice`: a test's fake manager); nil: the daemon forks them itself.
    func start(handlesSignals: Bool, unitManager: UnitManagerChoice?) throws(StartupError) {
        do {
            if handlesSignals {
                for signal in [Signal.terminate, .interrupt] {
                    try loop.addSignal(signal) { [unowned self] _, info in
                        self.stop(because: "\(info.signal.name) from pid \(info.senderPID)")
                    }
                }
                try loop.addSignal(.hangUp) { [unowned self] _, _ in self.reloadConfiguration() }
            }
            // A client that disappears mid-write must not kill the daemon.
            signal(SIGPIPE, SIG_IGN)
            try loop.addExit(name: "release-apps") { [unowned self] _ in self.releaseAllApps() }
            // Made now, disabled, so the loop's timer descriptor exists from the start and the daemon's
            // descriptor use does not grow with its first deadline.
            // 1 µs accuracy: deadlines are what apps see (a warning, a kill), so no coalescing delay is added to them.
            policyTimer = try clock.makeTimer(name: "policy-deadline", accuracy: .microseconds(1)) {
                [unowned self] in
                self.logger.debug("policy deadline reached at \(self.now)")
                self.perform(self.core.deadlineReached(now: self.now))
                self.updateStatus()
            }
            // What the handlers changed is saved once the loop has served everything ready (one journal record
            // per wake-up, however many calls it served), and the replies waiting on it go out, with no extra
            // turn of the loop per call; under a load that never lets the loop fall idle, every 64th dispatch.
            loop.whenIdle = { [unowned self] in
                self.persistence.saveChanges()
                self.saveScheduledRequests()
            }
            loop.afterDispatch = { [persistence] in persistence.countDispatch() }
            try connectionServer.makeBacklogSource()
            _ = try loop.enableWatchdog()
        } catch {
            throw StartupError(description: "cannot set up the event loop: \(error)")
        }
        do {
            try processTable.startWorker()
        } catch {
            throw StartupError(description: "cannot start the /proc worker thread: \(error)")
        }
        try persistence.startWriter()
        resolveAccessSettings()
        processTable.findDaemonCgroup()
        try processTable.startSupervisor(memory: configuration.memory, unitManager: unitManager)
        memoryMonitor = MemoryMonitor(host: self, settings: configuration.memory)
        startConditionMonitor()
        streamStore.readLimit()
        try takeListenedDescriptors()
        restoreState()
        // The restored requests meet the configuration's pins: those that no longer fit are cancelled.
        applyPins()
        // Only now: the service manager's probe above turns the loop, whose idle hook would otherwise write the empty
        // policy of a daemon just started over the requests it is about to restore.
        try scheduledStore?.start()
        scheduledStore?.writeIfChanged = { [unowned self] in self.saveScheduledRequests() }
        try startScheduling()
        startJournal()
        discardStoredStreams()
        try openListeners()
        let appsLimit = configuration.memory.appsMemoryMaxBytes.map { "\($0) bytes" } ?? "infinity"
        logger.notice(
            "bgtaskd \(Self.version) listening on \(socketPath); backends: "
                + backendNames.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
                + "; memory trigger: \(memoryMonitor?.triggers.description ?? "polling"), AppsMemoryMax=\(appsLimit)"
                + (configuration.memory.reclaimDryRun ? ", ReclaimDryRun" : ""))
        checkDescriptorBudget()
        _ = try? notifier.ready()
        updateStatus()
    }

    /// Runs the loop until a stop; returns the exit status.
    public func run() throws(Errno) -> Int32 {
        let code = try loop.run()
        processTable.stopThreads()
        persistence.stopWriter()
        scheduledStore?.stop(final: core.savedScheduling)
        conditionMonitor?.stop()
        wallClockWatch?.stop()
        clock.cancelAll()
        loop.cancelAllSources()
        return code
    }

    // MARK: Stepping (tests)

    /// Runs one iteration of the loop, waiting at most `timeout` for an input; whether one was dispatched. For a
    /// test that steps the manager instead of calling `run()`.
    @discardableResult
    public func runIteration(timeout: Duration) throws(Errno) -> Bool {
        try loop.runIteration(timeout: timeout)
    }

    /// The manager's time: the manual clock's reading, or the loop's.
    public var currentTime: MonotonicInstant { clock.now }

    /// Where the policy timer is armed; nil while it is not.
    public var policyDeadline: MonotonicInstant? { policyTimer?.deadline }

    /// Moves the manual clock (`ManagerClockMode.manual`) forward to `instant`, firing the manager's timers that
    /// fall due on the way, each at its own deadline.
    public func advanceTime(to instant: MonotonicInstant) {
        clock.advance(to: instant)
    }

    /// Moves the manual clock forward by `duration`.
    public func advanceTime(by duration: Duration) {
        clock.advance(to: clock.now + duration)
    }

    /// Warns when the descriptor limit cannot hold `ConnectionsMax` connections plus a process handle each: past
    /// it `accept` fails with `EMFILE` and the daemon stops accepting until descriptors free up.
    private func checkDescriptorBudget() {
        guard let limit = try? DescriptorLimit.current().soft else { return }
        let needed = UInt64(configuration.limits.connectionsMax) * 2 + 64
        if limit < needed {
            logger.warning(
                "the descriptor limit (RLIMIT_NOFILE=\(limit)) is below what ConnectionsMax="
                    + "\(configuration.limits.connectionsMax) may need (\(needed)); past it new connections wait "
                    + "until descriptors free up")
        }
    }

    /// Stops cleanly: `STOPPING=1`, every stopped app resumed, clients closed, the socket file removed.
    public func stop(because reason: String) {
        guard !isStopping else { return }
        isStopping = true
        logger.notice("stopping: \(reason)")
        _ = try? notifier.stopping()
        // The fd store's copies of the event streams stay open, for the next daemon to take them back.
        connectionServer.stop()
        // No half-launched child outlives the daemon: those whose program has not started yet are killed and reaped,
        // and those waiting for a slot never start.
        launchSlots?.stop()
        supervisor?.stop()
        releaseAllApps()
        try? loop.exit(code: 0)
    }

    /// Resumes every process the daemon stopped and lets go of them: no app may stay stopped once the daemon no
    /// longer tracks it.
    func releaseAllApps() {
        for process in processes.values {
            do {
                try process.resume()
            } catch {
                if error != .noSuchProcess {
                    logger.error("cannot resume pid \(process.pid): \(error)", process.apps.map { .app(appName($0)) })
                }
            }
        }
        // Saved with the processes continued, before they are let go: the next daemon adopts them again.
        persistence.saveFinalState()
        processTable.releaseAll()
    }

    /// SIGHUP: reads the configuration again, under the same trust rule as at start (a file refused now is not used,
    /// whatever was read before; `GetStatus` shows the new outcome). systemd hears `RELOADING=1` (with the time, as
    /// `Type=notify-reload` wants it) before and `READY=1` after, so `systemctl reload` returns once the new
    /// configuration is in force.
    func reloadConfiguration() {
        _ = try? notifier.notify("RELOADING=1\nMONOTONIC_USEC=\(MonotonicClock.now() / 1000)")
        defer { _ = try? notifier.ready() }
        let result = ConfigurationLoader(
            path: configurationPath, root: configurationSources?.root, daemonUserID: geteuid()
        ).load()
        ConfigurationLog.log(result, to: logger)
        configurationSources = result.sources
        let previousConditions = configuration.conditions
        configuration = result.configuration
        core.updatePolicy(configuration.core)
        memoryMonitor?.update(configuration.memory)
        if configuration.conditions != previousConditions { startConditionMonitor() }
        trail.capacity = configuration.core.historySize
        resolveAccessSettings()
        // A pin changed: held requests that no longer fit are cancelled, each with its reason in the history.
        applyPins()
        logger.notice(
            "configuration reloaded from \(configurationPath): \(result.filesRead.count) file(s) read, "
                + "\(result.refused.count) refused")
    }

    /// Starts the condition monitor with the configuration's `[Conditions]`, in place of the one running.
    private func startConditionMonitor() {
        conditionMonitor?.stop()
        let monitor = ConditionMonitor(host: self, settings: configuration.conditions)
        conditionMonitor = monitor
        monitor.start()
    }

    /// Resolves `ControllerGroup` and the users of pinned app names to ids.
    private func resolveAccessSettings() {
        controllerGroupID = nil
        if let group = configuration.access.controllerGroup {
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
        processTable.resolvePinnedUsers(configuration.access.appUsers)
    }

    func appName(_ app: AppID) -> String {
        core.snapshot(of: app, now: now)?.name ?? app.description
    }

    // MARK: Carrying out the core's actions

    /// Carries out actions in order; inputs that arise meanwhile are fed to the core afterwards.
    func perform(_ actions: [Action]) {
        if !actions.isEmpty { stateChanged() }
        pendingInputs.append { actions }
        guard !isPerforming else { return }
        isPerforming = true
        defer { isPerforming = false }
        while !pendingInputs.isEmpty {
            let batch = pendingInputs.removeFirst()()
            for action in batch { execute(action) }
        }
    }

    /// Feeds an input to the core after the batch being carried out, or now if none is.
    func feedLater(_ input: @escaping () -> [Action]) {
        pendingInputs.append(input)
        if !isPerforming { perform([]) }
    }

    private func execute(_ action: Action) {
        switch action {
        case .send(let event, let app):
            sendEvent(event, to: app)
        case .suspend(let app):
            requestSuspension(of: app)
        case .resume(let app):
            resumeProcess(of: app)
        case .kill(let app, let reason):
            killProcess(of: app, reason: reason)
        case .armTimer(let instant):
            armTimer(at: instant)
        case .forget(let app):
            pruneProcess(of: app)
        case .launch(let name, let owner):
            launchForScheduledWork(name, owner: owner)
        case .audit(let record):
            guard let entry = trail.publish(record, isWatched: !watchers.isEmpty) else { return }
            // Encoded once, on the first watcher allowed to see it, for every watcher.
            var encoded: [UInt8]?
            for watcher in watchers.values where isVisible(record, to: watcher) {
                if encoded == nil {
                    do {
                        encoded = try codec.encodeReply(WatchReply(entry: entry), continues: true)
                    } catch {
                        logger.error("cannot encode a Watch entry: \(error)")
                        return
                    }
                }
                if let encoded { transmit(encoded, on: watcher) }
            }
        }
    }

    private func armTimer(at instant: MonotonicInstant?) {
        guard let instant else {
            policyTimer?.disarm()
            return
        }
        do {
            // Made in start(), before any input can reach the core.
            try policyTimer?.rearm(at: instant)
            logger.debug("policy timer armed at \(instant) (now \(now))")
        } catch {
            // Without its timer the policy would miss deadlines: that is fatal for a supervised daemon.
            logger.error("cannot arm the policy timer: \(error)")
            stop(because: "the policy timer failed")
        }
    }

    private func sendEvent(_ event: AppEvent, to app: AppID) {
        guard let stream = eventStreams[app] else {
            // Registered without a stream: a registration restored from the state file whose app has not
            // re-attached yet. Its events wait for it (`Register` sends them after its first reply), as they would
            // in its stream: a task begun or warned meanwhile must not be lost on it.
            guard core.snapshot(of: app, now: now)?.isRegistered == true else { return }
            let limit = configuration.core.queuedEventsPerAppMax
            if !connectionServer.hold(event, for: app, limit: limit) {
                logger.notice(
                    "\(appName(app)) has not re-attached: dropped its oldest held event (QueuedEventsPerAppMax=\(limit))",
                    [.app(appName(app))])
            }
            return
        }
        sendStreamed(EventReply(event), on: stream)
    }

    /// Sends one reply of a stream (`continues: true`).
    func sendStreamed<Reply: Encodable>(_ reply: Reply, on connection: ClientConnection) {
        do {
            transmit(try codec.encodeReply(reply, continues: true), on: connection)
        } catch {
            logger.error("cannot encode a reply: \(error)")
        }
    }
}
