// The options every subcommand accepts: which daemon to talk to (`--socket`, `--user`).
import BGTaskArguments
import BGTaskClient

/// The global options of a command line; `CommandContext.socketPath()` turns them into the daemon's socket.
public struct GlobalOptions: Hashable, Sendable {
    /// `--socket PATH`.
    public static let socket = OptionSpec(
        "socket", valueName: "PATH",
        help: "Talk to the daemon listening on this Unix socket.",
        defaultValue: "$\(DaemonSocket.environmentVariable), else \(DaemonSocket.systemPath)")
    /// `--user`.
    public static let user = FlagSpec(
        "user",
        help: "Talk to the user's own daemon (systemctl --user) at $XDG_RUNTIME_DIR/bgtaskd/\(DaemonSocket.fileName), "
            + "unless --socket or $\(DaemonSocket.environmentVariable) names another socket.")

    /// The global options that take a value.
    public static let options = [socket]
    /// The global flags.
    public static let flags = [user]
    /// `--socket` and `--user` each name the daemon: only one may be given.
    public static let exclusiveGroups = [[socket.name, user.name]]

    /// `--socket`, if given.
    public var socketPath: String?
    /// Whether `--user` was given.
    public var isUser: Bool

    /// Global options as given; none by default.
    public init(socketPath: String? = nil, isUser: Bool = false) {
        self.socketPath = socketPath
        self.isUser = isUser
    }

    /// The global options of a parsed command line.
    init(_ parsed: ParsedArguments) {
        self.init(socketPath: parsed.text(GlobalOptions.socket), isUser: parsed.isSet(GlobalOptions.user))
    }
}

extension FlagSpec {
    /// `--json`, on every command that prints state: the reply's fields as the interface names them.
    public static let json = FlagSpec(
        "json", help: "Print the daemon's reply as one line of JSON, with the field names of the interface.")
}
