// `bgtask launch NAME -- CMD...`: asks the daemon to start a command as a managed app of its own.
import BGTaskArguments
import BGTaskClient

/// Starts a command as a managed app (`Launch`), which must then register under its name.
public struct Launch: Subcommand {
    static let name = ArgumentSpec("NAME", help: "The name the app registers under; no live app may have it.")
    static let command = ArgumentSpec(
        "CMD", help: "The command to start, with its arguments; without a slash, found in the daemon's PATH.",
        isCommand: true)
    static let exitsOnSuspend = FlagSpec(
        "exits-on-suspend",
        help: "End the app instead of suspending it once its background work is done (default: the daemon's "
            + "ExitsOnSuspend).")

    public static let spec = CommandSpec(
        name: "launch",
        abstract: "Start a command as an app the daemon manages",
        discussion: """
            Asks the daemon to start CMD as the managed app NAME. A daemon systemd started has the service \
            manager start CMD as a transient unit of its own, app-bgtask-NAME-RANDOM.service in app.slice, its \
            output in the journal under NAME: nothing of the daemon's sandbox reaches the app, and restarting \
            the daemon leaves it running. Otherwise the daemon forks CMD itself, into a cgroup of its own where \
            it can make one. Either way the daemon freezes and kills the app through its cgroup where it has one \
            (and measures it there where the cgroup counts memory), and records how it exited (its status, or \
            the signal that ended it, in 'bgtask status NAME'). CMD runs with standard input from /dev/null and \
            without a shell, its words exactly as given: nothing expands a $ or a % in them. A CMD without a \
            slash is looked up in the daemon's PATH, not bgtask's (under a service manager older than systemd \
            250, in the manager's). The app must then register under NAME within LaunchTimeoutSec, or the \
            daemon kills it and records launch-timeout.

            The app runs as you. A NAME that the daemon's apps.d/NAME.conf pins to a user (User=) runs as that \
            user: root may launch it, anyone else is refused. At most 4 launches start at once: past that the \
            launch waits for a slot, which goes in turn to the users with the fewest launches starting, and \
            fails if none comes within LaunchTimeoutSec.

            Prints the app as launched: its name, its state (notRunning until it registers), its process id, and \
            its cgroup. With --json, prints the Launch reply, which names the unit too. Fails when a live app \
            already has NAME, and with a daemon too old to launch apps. Options end at CMD's first word: write \
            -- before CMD when it begins with a dash.
            """,
        arguments: [name, command],
        flags: [exitsOnSuspend, .json],
        examples: [
            ExampleSpec(
                "bgtask launch org.example.mail -- /usr/bin/mail-app --name org.example.mail",
                "Start the mail app under the daemon's management; it registers as org.example.mail."),
            ExampleSpec(
                "bgtask launch --exits-on-suspend org.example.sync -- sync-agent --once",
                "Start a sync agent that is ended, not suspended, once its work is done."),
        ]
    )

    /// The name the app will register under.
    public var name: String
    /// The command line to start.
    public var command: [String]
    /// `true` with `--exits-on-suspend`; nil leaves it to the daemon's `ExitsOnSuspend`.
    public var exitsOnSuspend: Bool?
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        name = try arguments.requiredText(Launch.name, command: Launch.spec.name)
        command = arguments.words(Launch.command)
        exitsOnSuspend = arguments.isSet(Launch.exitsOnSuspend) ? true : nil
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let client = try context.connect()
        defer { client.close() }
        let app: AppInfo
        do {
            app = try client.launch(name: name, argv: command, exitsOnSuspend: exitsOnSuspend)
        } catch {
            throw launchFailure(error)
        }
        try context.print(LaunchReply(app: app), json: json) { Rendering.launched($0.app) }
        return .success
    }

    /// A refused launch as one line, saying what to do where the refusal is about this command line.
    func launchFailure(_ error: ClientError) -> CommandFailure {
        switch error {
        case .lifecycle(.appExists):
            return CommandFailure("\(error); 'bgtask status \(name)' shows it, 'bgtask terminate \(name)' ends it")
        case .service(.methodNotImplemented), .service(.methodNotFound):
            return CommandFailure("\(error): this bgtaskd cannot launch apps; upgrade it to use 'bgtask launch'")
        case .service(.invalidParameter("name")):
            return CommandFailure("\(error): NAME must be 1 to 255 bytes, without control characters")
        case .service(.invalidParameter("argv")):
            return CommandFailure(
                "\(error): the daemon cannot start CMD (a CMD without a slash is looked up in the daemon's PATH)")
        default:
            return failure(error)
        }
    }
}
