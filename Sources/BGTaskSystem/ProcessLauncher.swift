// Starts a managed app: in a new session, inside cgroups, as a given user, with a pidfd from clone3 (or clone) itself.
import BGTaskPOSIX
import CLauncher
import CSystemd
import Glibc

/// The user a launched app runs as: ids and the supplementary groups, resolved by the caller before the launch.
public struct LaunchUser: Hashable, Sendable {
    public var uid: uid_t
    public var gid: gid_t
    public var groups: [gid_t]
    /// Its home directory, the launched app's working directory ("/" when it has none).
    public var home: String
    public var name: String

    public init(uid: uid_t, gid: gid_t, groups: [gid_t], home: String, name: String) {
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.home = home
        self.name = name
    }
}

/// What `ProcessLauncher.launch` starts and how.
public struct LaunchSpec: Sendable {
    /// The program's absolute path (`ProcessLauncher.resolve`).
    public var program: String
    /// The argv, `arguments[0]` as given.
    public var arguments: [String]
    /// The environment as `NAME=value` strings.
    public var environment: [String]
    /// `cgroup.procs` files the child moves itself into before anything else runs.
    public var cgroupProcsFiles: [String]
    /// Where standard output and error go (the same descriptor for both is fine); input is `/dev/null`.
    public var standardOutput: FileDescriptor
    public var standardError: FileDescriptor
    /// The user to become; nil keeps the daemon's credentials.
    public var user: LaunchUser?
    /// The working directory.
    public var workingDirectory: String
    /// The child's `oom_score_adj`, written before it drops privileges (so a value below the daemon's own may be
    /// set where the daemon may lower it); nil leaves the one it inherits from the daemon.
    public var oomScoreAdjust: Int32?

    public init(
        program: String, arguments: [String], environment: [String], cgroupProcsFiles: [String],
        standardOutput: FileDescriptor, standardError: FileDescriptor, user: LaunchUser?, workingDirectory: String,
        oomScoreAdjust: Int32? = nil
    ) {
        self.program = program
        self.arguments = arguments
        self.environment = environment
        self.cgroupProcsFiles = cgroupProcsFiles
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.user = user
        self.workingDirectory = workingDirectory
        self.oomScoreAdjust = oomScoreAdjust
    }
}

/// Why a launch failed: the step in the child (or the parent's call) and the error number.
public struct LaunchError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What was being done: "exec /usr/bin/x", "joining its cgroup", "becoming uid 1000", ...
    public var step: String
    public var errno: Errno

    public var description: String { "\(step): \(errno.message)" }
}

/// Starts managed apps (`Launch`). Unlike `ProcessSpawner` (posix_spawn), the child must join cgroups and drop
/// privileges before `exec`, which posix_spawn cannot do; `bgtask_launch` (CLauncher) does it with raw system
/// calls in a fork-like clone3 child (clone where clone3 is refused), and reports a failure before `exec` through a
/// close-on-exec pipe, which the caller reads when it is ready (`LaunchHandshake`) rather than waiting for the child.
public enum ProcessLauncher {
    /// The search path used when the daemon has no `PATH`.
    public static let defaultSearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    /// `program` itself when it holds a slash, else the first executable regular file of that name in
    /// `searchPath`; nil when there is none.
    public static func resolve(_ program: String, searchPath: String) -> String? {
        func isExecutable(_ path: String) -> Bool {
            var info = stat()
            return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG && (info.st_mode & 0o111) != 0
        }
        if program.contains("/") { return isExecutable(program) ? program : nil }
        guard !program.isEmpty else { return nil }
        for directory in searchPath.split(separator: ":") where directory.hasPrefix("/") {
            let candidate = "\(directory)/\(program)"
            if isExecutable(candidate) { return candidate }
        }
        return nil
    }

