// `bgtask schedule APP ID`: submits a scheduled request for an app.
import BGTaskArguments
import BGTaskClient
import BGTaskProtocol
import Foundation

/// Submits a scheduled request (`SubmitRequest`), as an app does with `BGTaskScheduler.submit` on iOS.
public struct Schedule: Subcommand {
    static let app = ArgumentSpec("APP", help: "The app the work runs in.")
    static let identifier = ArgumentSpec(
        "ID", help: "Names the request within APP; a request of APP with the same ID is replaced.")
    static let processing = FlagSpec(
        "processing", help: "Longer work (ProcessingTaskSec, 10 min by default) instead of a refresh (30 s).")
    static let after = OptionSpec(
        "after", valueName: "DURATION", help: "Run no earlier than DURATION from now, such as 10min or 2h.",
        type: .duration, defaultValue: "now")
    static let requires = OptionSpec(
        "requires", valueName: "CONDITIONS",
        help: "Run only while these hold, joined with commas: ac, battery, network, unmetered, idle.",
        type: .conditions, defaultValue: "none")

    public static let spec = CommandSpec(
        name: "schedule",
        abstract: "Schedule background work for an app",
        discussion: """
            Submits a request for APP to do background work later: once it is due (--after) and every condition \
            it requires holds (--requires: ac, on external power; battery, the battery not low; network, a \
            default route through an interface that is up; unmetered, online through a connection \
            NetworkManager does not call metered; idle, the user idle as logind says), the daemon begins a task \
            in APP and sends it runScheduledTask, waking it if it is suspended. A condition that stops holding \
            while the task runs brings the expiration warning at once. A request waits while APP is not \
            running, unless the daemon's apps.d/APP.conf says how to start it (ExecStart= in [Launch]): the \
            daemon then starts APP in background for it. A condition this host has no source for is refused ('bgtask status' lists the sources).

            Prints the request and where it stands; with --json, the SubmitRequest reply.
            """,
        arguments: [app, identifier],
        options: [after, requires],
        flags: [processing, .json],
        examples: [
            ExampleSpec(
                "bgtask schedule org.backup nightly --processing --requires ac --after 1h",
                "Back up in an hour or later, once on external power."),
            ExampleSpec("bgtask schedule org.example.mail refresh --requires network", "Fetch mail once online."),
        ]
    )

    /// The app.
    public var app: String
    /// The request's identifier.
    public var identifier: String
    /// refresh or processing.
    public var kind: ScheduledTaskKind
    /// How long from now it waits at least; nil: due now.
    public var after: Duration?
    /// The conditions it requires.
    public var requires: [Constraint]
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        app = try arguments.requiredText(Schedule.app, command: Schedule.spec.name)
        identifier = try arguments.requiredText(Schedule.identifier, command: Schedule.spec.name)
        kind = arguments.isSet(Schedule.processing) ? .processing : .refresh
        after = arguments.duration(Schedule.after)
        requires = arguments.conditions(Schedule.requires) ?? []
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let now = Date().timeIntervalSince1970
        let earliestBegin = after.map { now + Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 }
        let request = try context.callOnce { client throws(ClientError) in
            try client.submitRequest(
                app: app, identifier: identifier, kind: kind, earliestBegin: earliestBegin, requires: requires)
        }
        try context.print(SubmitRequestReply(request: request), json: json) {
            Rendering.submitted($0.request, now: now, timeZone: context.timeZone)
        }
        return .success
    }
}
