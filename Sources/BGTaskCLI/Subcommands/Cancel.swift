// `bgtask cancel APP ID`: cancels a scheduled request.
import BGTaskArguments
import BGTaskClient

/// Cancels a scheduled request (`CancelRequest`), as an app does with `BGTaskScheduler.cancel` on iOS.
public struct Cancel: Subcommand {
    static let app = ArgumentSpec("APP", help: "The app the request belongs to.")
    static let identifier = ArgumentSpec("ID", help: "The request's identifier.")

    public static let spec = CommandSpec(
        name: "cancel",
        abstract: "Cancel a scheduled request",
        discussion: """
            Removes APP's request ID, and any newer submit waiting to take its place. If its task is running, \
            APP gets backgroundTaskExpiring for it and the task ends at once. Prints nothing; fails when APP \
            holds no such request you may see.
            """,
        arguments: [app, identifier],
        examples: [ExampleSpec("bgtask cancel org.example.backup nightly", "Drop the nightly backup request.")]
    )

    /// The app.
    public var app: String
    /// The request's identifier.
    public var identifier: String

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = try arguments.requiredText(Cancel.app, command: Cancel.spec.name)
        identifier = try arguments.requiredText(Cancel.identifier, command: Cancel.spec.name)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        try context.callOnce { client throws(ClientError) in
            try client.cancelRequest(app: app, identifier: identifier)
        }
        return .success
    }
}
