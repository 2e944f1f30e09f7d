// `bgtask deactivate APP`: makes an app inactive, in the foreground but not receiving input (`SetState` inactive).
import BGTaskArguments
import BGTaskClient
import BGTaskProtocol

/// Moves an app to `inactive`, as when a system dialog covers it.
public struct Deactivate: StateChangeCommand {
    static let appArgument = ArgumentSpec("APP", help: "The app to make inactive.")

    public static let spec = CommandSpec(
        name: "deactivate",
        abstract: "Make an app inactive: in the foreground, not receiving input",
        discussion: """
            Moves APP to inactive, as when a system dialog or the app switcher covers it: from active, APP gets \
            willResignActive. From background or suspended, APP returns to the foreground as inactive and gets \
            willEnterForeground, after being resumed if it was suspended.

            Prints the app's new state; with --json, the SetState reply.
            """,
        arguments: [appArgument],
        flags: [.json],
        examples: [
            ExampleSpec("bgtask deactivate org.example.mail", "Show the mail app without giving it input.")
        ]
    )

    static let targetState = AppState.inactive

    public var app: String
    public var json: Bool

    init(app: String, json: Bool) {
        self.app = app
        self.json = json
    }
}
