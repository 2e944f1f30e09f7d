// `bgtask requests`: a table of the scheduled requests the daemon holds.
import BGTaskArguments
import BGTaskClient
import BGTaskProtocol
import Foundation

/// Lists scheduled requests (`ListRequests`).
public struct Requests: Subcommand {
    static let app = OptionSpec("app", valueName: "APP", help: "Only APP's requests.", defaultValue: "every app")

    public static let spec = CommandSpec(
        name: "requests",
        abstract: "List scheduled requests",
        discussion: """
            Prints one line per scheduled request: its app, identifier, kind, the conditions it requires, its \
            state (pending, launching or running) and what it waits for (its due time, the conditions that do \
            not hold now, failed runs) or the task that runs it. Root and members of ControllerGroup see every \
            request; other users see their own.

            With --json, prints the ListRequests reply.
            """,
        options: [app],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask requests", "List the requests you may see."),
            ExampleSpec("bgtask requests --app org.example.backup --json", "The backup app's requests, as JSON."),
        ]
    )

    /// Only this app's requests; nil for every app's.
    public var app: String?
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = arguments.text(Requests.app)
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let requests = try context.callOnce { client throws(ClientError) in try client.listRequests(app: app) }
        let now = Date().timeIntervalSince1970
        try context.print(ListRequestsReply(requests: requests), json: json) {
            Rendering.requestTable($0.requests, now: now, timeZone: context.timeZone)
        }
        return .success
    }
}
