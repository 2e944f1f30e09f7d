// The bgtask tool as data (its words, global options, subcommands) and its entry point.
import BGTaskArguments
import BGTaskClient
import Foundation

/// The `bgtask` command-line tool: its spec, and `main`, which parses a command line and runs it.
public enum BGTaskTool {
    /// The version `bgtask --version` prints.
    public static let version = "0.1.0"

    /// The tool's declaration; the help, the usage lines and the man page are generated from it.
    public static let spec = ToolSpec(
        name: "bgtask",
        version: version,
        package: "bgtaskd",
        abstract: "Control bgtaskd, the daemon that gives Linux apps iOS-style background execution",
        discussion: """
            bgtaskd tracks each registered app's lifecycle state (active, inactive, background, suspended), grants \
            time-limited background tasks, warns apps before their background time runs out, suspends apps whose \
            work is done, and reclaims memory from suspended apps first. bgtask talks to it over its Varlink \
            socket: to inspect apps and the daemon, to move apps between foreground and background as a shell \
            does, to launch apps the daemon manages in cgroups of their own, to post notifications, to follow \
            the daemon's audit events, and to run any command as a background task held for exactly as long as \
            it runs.

            Controller commands (foreground, background, deactivate, terminate, post) need root, the app's own \
            user, or membership in the daemon's ControllerGroup.
            """,
        globalOptions: GlobalOptions.options,
        globalFlags: GlobalOptions.flags,
        exclusiveGroups: GlobalOptions.exclusiveGroups,
        environment: [
            EnvironmentSpec(
                DaemonSocket.environmentVariable,
                help: "The daemon's socket when --socket is not given; takes precedence over --user."),
            EnvironmentSpec(
                "XDG_RUNTIME_DIR",
                help: "With --user, the daemon's socket is $XDG_RUNTIME_DIR/bgtaskd/\(DaemonSocket.fileName)."),
        ],
        exitStatuses: [
            ExitStatusSpec("0", "Success."),
            ExitStatusSpec(
                "1",
                "Operational failure: no daemon at the socket, no such app or task, or the daemon "
                    + "refused the request; one line on standard error says what went wrong."),
            ExitStatusSpec(
                "64",
                "Usage error: the command line does not fit the subcommand (EX_USAGE); the error "
                    + "and the subcommand's usage are printed on standard error."),
            ExitStatusSpec("126, 127", "bgtask run could not execute CMD (126), or found no such command (127)."),
            ExitStatusSpec(
                "CMD's status",
                "bgtask run exits with the status of CMD, or 128+N when CMD was "
                    + "killed by signal N."),
        ],
        seeAlso: ["bgtaskd(8)", "bgtaskd.conf(5)", "systemd-inhibit(1)", "varlinkctl(1)"],
        commands: subcommands.map { $0.spec }
    )

    /// The subcommands, in the order the help lists them.
    public static let subcommands: [any Subcommand.Type] = [
        Status.self, Apps.self, Run.self, Begin.self, End.self, Remaining.self, Foreground.self, Background.self,
        Deactivate.self, Launch.self, Terminate.self, Post.self, Schedule.self, Requests.self, Cancel.self,
        Watch.self, History.self, Demo.self,
    ]

    /// What a command line of bgtask asks for, with the subcommand built from its arguments.
    public enum Request: Sendable {
        /// Print the help of a subcommand, or of the tool when nil.
        case help(CommandSpec?)
        /// Print the version.
        case version
        /// Run a subcommand with the global options given.
        case command(any Subcommand, GlobalOptions)
    }

    /// Parses `words` (the command line without the program name) and builds the subcommand it names.
    public static func parse(_ words: [String]) throws(UsageError) -> Request {
        switch try CommandLineParser(tool: spec).parse(words) {
        case .help(let command): return .help(command)
        case .version: return .version
        case .tool: throw UsageError(.missingSubcommand, command: nil)
        case .command(let command, let arguments):
            // A closure, not the key path `\.spec.name`: a key path to a static member through an existential
            // metatype crashes swiftc 6.3.1 (signal 11 in SIL generation).
            guard let type = subcommands.first(where: { $0.spec.name == command.name }) else {
                throw UsageError(.unknownSubcommand(command.name, suggestion: nil), command: nil)
            }
            return .command(try type.init(parsing: arguments), GlobalOptions(arguments))
        }
    }

    /// Parses `words` (the command line without the program name), runs what it asks for, and returns the exit
    /// status: 0 on success, 1 on an operational failure, 64 on a usage error, or what the subcommand returns.
    public static func main(
        _ words: [String], standardOutput: any TextOutput = FileDescriptorOutput.standardOutput,
        standardError: any TextOutput = FileDescriptorOutput.standardError,
        environment: [String: String] = ProcessInfo.processInfo.environment, timeZone: TimeZone = .current,
        demoRunner: (any DemoRunner)? = nil
    ) async -> ExitCode {
        let request: Request
        do {
            request = try parse(words)
        } catch {
            standardError.write(HelpFormatter.usageErrorText(error, tool: spec))
            return .usage
        }
        switch request {
        case .help(let command?):
            standardOutput.write(HelpFormatter.help(of: command, tool: spec))
            return .success
        case .help(nil):
            standardOutput.write(HelpFormatter.toolHelp(spec))
            return .success
        case .version:
            standardOutput.write("\(spec.name) \(spec.version)\n")
            return .success
        case .command(let command, let globals):
            let context = CommandContext(
                standardOutput: standardOutput, standardError: standardError, environment: environment,
                globals: globals, timeZone: timeZone, demoRunner: demoRunner)
            do {
                return try await command.run(in: context)
            } catch {
                standardError.write("\(spec.name) \(type(of: command).spec.name): error: \(error.message)\n")
                return error.exitCode
            }
        }
    }
}
