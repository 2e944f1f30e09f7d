// `bgtask status [APP]`: the daemon's status, or one app's state, remaining time, tasks and memory.
import BGTaskArguments
import BGTaskClient

/// Shows the daemon's status (`GetStatus`), or one app's (`GetApp`).
public struct Status: Subcommand {
    static let app = ArgumentSpec("APP", help: "The app to show; without it, the daemon itself.", isOptional: true)

    public static let spec = CommandSpec(
        name: "status",
        abstract: "Show the daemon's status, or one app's state, time left and tasks",
        discussion: """
            Without APP, shows the daemon: its version and uptime, the freeze, memory and kill backends it chose \
            for this host, how many apps it tracks and how many of them are suspended, the open background tasks, \
            the memory readings behind reclamation (the level, the trigger that wakes the daemon, the age of the \
            last reading), the memory of each running app it may see, heaviest first, with how it is measured, \
            the apps it never suspends, with why (their unit is stopping, or has a watchdog), and where its \
            configuration came from: the root, how many files it read, and each file or directory it refused \
            because someone other than root (or the daemon's user) could have written it, with the rule it fails.

            With APP, shows that app: its state, its cgroup when the daemon handles it through one, the \
            background time it has left (unlimited in the foreground), the memory charged to it and how that is \
            measured, the events queued while it is suspended, how it was last suspended, why it is never \
            suspended when its unit forbids it, its open background tasks with their age, and why it ended if it has, with its exit status or signal when the daemon \
            launched it. A terminated app stays visible, with its exit reason, until its name registers again.

            With --json, prints the GetStatus reply, or the GetApp reply for APP, as the io.bgtask.Lifecycle \
            interface defines them.
            """,
        arguments: [app],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask status", "Show the daemon's version, backends and counts."),
            ExampleSpec("bgtask status org.example.mail", "Show one app's state, time left, tasks and memory."),
            ExampleSpec("bgtask status --json | jq .backends", "Read the chosen backends from a script."),
        ]
    )

    /// The app to show; nil for the daemon.
    public var app: String?
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = arguments.text(Status.app)
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        if let app {
            let info = try context.callOnce { client throws(ClientError) in try client.getApp(app) }
            try context.print(GetAppReply(app: info), json: json) { Rendering.app($0.app) }
        } else {
            let (status, apps) = try context.callOnce { client throws(ClientError) in
                (try client.getStatus(), json ? [] : try client.listApps())
            }
            try context.print(status, json: json) { Rendering.status($0, apps: apps) }
        }
        return .success
    }
}
