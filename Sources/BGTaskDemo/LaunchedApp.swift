// A sample app the daemon started for the demo (Launch): its output followed in the daemon's log file, its end.
import BGTaskClient
import BGTaskPOSIX
import BGTaskSystem
import Foundation
import Glibc
import Synchronization

/// A `bgtask-demo-app` process that bgtaskd started as a managed app (`Launch`): the daemon's child, in a session
/// and, where the daemon has cgroups, a cgroup of its own. Its output goes to `NAME.log` in the daemon's
/// `--log-dir`, which a thread follows (woken by inotify as the file grows), quoting each line as it comes and
/// keeping it for the narration to wait on, until the process is gone.
final class LaunchedApp: QuotedApp {
    let name: String
    /// The command line it was launched with.
    let argv: [String]
    /// The app as `Launch` replied: `notRunning`, its pid, its cgroup.
    let launched: AppInfo
    let lines = Feed<String>()
    /// A pidfd on the process, checked to be the daemon's child after opening (so a reused pid is never taken
    /// for it); nil when it had already ended by then. Shared with the follower, closed when both let go.
    private let process: PidFDHolder?
    /// Set by `end`: the follower stops once it has read what is there.
    private let isStopping: StopFlag

    /// Its pid.
    var pid: pid_t { pid_t(launched.pid) }

    /// The cgroup the daemon handles it through, if any.
    var cgroup: CgroupDirectory? { launched.cgroup.map(CgroupDirectory.init(path:)) }

    /// Starts following the app `launched`, which the daemon `daemonPID` started from `argv` with its output in
    /// `logPath`.
    init(
        _ launched: AppInfo, argv: [String], daemonPID: pid_t, logPath: String, transcript: Transcript
    ) throws(DemoFailure) {
        name = launched.name
        self.argv = argv
        self.launched = launched
        let pid = pid_t(launched.pid)
        var opened: PidFDHolder?
        if let pidFD = try? PidFD.open(pid: pid) {
            opened = PidFDHolder(pidFD)
            // Until it exits the daemon does not reap it, so while it runs its pid is its own: a child of the
            // daemon's now is the process the daemon launched.
            if (try? ProcFS().stat(pid).parentPID) != daemonPID { opened = nil }
        }
        process = opened
        let file: FileDescriptor
        let watch: FileChangeWatch
        do throws(Errno) {
            file = try FileDescriptor.open(logPath, .readOnly)
            do throws(Errno) {
                watch = try FileChangeWatch(path: logPath)
            } catch {
                try? file.close()
                throw error
            }
        } catch {
            throw DemoFailure("cannot follow \(name)'s output in \(logPath), where bgtaskd --log-dir puts it: \(error)")
        }
        let isStopping = StopFlag()
        self.isStopping = isStopping
        let quoted = QuotedLines(source: name, lines: lines, transcript: transcript)
        let process = process
        let thread = Thread {
            Self.follow(file, watch: watch, until: process, or: isStopping, into: quoted)
        }
        thread.name = "bgtask-demo-\(name)"
        thread.start()
    }

    /// Reads the file to its end, then waits for it to grow, until the process has exited (and the rest is read) or
    /// the demo stops following; then closes everything and the feed.
    private static func follow(
        _ file: FileDescriptor, watch: FileChangeWatch, until process: PidFDHolder?, or isStopping: StopFlag,
        into quoted: QuotedLines
    ) {
        var quoted = quoted
        while true {
            // Checked before reading, so what the app wrote before it exited is read in this round.
            let isOver = (process?.hasExited ?? true) || isStopping.isSet
            while let chunk = try? file.read(upTo: 4_096), !chunk.isEmpty {
                quoted.append(chunk)
            }
            if isOver { break }
            // A slice, not forever: the process's exit and the stop flag are checked between waits.
            if (try? watch.wait(timeout: .milliseconds(100))) == nil { break }
        }
        try? watch.close()
        try? file.close()
        quoted.finish()
    }

    /// Whether the process has exited.
    var hasExited: Bool {
        process?.hasExited ?? true
    }

    /// How `end(grace:)` found or left the process.
    enum Ending {
        /// It had ended before.
        case alreadyEnded
        /// The demo ended it now (its parent, the daemon, reaps it).
        case ended(Signal)
        /// It could not be ended; its lifetime, or losing the daemon, ends it.
        case stillRunning
    }

    /// Ends the process, whatever its state: its cgroup thawed, SIGTERM and SIGCONT, then SIGKILL (to all of its
    /// cgroup, where it has one) if it is still there after `grace`; and stops following its output. Never throws:
    /// this is the clean-up.
    func end(grace: Duration = .seconds(2)) -> Ending {
        defer { isStopping.set() }
        guard let pidFD = process?.pidFD, (try? pidFD.hasExited) == false else { return .alreadyEnded }
        // A frozen task acts on no signal until thawed; SIGCONT undoes a SIGSTOP.
        try? cgroup?.setFrozen(false)
        try? pidFD.sendSignal(.terminate)
        try? pidFD.sendSignal(.continue)
        if (try? pidFD.waitForExit(timeout: grace)) == true { return .ended(.terminate) }
        try? pidFD.sendSignal(.kill)
        _ = try? cgroup?.killEverything()
        // SIGKILL acts at once; the bound only guards against a kernel that never reports it.
        guard (try? pidFD.waitForExit(timeout: .seconds(5))) == true else { return .stillRunning }
        return .ended(.kill)
    }

    deinit {
        isStopping.set()
    }
}

/// A pidfd held by the app and its follower thread, closed once neither needs it.
final class PidFDHolder: Sendable {
    let pidFD: PidFD

    init(_ pidFD: PidFD) {
        self.pidFD = pidFD
    }

    /// Whether the process has exited (a zombie counts); true when that cannot be told.
    var hasExited: Bool { (try? pidFD.hasExited) ?? true }

    deinit {
        try? pidFD.close()
    }
}

/// A flag one thread sets and another reads: an atomic, in a class so that both can hold it.
final class StopFlag: Sendable {
    private let value = Atomic<Bool>(false)

    var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }

    func set() {
        value.store(true, ordering: .sequentiallyConsistent)
    }
}
