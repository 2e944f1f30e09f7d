// `bgtask history`: past terminations, expiries and reclaims with their reasons.
import BGTaskArguments
import BGTaskClient

/// Shows the daemon's history (`History`).
public struct History: Subcommand {
    static let limit = OptionSpec(
        "limit", short: "n", valueName: "N", help: "Show only the N most recent entries.",
        type: .integer(1...Int.max), defaultValue: "every entry kept")

    public static let spec = CommandSpec(
        name: "history",
        abstract: "Show the daemon's audit trail: terminations, expiries and reclaims with their reasons",
        discussion: """
            Prints the daemon's history, oldest first, one line per entry: what explains how each app ended. \
            Registrations and launches, the end of every background task with how it ended (end=ended: the app \
            ended it, its work done; expired; app-ended: it ended with its app), expiration warnings, \
            suspensions put off for a held file lock, memory warnings, kills, and every end of an app with its \
            reason (task-expired, memory-reclaim, enter-background-timeout, exits-on-suspend, controller, exited, \
            crashed, ...). A job that finished its work and exited by itself, as under 'bgtask run', ends \
            processExited reason=exited. A memory reclaim also shows the band the app was chosen from, its \
            memory, and the latency from the pressure trigger to the kill. State changes and task beginnings \
            are not kept; 'bgtask watch' shows those as they happen. The daemon keeps the last HistorySize \
            entries (1000 by default).

            With --json, prints the History reply.
            """,
        options: [limit],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask history -n 20", "The last 20 entries."),
            ExampleSpec(
                "bgtask history --json | jq '.entries[] | select(.band != null)'",
                "Every memory reclaim still in the history."),
        ]
    )

    /// The most recent entries to show; nil for all.
    public var limit: Int?
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        limit = arguments.integer(History.limit)
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let entries = try context.callOnce { client throws(ClientError) in try client.history(limit: limit) }
        try context.print(HistoryReply(entries: entries), json: json) {
            Rendering.historyTable($0.entries, timeZone: context.timeZone)
        }
        return .success
    }
}
