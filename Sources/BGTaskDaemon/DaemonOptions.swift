// bgtaskd's command line: where to listen, which configuration to read, and what to do.

import BGTaskArguments
import BGTaskProtocol

/// The parsed command line of `bgtaskd`.
public struct DaemonOptions: Equatable, Sendable {
    /// What the invocation asks for.
    public enum Mode: Equatable, Sendable {
        /// Serve until stopped (the default).
        case serve
        /// Print the effective configuration and exit (`--dump-config`).
        case dumpConfiguration
        /// Print the help text and exit.
        case help
        /// Print the version and exit.
        case version
        /// Continue what the saved state says the daemon stopped, and exit (`--release-stopped`).
        case releaseStopped
    }

    /// What to do.
    public var mode: Mode = .serve
    /// The socket path given with `--socket`, if any.
    public var socketPath: String?
    /// Run as a per-user instance (`--user`): socket and configuration under the user's directories.
    public var isUserInstance = false
    /// The configuration file given with `--config`, if any.
    public var configurationPath: String?
    /// The state file given with `--state-file`, if any.
    public var statePath: String?
    /// The file of scheduled requests given with `--schedule-file`, if any.
    public var scheduledPath: String?
    /// The directory launched apps' output goes to (`--log-dir`), instead of the journal.
    public var logDirectory: String?

    /// `--socket PATH`.
    static let socket = OptionSpec(
        "socket", valueName: "PATH",
        help: "Listen on PATH. A socket passed by systemd (LISTEN_FDS) is used instead when present.",
        defaultValue: "$RUNTIME_DIRECTORY/\(LifecycleInterface.name), else /run/bgtaskd/\(LifecycleInterface.name); "
            + "with --user, $XDG_RUNTIME_DIR/bgtaskd/\(LifecycleInterface.name)")
    /// `--config PATH`.
    static let config = OptionSpec(
        "config", valueName: "PATH",
        help: "Read PATH (drop-ins in PATH.d/, per-app files in apps.d/ beside it).",
        defaultValue: "/etc/bgtaskd/bgtaskd.conf; with --user, $XDG_CONFIG_HOME/bgtaskd/bgtaskd.conf")
    /// `--state-file PATH`.
    static let stateFile = OptionSpec(
        "state-file", valueName: "PATH",
        help: "Save the apps' state in PATH as it changes and restore it on start, so a restart loses no lease.",
        defaultValue: "$RUNTIME_DIRECTORY/state.json, else state.json beside the socket")
    /// `--schedule-file PATH`.
    static let scheduleFile = OptionSpec(
        "schedule-file", valueName: "PATH",
        help: "Keep the scheduled requests in PATH, where they outlive reboots.",
        defaultValue: "$STATE_DIRECTORY/scheduled.json; else, with --socket, scheduled.json beside the socket; else "
            + "/var/lib/bgtaskd/scheduled.json, with --user $XDG_STATE_HOME/bgtaskd/scheduled.json")
    /// `--log-dir DIR`.
    static let logDirectory = OptionSpec(
        "log-dir", valueName: "DIR",
        help: "Write each launched app's output to DIR/NAME.log instead of the journal.",
        defaultValue: "the journal, tagged with the app's name; the daemon's standard error without one")
    /// `--release-stopped`.
    static let releaseStopped = FlagSpec(
        "release-stopped",
        help: "Continue every process the state file says bgtaskd stopped, then exit (the service's ExecStopPost=).")
    /// `--user`.
    static let user = FlagSpec(
        "user", help: "Run as a per-user instance (socket and configuration in the user's directories).")
    /// `--dump-config`.
    static let dumpConfig = FlagSpec(
        "dump-config",
        help: "Print the files read and refused, then the effective configuration, and exit (1 if it has errors or "
            + "refused a file).")

    /// The command line as data: the help and the parser both come from it.
    public static let spec = ToolSpec(
        name: "bgtaskd", version: Manager.version,
        abstract: "iOS-style background execution for Linux apps",
        discussion: """
            Leases, expiration handlers, suspension of apps whose work is done, and memory reclamation, over Varlink \
            (\(LifecycleInterface.name)).

            Signals: SIGTERM and SIGINT stop (every stopped app is resumed first); SIGHUP reloads the \
            configuration. Exit status: 0 on a clean stop, 1 on a failure to start or run, 64 on bad usage.
            """,
        globalOptions: [socket, config, stateFile, scheduleFile, logDirectory],
        globalFlags: [user, dumpConfig, releaseStopped],
        exitStatuses: [
            ExitStatusSpec("0", "A clean stop."), ExitStatusSpec("1", "A failure to start or run."),
            ExitStatusSpec("64", "Bad usage."),
        ],
        seeAlso: ["bgtask(1)", "systemd.service(5)"])

