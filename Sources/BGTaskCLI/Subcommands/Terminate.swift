// `bgtask terminate APP`: asks the daemon to terminate an app.
import BGTaskArguments
import BGTaskClient

/// Terminates an app (`Terminate`), with `willTerminate` and a grace period before SIGKILL.
public struct Terminate: Subcommand {
    static let app = ArgumentSpec("APP", help: "The app to terminate.")

    public static let spec = CommandSpec(
        name: "terminate",
        abstract: "Terminate an app",
        discussion: """
            Asks the daemon to terminate APP: APP gets willTerminate and WillTerminateGraceSec (5 s by default) \
            to exit before it is killed. Its open tasks end with it, and the reason recorded is 'controller'. \
            Prints nothing: the request is accepted at once, and 'bgtask status APP' or 'bgtask watch' shows \
            the app end.
            """,
        arguments: [app],
        examples: [
            ExampleSpec("bgtask terminate org.example.mail", "Terminate the mail app, letting it save first.")
        ]
    )

    /// The app.
    public var app: String

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = try arguments.requiredText(Terminate.app, command: Terminate.spec.name)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        try context.callOnce { client throws(ClientError) in try client.terminate(app) }
        return .success
    }
}
