// Opening many leases at once for `bgtask-bench scale`: pipelined over a few connections of their own, closed
// after.

import BGTaskBenchmarks
import BGTaskPOSIX

/// Opens leases in bulk: `BeginBackgroundTask` calls pipelined over `connectionCount` connections, `window` in
/// flight on each, every reply checked.
///
/// The daemon serves up to 16 calls of each connection per turn of its loop and then takes one snapshot of its
/// state to save; with 1,000 apps and their leases that snapshot costs far more than a call, so the calls of a
/// turn should be many: sixteen connections give it 256. The connections are closed when done, and the daemon is
/// known to have closed its ends: each is shut down for writing and read to its end, which the daemon sends only
/// as it closes the connection.
struct LeaseOpener {
    /// Connections the calls are spread over.
    static let connectionCount = 16
    /// Calls in flight per connection: 64 calls are 7 KiB, far under the 64 KiB of input the daemon leaves a client
    /// unread, and their replies 2 KiB, far under the 64 KiB unsent at which it stops reading one.
    static let window = 64
    /// How long one read may wait: the daemon answers a pipelined batch once its state is saved.
    static let readTimeout: Duration = .seconds(30)

    /// The daemon's socket.
    var socketPath: String

    /// Opens `perApp` leases on each of `names`, and returns once every one was granted and the connections are
    /// closed on both sides; checks for an interruption between batches.
    func open(_ perApp: Int, on names: [String]) throws {
        var connections: [FileDescriptor] = []
        defer {
            for connection in connections { try? connection.close() }
        }
        for _ in 0..<Self.connectionCount {
            connections.append(try UnixSocket.connect(path: socketPath))
        }
        var calls = names.lazy.flatMap { name in
            repeatElement(LeaseCaller.beginMessage(app: name), count: perApp)
        }.makeIterator()
        var readers = Array(repeating: FrameReader(), count: connections.count)
        var isDone = false
        while !isDone {
            try BenchmarkInterruption.check()
            var inFlight = Array(repeating: 0, count: connections.count)
            for (index, connection) in connections.enumerated() {
                var batch: [UInt8] = []
                while inFlight[index] < Self.window, let call = calls.next() {
                    batch += call
                    inFlight[index] += 1
                }
                if batch.isEmpty { isDone = true }
                try connection.sendAll(batch)
            }
            for (index, connection) in connections.enumerated() {
                try expectGranted(inFlight[index], from: connection, reader: &readers[index])
            }
        }
        for connection in connections {
            try UnixSocket.shutdown(connection, .write)
            try readEndOfFile(connection)
        }
    }

    /// Reads `count` replies and fails unless each grants a lease.
    private func expectGranted(_ count: Int, from connection: FileDescriptor, reader: inout FrameReader) throws {
        for _ in 0..<count {
            let reply = try reader.next(from: connection, timeout: Self.readTimeout)
            guard taskID(in: reply) != nil else {
                throw BenchError("BeginBackgroundTask failed: \(String(decoding: reply, as: UTF8.self))")
            }
        }
    }

    /// Waits at most `readTimeout` for the daemon to close `connection`, which has nothing more to send.
    private func readEndOfFile(_ connection: FileDescriptor) throws {
        guard try !connection.poll(for: .readable, timeout: Self.readTimeout).isEmpty else {
            throw BenchError("the daemon did not close a finished connection within \(Self.readTimeout)")
        }
        let bytes = try connection.read(upTo: 4096)
        guard bytes.isEmpty else {
            throw BenchError("the daemon sent more than was asked: \(String(decoding: bytes, as: UTF8.self))")
        }
    }
}

/// NUL-terminated messages read from a blocking socket, keeping what follows one message for the next (replies to
/// pipelined calls arrive several per read).
struct FrameReader {
    /// Bytes read and not yet returned.
    private var buffer: [UInt8] = []

    /// The next message, without its NUL; waits at most `timeout` for each read.
    mutating func next(from socket: FileDescriptor, timeout: Duration) throws -> [UInt8] {
        while true {
            if let end = buffer.firstIndex(of: 0) {
                let message = Array(buffer[..<end])
                buffer.removeSubrange(...end)
                return message
            }
            guard try !socket.poll(for: .readable, timeout: timeout).isEmpty else {
                throw BenchError("no reply within \(timeout)")
            }
            let chunk = try socket.read(upTo: 65_536)
            guard !chunk.isEmpty else { throw BenchError("the daemon closed the connection") }
            buffer += chunk
        }
    }
}