    /// Starts `spec` and returns at once, the child cloned but not yet exec'd: whether it execs is for the caller
    /// to learn from the handshake (`LaunchHandshake.outcome()`), without waiting on a child that may take its
    /// time (a hung home directory, a frozen cgroup). Throws when the child cannot be cloned.
    public static func start(_ spec: LaunchSpec) throws(LaunchError) -> LaunchHandshake {
        var cgroupFiles: [FileDescriptor] = []
        defer { for file in cgroupFiles { try? file.close() } }
        for path in spec.cgroupProcsFiles {
            do {
                cgroupFiles.append(try FileDescriptor.open(path, .writeOnly))
            } catch {
                throw LaunchError(step: "opening \(path)", errno: error)
            }
        }
        let input: FileDescriptor
        let pipe: (readEnd: FileDescriptor, writeEnd: FileDescriptor)
        do {
            input = try FileDescriptor.open("/dev/null", .readOnly)
        } catch {
            throw LaunchError(step: "opening /dev/null", errno: error)
        }
        defer { try? input.close() }
        do {
            pipe = try FileDescriptor.pipe()
        } catch {
            throw LaunchError(step: "making a pipe", errno: error)
        }
        do {
            try pipe.readEnd.setNonBlocking()
        } catch {
            try? pipe.readEnd.close()
            try? pipe.writeEnd.close()
            throw LaunchError(step: "making the pipe non-blocking", errno: error)
        }

        var pidFD: Int32 = -1
        var cloneCall = BGTASK_CLONE3
        let groups = spec.user?.groups ?? []
        let procsFDs = cgroupFiles.map(\.rawValue)
        let pid: pid_t = withCStringArray(spec.arguments) { argv in
            withCStringArray(spec.environment) { envp in
                procsFDs.withUnsafeBufferPointer { procs in
                    groups.withUnsafeBufferPointer { groupIDs in
                        var launch = bgtask_launch_spec()
                        launch.cgroup_procs = procs.baseAddress
                        launch.cgroup_count = Int32(procs.count)
                        launch.standard_input = input.rawValue
                        launch.standard_output = spec.standardOutput.rawValue
                        launch.standard_error = spec.standardError.rawValue
                        launch.change_user = spec.user == nil ? 0 : 1
                        launch.uid = spec.user?.uid ?? 0
                        launch.gid = spec.user?.gid ?? 0
                        launch.groups = groupIDs.baseAddress
                        launch.group_count = Int32(groupIDs.count)
                        launch.error_pipe = pipe.writeEnd.rawValue
                        return spec.program.withCString { program in
                            spec.workingDirectory.withCString { directory in
                                launch.path = program
                                launch.directory = directory
                                launch.change_oom_score_adj = spec.oomScoreAdjust == nil ? 0 : 1
                                launch.oom_score_adj = spec.oomScoreAdjust ?? 0
                                return argv.withUnsafeBufferPointer { argvPointer in
                                    envp.withUnsafeBufferPointer { envpPointer in
                                        launch.argv = UnsafePointer(argvPointer.baseAddress)
                                        launch.envp = UnsafePointer(envpPointer.baseAddress)
                                        return bgtask_launch(&launch, &pidFD, &cloneCall)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        let launchErrno = errno
        // Only the child holds the write end now: the pipe reads end of file once it has exec'd or exited.
        try? pipe.writeEnd.close()
        guard pid > 0 else {
            try? pipe.readEnd.close()
            let call = cloneCall == BGTASK_CLONE ? "clone (clone3 refused)" : "clone3"
            throw LaunchError(step: call, errno: Errno(rawValue: launchErrno, operation: call))
        }
        return LaunchHandshake(
            child: SpawnedProcess(pidFD: PidFD(fileDescriptor: FileDescriptor(rawValue: pidFD), pid: pid)),
            pipe: pipe.readEnd, steps: LaunchSteps(spec))
    }

    /// A journal stream for a launched app's output, tagged with `identifier` (`SyslogIdentifier=`); nil when
    /// there is no journal (not under systemd, or journald not running).
    public static func journalStream(identifier: String) -> FileDescriptor? {
        let fd = bgtask_journal_stream(identifier, LOG_INFO)
        return fd >= 0 ? FileDescriptor(rawValue: fd) : nil
    }
}

/// A launched child between its clone and its exec, and the pipe through which it tells how that went: end of file
/// once it has exec'd (the pipe closes on exec), or the step that failed and its error number, written just before
/// it exits with status 127.
public struct LaunchHandshake: Sendable {
    /// The child: its pid and the pidfd from clone3 or clone. The owner reaps it and closes the pidfd.
    public let child: SpawnedProcess
    /// The pipe's read end, non-blocking: watch it for readability, then ask `outcome()`. The owner closes it
    /// (`close()`).
    public let pipe: FileDescriptor
    let steps: LaunchSteps

    /// How far the child has got.
    public enum Outcome: Sendable, Equatable {
        /// Nothing to read yet: it is still on its way to exec.
        case pending
        /// It exec'd the program.
        case executed
        /// It failed before exec and is exiting (or has exited) with status 127; it is not reaped.
        case failed(LaunchError)
    }

    /// Reads the pipe without blocking.
    public func outcome() -> Outcome {
        var report: [Int32] = [0, 0]
        let read = report.withUnsafeMutableBytes { buffer in
            Result { () throws(Errno) -> Int in try pipe.read(into: buffer) }
        }
        switch read {
        case .success(0):
            return .executed
        case .success(let count):
            // The report is 8 bytes, written at once (a pipe write under PIPE_BUF is never split).
            let number = count == 8 ? report[1] : EPROTO
            return .failed(
                LaunchError(step: steps.description(report[0]), errno: Errno(rawValue: number, operation: "launch")))
        case .failure(let error) where error == .wouldBlock:
            return .pending
        case .failure(let error):
            return .failed(LaunchError(step: "reading how \(steps.program) started", errno: error))
        }
    }

    /// Closes the pipe (the child is left alone).
    public func close() {
        // A failed close still releases the descriptor (close(2) never leaves it open on Linux).
        try? pipe.close()
    }
}

/// What each step the child reports stands for, in words naming the launch's program, user and directory.
struct LaunchSteps: Sendable {
    let program: String
    let uid: uid_t
    let gid: gid_t
    let workingDirectory: String
    let oomScoreAdjust: Int32?

    init(_ spec: LaunchSpec) {
        program = spec.program
        uid = spec.user?.uid ?? 0
        gid = spec.user?.gid ?? 0
        workingDirectory = spec.workingDirectory
        oomScoreAdjust = spec.oomScoreAdjust
    }

    func description(_ step: Int32) -> String {
        switch UInt32(bitPattern: step) {
        case BGTASK_LAUNCH_SIGNALS.rawValue: "resetting its signals"
        case BGTASK_LAUNCH_SESSION.rawValue: "starting a session"
        case BGTASK_LAUNCH_CGROUP.rawValue: "joining its cgroups"
        case BGTASK_LAUNCH_GROUPS.rawValue: "setting its groups"
        case BGTASK_LAUNCH_GID.rawValue: "becoming gid \(gid)"
        case BGTASK_LAUNCH_UID.rawValue: "becoming uid \(uid)"
        case BGTASK_LAUNCH_STREAMS.rawValue: "setting up its standard streams"
        case BGTASK_LAUNCH_DIRECTORY.rawValue: "changing to \(workingDirectory)"
        case BGTASK_LAUNCH_EXEC.rawValue: "executing \(program)"
        case BGTASK_LAUNCH_DESCRIPTORS.rawValue: "marking the daemon's other descriptors close-on-exec"
        case BGTASK_LAUNCH_OOM_SCORE_ADJ.rawValue:
            "setting its oom_score_adj to \(oomScoreAdjust.map(String.init) ?? "the app's")"
        default: "starting \(program)"
        }
    }
}

extension UserDatabase {
    /// Everything a launch needs of `uid`: primary group, supplementary groups, home and name; nil without an
    /// entry (a launch as a uid with no user entry is refused rather than guessed).
    public static func launchUser(for uid: uid_t) throws(Errno) -> LaunchUser? {
        guard let entry = try account(for: uid) else { return nil }
        var count: Int32 = 32
        while true {
            var groups = [gid_t](repeating: 0, count: Int(count))
            let previousCount = count
            if getgrouplist(entry.name, entry.gid, &groups, &count) >= 0 {
                return LaunchUser(
                    uid: uid, gid: entry.gid, groups: Array(groups.prefix(Int(count))), home: entry.home,
                    name: entry.name)
            }
            guard count > previousCount else {
                throw Errno(rawValue: ERANGE, operation: "getgrouplist(\(entry.name))")
            }
        }
    }
}
