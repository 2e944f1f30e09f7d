// `bgtask watch`: follows the daemon's audit events live, one line each.
import BGTaskArguments
import BGTaskClient

/// Streams the daemon's audit events (`Watch`).
public struct Watch: Subcommand {
    public static let spec = CommandSpec(
        name: "watch",
        abstract: "Follow the daemon's audit events as they happen",
        discussion: """
            Prints one line per entry as the daemon records it: everything 'bgtask history' keeps (registrations, \
            warnings, expiries, kills and every end with its reason, with band, memory and latency for a memory \
            reclaim), and also each state change and each background task beginning and ending. Entries \
            recorded before the watch starts are not shown. Runs until interrupted or until the daemon stops.

            With --json, prints each Watch reply as one line of JSON.
            """,
        flags: [.json],
        examples: [
            ExampleSpec("bgtask watch", "Follow suspensions, expiries and reclaims live."),
            ExampleSpec(
                "bgtask watch --json | jq -c 'select(.entry.kind == \"terminated\")'", "Follow terminations only."),
        ]
    )

    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let client = try context.connect()
        defer { client.close() }
        let stream = try context.call { () throws(ClientError) in try client.watch() }
        defer { stream.close() }
        context.progress("following bgtaskd's audit trail at \(client.socketPath); interrupt to stop")
        while let entry = try context.call({ () throws(ClientError) in try stream.next() }) {
            context.standardOutput.write(
                json
                    ? try Rendering.json(WatchReply(entry: entry))
                    : Rendering.historyLine(entry, timeZone: context.timeZone))
        }
        return .success
    }
}
