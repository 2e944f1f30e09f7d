// The daemon's processes in one part: tracking each by its pidfd, watching its exit, and stopping, continuing and
// killing it as the policy decides, after a file-lock check made off the loop.

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// The processes behind the registrations, and everything that acts on them: the table of tracked processes (by
/// serial and by app), the lock checks a suspension waits for, the freezes awaiting confirmation, the `/proc`
/// inspection worker, the supervisor of managed apps, the host's cgroups, and the users app names are pinned to.
///
/// Every signal, freeze and kill the daemon sends to an app goes through here, through the process's pidfd (a
/// reused pid is never signalled), and every doubt fails closed: a suspension without a lock check is refused, a
/// process whose exit cannot be watched is not tracked, and a process the daemon stops is continued before it is
/// let go.
final class ProcessTable {
    /// Jobs that may wait for the inspection worker: a lock check per suspension and a memory sample. Far above
    /// any real backlog (one check per app at most), yet a bound.
    static let workerCapacity = 4096

    let loop: EventLoop
    let clock: ManagerClock
    let logger: Logger
    let procFS: ProcFS
    let inspector: ProcessInspector
    /// The owner: the policy's view of the apps, and the neighbours told of changes. Set once the owner exists.
    weak var host: (any ProcessTableHost)?
    /// The cgroup hierarchies of the host, and the daemon's own cgroup2 cgroup (never frozen); see
    /// `ProcessTable+Cgroups.swift`.
    let cgroupHierarchies = CgroupHierarchies.probe()
    private(set) var daemonCgroup: CgroupDirectory?
    /// Tracked processes by serial, and the process of each registration.
    private(set) var processes: [Int: TrackedProcess] = [:]
    private(set) var processOfApp: [AppID: TrackedProcess] = [:]
    private var nextProcessSerial = 1
    /// Suspensions waiting for their lock check, by app, with the check's request number.
    private var pendingSuspensions: [AppID: Int] = [:]
    private var lockCheckRequests: [Int: AppID] = [:]
    private var nextLockCheckRequest = 1
    /// Freezes awaiting confirmation from `cgroup.events`, by process serial, with the moment SIGSTOP replaces them
    /// (kept by `ProcessTable+Cgroups.swift`).
    var freezeConfirmations: [Int: MonotonicInstant] = [:]
    var freezeConfirmationTimer: ManagerTimer?
    /// The thread that reads `/proc` for memory samples and lock checks; made in `startWorker()`, after the signals
    /// are blocked, so it inherits a mask that keeps them for the loop.
    private var worker: BackgroundWorker<InspectionJob, InspectionOutcome>?
    /// Starts managed apps and owns what it made for them (`AppSupervisor`); made in `startSupervisor`.
    private(set) var supervisor: AppSupervisor?
    /// The pins of app names (`User=` in `apps.d`, resolved to uids) and the one rule deciding from them who a
    /// launched app runs as and whose a name's requests are (`IdentityRule`).
    private(set) var identity = IdentityRule()
    /// What launches go through, in front of the supervisor: fair launch slots (`LaunchSlots`); made with it.
    private(set) var launchSlots: LaunchSlots?

    init(loop: EventLoop, clock: ManagerClock, logger: Logger, procFS: ProcFS) {
        self.loop = loop
        self.clock = clock
        self.logger = logger
        self.procFS = procFS
        inspector = ProcessInspector(procFS: procFS)
    }

    /// The app's name for a log line.
    func appName(_ app: AppID) -> String {
        host?.appName(app) ?? app.description
    }

    // MARK: Start and stop

    /// Finds the daemon's own cgroup2 cgroup, which is never frozen with an app.
    func findDaemonCgroup() {
        let ownCgroups = try? cgroupHierarchies.cgroups(of: getpid(), procFS: procFS)
        daemonCgroup = ownCgroups?.unified
    }

    /// Starts the inspection worker's thread and watches its outcomes on the loop.
    func startWorker() throws {
        let worker = try BackgroundWorker<InspectionJob, InspectionOutcome>(
            name: "bgtaskd-proc", capacity: Self.workerCapacity
        ) { [inspector] job in
            switch job {
            case .memory(let processes):
                .memory(inspector.sampleMemory(processes, includesProcesses: !processes.isEmpty))
            case .locks(let request, let process):
                .locks(request: request, inspector.checkLocks(process))
            }
        }
        self.worker = worker
        try loop.addIO(fd: worker.outcomesReady, events: .readable, name: "proc-worker") { [unowned self] _, _ in
            self.inspectionsFinished()
        }
    }

