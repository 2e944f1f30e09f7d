// `bgtask run -- CMD...`: runs a command as a background task held for exactly as long as the command runs, or, with
// --when, as a scheduled task once the conditions it needs hold.
import BGTaskArguments
import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSupervision
import Glibc

/// Runs CMD under a background-task lease, like `systemd-inhibit` for background time.
public struct Run: Subcommand {
    static let name = OptionSpec(
        "name", valueName: "NAME", help: "The task's name in status, history and logs.",
        defaultValue: "CMD's file name")
    static let app = OptionSpec(
        "app", valueName: "APP", help: "Register as APP, or hold the task for APP if it is already registered.",
        defaultValue: "bgtask-run.CMD.PID")
    static let onExpire = OptionSpec(
        "on-expire", short: "s", valueName: "SIGNAL",
        help: "The signal CMD gets when the background time is about to run out (name or number).",
        type: .signal, defaultValue: "TERM")
    static let budget = OptionSpec(
        "budget", valueName: "DURATION",
        help: "A shorter background time than the daemon's (e.g. 90s, 5min): CMD gets SIGNAL before it ends.",
        type: .duration, defaultValue: "the daemon's limit")
    static let when = OptionSpec(
        "when", valueName: "CONDITIONS",
        help: "Wait until these hold, then run CMD as a scheduled task: ac, battery, network, unmetered, idle.",
        type: .conditions, defaultValue: "run at once")
    static let processing = FlagSpec(
        "processing", help: "With --when: a processing task (ProcessingTaskSec, 10 min) instead of a refresh (30 s).")
    static let identifier = OptionSpec(
        "id", valueName: "ID", help: "With --when: the request's identifier within the app.", defaultValue: "run")
    static let command = ArgumentSpec("CMD", help: "The command to run, with its arguments.", isCommand: true)

    public static let spec = CommandSpec(
        name: "run",
        abstract: "Run a command as a background task held for exactly as long as it runs",
        discussion: """
            Like systemd-inhibit, for background time: registers with the daemon as an app that starts in \
            background (or, with --app, holds the task for that app when it is already registered), begins a \
            background task, and runs CMD. The task ends when CMD exits (ended, in the history), and bgtask exits \
            with CMD's status, or 128+N when CMD was killed by signal N. A registration of bgtask's own has \
            ExitsOnSuspend: with its task ended, the daemon ends the app rather than stopping bgtask on its way \
            out. When CMD is cut short, killed by a signal or stopped because bgtask was asked to stop (SIGHUP, \
            SIGINT, SIGQUIT or SIGTERM, which bgtask forwards to CMD; systemctl stop sends SIGTERM), bgtask closes \
            its registration with the task open, which ends it app-ended.

            When the background time is about to run out, bgtask forwards the daemon's warning to CMD as \
            SIGNAL, so CMD can save its work and exit. If CMD is still running when the time is up, the daemon \
            terminates the app: CMD gets SIGNAL again, and after the daemon's grace period bgtask is killed \
            with CMD: bgtask leads a process group of its own (it makes one before it registers when its caller, \
            a script, did not) and CMD runs in it, so the daemon's kill takes both. \
            --budget asks the daemon for a shorter background time: the warning, and so SIGNAL, comes before it \
            ends (a quarter of it, at most the daemon's ExpirationWarningSec, before), and if CMD is still \
            running when it ends the daemon terminates the app as task-expired. An app registered by another \
            process gets its own events and keeps its own budget, so for a joined app bgtask reads the \
            remaining time instead, sends SIGNAL 5 s before it runs out, and treats --budget as a limit of its \
            own: CMD gets SIGNAL once it has run that long.

            With --when, bgtask waits before it runs CMD, as a job of Android's JobScheduler does: it registers \
            as an app in the foreground (so the daemon never stops it while it waits), submits a scheduled \
            request that requires CONDITIONS (as 'bgtask schedule' does), and runs CMD when the daemon starts \
            the request's task, once every condition holds; it waits at no cost, woken by the daemon. The task \
            is named by the request's identifier (--id) and has the time of its kind (--processing, or a \
            refresh). When a condition stops holding while CMD \
            runs (unplugged, offline), or the task's time runs out, the daemon warns at once and bgtask sends \
            CMD SIGNAL; if CMD is still running 5 s later, when the daemon ends the task (constraints-lost or \
            expired), bgtask kills it with SIGKILL. CMD's exit completes the task, as a success when it \
            exited 0. bgtask runs CMD at most once: it cancels its request on its way out, also when it is \
            asked to stop (SIGHUP, SIGINT, SIGQUIT, SIGTERM) while it waits, and then exits 128+N for signal N; \
            only a bgtask killed outright leaves its request held ('bgtask cancel APP ID' removes it). \
            A condition this host has no source for is refused at once ('bgtask status' lists the sources).

            CMD inherits bgtask's standard input and output; bgtask's own progress lines (the task begun, the \
            warning forwarded) go to standard error. Options end at CMD's first word: write -- before CMD when \
            it begins with a dash.
            """,
        arguments: [command],
        options: [name, app, onExpire, budget, when, identifier],
        flags: [processing],
        examples: [
            ExampleSpec(
                "bgtask run -- rsync -a photos/ backup:photos/",
                "Upload photos as a background task; rsync gets SIGTERM if the background time runs out."),
            ExampleSpec(
                "bgtask run --name export --on-expire INT -- ./export.sh --all",
                "Run a script whose cleanup handler listens for SIGINT."),
            ExampleSpec(
                "bgtask run --app org.example.mail --budget 5min -- mail-sync",
                "Hold a task for the running mail app for at most five minutes while mail-sync runs."),
            ExampleSpec(
                "bgtask run --when ac,network --processing -- restic backup ~/Documents",
                "Back up once on external power and online; restic gets SIGTERM if unplugged or offline."),
        ]
    )

