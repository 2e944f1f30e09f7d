// The manager's side of its processes: the core's process actions handed to the process table (`ProcessTable`),
// and the policy's inputs and the neighbours' news the table reports back.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

extension Manager {
    /// Tracked processes by serial, and the process of each registration (the process table's).
    var processes: [Int: TrackedProcess] { processTable.processes }
    var processOfApp: [AppID: TrackedProcess] { processTable.processOfApp }
    /// The supervisor of managed apps; nil before `start()`.
    var supervisor: AppSupervisor? { processTable.supervisor }
    /// The fair launch slots every launch goes through, in front of the supervisor; nil before `start()`.
    var launchSlots: LaunchSlots? { processTable.launchSlots }
    var inspector: ProcessInspector { processTable.inspector }
    /// The pins of app names (`User=` in `apps.d`) and the one rule deciding from them who a launched app runs as and
    /// whose a name's requests are.
    var identity: IdentityRule { processTable.identity }

    // MARK: The core's actions

    /// `.suspend`: stopped once a lock check finds no file lock (`ProcessTable.requestSuspension`).
    func requestSuspension(of app: AppID) {
        processTable.requestSuspension(of: app)
    }

    /// `.resume`: the app's process is continued if the daemon stopped it.
    func resumeProcess(of app: AppID) {
        processTable.resume(app)
    }

    /// `.kill`: SIGKILL to the app's process.
    func killProcess(of app: AppID, reason: TerminationReason) {
        processTable.kill(app, reason: reason)
    }

    /// `.forget`: registrations the policy no longer tracks are let go, and their process once none is left.
    func pruneProcess(of app: AppID) {
        processTable.forget(app)
        _ = connectionServer.takeHeldEvents(of: app)
    }

    // MARK: Registering and restoring

    /// The process behind `connection`, identified so a reused pid is never mistaken for it.
    func identifyPeer(of connection: ClientConnection) throws(Errno) -> PeerProcess {
        try processTable.identifyPeer(of: connection)
    }

    /// Ends the registrations of the live app holding `name` if its process has exited but the exit was not
    /// handled yet: a Register must never re-attach to a dead process's registration.
    func settleExitedHolder(of name: String) {
        guard let app = core.liveAppID(named: name) else { return }
        processTable.settleExitedHolder(app)
    }

    /// Starts tracking `app` as a registration of the peer process; an app whose exit cannot be watched is not
    /// tracked at all, and its registration ends (fail closed).
    func track(_ app: AppID, peer: PeerProcess, uid: uid_t) {
        guard processTable.track(app, peer: peer, uid: uid) else {
            perform(core.processExited(app, how: .exited, now: now))
            return
        }
    }

    /// A process to track under the next serial (`ProcessTable.newTrackedProcess`).
    func newTrackedProcess(pidFD: PidFD, uid: uid_t, startTime: UInt64) -> TrackedProcess {
        processTable.newTrackedProcess(pidFD: pidFD, uid: uid, startTime: startTime)
    }

    /// Watches the process's pidfd for its exit (`ProcessTable.watchExit`).
    func watchExit(of process: TrackedProcess) -> Bool {
        processTable.watchExit(of: process)
    }

    /// The cgroup2 cgroup `process` may be frozen through as one of its own (`ProcessTable.ownCgroup`).
    func ownCgroup(of process: TrackedProcess) -> CgroupDirectory? {
        processTable.ownCgroup(of: process)
    }

    /// The cgroup2 cgroup `process` is in now, unless it is the root or the daemon's own.
    func currentCgroup(of process: TrackedProcess) -> CgroupDirectory? {
        processTable.currentCgroup(of: process)
    }

    /// The backends in use, by capability (`ProcessTable.backendNames`), and the source of each host condition
    /// (`ConditionMonitor.sourceNames`).
    var backendNames: [String: String] {
        processTable.backendNames.merging(conditionMonitor?.sourceNames ?? [:]) { own, _ in own }
    }

    /// Submits a job to the inspection worker; false (logged) when it is full.
    func submit(_ job: InspectionJob) -> Bool {
        processTable.submit(job)
    }
}

extension Manager: ProcessTableHost {
    func policyState(of app: AppID) -> AppState? {
        core.state(of: app)
    }

    func isWatchingProcess(of app: AppID) -> Bool {
        core.isWatchingProcess(of: app)
    }

    func suspensionRefused(_ app: AppID, deferred: Bool) {
        if deferred {
            feedLater { [unowned self] in self.core.suspensionRefused(app, now: self.now) }
        } else {
            perform(core.suspensionRefused(app, now: now))
        }
    }

    func suspensionExempted(_ app: AppID, because exemption: SuspensionExemption) {
        feedLater { [unowned self] in self.core.suspensionExempted(app, because: exemption, now: self.now) }
    }

    func appProcessExited(_ app: AppID, how: ProcessEnd, exit: ProcessExit?) {
        let sinceKill = memoryMonitor?.victimExited(app)
        perform(core.processExited(app, how: how, exit: exit, sinceKill: sinceKill, now: now))
        connectionServer.detachEventStream(of: app)?.close(because: "the app's process exited")
        // Held for a re-attach that can no longer come: a new process registers anew.
        _ = connectionServer.takeHeldEvents(of: app)
    }

    func trackedProcessesChanged() {
        memoryMonitor?.appsChanged()
    }

    func descriptorsFreed() {
        resumeListeners()
    }

    func memorySampleArrived(_ sample: MemorySample) {
        memoryMonitor?.sampleArrived(sample)
    }
}
