// `bgtask remaining APP`: prints an app's remaining background time, for scripts.
import BGTaskArguments
import BGTaskClient

/// Prints an app's remaining background time (`BackgroundTimeRemaining`).
public struct Remaining: Subcommand {
    static let app = ArgumentSpec("APP", help: "The app to ask about.")

    public static let spec = CommandSpec(
        name: "remaining",
        abstract: "Print an app's remaining background time",
        discussion: """
            Prints the background time APP has left, such as '4m 12s', or 'unlimited' while APP is in the \
            foreground. The time counts down from BackgroundTimeSec (10 minutes by default) while APP is in \
            background, whether or not it holds a task, and starts again when APP returns to the foreground.

            With --json, prints the BackgroundTimeRemaining reply: seconds as a number, or null when unlimited.
            """,
        arguments: [app],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask remaining org.example.mail", "Print the mail app's background time left."),
            ExampleSpec(
                "bgtask remaining org.example.mail --json | jq .seconds", "The same in seconds, for a script."),
        ]
    )

    /// The app.
    public var app: String
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = try arguments.requiredText(Remaining.app, command: Remaining.spec.name)
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let seconds = try context.callOnce { client throws(ClientError) in
            try client.backgroundTimeRemaining(app: app)
        }
        try context.print(BackgroundTimeRemainingReply(seconds: seconds), json: json) {
            Formatting.remaining($0.seconds) + "\n"
        }
        return .success
    }
}
