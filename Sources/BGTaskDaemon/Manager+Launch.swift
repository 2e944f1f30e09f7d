// Managed apps (`Launch`): started by the daemon in cgroups of their own, watched as its children, and their
// cgroups removed once they are gone.

import BGTaskCore
import BGTaskProtocol
import BGTaskSystem
import Glibc

extension Manager {
    /// The most arguments, and bytes of them in all, a launch takes (the message itself is under MessageSizeMax).
    static let launchArgumentsMax = 1024
    /// How long the daemon keeps trying to remove an ended app's cgroups while something in them is still exiting.
    static let cgroupRemovalTimeout: Duration = .seconds(30)
    static let cgroupRemovalInterval: Duration = .milliseconds(100)

    /// `Launch`: starts `argv` as the managed app `name` and answers with the app, `notRunning` until its process
    /// registers.
    func launch(_ parameters: LaunchParameters, _ call: IncomingCall) throws -> CallOutcome<LaunchReply> {
        let name = parameters.name
        guard Self.isValidName(name) else { throw VarlinkError.invalidParameter(parameter: "name") }
        let argv = parameters.argv
        guard let program = argv.first, !program.isEmpty, argv.count <= Self.launchArgumentsMax,
            argv.allSatisfy({ !$0.utf8.contains(0) })
        else { throw VarlinkError.invalidParameter(parameter: "argv") }
        let credentials = call.credentials
        let uid = try launchUID(for: name, credentials: credentials)
        settleExitedHolder(of: name)
        try core.canLaunch(name: name, uid: uid)

        func refuse(_ reason: String) -> VarlinkError {
            logger.notice("cannot launch \(name) for uid \(credentials.uid): \(reason)", [.app(name)])
            return VarlinkError.launchFailed(app: name, reason: reason)
        }
        let searchPath = ProcessInfoEnvironment.value("PATH") ?? ProcessLauncher.defaultSearchPath
        guard let executable = ProcessLauncher.resolve(program, searchPath: searchPath) else {
            throw refuse(
                program.contains("/") ? "\(program) is not an executable file" : "no executable \(program) in PATH")
        }
        var user: LaunchUser?
        if uid != geteuid() {
            guard let found = try? UserDatabase.launchUser(for: uid) else {
                throw refuse("uid \(uid) has no user entry")
            }
            user = found
        }
        let cgroups: AppCgroups?
        do {
            cgroups =
                launchRoots.control == nil && launchRoots.memory == nil
                ? nil : try launchRoots.makeCgroups(name: name)
        } catch {
            throw refuse("cannot make its cgroup: \(error)")
        }
        if let owner = user, let cgroups {
            // The app may then make cgroups of its own below (a delegated subtree) and read its files.
            for cgroup in cgroups.all {
                for file in ["", "/cgroup.procs", "/cgroup.subtree_control", "/cgroup.threads"] {
                    _ = chown(cgroup.path + file, owner.uid, owner.gid)
                }
            }
        }
        let output = launchOutput(for: name)
        defer { if output.rawValue > 2 { try? output.close() } }
        let spec = LaunchSpec(
            program: executable, arguments: argv,
            environment: launchEnvironment(name: name, uid: uid, user: user, cgroups: cgroups),
            cgroupProcsFiles: cgroups?.all.map { $0.path + "/cgroup.procs" } ?? [], standardOutput: output,
            standardError: output, user: user, workingDirectory: user.map { Self.existingDirectory($0.home) } ?? "/")
        let child: SpawnedProcess
        do {
            child = try ProcessLauncher.launch(spec)
        } catch {
            _ = cgroups?.removeEmpty()
            throw refuse("\(error)")
        }
        // The child is ours and unreaped: its stat is its own.
        let startTime = (try? procFS.stat(child.pid).startTime) ?? 0
        let launched: (app: AppID, actions: [Action])
        do {
            launched = try core.appLaunched(
                name: name, process: ProcessIdentity(pid: child.pid, uid: uid),
                exitsOnSuspend: parameters.exitsOnSuspend, now: now)
        } catch {
            // Checked above, on this same loop iteration: cannot happen; undo all the same.
            _ = try? child.pidFD.sendSignal(.kill)
            _ = try? child.waitForExit()
            try? child.pidFD.close()
            cgroups?.killAll()
            _ = cgroups?.removeEmpty()
            throw error
        }
        let process = newTrackedProcess(pidFD: child.pidFD, uid: uid, startTime: startTime)
        process.cgroups = cgroups
        process.child = child
        let app = launched.app
        guard watchExit(of: process) else {
            // Fail closed: an app whose exit cannot be watched is not kept.
            _ = try? child.pidFD.sendSignal(.kill)
            cgroups?.killAll()
            return CallOutcome(actions: launched.actions + core.processExited(app, how: .exited, now: now))
        }
        process.apps.insert(app)
        processes[process.serial] = process
        processOfApp[app] = process
        memoryMonitor?.appsChanged()
        logger.notice(
            "launched \(name) as pid \(child.pid) (uid \(uid))"
                + (cgroups?.control.map { " in \($0.path)" } ?? " without a cgroup")
                + ": \(argv.joined(separator: " "))",
            [.app(name)])
        guard let info = appInfo(app) else { throw VarlinkError.noSuchApp(app: name) }
        return CallOutcome(reply: LaunchReply(app: info), actions: launched.actions)
    }