    /// Makes the supervisor of managed apps (see `makeSupervisor`) and the launch slots in front of it.
    func startSupervisor(memory: DaemonConfiguration.Memory, unitManager: UnitManagerChoice?) throws(StartupError) {
        let supervisor = try makeSupervisor(memory: memory, unitManager: unitManager)
        self.supervisor = supervisor
        do {
            let slots = try LaunchSlots(
                supervisor: supervisor, capacity: Self.launchesInFlightMax,
                waitingPerUserMax: LaunchSlots.waitingPerUserMax, clock: clock, logger: logger)
            slots.host = host
            launchSlots = slots
        } catch {
            throw StartupError(description: "cannot make the launch slots' timer: \(error)")
        }
    }

    /// Stops the supervisor's and the worker's threads (the loop has ended).
    func stopThreads() {
        launchSlots?.stop()
        supervisor?.stop()
        worker?.stop()
    }

    /// Resolves the users of pinned app names (`User=` in `apps.d`, by name or number) to uids: the identity rule
    /// from now on.
    func resolvePinnedUsers(_ appUsers: [String: String]) {
        identity = IdentityRule(pins: Self.pinnedUsers(appUsers, logger: logger))
    }

    /// Lets go of every process (after they were continued): the table is empty afterwards.
    func releaseAll() {
        for process in processes.values { process.release() }
        processes = [:]
        processOfApp = [:]
    }

    // MARK: The inspection worker

    /// Submits a job to the worker; false (logged) when it is full, which bounds what the daemon queues.
    func submit(_ job: InspectionJob) -> Bool {
        guard let worker, worker.submit(job) else {
            logger.warning("the /proc worker is busy (\(Self.workerCapacity) jobs waiting)")
            return false
        }
        return true
    }

    private func inspectionsFinished() {
        guard let worker else { return }
        for outcome in worker.takeOutcomes() {
            switch outcome {
            case .memory(let sample):
                host?.memorySampleArrived(sample)
            case .locks(let request, let check):
                lockCheckFinished(request: request, check)
            }
        }
        host?.updateStatus()
    }

    // MARK: Identity

    /// The tracked process the peer of `connection` is, if it is tracked and alive. A tracked process with the
    /// peer's pid that has exited is handled as gone first (its apps end), so a new process reusing the pid is
    /// never taken for it.
    func trackedLiveProcess(pid: pid_t) -> TrackedProcess? {
        guard let process = processes.values.first(where: { $0.pid == pid }) else { return nil }
        if (try? process.pidFD.hasExited) ?? true {
            processExited(process)
            return nil
        }
        return process
    }

    /// Ends the registrations of the live app `app` (holding a name) if its process has exited but the exit was
    /// not handled yet: a Register must never re-attach to a dead process's registration.
    func settleExitedHolder(_ app: AppID) {
        guard let process = processOfApp[app] else { return }
        if (try? process.pidFD.hasExited) ?? true { processExited(process) }
    }

    // MARK: Tracking

    /// Starts tracking `app` as a registration of the peer process (one pidfd per process, however many names).
    /// False when the process's exit cannot be watched: fail closed, it is not tracked at all, and the caller ends
    /// the registration.
    func track(_ app: AppID, peer: PeerProcess, uid: uid_t) -> Bool {
        if let existing = trackedLiveProcess(pid: peer.pidFD.pid) {
            try? peer.pidFD.close()
            existing.apps.insert(app)
            processOfApp[app] = existing
            return true
        }
        let process = newTrackedProcess(pidFD: peer.pidFD, uid: uid, startTime: peer.startTime)
        guard watchExit(of: process) else { return false }
        process.apps.insert(app)
        processes[process.serial] = process
        processOfApp[app] = process
        supervisor?.registered(process)
        host?.trackedProcessesChanged()
        return true
    }

