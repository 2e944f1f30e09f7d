// Varlink framing: each message is a JSON object followed by one NUL byte on a stream socket.

/// A framing failure: the peer broke the framing rules, and the connection must be closed.
public enum VarlinkFramingError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A message, or the bytes buffered while waiting for its NUL, exceeds `limit` bytes (the NUL not counted).
    case messageTooLarge(limit: Int)

    public var description: String {
        switch self {
        case .messageTooLarge(let limit): "Varlink message larger than \(limit) bytes"
        }
    }
}

/// Splits a byte stream into Varlink messages, however the reads cut it.
///
/// Append whatever a read returned, then pop messages until `nextMessage()` returns nil. One read may hold many
/// messages and a message may span many reads. Each byte is scanned once: the search for the NUL resumes where
/// it stopped. A message longer than `maximumMessageSize` is an error as soon as it is detected, without waiting
/// for its end, so a peer cannot make the buffer grow without bound; after it the decoder stays failed.
public struct VarlinkFrameDecoder: Sendable {
    /// 64 KiB, the default of `MessageSizeMax=64K`: calls are a few hundred bytes, so this is generous for the
    /// daemon while bounding what one connection can make it buffer. A client reading replies that list many apps
    /// (`ListApps`, `History`) should pass a larger limit.
    public static let defaultMaximumMessageSize = 64 * 1024

    /// The largest message accepted, in bytes, not counting the NUL.
    public let maximumMessageSize: Int

    /// Received bytes; the unconsumed ones are `buffer[start...]`.
    private var buffer: [UInt8] = []
    /// Index of the first byte of the next message.
    private var start = 0
    /// Index from which to continue searching for a NUL: every byte in `start..<scanned` is known not to be NUL.
    private var scanned = 0
    /// Set once a message was too large: the stream cannot be resynchronised, so every later call fails.
    private var failure: VarlinkFramingError?

    /// A decoder accepting messages up to `maximumMessageSize` bytes.
    public init(maximumMessageSize: Int = VarlinkFrameDecoder.defaultMaximumMessageSize) {
        self.maximumMessageSize = maximumMessageSize
    }

    /// The number of received bytes not yet returned as a message.
    public var bufferedByteCount: Int { buffer.count - start }

    /// Adds bytes received from the peer.
    public mutating func append<Bytes: Collection>(contentsOf bytes: Bytes) where Bytes.Element == UInt8 {
        dropConsumed()
        buffer.append(contentsOf: bytes)
    }

    /// Adds bytes received from the peer, straight from the `[UInt8]` a read filled (memory bound to `UInt8`):
    /// one copy, with no generic iteration (the daemon's readers call this on every read).
    public mutating func append(contentsOf bytes: UnsafeRawBufferPointer) {
        dropConsumed()
        buffer.append(contentsOf: bytes.assumingMemoryBound(to: UInt8.self))
    }

    /// Drops consumed bytes before growing, so the buffer holds at most one partial message plus the next read.
    private mutating func dropConsumed() {
        if start > 0 && (start == buffer.count || start >= 4096) {
            buffer.removeSubrange(0..<start)
            scanned -= start
            start = 0
        }
    }

    /// The next complete message without its NUL, or nil when the buffered bytes hold no complete message.
    ///
    /// An empty message (a NUL right after the previous one) is returned empty; the codec rejects it.
    public mutating func nextMessage() throws(VarlinkFramingError) -> [UInt8]? {
        if let failure { throw failure }
        guard let terminator = buffer[scanned...].firstIndex(of: 0) else {
            scanned = buffer.count
            if buffer.count - start > maximumMessageSize { return try fail() }
            return nil
        }
        if terminator - start > maximumMessageSize { return try fail() }
        let message = Array(buffer[start..<terminator])
        start = terminator + 1
        scanned = start
        return message
    }

    /// Records the size failure, releases the buffer, and throws.
    private mutating func fail() throws(VarlinkFramingError) -> [UInt8]? {
        let error = VarlinkFramingError.messageTooLarge(limit: maximumMessageSize)
        failure = error
        buffer = []
        start = 0
        scanned = 0
        throw error
    }
}

/// Helpers for writing Varlink frames.
public enum VarlinkFrame {
    /// The byte that ends every message.
    public static let terminator: UInt8 = 0

    /// `json` followed by the NUL that ends a message.
    public static func frame<Bytes: Collection>(_ json: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        var framed = Array(json)
        framed.append(terminator)
        return framed
    }

    /// Appends `json` and the NUL that ends a message to `output` (a connection's output buffer).
    public static func append<Bytes: Collection>(_ json: Bytes, to output: inout [UInt8]) where Bytes.Element == UInt8 {
        output.append(contentsOf: json)
        output.append(terminator)
    }
}