    /// `path` if it is a directory, else `/` (system users' homes, such as nobody's `/nonexistent`, often are not).
    private static func existingDirectory(_ path: String) -> String {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR ? path : "/"
    }

    /// The uid a launch of `name` runs as: the caller's; for root, the user `apps.d/NAME.conf` pins the name to.
    /// A daemon that is not root launches only as itself.
    private func launchUID(for name: String, credentials: PeerCredentials) throws -> uid_t {
        var uid = credentials.uid
        if let pinned = pinnedUsers[name] {
            if credentials.uid == 0, let pinnedUID = pinned {
                uid = pinnedUID
            } else if pinned != credentials.uid {
                logger.notice(
                    "denied Launch of \(name) to uid \(credentials.uid): the name is pinned to "
                        + "\(pinned.map { "uid \($0)" } ?? "a user that cannot be resolved") by apps.d/\(name).conf",
                    [.app(name)])
                throw VarlinkError.permissionDenied()
            }
        }
        if uid != geteuid() && geteuid() != 0 {
            logger.notice("denied Launch of \(name) as uid \(uid): bgtaskd runs as uid \(geteuid())", [.app(name)])
            throw VarlinkError.permissionDenied()
        }
        return uid
    }

    /// Where a launched app's output goes: a file under `--log-dir` (tests), else the journal under the app's name,
    /// else the daemon's own standard error.
    private func launchOutput(for name: String) -> FileDescriptor {
        if let directory = logDirectory {
            let safe = String(name.unicodeScalars.map { $0 == "/" || $0.value < 0x20 ? "_" : Character($0) })
            if let file = try? FileDescriptor.open(
                "\(directory)/\(safe).log", .writeOnly, options: [.create, .append], permissions: 0o640)
            {
                return file
            }
            logger.warning("cannot open \(directory)/\(safe).log; \(name)'s output goes to the journal")
        }
        return ProcessLauncher.journalStream(identifier: name) ?? .standardError
    }

    /// A launched app's environment: a clean one (none of the daemon's: its `NOTIFY_SOCKET`, `LISTEN_FDS`, ...),
    /// with what an app needs to find the daemon and learn of memory pressure.
    private func launchEnvironment(name: String, uid: uid_t, user: LaunchUser?, cgroups: AppCgroups?) -> [String] {
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

    // MARK: Ending

    /// How a managed app's process ended (the daemon is its parent: this reaps it); nil for other processes.
    func reapLaunched(_ process: TrackedProcess) -> ProcessExit? {
        guard let child = process.child else { return nil }
        process.child = nil
        switch try? child.exitStatusIfExited() {
        case .exited(let status)?: return .status(status)
        case .signaled(let signal)?: return .signal(signal.rawValue)
        case nil: return nil
        }
    }

    /// A managed app's process is gone: whatever is left in its cgroups is the app's and ends with it, and the
    /// cgroups are removed, now or, while something in them is still exiting, as soon as they are empty.
    func removeCgroups(of process: TrackedProcess) {
        guard let cgroups = process.cgroups else { return }
        process.cgroups = nil
        removeCgroups(cgroups)
    }

    /// Kills what is left in `cgroups` and removes them, now or once they are empty.
    func removeCgroups(_ cgroups: AppCgroups) {
        if cgroups.isPopulated { cgroups.killAll() }
        if cgroups.removeEmpty() { return }
        cgroupRemovals.append((cgroups, now + Self.cgroupRemovalTimeout))
        armCgroupRemovalTimer()
    }

    private func armCgroupRemovalTimer() {
        guard !cgroupRemovals.isEmpty else { return }
        do {
            if cgroupRemovalTimer == nil {
                cgroupRemovalTimer = try clock.makeTimer(name: "cgroup-removal", accuracy: .milliseconds(20)) {
                    [unowned self] in
                    self.retryCgroupRemovals()
                }
            }
            try cgroupRemovalTimer?.rearm(at: now + Self.cgroupRemovalInterval)
        } catch {
            logger.error("cannot schedule removing ended apps' cgroups: \(error)")
        }
    }

    private func retryCgroupRemovals() {
        let current = now
        cgroupRemovals = cgroupRemovals.filter { cgroups, deadline in
            if cgroups.removeEmpty() { return false }
            if current >= deadline {
                logger.error(
                    "cannot remove \(cgroups.all.map(\.path).joined(separator: ", ")): still not empty after "
                        + "\(Self.cgroupRemovalTimeout)")
                return false
            }
            cgroups.killAll()
            return true
        }
        armCgroupRemovalTimer()
    }
}

/// The daemon's environment, read once per lookup (`getenv`; the daemon never changes its own environment).
enum ProcessInfoEnvironment {
    static func value(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
