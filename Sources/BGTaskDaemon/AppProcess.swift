// The process behind a self-registered app: its pidfd, and stopping, continuing, measuring and killing it.

import BGTaskCore
import BGTaskSystem
import Glibc

/// The running process of an app that registered by itself (DESIGN §3: signal and PSS backends).
///
/// Identity is the pidfd, never the bare pid: signals go through it, and its readability is how the daemon
/// learns the process is gone. Stop and continue go to the app's process group only when the app leads its
/// own group; otherwise to the app's process alone, never to a group it merely belongs to (a shell's, a
/// test runner's).
final class AppProcess {
    let app: AppID
    let pidFD: PidFD
    /// Whether the app led its own process group when it registered.
    let leadsGroup: Bool
    /// The loop source reporting the pidfd readable (the process exited).
    var exitSource: IOSource?
    /// Whether the daemon has it stopped.
    private(set) var isStopped = false

    var pid: pid_t { pidFD.pid }

    init(app: AppID, pidFD: PidFD) {
        self.app = app
        self.pidFD = pidFD
        leadsGroup = (try? ProcessGroup.isLeader(pidFD.pid)) ?? false
    }

    /// Sends `signal` to the app: its group if it leads one, else its process.
    private func send(_ signal: Signal) throws(Errno) {
        if leadsGroup {
            // The pidfd pins the leader: while it has not exited, its pid (and so its group id) is not reused.
            guard try !pidFD.hasExited else { throw Errno.noSuchProcess }
            try ProcessGroup(id: pid).send(signal)
        } else {
            try pidFD.sendSignal(signal)
        }
    }

    /// SIGSTOP (the signal freeze backend).
    func stop() throws(Errno) {
        try send(.stop)
        isStopped = true
    }

    /// SIGCONT, if stopped.
    func resume() throws(Errno) {
        guard isStopped else { return }
        isStopped = false
        try send(.continue)
    }

    /// SIGKILL, then `process_mrelease` so the memory comes back now rather than when the exit completes.
    func kill() throws(Errno) {
        try send(.kill)
        isStopped = false
        // The kill already happened; releasing early is an optimisation the kernel may decline (EINVAL while
        // the exit has not started, ESRCH once it finished).
        try? pidFD.releaseMemory()
    }

    /// Whether the app holds a file lock (`/proc/locks`), by its process or, when it leads its group, by any
    /// process of the group. Freezing a lock holder can hang whoever waits for the lock (the foreground).
    /// Throws when `/proc/locks` cannot be read or parsed.
    func holdsFileLock(_ procFS: ProcFS) throws -> Bool {
        for lock in try procFS.locks() where !lock.isBlockedWaiter && lock.pid > 0 {
            if lock.pid == pid { return true }
            // A holder that exited since the read no longer holds anything: skipping it is right.
            if leadsGroup, let stat = try? procFS.stat(lock.pid), stat.processGroupID == pid { return true }
        }
        return false
    }

    /// The app's memory: the PSS of its process (`/proc/PID/smaps_rollup`), nil when unreadable.
    func memoryBytes(_ procFS: ProcFS) -> Int? {
        (try? procFS.proportionalSetSize(pid)).map { Int($0) }
    }

    /// Stops watching and closes the pidfd.
    func release() {
        exitSource?.cancel()
        exitSource = nil
        try? pidFD.close()
    }
}