    /// Tracks a launched child that has exec'd as the process of `app`, its cgroups and unit those the supervisor
    /// made. False when its exit cannot be watched: fail closed, it is not kept (the child is the caller's to end).
    func trackLaunched(_ started: StartedApp, uid: uid_t, as app: AppID) -> Bool {
        let process = newTrackedProcess(pidFD: started.pidFD, uid: uid, startTime: started.startTime)
        process.cgroups = started.cgroups
        process.child = started.child
        process.unit = started.unit
        supervisor?.adopted(process)
        guard watchExit(of: process, releasingOnFailure: false) else { return false }
        process.apps.insert(app)
        processes[process.serial] = process
        processOfApp[app] = process
        return true
    }

    /// Adds a process a previous daemon tracked, with its apps (`process.apps`), once it is identified and watched.
    func insert(_ process: TrackedProcess) {
        processes[process.serial] = process
        for app in process.apps { processOfApp[app] = process }
    }

    /// A process to track under the next serial, whose signals' reports (a process of another uid left alone) are
    /// logged with the names of its apps.
    func newTrackedProcess(pidFD: PidFD, uid: uid_t, startTime: UInt64) -> TrackedProcess {
        let process = TrackedProcess(
            serial: nextProcessSerial, pidFD: pidFD, uid: uid, startTime: startTime, procFS: procFS,
            changes: host?.processChanges)
        nextProcessSerial += 1
        // The process owns the closure (through its signals): it is alive whenever the closure runs.
        process.signals.report = { [weak self, unowned process] message in
            guard let self else { return }
            self.logger.notice(message, process.apps.sorted().map { .app(self.appName($0)) })
        }
        return process
    }

    /// Watches the process's pidfd for its exit; false (logged) when it cannot be watched, the process released (its
    /// pidfd closed) unless `releasingOnFailure` is false (a launched child, which the caller still has to reap).
    func watchExit(of process: TrackedProcess, releasingOnFailure: Bool = true) -> Bool {
        do {
            process.exitSource = try loop.addIO(fd: process.pidFD.fileDescriptor, events: .readable, name: "pidfd") {
                [unowned self, unowned process] source, _ in
                // How it ended may come a little after (an app the service manager started): the pidfd stays
                // readable, so its source is switched off while the manager's word is awaited.
                let isAwaited = self.supervisor?.awaitExit(of: process) { [weak self, weak process] in
                    guard let self, let process else { return }
                    self.processExited(process)
                }
                if isAwaited == true {
                    source.cancel()
                    process.exitSource = nil
                    return
                }
                self.processExited(process)
            }
            return true
        } catch {
            logger.error("cannot watch pid \(process.pid): \(error)")
            if releasingOnFailure { process.release() }
            return false
        }
    }

    /// Forgets registrations of `app`'s process the policy no longer tracks; releases the process when none is
    /// left (one process cycling through names holds one pidfd, and none once its names are gone).
    func forget(_ app: AppID) {
        guard let host, let process = processOfApp[app] else { return }
        for tracked in process.apps where !host.isWatchingProcess(of: tracked) {
            process.apps.remove(tracked)
            processOfApp[tracked] = nil
            pendingSuspensions[tracked] = nil
        }
        guard process.apps.isEmpty else { return }
        do {
            try process.resume()
        } catch {
            if error != .noSuchProcess { logger.error("cannot resume pid \(process.pid): \(error)") }
        }
        supervisor?.released(process)
        process.release()
        processes[process.serial] = nil
        host.processChanges.note(process.serial)
        host.trackedProcessesChanged()
        host.descriptorsFreed()
    }

    /// The process's pidfd became readable: it exited. Every registration of it ends, and what the daemon had
    /// stopped of its group is continued (or killed, when the daemon was ending the app).
    func processExited(_ process: TrackedProcess) {
        guard processes.removeValue(forKey: process.serial) != nil else { return }
        host?.processChanges.note(process.serial)
        let apps = process.apps.sorted()
        let isBeingKilled = apps.contains { host?.policyState(of: $0) == .terminated }
        do {
            try process.releaseGroupAfterExit(killing: isBeingKilled, procFS: procFS)
        } catch {
            logger.error("cannot release the process group of exited pid \(process.pid): \(error)")
        }
        let exit = supervisor?.ended(process)
        process.release()
        var how = ProcessEnd.exited
        if case .signal(let number)? = exit {
            how = .crashed
            if !isBeingKilled {
                let signal = Signal(rawValue: number)?.name ?? "signal \(number)"
                logger.notice(
                    "pid \(process.pid) was killed by \(signal)", apps.map { .app(appName($0)) })
            }
        } else if case .status(let status)? = exit, status != 0 {
            logger.notice("pid \(process.pid) exited with status \(status)", apps.map { .app(appName($0)) })
        }
        for app in apps {
            processOfApp[app] = nil
            pendingSuspensions[app] = nil
            host?.appProcessExited(app, how: how, exit: exit)
        }
        process.apps = []
        host?.trackedProcessesChanged()
        host?.descriptorsFreed()
        host?.updateStatus()
    }

