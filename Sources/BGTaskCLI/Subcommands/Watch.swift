// `bgtask watch`: follows the daemon's audit events live, one line each.
import BGTaskArguments
import BGTaskClient

/// Streams the daemon's audit events (`Watch`).
public struct Watch: Subcommand {
    static let history = OptionSpec(
        "history", short: "n", valueName: "N",
        help: "First show the N most recent entries 'bgtask history' keeps, then follow.",
        type: .integer(0...Int.max), defaultValue: "0")

    public static let spec = CommandSpec(
        name: "watch",
        abstract: "Follow the daemon's audit events as they happen",
        discussion: """
            Prints one line per entry as the daemon records it: everything 'bgtask history' keeps (registrations, \
            warnings, expiries, kills and every end with its reason, with band, memory and latency for a memory \
            reclaim), and also each state change and each background task beginning and ending. Entries \
            recorded before the watch starts are not shown, unless --history N asks for the last N kept ones \
            first: the daemon sends those and starts the stream in one step, so no entry falls between them, as \
            it could between 'bgtask history' and 'bgtask watch'. Runs until interrupted or until the daemon \
            stops.

            With --json, prints each Watch reply as one line of JSON.
            """,
        options: [history],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask watch", "Follow suspensions, expiries and reclaims live."),
            ExampleSpec("bgtask watch -n 20", "The last 20 kept entries, then everything new."),
            ExampleSpec(
                "bgtask watch --json | jq -c 'select(.entry.kind == \"terminated\")'", "Follow terminations only."),
        ]
    )

    /// How many kept entries to show first.
    public var history: Int
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        history = arguments.integer(Watch.history) ?? 0
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let client = try context.connect()
        defer { client.close() }
        let history = history
        let stream = try context.call { () throws(ClientError) in
            try client.watch(history: history > 0 ? history : nil)
        }
        defer { stream.close() }
        context.progress("following bgtaskd's audit trail at \(client.socketPath); interrupt to stop")
        while let (entry, isReplayed) = try context.call({ () throws(ClientError) in try stream.nextReply() }) {
            context.standardOutput.write(
                json
                    ? try Rendering.json(WatchReply(entry: entry, replayed: isReplayed ? true : nil))
                    : Rendering.historyLine(entry, timeZone: context.timeZone))
        }
        return .success
    }
}
