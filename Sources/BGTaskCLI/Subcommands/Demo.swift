// `bgtask demo`: a self-contained demonstration with a private daemon; the demo itself is provided by a hook.

import BGTaskArguments

/// What `bgtask demo` asks of the demo's implementation.
public struct DemoRequest: Hashable, Sendable {
    /// `BackgroundTimeSec` for the private daemon: how long the demo's apps may run in background.
    public var backgroundTime: Duration

    /// A request.
    public init(backgroundTime: Duration) {
        self.backgroundTime = backgroundTime
    }
}

/// The implementation of `bgtask demo`, which lives outside this library (it starts a daemon of its own, so it
/// depends on the daemon's modules, which this library must not).
///
/// The `bgtask` executable passes one to `BGTaskTool.main(_:...demoRunner:)` when it is built with the demo. The
/// runner owns everything the demo starts (private daemon, sockets, app processes) and must stop all of it
/// before returning, also when it fails. Its narration goes to `context.standardOutput`; it throws
/// `CommandFailure` with one line for anything that stops the demo.
public protocol DemoRunner: Sendable {
    /// Runs the demo and returns the tool's exit status.
    func runDemo(_ request: DemoRequest, in context: CommandContext) async throws(CommandFailure) -> ExitCode
}

/// Runs the demo through the context's `DemoRunner`.
public struct Demo: Subcommand {
    static let backgroundTime = OptionSpec(
        "background-time", valueName: "DURATION",
        help: "The private daemon's BackgroundTimeSec: how long the demo's apps may run in background.",
        type: .duration, defaultValue: "6s")

    /// The default of `--background-time`: short, so the whole demo, expiry included, takes under half a minute.
    static let defaultBackgroundTime = Duration.seconds(6)

    public static let spec = CommandSpec(
        name: "demo",
        abstract: "Run a self-contained demonstration with a private daemon",
        discussion: """
            Starts a private bgtaskd in a temporary runtime directory with a short policy, apart from any other \
            daemon, runs sample apps (bgtask-demo-app, found next to bgtask, as bgtaskd is), and narrates each \
            scene with what really happens: the apps' own lines, the daemon's audit trail and replies, and /proc. \
            The scenes: apps register in the foreground and one leaves it; a background task ends in time while \
            its remaining time counts down, and the app is suspended; a task outlives its background time \
            (expiration warning, then termination); notifications to a suspended app are coalesced; two apps the \
            daemon launches itself hold memory, then memory warnings and reclamation, heaviest first. Needs no \
            root; as root it makes cgroups of its own for the daemon, so the apps it launches are frozen and \
            measured through cgroups, and says which backends the daemon chose. Everything the demo starts is \
            stopped, and its cgroups and directory removed, when it ends or is interrupted. --socket and --user do \
            not apply: the demo never talks to another daemon.
            """,
        options: [backgroundTime],
        examples: [
            ExampleSpec("bgtask demo", "Watch the whole lifecycle in under half a minute."),
            ExampleSpec("bgtask demo --background-time 1min", "The same at a slower pace."),
        ]
    )

    /// The request for the runner.
    public var request: DemoRequest

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        request = DemoRequest(backgroundTime: arguments.duration(Demo.backgroundTime) ?? Demo.defaultBackgroundTime)
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        guard let runner = context.demoRunner else {
            throw CommandFailure("this build of bgtask does not include the demo (it was built without a DemoRunner)")
        }
        return try await runner.runDemo(request, in: context)
    }
}