    /// The command line to run.
    public var command: [String]
    /// The task's name; nil for CMD's file name.
    public var taskName: String?
    /// The app to register as or join; nil for a name made from CMD and the process id.
    public var app: String?
    /// The signal forwarded to CMD.
    public var expirationSignal: Signal
    /// bgtask's own limit, if any.
    public var budget: Duration?
    /// The conditions to wait for (`--when`); nil: run at once under a lease.
    public var conditions: [Constraint]?
    /// With `--when`: refresh or processing.
    public var kind: ScheduledTaskKind
    /// With `--when`: the request's identifier.
    public var identifier: String

    public init(parsing arguments: ParsedArguments) throws(UsageError) {
        command = arguments.words(Run.command)
        taskName = arguments.text(Run.name)
        app = arguments.text(Run.app)
        expirationSignal = arguments.signal(Run.onExpire) ?? .terminate
        budget = arguments.duration(Run.budget)
        conditions = arguments.conditions(Run.when)
        kind = arguments.isSet(Run.processing) ? .processing : .refresh
        identifier = arguments.text(Run.identifier) ?? "run"
        if conditions != nil, budget != nil {
            throw UsageError(.conflictingOptions("--when", "--budget"), command: Run.spec.name)
        }
        if conditions == nil {
            if arguments.isSet(Run.processing) {
                throw UsageError(.optionNeedsAnother("--processing", needs: "--when"), command: Run.spec.name)
            }
            if arguments.text(Run.identifier) != nil {
                throw UsageError(.optionNeedsAnother("--id", needs: "--when"), command: Run.spec.name)
            }
        }
    }

    public func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        // The parser refuses a command line without CMD, so `command` has a first word.
        let program = command.first.map { $0.split(separator: "/").last.map(String.init) ?? $0 } ?? "command"
        let client = try context.connect()
        defer { client.close() }
        // Lead a group before registering: the daemon decides from the group it finds whether its kill takes the
        // whole group, and CMD must go with bgtask even when bgtask was started by a script without job control.
        let terminalOwner = SupervisedCommand.leadProcessGroup()
        defer { SupervisedCommand.restoreTerminal(terminalOwner) }
        if let conditions {
            let scheduled = try ScheduledCommand.submit(
                app: app ?? Run.defaultAppName(program: program, pid: getpid()), identifier: identifier, kind: kind,
                conditions: conditions, client: client, context: context)
            return try scheduled.run(command, signal: expirationSignal)
        }
        let lease = try LeasedCommand.begin(
            app: app ?? Run.defaultAppName(program: program, pid: getpid()), joining: app != nil,
            taskName: taskName ?? program, budget: budget, client: client, context: context)
        return try lease.run(command, signal: expirationSignal, budget: budget)
    }

    /// `bgtask-run.PROGRAM.PID`: unique while bgtask runs, and readable in `bgtask apps`. The program's name is
    /// cut to 200 bytes and its control characters replaced, since the daemon refuses names longer than 255 bytes
    /// or holding control characters (a file name may hold a newline).
    public static func defaultAppName(program: String, pid: pid_t) -> String {
        var cleaned = ""
        for scalar in program.unicodeScalars {
            let kept: Unicode.Scalar = scalar.properties.generalCategory == .control ? "_" : scalar
            guard cleaned.utf8.count + String(kept).utf8.count <= 200 else { break }
            cleaned.unicodeScalars.append(kept)
        }
        return "bgtask-run.\(cleaned).\(pid)"
    }
}
