// What the process table needs of the manager that owns it, and how it identifies a registering peer.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// A registering peer's process, identified beyond its pid: a pidfd and the start time /proc reads are checked by.
struct PeerProcess {
    let pidFD: PidFD
    let startTime: UInt64
}

/// What the process table needs of its owner (the manager): the policy's view of each app, the policy's inputs
/// that come from processes, the saving of the state, and the neighbours told when the processes change.
///
/// The table asks, and the owner answers; the table never reaches into its owner's state, and the owner changes
/// the table's only through its methods.
protocol ProcessTableHost: LaunchSlotsHost {
    /// The time of the current loop iteration, as the policy's clock.
    var now: MonotonicInstant { get }
    /// Where the processes changed since the last journal record are noted.
    var processChanges: ProcessChangeLog { get }
    /// What the policy says `app` is in (nil: it does not know the app).
    func policyState(of app: AppID) -> AppState?
    /// Whether the policy still watches the process of `app`.
    func isWatchingProcess(of app: AppID) -> Bool
    /// The app's name, for logs.
    func appName(_ app: AppID) -> String
    /// The policy must hear that `app` may not be suspended (a lock held, or no check possible): now, or after the
    /// batch of actions being carried out (`deferred`).
    func suspensionRefused(_ app: AppID, deferred: Bool)
    /// `app` must never be suspended (`exemption`: its unit is stopping, or has a watchdog).
    func suspensionExempted(_ app: AppID, because exemption: SuspensionExemption)
    /// The process of `app` exited (its registration ends), `exit` saying how when the supervisor knows.
    func appProcessExited(_ app: AppID, how: ProcessEnd, exit: ProcessExit?)
    /// The set of tracked processes changed (the memory monitor samples them).
    func trackedProcessesChanged()
    /// A process handle was closed: listeners paused for want of descriptors may resume.
    func descriptorsFreed()
    /// Something `STATUS=` counts may have changed.
    func updateStatus()
    /// The state to save changed (a stop decided, or undone).
    func stateChanged()
    /// Runs `action` once the state changed so far is saved.
    func whenStateSaved(_ action: @escaping () -> Void)
    /// A memory sample came back from the inspection worker.
    func memorySampleArrived(_ sample: MemorySample)
}

extension ProcessTable {
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
}
