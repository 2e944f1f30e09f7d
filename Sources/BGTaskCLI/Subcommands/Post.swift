// `bgtask post NAME`: posts a notification event to one app or to all.
import BGTaskArguments
import BGTaskClient
import BGTaskJSON
import BGTaskProtocol

/// Posts a notification event (`Post`).
public struct Post: Subcommand {
    static let name = ArgumentSpec("NAME", help: "The notification's name, as the app will see it.")
    static let payload = OptionSpec(
        "payload", valueName: "JSON", help: "Data for the app, a JSON object such as '{\"folder\":\"inbox\"}'.",
        type: .jsonObject)
    static let behavior = OptionSpec(
        "behavior", valueName: "BEHAVIOR",
        help: "What a suspended app gets: drop, coalesce, hold or wake.", type: .behavior,
        defaultValue: DeliveryBehavior.default.rawValue)
    static let app = OptionSpec("app", valueName: "APP", help: "Post to APP only.", defaultValue: "every app")

    public static let spec = CommandSpec(
        name: "post",
        abstract: "Post a notification event to apps",
        discussion: """
            Posts a notification named NAME, with an optional JSON payload, to APP or to every registered app. \
            Running apps get it at once. For a suspended app, --behavior decides: drop discards it; coalesce \
            keeps one pending event per name, with the latest payload and a count of posts; hold keeps every \
            event, up to a bound; wake wakes the app into background to handle it, and suspends it again once it \
            has acknowledged. Queued events are delivered in order when the app next runs.

            Prints how many apps got the event and for how many it is queued; with --json, the Post reply.
            """,
        arguments: [name],
        options: [payload, behavior, app],
        flags: [.json],
        examples: [
            ExampleSpec(
                "bgtask post mail --app org.example.mail --payload '{\"n\":3}' --behavior wake",
                "Wake the mail app, if suspended, to handle new mail."),
            ExampleSpec(
                "bgtask post locale-changed --behavior coalesce", "Tell every app; suspended ones see it once."),
        ]
    )

    /// The notification's name.
    public var name: String
    /// The payload, if any.
    public var payload: [String: JSONValue]?
    /// The behaviour for suspended apps; nil for the daemon's default.
    public var behavior: DeliveryBehavior?
    /// The app to post to; nil for all.
    public var app: String?
    /// Whether to print JSON.
    public var json: Bool

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        name = try arguments.requiredText(Post.name, command: Post.spec.name)
        payload = arguments.jsonObject(Post.payload)
        behavior = arguments.behavior(Post.behavior)
        app = arguments.text(Post.app)
        json = arguments.isSet(.json)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let reply = try context.callOnce { client throws(ClientError) in
            try client.post(name: name, payload: payload, behavior: behavior, app: app)
        }
        try context.print(reply, json: json, text: Rendering.postResult)
        return .success
    }
}
