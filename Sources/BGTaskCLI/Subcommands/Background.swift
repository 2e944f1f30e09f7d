// `bgtask background APP`: sends an app to the background (`SetState` background).
import BGTaskArguments
import BGTaskClient
import BGTaskProtocol

/// Moves an app to `background`, as a shell does when the user leaves it.
public struct Background: Subcommand {
    static let app = ArgumentSpec("APP", help: "The app to send to the background.")

    public static let spec = CommandSpec(
        name: "background",
        abstract: "Send an app to the background",
        discussion: """
            Moves APP to background, as a shell does when the user leaves it. From active it passes through \
            inactive: APP gets willResignActive, then didEnterBackground, which it must acknowledge within \
            EnterBackgroundGraceSec (5 s by default) unless it holds a task. Its background time starts counting \
            down; once it has acknowledged and holds no task, it is suspended.

            Prints the app's new state; with --json, the SetState reply.
            """,
        arguments: [app],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask background org.example.mail", "Send the mail app to the background.")
        ]
    )

    /// The app.
    public var app: String
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = try arguments.requiredText(Background.app, command: Background.spec.name)
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        try changeState(of: app, to: .background, json: json, in: context)
    }
}
