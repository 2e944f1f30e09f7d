// `bgtask apps`: a table of the apps the daemon tracks.
import BGTaskArguments
import BGTaskClient
import BGTaskProtocol

/// Lists the apps the daemon tracks (`ListApps`).
public struct Apps: Subcommand {
    static let state = OptionSpec(
        "state", short: "s", valueName: "STATE",
        help: "Only apps in STATE: notRunning, inactive, active, background, suspended or terminated.",
        type: .state)
    static let all = FlagSpec("all", short: "a", help: "Include terminated apps the daemon still remembers.")

    public static let spec = CommandSpec(
        name: "apps",
        abstract: "List the apps the daemon tracks",
        discussion: """
            Prints one line per app: its name, state, process id, open background tasks, background time left, \
            memory, how the daemon handles it (VIA: unit when the service manager runs the app as a unit of its \
            own and freezes it, unit cgroup2 or unit cgroup1 when the daemon last froze the unit through its \
            cgroup, unit signals when it last stopped it with SIGSTOP; cgroup when it freezes, measures and kills \
            the app through a cgroup of its own, signals when it stops and kills the app with signals and measures \
            its processes' memory), and exit reason. Terminated apps the daemon still remembers are left out \
            unless --all is given or --state terminated asks for them.

            With --json, prints the ListApps reply, filtered the same way.
            """,
        options: [state],
        flags: [all, .json],
        examples: [
            ExampleSpec("bgtask apps", "List the live apps."),
            ExampleSpec("bgtask apps --all", "Also list the apps that ended, with the reason."),
            ExampleSpec("bgtask apps --state suspended --json", "The suspended apps, as JSON."),
        ]
    )

    /// Only apps in this state; nil for every live app.
    public var state: AppState?
    /// Whether to include terminated apps.
    public var includesTerminated: Bool
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        state = arguments.state(Apps.state)
        includesTerminated = arguments.isSet(Apps.all)
        json = arguments.isSet(.json)
    }

    /// Whether `app` is listed: in the asked state, or live (or any with `--all`) when no state is asked.
    func isListed(_ app: AppInfo) -> Bool {
        if let state { return app.state == state }
        return includesTerminated || app.state != .terminated
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let apps = try context.callOnce { client throws(ClientError) in try client.listApps() }.filter(isListed)
        try context.print(ListAppsReply(apps: apps), json: json) { Rendering.appTable($0.apps) }
        return .success
    }
}
