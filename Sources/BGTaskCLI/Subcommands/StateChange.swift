// What `foreground`, `background` and `deactivate` share: one app argument, `--json`, and one `SetState` call.
import BGTaskArguments
import BGTaskClient

/// A subcommand that moves one app to one state. Each conforming type declares only what differs: its spec
/// (name, help), the argument naming the app, and the state.
protocol StateChangeCommand: Subcommand {
    /// The `APP` argument, with its help.
    static var appArgument: ArgumentSpec { get }
    /// The state the app is moved to.
    static var targetState: AppState { get }
    /// The app.
    var app: String { get }
    /// Whether to print JSON.
    var json: Bool { get }
    init(app: String, json: Bool)
}

extension StateChangeCommand {
    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        self.init(
            app: try arguments.requiredText(Self.appArgument, command: Self.spec.name), json: arguments.isSet(.json))
    }

    /// Moves the app and prints its new state (or the `SetState` reply with `--json`).
    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let info = try context.callOnce { client throws(ClientError) in try client.setState(app, to: Self.targetState) }
        try context.print(SetStateReply(app: info), json: json) { Rendering.stateLine($0.app) }
        return .success
    }
}
