// `bgtask background APP`: sends an app to the background (`SetState` background).
import BGTaskArguments
import BGTaskClient
import BGTaskProtocol

/// Moves an app to `background`, as a shell does when the user leaves it.
public struct Background: StateChangeCommand {
    static let appArgument = ArgumentSpec("APP", help: "The app to send to the background.")

    public static let spec = CommandSpec(
        name: "background",
        abstract: "Send an app to the background",
        discussion: """
            Moves APP to background, as a shell does when the user leaves it. From active it passes through \
            inactive: APP gets willResignActive, then didEnterBackground, which it must acknowledge within \
            EnterBackgroundGraceSec (5 s by default) unless it holds a task. Its background time starts counting \
            down; once it has acknowledged and holds no task, it is suspended.

            Prints the app's new state; with --json, the SetState reply.
            """,
        arguments: [appArgument],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask background org.example.mail", "Send the mail app to the background.")
        ]
    )

    static let targetState = AppState.background

    public var app: String
    public var json: Bool

    init(app: String, json: Bool) {
        self.app = app
        self.json = json
    }
}
