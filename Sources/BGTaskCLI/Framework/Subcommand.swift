// The shape every subcommand has: a static spec, an initializer from parsed arguments, and a run method.
import BGTaskArguments
import Foundation

/// A subcommand of `bgtask`: its spec, its parsed form, and what it does.
///
/// One type per subcommand, in its own file. The parser reads `spec` to parse the command line and to write the
/// help, the usage lines and the man page; it then builds the subcommand with `init(parsing:)` and the tool calls
/// `run(in:)`.
public protocol Subcommand: Sendable {
    /// The subcommand's declaration.
    static var spec: CommandSpec { get }

    /// Builds the subcommand from a command line the parser matched to `spec`; throws for what the spec cannot
    /// express (a combination of options that makes no sense).
    init(parsing arguments: ParsedArguments) throws(UsageError)

    /// Does the work, writing to the context's outputs; returns the exit status, throws for an operational
    /// failure.
    func run(in context: CommandContext) async throws(CommandFailure) -> ExitCode
}

/// Where a subcommand writes and what it may read of its surroundings; tests run the tool in-process with
/// captured outputs and a fixed environment.
public struct CommandContext: Sendable {
    /// Standard output: results.
    public var standardOutput: any TextOutput
    /// Standard error: errors and progress lines.
    public var standardError: any TextOutput
    /// The environment variables (`BGTASK_SOCKET`, `XDG_RUNTIME_DIR`).
    public var environment: [String: String]
    /// The global options of the command line.
    public var globals: GlobalOptions
    /// The time zone in which wall-clock times are shown.
    public var timeZone: TimeZone
    /// The demo's implementation, when this build of the tool has one.
    public var demoRunner: (any DemoRunner)?

    /// A context.
    public init(
        standardOutput: any TextOutput, standardError: any TextOutput, environment: [String: String],
        globals: GlobalOptions = GlobalOptions(), timeZone: TimeZone = .current, demoRunner: (any DemoRunner)? = nil
    ) {
        self.standardOutput = standardOutput
        self.standardError = standardError
        self.environment = environment
        self.globals = globals
        self.timeZone = timeZone
        self.demoRunner = demoRunner
    }

    /// Writes a progress line to standard error: `bgtask: <line>`.
    public func progress(_ line: String) {
        standardError.write("bgtask: " + line + "\n")
    }
}
