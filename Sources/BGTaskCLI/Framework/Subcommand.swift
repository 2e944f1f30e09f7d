// The shape every subcommand has: a static spec, an initializer from parsed arguments, and a run method.
import Foundation

/// A process exit status.
public struct ExitCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The status, 0 through 255.
    public var rawValue: Int32

    /// Wraps a status.
    public init(rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// 0: the command did what was asked.
    public static let success = ExitCode(rawValue: 0)
    /// 1: an operational failure (no daemon, no such app, refused by the daemon).
    public static let failure = ExitCode(rawValue: 1)
    /// 64: the command line was wrong (`EX_USAGE` from sysexits.h).
    public static let usage = ExitCode(rawValue: 64)

    public var description: String { String(rawValue) }
}

/// An operational failure: what went wrong and what to do about it, printed as one line; exits 1 unless told.
public struct CommandFailure: Error, Hashable, Sendable, CustomStringConvertible {
    /// The line to print after the program name, naming what went wrong and, where known, what to do.
    public var message: String
    /// The exit status: 1, or a conventional status such as 127 for a command that was not found.
    public var exitCode: ExitCode

    /// A failure with its message and exit status.
    public init(_ message: String, exitCode: ExitCode = .failure) {
        self.message = message
        self.exitCode = exitCode
    }

    public var description: String { message }
}

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
