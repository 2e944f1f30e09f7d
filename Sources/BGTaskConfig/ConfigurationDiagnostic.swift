// Where a configuration problem was found and how bad it is, printed like a compiler message.

/// A place in a configuration file: the file name as it was read, and a line number starting at 1.
public struct FileLocation: Hashable, Sendable, CustomStringConvertible {
    /// The file's path, as the loader read it (or the name given to the parser).
    public var file: String
    /// The line, starting at 1. For a line continued with a backslash, the line where it starts.
    public var line: Int

    /// Creates a location.
    public init(file: String, line: Int) {
        self.file = file
        self.line = line
    }

    public var description: String { "\(file):\(line)" }
}

/// One problem found while reading the configuration.
///
/// An `error` means something written in the files was not applied (a bad value, an unreadable file, a
/// malformed line); the previous value stays in force. A `warning` means the files were applied but something
/// looks wrong (an unknown key, a key set twice in one file, settings that work against each other).
public struct ConfigurationDiagnostic: Hashable, Sendable, CustomStringConvertible {
    /// How serious a diagnostic is.
    public enum Severity: String, Hashable, Sendable {
        /// Applied, but probably not what was meant.
        case warning
        /// Not applied.
        case error
    }

    /// The file the problem is in.
    public var file: String
    /// The line, starting at 1; nil for problems with a whole file (unreadable, misnamed).
    public var line: Int?
    /// How serious it is.
    public var severity: Severity
    /// What is wrong, and what happens instead.
    public var message: String

    /// Creates a diagnostic.
    public init(file: String, line: Int?, severity: Severity, message: String) {
        self.file = file
        self.line = line
        self.severity = severity
        self.message = message
    }

    /// Creates a diagnostic at `location`.
    public init(at location: FileLocation, severity: Severity, message: String) {
        self.init(file: location.file, line: location.line, severity: severity, message: message)
    }

    /// `file:line: severity: message`, the shape editors and `grep -n` users recognize.
    public var description: String {
        let place = line.map { "\(file):\($0)" } ?? file
        return "\(place): \(severity.rawValue): \(message)"
    }
}
