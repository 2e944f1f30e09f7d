// Freezing self-registered apps through a cgroup2 cgroup of their own, with the freeze confirmed from
// cgroup.events and SIGSTOP as the fallback.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

extension ProcessTable {
    /// The most processes a cgroup may hold for the daemon to check that they are all the app's (each is two
    /// `/proc` reads on the loop); past it the app is stopped with signals.
    static let ownCgroupProcessLimit = 64
    /// How long a freeze may take to show in `cgroup.events` (5–7 ms here) before SIGSTOP replaces it.
    static let freezeConfirmationTimeout: Duration = .seconds(1)
    static let freezeConfirmationInterval: Duration = .milliseconds(20)

    /// The cgroup2 cgroup `process` may be frozen through: one of its own (desktop shells and
    /// `systemd-run --scope` give each app one) that holds only the process and its descendants, all wholly of the
    /// app's uid (a setuid child is not the app's to freeze), has no child cgroups, is neither the root nor the
    /// daemon's own (or an ancestor of it), and that the daemon may freeze. Nil for anything else, or anything that
    /// cannot be read: the app is then stopped with signals, which leave a process of another uid alone.
    func ownCgroup(of process: TrackedProcess) -> CgroupDirectory? {
        guard let cgroup = currentCgroup(of: process) else { return nil }
        guard access(cgroup.path + "/cgroup.freeze", W_OK) == 0, process.mayActOnWhole(cgroup) else { return nil }
        return cgroup
    }

    /// The cgroup2 cgroup `process` is in now (`/proc/PID/cgroup`), unless it is the root or the daemon's own (or an
    /// ancestor of it); nil when it cannot be read.
    func currentCgroup(of process: TrackedProcess) -> CgroupDirectory? {
        guard let root = cgroupHierarchies.unified,
            let cgroup = try? cgroupHierarchies.cgroups(of: process.pid, procFS: procFS).unified,
            cgroup.path != root, cgroup.path.hasPrefix(root + "/")
        else { return nil }
        if let own = daemonCgroup, own.path == cgroup.path || own.path.hasPrefix(cgroup.path + "/") { return nil }
        return cgroup
    }

    /// The backends in use, by capability, as `GetStatus` and the startup log report them: each the chain from
    /// the best (what managed apps get) to the fallback (what an app without a cgroup of its own gets). Probed at
    /// start: `freeze` is `cgroup2` (`cgroup.freeze`) or `cgroup1` (v1 `freezer.state`) where managed apps get
    /// cgroups, then `cgroup2` for self-registered apps found alone in a cgroup2 cgroup, then `sigstop`; `memory`
    /// is `cgroup2` (`memory.current`) or `cgroup1` (`memory.usage_in_bytes`), then `pss`; `kill` is
    /// `cgroup.kill` where cgroup2 has it, `cgroup1` (SIGKILL to each member through a pidfd, then a thaw), then
    /// `pidfd`.
    var backendNames: [String: String] {
        let managed = supervisor?.managedBackends ?? ManagedBackends()
        var freeze = managed.freeze.map { [$0] } ?? []
        if cgroupHierarchies.unified != nil && !freeze.contains("cgroup2") { freeze.append("cgroup2") }
        freeze.append("sigstop")
        let memory = (managed.memory.map { [$0] } ?? []) + ["pss"]
        var kill = managed.kill.map { [$0] } ?? []
        if kill.isEmpty, let root = cgroupHierarchies.unified, CgroupDirectory(path: root).has("cgroup.kill") {
            kill.append("cgroup.kill")
        }
        kill.append("pidfd")
        var names = supervisor?.report ?? [:]
        names["freeze"] = freeze.joined(separator: "+")
        names["memory"] = memory.joined(separator: "+")
        names["kill"] = kill.joined(separator: "+")
        return names
    }

    // MARK: Stopping, and confirming freezes

    /// Carries out the stop `process` has decided once the state saying so is saved (after a crash, that state is
    /// what continues it: nothing is stranded), and has a freeze confirmed.
    func sendStopOnceSaved(_ process: TrackedProcess) {
        guard let host else { return }
        host.stateChanged()
        host.whenStateSaved { [weak self, weak process] in
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
                self.host?.stateChanged()
            }
        }
    }

    /// A freeze was requested for `process`: `cgroup.events` must say `frozen 1` within
    /// `freezeConfirmationTimeout`, or the daemon thaws the cgroup and stops the process with SIGSTOP instead.
    func confirmFreeze(of process: TrackedProcess) {
        freezeConfirmations[process.serial] = clock.now + Self.freezeConfirmationTimeout
        armFreezeConfirmationTimer()
    }

    private func armFreezeConfirmationTimer() {
        guard !freezeConfirmations.isEmpty else {
            freezeConfirmationTimer?.disarm()
            return
        }
        do {
            if freezeConfirmationTimer == nil {
                freezeConfirmationTimer = try clock.makeTimer(
                    name: "freeze-confirmation", accuracy: .milliseconds(5)
                ) { [unowned self] in
                    self.checkFreezes()
                }
            }
            try freezeConfirmationTimer?.rearm(at: clock.now + Self.freezeConfirmationInterval)
        } catch {
            logger.warning("cannot schedule confirming freezes: \(error); falling back to SIGSTOP")
            for serial in freezeConfirmations.keys { fallBack(processes[serial], because: "\(error)") }
            freezeConfirmations = [:]
        }
    }

    /// Reads `cgroup.events` of every freeze awaiting confirmation.
    private func checkFreezes() {
        let current = clock.now
        for (serial, deadline) in freezeConfirmations {
            guard let process = processes[serial], let cgroup = process.frozenCgroup, !process.isStopPending else {
                // Resumed, gone, or still waiting for the state write: nothing to confirm yet.
                if processes[serial]?.isStopPending != true { freezeConfirmations[serial] = nil }
                continue
            }
            if (try? cgroup.isFrozen()) == true {
                freezeConfirmations[serial] = nil
                // Frozen, nothing in it can change its uid or fork: a process that turned another uid's, or one not
                // the app's moved in, between the check before the freeze and the freeze itself is found now, and
                // thawed with the rest.
                if process.frozenOwnCgroup != nil && !process.mayActOnWhole(cgroup) {
                    fallBack(process, because: "\(cgroup) holds a process that is not the app's")
                    continue
                }
                logger.debug("froze pid \(process.pid) through \(cgroup)", process.apps.map { .app(appName($0)) })
            } else if current >= deadline {
                freezeConfirmations[serial] = nil
                fallBack(process, because: "\(cgroup) did not report frozen within \(Self.freezeConfirmationTimeout)")
            }
        }
        armFreezeConfirmationTimer()
    }

    /// Stops `process` with SIGSTOP instead of the freeze that did not confirm or may not stand (after the state
    /// says so).
    func fallBack(_ process: TrackedProcess?, because reason: String) {
        guard let process, process.frozenCgroup != nil else { return }
        logger.warning(
            "\(reason): \(process.isStopPending ? "not freezing it;" : "thawing it and") stopping pid \(process.pid) "
                + "with SIGSTOP instead", process.apps.map { .app(appName($0)) })
        do {
            try process.fallBackToSignals()
        } catch {
            if error != .noSuchProcess { logger.error("cannot stop pid \(process.pid): \(error)") }
            host?.stateChanged()
            return
        }
        sendStopOnceSaved(process)
    }
}
