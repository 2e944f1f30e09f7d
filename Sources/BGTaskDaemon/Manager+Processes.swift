// The manager's processes: identifying a registering peer, watching its exit, and stopping, continuing and
// killing it as the policy decides, after a file-lock check made off the loop.

import BGTaskCore
import BGTaskPOSIX
import Glibc

/// A registering peer's process, identified beyond its pid: a pidfd and the start time /proc reads are checked by.
struct PeerProcess {
    let pidFD: PidFD
    let startTime: UInt64
}

extension Manager {
    // MARK: Identity

    /// The process behind `connection`, identified so a reused pid is never mistaken for it.
    ///
    /// With `SO_PEERPIDFD` the kernel names the process that connected; its start time is read and kept only if
    /// the pidfd still shows it alive afterwards (then the stat was its own). Without it, the pid from
    /// `SO_PEERCRED` is opened and kept only if that process started before the connection was accepted: a
    /// process started later cannot be the peer. Throws `.noSuchProcess` when the peer is gone.
    func identifyPeer(of connection: ClientConnection) throws(Errno) -> PeerProcess {
        let pid = connection.credentials.pid
        let pidFD: PidFD
        var mustPredateConnection = false
        if let peer = try UnixSocket.peerPidFD(of: connection.descriptor) {
            pidFD = peer
        } else {
            pidFD = try PidFD.open(pid: pid)
            mustPredateConnection = true
        }
        do throws(Errno) {
            guard let stat = try? procFS.stat(pid), try !pidFD.hasExited,
                !mustPredateConnection || stat.startTime <= connection.acceptedAtTicks
            else { throw Errno.noSuchProcess }
            return PeerProcess(pidFD: pidFD, startTime: stat.startTime)
        } catch {
            try? pidFD.close()
            throw error
        }
    }

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

    /// Ends the registrations of the live app holding `name` if its process has exited but the exit was not
    /// handled yet: a Register must never re-attach to a dead process's registration.
    func settleExitedHolder(of name: String) {
        guard let app = core.liveAppID(named: name), let process = processOfApp[app] else { return }
        if (try? process.pidFD.hasExited) ?? true { processExited(process) }
    }

    // MARK: Tracking

    /// Starts tracking `app` as a registration of the peer process (one pidfd per process, however many names).
    func track(_ app: AppID, peer: PeerProcess, uid: uid_t) {
        if let existing = trackedLiveProcess(pid: peer.pidFD.pid) {
            try? peer.pidFD.close()
            existing.apps.insert(app)
            processOfApp[app] = existing
            return
        }
        let process = newTrackedProcess(pidFD: peer.pidFD, uid: uid, startTime: peer.startTime)
        guard watchExit(of: process) else {
            // Fail closed: an app whose exit cannot be watched is not tracked at all, and its registration ends.
            perform(core.processExited(app, how: .exited, now: now))
            return
        }
        process.apps.insert(app)
        processes[process.serial] = process
        processOfApp[app] = process
        memoryMonitor?.appsChanged()
    }

    /// A process to track under the next serial, whose signals' reports (a process of another uid left alone) are
    /// logged with the names of its apps.
    func newTrackedProcess(pidFD: PidFD, uid: uid_t, startTime: UInt64) -> TrackedProcess {
        let process = TrackedProcess(
            serial: nextProcessSerial, pidFD: pidFD, uid: uid, startTime: startTime, procFS: procFS,
            changes: processChanges)
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
    func pruneProcess(of app: AppID) {
        guard let process = processOfApp[app] else { return }
        for tracked in process.apps where !core.isWatchingProcess(of: tracked) {
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
        process.release()
        processes[process.serial] = nil
        processChanges.note(process.serial)
        memoryMonitor?.appsChanged()
        resumeListeners()
    }

    /// The process's pidfd became readable: it exited. Every registration of it ends, and what the daemon had
    /// stopped of its group is continued (or killed, when the daemon was ending the app).
    func processExited(_ process: TrackedProcess) {
        guard processes.removeValue(forKey: process.serial) != nil else { return }
        processChanges.note(process.serial)
        let apps = process.apps.sorted()
        let isBeingKilled = apps.contains { core.state(of: $0) == .terminated }
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
            let sinceKill = memoryMonitor?.victimExited(app)
            perform(core.processExited(app, how: how, exit: exit, sinceKill: sinceKill, now: now))
            if let stream = eventStreams.removeValue(forKey: app) {
                stream.stream = nil
                stream.close(because: "the app's process exited")
            }
        }
        process.apps = []
        memoryMonitor?.appsChanged()
        resumeListeners()
        updateStatus()
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
            feedLater { [unowned self] in self.core.suspensionRefused(app, now: self.now) }
            return
        }
        pendingSuspensions[app] = request
        lockCheckRequests[request] = app
    }

    /// A lock check came back: stop the process, refuse the suspension, or nothing if the policy moved on.
    func lockCheckFinished(request: Int, _ check: LockCheck) {
        guard let app = lockCheckRequests.removeValue(forKey: request), pendingSuspensions[app] == request else {
            return
        }
        pendingSuspensions[app] = nil
        guard core.state(of: app) == .suspended, let process = processOfApp[app] else { return }
        switch check {
        case .free:
            stopIfAllSuspended(process)
        case .held(let what):
            logger.info("\(appName(app)) holds \(what): not suspending it", [.app(appName(app))])
            perform(core.suspensionRefused(app, now: now))
        case .unknown(let why):
            logger.warning("\(why): treating \(appName(app)) as holding a lock", [.app(appName(app))])
            perform(core.suspensionRefused(app, now: now))
        case .gone:
            // Its pidfd reports the exit and the policy hears of it then.
            break
        }
        updateStatus()
    }

    /// Stops the process if every registration it has is suspended (one that must run keeps it running).
    private func stopIfAllSuspended(_ process: TrackedProcess) {
        guard !process.isStopped else { return }
        let mayStop = process.apps.allSatisfy { app in
            switch core.state(of: app) {
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

    /// Carries out the stop `process` has decided once the state saying so is saved (after a crash, that state is
    /// what continues it: nothing is stranded), and has a freeze confirmed.
    func sendStopOnceSaved(_ process: TrackedProcess) {
        stateChanged()
        whenStateSaved { [weak self, weak process] in
            guard let self, let process else { return }
            // A freeze of a cgroup of the app's own waited for the save: what is in it may have changed meanwhile.
            if let cgroup = process.pendingOwnCgroupFreeze, !process.mayActOnWhole(cgroup) {
                self.fallBack(process, because: "\(cgroup) no longer holds only the app's processes")
                return
            }
            do throws(Errno) {
                try process.sendPendingStop()
                if process.frozenCgroup != nil { self.confirmFreeze(of: process) }
            } catch {
                if error != .noSuchProcess {
                    self.logger.error(
                        "cannot suspend pid \(process.pid): \(error)", process.apps.map { .app(self.appName($0)) })
                }
                // Not stopped after all: the state must say so.
                self.stateChanged()
            }
        }
    }

    /// `.resume`: the app must run; its process is continued if the daemon stopped it.
    func resumeProcess(of app: AppID) {
        if let request = pendingSuspensions.removeValue(forKey: app) { lockCheckRequests[request] = nil }
        guard let process = processOfApp[app] else { return }
        defer { stateChanged() }
        do {
            try process.resume()
        } catch {
            if error != .noSuchProcess { logger.error("cannot resume \(appName(app)): \(error)") }
        }
    }

    /// `.kill`: SIGKILL to the app's process (its group when it leads one or was stopped as one).
    func killProcess(of app: AppID, reason: TerminationReason) {
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