    // MARK: Carrying out suspend, resume and kill

    /// `.suspend`: the policy counts the app suspended; the process is stopped once a lock check on the worker
    /// finds no file lock (freezing a lock holder can hang every process waiting on the lock), and only when every
    /// registration of the process is suspended.
    func requestSuspension(of app: AppID) {
        guard let process = processOfApp[app] else { return }
        let request = nextLockCheckRequest
        nextLockCheckRequest += 1
        guard submit(.locks(request: request, process: process.inspected)) else {
            // Fail closed: without a check, treat it as holding a lock (grace, then terminated if it persists).
            host?.suspensionRefused(app, deferred: true)
            return
        }
        pendingSuspensions[app] = request
        lockCheckRequests[request] = app
    }

    /// Whether a suspension of `app` waits for its lock check.
    func isSuspensionPending(_ app: AppID) -> Bool {
        pendingSuspensions[app] != nil
    }

    /// A lock check came back: stop the process, refuse the suspension, or nothing if the policy moved on.
    func lockCheckFinished(request: Int, _ check: LockCheck) {
        guard let app = lockCheckRequests.removeValue(forKey: request), pendingSuspensions[app] == request else {
            return
        }
        pendingSuspensions[app] = nil
        guard let host, host.policyState(of: app) == .suspended, let process = processOfApp[app] else { return }
        switch check {
        case .free:
            stopIfAllSuspended(process)
        case .held(let what):
            logger.info("\(appName(app)) holds \(what): not suspending it", [.app(appName(app))])
            host.suspensionRefused(app, deferred: false)
        case .unknown(let why):
            logger.warning("\(why): treating \(appName(app)) as holding a lock", [.app(appName(app))])
            host.suspensionRefused(app, deferred: false)
        case .gone:
            // Its pidfd reports the exit and the policy hears of it then.
            break
        }
        host.updateStatus()
    }

    /// Stops the process if every registration it has is suspended (one that must run keeps it running).
    private func stopIfAllSuspended(_ process: TrackedProcess) {
        guard let host, !process.isStopped else { return }
        let mayStop = process.apps.allSatisfy { app in
            switch host.policyState(of: app) {
            case .suspended: pendingSuspensions[app] == nil
            case .notRunning, nil: true
            case .active, .inactive, .background, .terminated: false
            }
        }
        guard mayStop else { return }
        do {
            try process.stop(freezing: process.cgroups?.control ?? ownCgroup(of: process))
        } catch {
            // Gone already: its pidfd reports the exit and the core hears of it then.
            if error != .noSuchProcess {
                logger.error("cannot suspend pid \(process.pid): \(error)", process.apps.map { .app(appName($0)) })
            }
            return
        }
        sendStopOnceSaved(process)
    }

    /// `.resume`: the app must run; its process is continued if the daemon stopped it.
    func resume(_ app: AppID) {
        if let request = pendingSuspensions.removeValue(forKey: app) { lockCheckRequests[request] = nil }
        guard let process = processOfApp[app] else { return }
        defer { host?.stateChanged() }
        do {
            try process.resume()
        } catch {
            if error != .noSuchProcess { logger.error("cannot resume \(appName(app)): \(error)") }
        }
    }

    /// `.kill`: SIGKILL to the app's process (its group when it leads one or was stopped as one).
    func kill(_ app: AppID, reason: TerminationReason) {
        if let request = pendingSuspensions.removeValue(forKey: app) { lockCheckRequests[request] = nil }
        guard let process = processOfApp[app] else { return }
        do {
            try process.kill()
        } catch {
            if error != .noSuchProcess {
                logger.error("cannot kill \(appName(app)) (\(reason.rawValue)): \(error)", [.app(appName(app))])
            }
        }
    }
}
