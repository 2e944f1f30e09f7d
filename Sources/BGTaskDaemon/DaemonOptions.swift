// bgtaskd's command line: where to listen, which configuration to read, and what to do.

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
    }

    /// What to do.
    public var mode: Mode = .serve
    /// The socket path given with `--socket`, if any.
    public var socketPath: String?
    /// Run as a per-user instance (`--user`): socket and configuration under the user's directories.
    public var isUserInstance = false
    /// The configuration file given with `--config`, if any.
    public var configurationPath: String?

    /// The usage text.
    public static let help = """
        usage: bgtaskd [--socket PATH] [--user] [--config PATH] [--dump-config] [--version] [--help]

        iOS-style background execution for Linux apps: leases, expiration handlers, suspension of
        apps whose work is done, and memory reclamation, over Varlink (\(LifecycleInterface.name)).

          --socket PATH    listen on PATH (default: $RUNTIME_DIRECTORY/\(LifecycleInterface.name), else
                           /run/bgtaskd/\(LifecycleInterface.name); with --user,
                           $XDG_RUNTIME_DIR/bgtaskd/\(LifecycleInterface.name)). A socket passed by
                           systemd (LISTEN_FDS) is used instead when present.
          --user           run as a per-user instance (socket and configuration in the user's directories)
          --config PATH    read PATH instead of /etc/bgtaskd/bgtaskd.conf (drop-ins in PATH.d/, per-app
                           files in apps.d/ beside it); with --user the default is
                           $XDG_CONFIG_HOME/bgtaskd/bgtaskd.conf
          --dump-config    print the effective configuration and exit (1 if it has errors)
          --version        print the version and exit
          --help           print this help and exit

        Signals: SIGTERM and SIGINT stop (every stopped app is resumed first); SIGHUP reloads the
        configuration. Exit status: 0 on a clean stop, 1 on a failure to start or run, 64 on bad usage.
        """

    /// A command-line mistake, reported with the usage and exit status 64.
    public struct UsageError: Error, Equatable, CustomStringConvertible {
        /// What was wrong.
        public var message: String
        public var description: String { message }
    }

    /// Parses `arguments` (without the program name).
    public static func parse(_ arguments: [String]) throws(UsageError) -> DaemonOptions {
        var options = DaemonOptions()
        var index = 0
        func value(for option: String, inline: String?) throws(UsageError) -> String {
            if let inline { return inline }
            index += 1
            guard index < arguments.count, !arguments[index].isEmpty else {
                throw UsageError(message: "option \(option) needs a value")
            }
            return arguments[index]
        }
        while index < arguments.count {
            let argument = arguments[index]
            let parts = argument.split(separator: "=", maxSplits: 1).map(String.init)
            let name = parts[0]
            let inline = parts.count == 2 ? parts[1] : nil
            switch name {
            case "--socket": options.socketPath = try value(for: name, inline: inline)
            case "--config": options.configurationPath = try value(for: name, inline: inline)
            case "--user" where inline == nil: options.isUserInstance = true
            case "--dump-config" where inline == nil: options.mode = .dumpConfiguration
            case "--version" where inline == nil: options.mode = .version
            case "--help", "-h": options.mode = .help
            default: throw UsageError(message: "unknown argument \"\(argument)\"")
            }
            index += 1
        }
        return options
    }

    /// The socket to listen on, from the options and the environment.
    public func resolvedSocketPath(environment: [String: String]) throws(UsageError) -> String {
        if let socketPath { return socketPath }
        let file = LifecycleInterface.name
        if isUserInstance {
            guard let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty else {
                throw UsageError(message: "--user needs XDG_RUNTIME_DIR (or give --socket PATH)")
            }
            return "\(runtime)/bgtaskd/\(file)"
        }
        if let runtime = environment["RUNTIME_DIRECTORY"]?.split(separator: ":").first, !runtime.isEmpty {
            return "\(runtime)/\(file)"
        }
        return "/run/bgtaskd/\(file)"
    }

    /// The configuration file to read, from the options and the environment.
    public func resolvedConfigurationPath(environment: [String: String]) -> String {
        if let configurationPath { return configurationPath }
        if isUserInstance {
            let base =
                environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
                ?? "\(environment["HOME"] ?? "")/.config"
            return "\(base)/bgtaskd/bgtaskd.conf"
        }
        return "/etc/bgtaskd/bgtaskd.conf"
    }
}
