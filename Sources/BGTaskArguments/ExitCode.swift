// How a command ends: its exit status, and an operational failure with the line that explains it.

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
    /// 1: an operational failure (what the command needs is missing, or was refused).
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
