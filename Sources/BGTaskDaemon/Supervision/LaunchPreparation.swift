// A forked managed app's launch up to its clone, done on the launcher's thread because any step may block: the program
// looked up in PATH, the user in the user database (NSS), the home directory checked, the output opened, the cgroups
// made and the child cloned.

import BGTaskPOSIX
import BGTaskSystem
import Glibc
import Synchronization

/// What the loop decided about a launch (`Manager.launch`); the rest is looked up on the launcher's thread.
struct LaunchRequest: Sendable {
    let name: String
    /// The program (looked up in PATH when it has no slash) and its arguments; never empty.
    let argv: [String]
    let uid: uid_t
    /// Whether the app runs as another user than the daemon: its user entry is then looked up and switched to.
    let changesUser: Bool
    /// `Launch`'s `exitsOnSuspend`, for the core once the app is launched.
    let exitsOnSuspend: Bool?
    /// Where the app's output goes instead of the journal: `NAME.log` in it (`--log-dir`, tests).
    let logDirectory: String?
    /// The daemon's socket, for the app's `BGTASK_SOCKET`.
    let socketPath: String
    /// The app's own `oom_score_adj` (`OOMScoreAdjust=` of its `apps.d` file, else 0), never the daemon's.
    let oomScoreAdjust: Int32
}

extension LaunchRequest {
    /// What to tell the operator when the app launched as `pid` does not run with its `oomScoreAdjust`: the
    /// kernel refuses to lower a process's `oom_score_adj` below the floor it inherited without CAP_SYS_RESOURCE,
    /// and the launcher's child then takes the nearest value it allows (a user manager, as systemd does for
    /// `OOMScoreAdjust=`, keeps its own): higher than asked, so the app is less shielded than asked, never more.
    /// Nil when it runs with its own, or the value cannot be read.
    func oomScoreAdjustNote(pid: pid_t, procFS: ProcFS) -> String? {
        guard let actual = try? procFS.oomScoreAdjust(pid), actual != oomScoreAdjust else { return nil }
        return "\(name) runs with oom_score_adj \(actual), not its OOMScoreAdjust=\(oomScoreAdjust): lowering it "
            + "below the value it inherits needs CAP_SYS_RESOURCE"
    }
}

/// A child cloned for a launch, not yet known to have exec'd: its handshake and what was made for it.
struct StartedLaunch: Sendable {
    let handshake: LaunchHandshake
    let cgroups: AppCgroups?
    /// The child's start time in clock ticks (`/proc/PID/stat`), read while it is ours and unreaped.
    let startTime: UInt64
    /// The program's path as found in PATH.
    let executable: String

    var child: SpawnedProcess { handshake.child }
}

/// What the launcher's thread made of a request.
struct LaunchPreparation: Sendable {
    enum Result: Sendable {
        /// The child is cloned; whether it execs is for the loop to read from the handshake.
        case started(StartedLaunch)
        /// Nothing is left of it; why, for people.
        case refused(String)
    }

    /// The launch's number (`AppLauncher`).
    let serial: Int
    let result: Result
    /// What went less well than it should, for the loop to log (this thread logs nothing).
    let warnings: [String]
}

extension LaunchRequest {
    /// Does the launch's blocking work, then makes the cgroups under `roots` and clones the child through `gate`
    /// (which refuses once the daemon stops, so no child or cgroup is made behind a stopping daemon's back). Runs on
    /// the launcher's thread.
    func prepare(serial: Int, roots: LaunchCgroupRoots, gate: LaunchGate, procFS: ProcFS) -> LaunchPreparation {
        var warnings: [String] = []
        let program = argv.first ?? ""
        let searchPath = ProcessInfoEnvironment.value("PATH") ?? ProcessLauncher.defaultSearchPath
        guard let executable = ProcessLauncher.resolve(program, searchPath: searchPath) else {
            let reason =
                program.contains("/") ? "\(program) is not an executable file" : "no executable \(program) in PATH"
            return LaunchPreparation(serial: serial, result: .refused(reason), warnings: warnings)
        }
        var user: LaunchUser?
        if changesUser {
            do {
                user = try UserDatabase.launchUser(for: uid)
            } catch {
                return LaunchPreparation(
                    serial: serial, result: .refused("cannot look up uid \(uid): \(error)"), warnings: warnings)
            }
            guard user != nil else {
                return LaunchPreparation(
                    serial: serial, result: .refused("uid \(uid) has no user entry"), warnings: warnings)
            }
        }
        let workingDirectory = user.map { Self.existingDirectory($0.home) } ?? "/"
        let output = openOutput(warnings: &warnings)
        defer { if output.rawValue > 2 { try? output.close() } }
        let result = gate.admit(serial: serial) { () -> LaunchPreparation.Result in
            start(
                executable: executable, user: user, workingDirectory: workingDirectory, output: output, roots: roots,
                procFS: procFS)
        }
        return LaunchPreparation(serial: serial, result: result ?? .refused("bgtaskd is stopping"), warnings: warnings)
    }

