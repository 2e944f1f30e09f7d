// Where the tool's text goes: a file descriptor in the real tool, a buffer in tests.
import Glibc
import Synchronization

/// A destination for text.
public protocol TextOutput: Sendable {
    /// Writes `text` as UTF-8, whole, or as much as the destination takes.
    func write(_ text: String)
}

/// Text written to a file descriptor (1 or 2) with `write(2)`, retrying short writes and `EINTR`.
///
/// Foundation's `stderr` global is not concurrency-safe in Swift 6; this writes to the descriptor directly.
public struct FileDescriptorOutput: TextOutput {
    /// The descriptor written to.
    public let descriptor: Int32

    /// Output to `descriptor`.
    public init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Standard output, fd 1.
    public static let standardOutput = FileDescriptorOutput(descriptor: 1)
    /// Standard error, fd 2.
    public static let standardError = FileDescriptorOutput(descriptor: 2)

    public func write(_ text: String) {
        var remaining = Array(text.utf8)[...]
        while !remaining.isEmpty {
            let written = remaining.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            // A closed pipe (EPIPE) or a full disk: nothing useful can be done with the rest of the text.
            guard written > 0 else { return }
            remaining = remaining.dropFirst(written)
        }
    }
}

/// Text kept in memory, for running the tool in-process in tests.
public final class CapturedOutput: TextOutput {
    private let buffer = Mutex("")

    /// An empty buffer.
    public init() {}

    public func write(_ text: String) {
        buffer.withLock { $0 += text }
    }

    /// Everything written so far.
    public var text: String { buffer.withLock { $0 } }
}
