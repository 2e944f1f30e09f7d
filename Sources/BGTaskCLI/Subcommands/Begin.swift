// `bgtask begin APP NAME`: begins a background task for an app and prints its id, for scripts.
import BGTaskArguments
import BGTaskClient

/// Begins a background-task lease for an app (`BeginBackgroundTask`).
public struct Begin: Subcommand {
    static let app = ArgumentSpec("APP", help: "The app the task is for; it must be registered.")
    static let name = ArgumentSpec("NAME", help: "The task's name in status, history and logs.")

    public static let spec = CommandSpec(
        name: "begin",
        abstract: "Begin a background task for an app and print its id",
        discussion: """
            For scripts working on behalf of an app: begins a background task for APP and prints the new task's \
            id on standard output, to give to 'bgtask end' when the work is done. The task counts against APP's \
            background time like any of its own, and ends at the latest when APP ends. In background with no \
            time left, no task can begin.

            Accepted from APP's own user and from root. With --json, prints the BeginBackgroundTask reply.
            """,
        arguments: [app, name],
        flags: [.json],
        examples: [
            ExampleSpec(
                "task=$(bgtask begin org.example.mail flush-outbox)",
                "Begin a task and keep its id for 'bgtask end'.")
        ]
    )

    /// The app.
    public var app: String
    /// The task's name.
    public var name: String
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = try arguments.requiredText(Begin.app, command: Begin.spec.name)
        name = try arguments.requiredText(Begin.name, command: Begin.spec.name)
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let taskId = try context.callOnce { client throws(ClientError) in
            try client.beginBackgroundTask(app: app, name: name)
        }
        try context.print(BeginBackgroundTaskReply(taskId: taskId), json: json) { "\($0.taskId)\n" }
        return .success
    }
}