    /// Makes the cgroups and clones the child.
    private func start(
        executable: String, user: LaunchUser?, workingDirectory: String, output: FileDescriptor,
        roots: LaunchCgroupRoots, procFS: ProcFS
    ) -> LaunchPreparation.Result {
        let cgroups: AppCgroups?
        do {
            cgroups = roots.control == nil && roots.memory == nil ? nil : try roots.makeCgroups(name: name)
        } catch {
            return .refused("cannot make its cgroup: \(error)")
        }
        if let owner = user, let cgroups {
            // The app may then make cgroups of its own below (a delegated subtree) and read its files.
            for cgroup in cgroups.all {
                for file in ["", "/cgroup.procs", "/cgroup.subtree_control", "/cgroup.threads"] {
                    _ = chown(cgroup.path + file, owner.uid, owner.gid)
                }
            }
        }
        let spec = LaunchSpec(
            program: executable, arguments: argv, environment: environment(user: user, cgroups: cgroups),
            cgroupProcsFiles: cgroups?.all.map { $0.path + "/cgroup.procs" } ?? [], standardOutput: output,
            standardError: output, user: user, workingDirectory: workingDirectory, oomScoreAdjust: oomScoreAdjust)
        let handshake: LaunchHandshake
        do {
            handshake = try ProcessLauncher.start(spec)
        } catch {
            _ = cgroups?.removeEmpty()
            return .refused("\(error)")
        }
        // The child is ours and unreaped: its stat is its own.
        let startTime = (try? procFS.stat(handshake.child.pid).startTime) ?? 0
        return .started(
            StartedLaunch(handshake: handshake, cgroups: cgroups, startTime: startTime, executable: executable))
    }

    /// `path` if it is a directory, else `/` (system users' homes, such as nobody's `/nonexistent`, often are not).
    private static func existingDirectory(_ path: String) -> String {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR ? path : "/"
    }

    /// Where the app's output goes: a file under `logDirectory` (tests), else the journal under the app's name,
    /// else the daemon's own standard error.
    private func openOutput(warnings: inout [String]) -> FileDescriptor {
        if let directory = logDirectory {
            let safe = String(name.unicodeScalars.map { $0 == "/" || $0.value < 0x20 ? "_" : Character($0) })
            do {
                return try FileDescriptor.open(
                    "\(directory)/\(safe).log", .writeOnly, options: [.create, .append], permissions: 0o640)
            } catch {
                warnings.append("cannot open \(directory)/\(safe).log (\(error)); \(name)'s output goes to the journal")
            }
        }
        return ProcessLauncher.journalStream(identifier: name) ?? .standardError
    }

    /// The app's environment: a clean one (none of the daemon's: its `NOTIFY_SOCKET`, `LISTEN_FDS`, ...), with what
    /// an app needs to find the daemon and learn of memory pressure.
    private func environment(user: LaunchUser?, cgroups: AppCgroups?) -> [String] {
        var environment = [
            "PATH=" + (ProcessInfoEnvironment.value("PATH") ?? ProcessLauncher.defaultSearchPath),
            "BGTASK_SOCKET=" + socketPath, "BGTASK_APP_NAME=" + name,
        ]
        if let user {
            environment += ["HOME=" + user.home, "USER=" + user.name, "LOGNAME=" + user.name]
            let runtime = "/run/user/\(uid)"
            if access(runtime, F_OK) == 0 { environment.append("XDG_RUNTIME_DIR=" + runtime) }
        } else {
            for key in ["HOME", "USER", "LOGNAME", "XDG_RUNTIME_DIR"] {
                if let value = ProcessInfoEnvironment.value(key) { environment.append("\(key)=\(value)") }
            }
        }
        if let language = ProcessInfoEnvironment.value("LANG") { environment.append("LANG=" + language) }
        if let control = cgroups?.control, cgroups?.pressureFile != nil {
            // systemd's memory pressure protocol, on the app's own cgroup (MemoryPressureThresholdSec's default).
            environment += MemoryPressureWatch.environment(for: control).sorted { $0.key < $1.key }
                .map { "\($0.key)=\($0.value)" }
        }
        return environment
    }
}

/// The launcher thread's way to clone a child, open until the daemon stops. It keeps each child it let through until
/// the loop takes it over (`claim`), so a stop finds every child, even one whose news is still on its way to the loop.
final class LaunchGate: Sendable {
    private struct State {
        var isOpen = true
        /// Children cloned whose launch the loop has not taken over yet, by launch number.
        var unclaimed: [Int: StartedLaunch] = [:]
    }

    private let state = Mutex(State())

    /// Runs `start` (which makes cgroups and clones) unless the gate is closed, and keeps the child it started until
    /// `claim(_:)`; nil when closed. The lock is held throughout: `close()` waits for a start in progress.
    func admit(
        serial: Int, _ start: () -> LaunchPreparation.Result
    ) -> LaunchPreparation.Result? {
        state.withLock { state -> LaunchPreparation.Result? in
            guard state.isOpen else { return nil }
            let result = start()
            if case .started(let started) = result { state.unclaimed[serial] = started }
            return result
        }
    }

    /// The loop took over the child of launch `serial`.
    func claim(_ serial: Int) {
        _ = state.withLock { $0.unclaimed.removeValue(forKey: serial) }
    }

    /// Closes the gate for good (after a start in progress) and hands back the children the loop has not taken over.
    func close() -> [StartedLaunch] {
        state.withLock { state -> [StartedLaunch] in
            state.isOpen = false
            defer { state.unclaimed = [:] }
            return Array(state.unclaimed.values)
        }
    }
}
