// Starts child processes with posix_spawn and hands back a pidfd, so they are tracked without PID races.
import CPOSIX
import Glibc

/// How a child's standard stream is set up.
public enum StandardStream: Sendable, Hashable {
    /// The daemon's own descriptor (fd 0, 1 or 2) is inherited.
    case inherit
    /// `/dev/null`, opened read-only for input and write-only for output.
    case nullDevice
    /// A descriptor of ours, duplicated onto the stream; it stays open in the parent.
    case fileDescriptor(FileDescriptor)
}

/// Flags of `SpawnOptions`.
public struct SpawnFlags: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// The child leads a new process group (`setpgid(0, 0)`), so the freezer's fallback can stop the
    /// whole app with one `kill(-pgid)` without touching the daemon's group.
    public static let newProcessGroup = SpawnFlags(rawValue: 1 << 0)
    /// The child starts a new session (`setsid()`), detached from any controlling terminal. Implies a new
    /// process group.
    public static let newSession = SpawnFlags(rawValue: 1 << 1)
}

/// What `ProcessSpawner.spawn` does in the child before `exec`.
public struct SpawnOptions: Sendable, Hashable {
    /// New process group, new session.
    public var flags: SpawnFlags = []
    /// Standard input; `/dev/null` by default so a child never reads the daemon's input.
    public var standardInput: StandardStream = .nullDevice
    /// Standard output.
    public var standardOutput: StandardStream = .inherit
    /// Standard error.
    public var standardError: StandardStream = .inherit
    /// The environment as `NAME=value` strings; `nil` passes the daemon's own environment.
    public var environment: [String]?
    /// The working directory; `nil` keeps the daemon's.
    public var workingDirectory: String?

    /// Defaults: stdin from `/dev/null`, stdout and stderr inherited, same environment and directory.
    public init(
        flags: SpawnFlags = [],
        standardInput: StandardStream = .nullDevice,
        standardOutput: StandardStream = .inherit,
        standardError: StandardStream = .inherit,
        environment: [String]? = nil,
        workingDirectory: String? = nil
    ) {
        self.flags = flags
        self.standardInput = standardInput
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.environment = environment
        self.workingDirectory = workingDirectory
    }
}

/// How a child ended.
public enum ExitStatus: Hashable, Sendable, CustomStringConvertible {
    /// It called `exit(code)` (or returned from `main`).
    case exited(Int32)
    /// A signal ended it (`SIGKILL`, `SIGSEGV`, ...), with or without a core dump.
    case signaled(Signal)

    public var description: String {
        switch self {
        case .exited(let code): "exited with status \(code)"
        case .signaled(let signal): "killed by \(signal.name)"
        }
    }
}

/// A child started by `ProcessSpawner`: its PID and a pidfd opened before anyone could reap it.
public struct SpawnedProcess: Hashable, Sendable, CustomStringConvertible {
    /// The child's process id.
    public var pid: pid_t { pidFD.pid }
    /// The pidfd; readable once the child exits. The owner closes it after reaping.
    public let pidFD: PidFD

    /// Wraps the pidfd of a child started elsewhere (the launcher's clone).
    package init(pidFD: PidFD) {
        self.pidFD = pidFD
    }

    public var description: String { "process \(pid)" }

    /// Blocks until the child exits, reaps it (`waitid(P_PIDFD, WEXITED)`) and returns how it ended.
    public func waitForExit() throws(Errno) -> ExitStatus {
        switch try wait(options: WEXITED) {
        case .exited(let status)?: return status
        default:
            // Only WEXITED was asked for and WNOHANG was not: waitid reports an exit or fails.
            throw Errno(rawValue: EPROTO, operation: "waitid(P_PIDFD, \(pid)) returned no exit")
        }
    }

    /// Reaps the child if it has exited, without blocking (`WNOHANG`); nil while it runs. Use after the
    /// event loop reports the pidfd readable.
    public func exitStatusIfExited() throws(Errno) -> ExitStatus? {
        switch try wait(options: WEXITED | WNOHANG) {
        case .exited(let status)?: return status
        default: return nil
        }
    }

    /// Blocks until the child stops, continues or exits (`WSTOPPED | WCONTINUED | WEXITED`); an exit is
    /// reaped. Confirms that a `SIGSTOP` or `SIGCONT` took effect, without looking at `/proc`.
    public func waitForChange() throws(Errno) -> ProcessChange {
        guard let change = try wait(options: WEXITED | WSTOPPED | WCONTINUED) else {
            throw Errno(rawValue: EPROTO, operation: "waitid(P_PIDFD, \(pid)) returned no change")
        }
        return change
    }

    private func wait(options: Int32) throws(Errno) -> ProcessChange? {
        var code: Int32 = 0
        var status: Int32 = 0
        var reportedPID: pid_t = 0
        _ = try systemCall("waitid(P_PIDFD, \(pid))") {
            bgtask_waitid_pidfd(pidFD.fileDescriptor.rawValue, options, &code, &status, &reportedPID)
        }
        if reportedPID == 0 { return nil }  // WNOHANG and nothing happened yet.
        func signal() throws(Errno) -> Signal {
            guard let signal = Signal(rawValue: status) else {
                throw Errno(rawValue: EPROTO, operation: "waitid(P_PIDFD, \(pid)) reported signal \(status)")
            }
            return signal
        }
        switch code {
        case Int32(CLD_EXITED): return .exited(.exited(status))
        case Int32(CLD_KILLED), Int32(CLD_DUMPED): return .exited(.signaled(try signal()))
        case Int32(CLD_STOPPED), Int32(CLD_TRAPPED): return .stopped(try signal())
        case Int32(CLD_CONTINUED): return .continued
        default: throw Errno(rawValue: EPROTO, operation: "waitid(P_PIDFD, \(pid)) reported code \(code)")
        }
    }
}

