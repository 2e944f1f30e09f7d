// `bgtask end APP TASK`: ends a background task begun with `bgtask begin`.
import BGTaskArguments
import BGTaskClient

/// Ends a background-task lease (`EndBackgroundTask`).
public struct End: Subcommand {
    static let app = ArgumentSpec("APP", help: "The app the task is for.")
    static let task = ArgumentSpec("TASK", help: "The task id 'bgtask begin' printed.", type: .integer(1...Int.max))

    public static let spec = CommandSpec(
        name: "end",
        abstract: "End a background task begun with 'bgtask begin'",
        discussion: """
            Ends task TASK of APP. A task ends exactly once: ending one that already ended, that was never \
            begun, or that belongs to another app fails and changes nothing. Prints nothing on success.
            """,
        arguments: [app, task],
        examples: [
            ExampleSpec("bgtask end org.example.mail \"$task\"", "End the task begun by 'bgtask begin'.")
        ]
    )

    /// The app.
    public var app: String
    /// The task id.
    public var taskId: Int

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = try arguments.requiredText(End.app, command: End.spec.name)
        guard let taskId = arguments.integer(End.task) else {
            throw UsageError(.missingArgument(name: End.task.name), command: End.spec.name)
        }
        self.taskId = taskId
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        try context.callOnce { client throws(ClientError) in try client.endBackgroundTask(app: app, taskId: taskId) }
        return .success
    }
}
