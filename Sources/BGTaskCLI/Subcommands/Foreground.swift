// `bgtask foreground APP`: brings an app to the foreground (`SetState` active).
import BGTaskArguments
import BGTaskClient
import BGTaskProtocol

/// Moves an app to `active`, as a shell does when the user switches to it.
public struct Foreground: StateChangeCommand {
    static let appArgument = ArgumentSpec("APP", help: "The app to bring to the foreground.")

    public static let spec = CommandSpec(
        name: "foreground",
        abstract: "Bring an app to the foreground (active)",
        discussion: """
            Moves APP to active, as a shell does when the user switches to it. A suspended app is resumed \
            first; from background or suspended, APP gets willEnterForeground, then didBecomeActive. Its \
            background time is unlimited while it is in the foreground and starts afresh next time it enters \
            background. Tasks it holds stay open.

            Prints the app's new state; with --json, the SetState reply.
            """,
        arguments: [appArgument],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask foreground org.example.mail", "Bring the mail app back, resuming it if suspended.")
        ]
    )

    static let targetState = AppState.active

    public var app: String
    public var json: Bool

    init(app: String, json: Bool) {
        self.app = app
        self.json = json
    }
}