/// A state change of a child, as `waitid` reports it.
public enum ProcessChange: Hashable, Sendable {
    /// It ended (and was reaped).
    case exited(ExitStatus)
    /// A signal stopped it (`SIGSTOP`, `SIGTSTP`, ...).
    case stopped(Signal)
    /// `SIGCONT` resumed it.
    case continued
}

/// Starts programs with `posix_spawnp(3)` (a vfork-like clone: cheap even for a large daemon).
public enum ProcessSpawner {
    /// Starts `arguments[0]`, looked up in `PATH` unless it contains a slash, with `arguments` as its argv.
    ///
    /// The child gets an empty signal mask and default signal dispositions (the daemon blocks signals for
    /// its event loop, and a blocked `SIGTERM` would make the child unkillable by a polite stop), and no
    /// descriptor of the daemon's beyond 0, 1 and 2. Fails with the `posix_spawnp` error when the program
    /// cannot be found or executed.
    public static func spawn(_ arguments: [String], options: SpawnOptions = SpawnOptions()) throws(Errno)
        -> SpawnedProcess
    {
        guard let program = arguments.first, !program.isEmpty else {
            throw Errno(rawValue: EINVAL, operation: "posix_spawnp(empty argv)")
        }
        let operation = "posix_spawnp(\(program))"
        var actions = posix_spawn_file_actions_t()
        _ = try systemCall(operation, convention: .returnsErrorNumber) {
            posix_spawn_file_actions_init(&actions)
        }
        defer { posix_spawn_file_actions_destroy(&actions) }
        var attributes = posix_spawnattr_t()
        _ = try systemCall(operation, convention: .returnsErrorNumber) { posix_spawnattr_init(&attributes) }
        defer { posix_spawnattr_destroy(&attributes) }

        let streams: [(StandardStream, Int32, Int32)] = [
            (options.standardInput, 0, O_RDONLY),
            (options.standardOutput, 1, O_WRONLY),
            (options.standardError, 2, O_WRONLY),
        ]
        for (stream, target, nullFlags) in streams {
            switch stream {
            case .inherit:
                break
            case .nullDevice:
                _ = try systemCall(operation, convention: .returnsErrorNumber) {
                    posix_spawn_file_actions_addopen(&actions, target, "/dev/null", nullFlags, 0)
                }
            case .fileDescriptor(let fd):
                // dup2 onto the same number is a no-op that would leave FD_CLOEXEC set; glibc clears the
                // flag in that case (since 2.29), which is what we want.
                _ = try systemCall(operation, convention: .returnsErrorNumber) {
                    posix_spawn_file_actions_adddup2(&actions, fd.rawValue, target)
                }
            }
        }
        if let directory = options.workingDirectory {
            _ = try systemCall(operation, convention: .returnsErrorNumber) {
                bgtask_spawn_add_chdir(&actions, directory)
            }
        }
        _ = try systemCall(operation, convention: .returnsErrorNumber) {
            bgtask_spawn_add_close_from(&actions, 3)
        }

        var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        if options.flags.contains(.newSession) {
            flags |= BGTASK_POSIX_SPAWN_SETSID
        } else if options.flags.contains(.newProcessGroup) {
            flags |= Int32(POSIX_SPAWN_SETPGROUP)
            _ = try systemCall(operation, convention: .returnsErrorNumber) {
                posix_spawnattr_setpgroup(&attributes, 0)
            }
        }
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        _ = try systemCall(operation, convention: .returnsErrorNumber) {
            posix_spawnattr_setsigmask(&attributes, &emptyMask)
        }
        _ = try systemCall(operation, convention: .returnsErrorNumber) {
            posix_spawnattr_setsigdefault(&attributes, &allSignals)
        }
        _ = try systemCall(operation, convention: .returnsErrorNumber) {
            posix_spawnattr_setflags(&attributes, Int16(flags))
        }

        var pid: pid_t = 0
        _ = try systemCall(operation, convention: .returnsErrorNumber) {
            withCStringArray(arguments) { argv in
                if let environment = options.environment {
                    return withCStringArray(environment) { envp in
                        posix_spawnp(&pid, program, &actions, &attributes, argv, envp)
                    }
                }
                return posix_spawnp(&pid, program, &actions, &attributes, argv, environ)
            }
        }
        // Race-free: the child is ours and unreaped, so its PID cannot be reused before this call.
        do throws(Errno) {
            return SpawnedProcess(pidFD: try PidFD.open(pid: pid))
        } catch {
            // Without a pidfd the child cannot be tracked; do not leave it running or unreaped.
            kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            throw error
        }
    }
}

/// Calls `body` with a NULL-terminated `char *[]` built from `strings`, valid only during the call.
package func withCStringArray<Result>(
    _ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> Result
) -> Result {
    // strdup copies each string into C memory that stays put for the whole call; freed right after.
    // It returns nil only when malloc fails, where Swift's own allocations already trap.
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return body(pointers)
}