    /// The help text (`--help`).
    public static var help: String { HelpFormatter.toolHelp(spec) }

    /// The text printed for a usage error: one line, the usage, and where to read more.
    public static func usageErrorText(_ error: UsageError) -> String {
        HelpFormatter.usageErrorText(error, tool: spec)
    }

    /// The environment does not give what the options need (`--user` without `XDG_RUNTIME_DIR`).
    public struct ResolutionError: Error, Equatable, CustomStringConvertible {
        /// What is missing.
        public var message: String
        public var description: String { message }
    }

    /// Parses `arguments` (without the program name).
    public static func parse(_ arguments: [String]) throws(UsageError) -> DaemonOptions {
        var options = DaemonOptions()
        switch try CommandLineParser(tool: spec).parse(arguments) {
        case .help:
            options.mode = .help
        case .version:
            options.mode = .version
        case .tool(let parsed), .command(_, let parsed):
            options.socketPath = parsed.text(socket)
            options.configurationPath = parsed.text(config)
            options.isUserInstance = parsed.isSet(user)
            options.statePath = parsed.text(stateFile)
            options.scheduledPath = parsed.text(scheduleFile)
            options.logDirectory = parsed.text(logDirectory)
            if parsed.isSet(dumpConfig) { options.mode = .dumpConfiguration }
            if parsed.isSet(releaseStopped) { options.mode = .releaseStopped }
        }
        return options
    }

    /// The socket to listen on, from the options and the environment.
    public func resolvedSocketPath(environment: [String: String]) throws(ResolutionError) -> String {
        if let socketPath { return socketPath }
        let file = LifecycleInterface.name
        if isUserInstance {
            guard let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty else {
                throw ResolutionError(message: "--user needs XDG_RUNTIME_DIR (or give --socket PATH)")
            }
            return "\(runtime)/bgtaskd/\(file)"
        }
        if let runtime = environment["RUNTIME_DIRECTORY"]?.split(separator: ":").first, !runtime.isEmpty {
            return "\(runtime)/\(file)"
        }
        return "/run/bgtaskd/\(file)"
    }

    /// The state file, from the options, the environment and the socket path: the service's runtime directory
    /// (which `RuntimeDirectoryPreserve=` keeps across restarts), else the socket's directory.
    public func resolvedStatePath(socketPath: String, environment: [String: String]) -> String {
        if let statePath { return statePath }
        if let runtime = environment["RUNTIME_DIRECTORY"]?.split(separator: ":").first, !runtime.isEmpty {
            return "\(runtime)/state.json"
        }
        return StateStore.directory(of: socketPath) + "/state.json"
    }

    /// The file of scheduled requests: the service's state directory (`StateDirectory=`), else, for an instance
    /// given its own socket (a test's, the demo's), beside that socket with the rest of its state, else the
    /// system's or the user's state directory. Unlike the runtime state, it outlives a reboot.
    public func resolvedScheduledPath(socketPath: String, environment: [String: String]) -> String {
        if let scheduledPath { return scheduledPath }
        if let state = environment["STATE_DIRECTORY"]?.split(separator: ":").first, !state.isEmpty {
            return "\(state)/scheduled.json"
        }
        if self.socketPath != nil { return StateStore.directory(of: socketPath) + "/scheduled.json" }
        if isUserInstance {
            return "\(Self.userDirectory("XDG_STATE_HOME", else: ".local/state", environment))/bgtaskd/scheduled.json"
        }
        return "/var/lib/bgtaskd/scheduled.json"
    }

    /// The configuration file to read, from the options and the environment.
    public func resolvedConfigurationPath(environment: [String: String]) -> String {
        if let configurationPath { return configurationPath }
        if isUserInstance {
            return "\(Self.userDirectory("XDG_CONFIG_HOME", else: ".config", environment))/bgtaskd/bgtaskd.conf"
        }
        return "/etc/bgtaskd/bgtaskd.conf"
    }

    /// The configuration root, the directory above which the trust rule checks nothing: the main file's directory,
    /// which is `/etc/bgtaskd`, `$XDG_CONFIG_HOME/bgtaskd` with `--user`, or that of `--config PATH` (`.` for a bare
    /// file name).
    public func resolvedConfigurationRoot(environment: [String: String]) -> String {
        let path = resolvedConfigurationPath(environment: environment)
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// A user's base directory as the XDG Base Directory specification has it: `$VARIABLE` when set and not empty,
    /// else `$HOME/fallback`.
    private static func userDirectory(_ variable: String, else fallback: String, _ environment: [String: String])
        -> String
    {
        environment[variable].flatMap { $0.isEmpty ? nil : $0 } ?? "\(environment["HOME"] ?? "")/\(fallback)"
    }
}
