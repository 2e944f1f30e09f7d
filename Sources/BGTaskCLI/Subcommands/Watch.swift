// `bgtask watch`: follows the daemon's audit events live, one line each.
import BGTaskClient

/// Streams the daemon's audit events (`Watch`).
public struct Watch: Subcommand {
    public static let spec = CommandSpec(
        name: "watch",
        abstract: "Follow the daemon's audit events as they happen",
        discussion: """
            Prints one line per entry as the daemon adds it to its history: apps registering, changing state, \
            beginning and ending background tasks, being warned, suspended and terminated, with the reason for \
            each end and, for a memory reclaim, the band, the memory and the latency from the pressure trigger \
            to the kill (see 'bgtask help history'). Runs until interrupted or until the daemon stops.

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
        while let entry = try context.call({ () throws(ClientError) in try stream.next() }) {
            context.standardOutput.write(
                json
                    ? try Rendering.json(WatchReply(entry: entry))
                    : Rendering.historyLine(entry, timeZone: context.timeZone))
        }
        return .success
    }
}
