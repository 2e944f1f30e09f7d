// One client connection: non-blocking reads into the Varlink frame decoder, bounded buffered writes.

import BGTaskCore
import BGTaskProtocol
import BGTaskSystem
import Foundation
import Glibc

/// What a connection streams after a call with `more: true`.
enum StreamRole: Equatable {
    /// The event stream of a registered app.
    case registration(AppID)
    /// The audit stream of `Watch`.
    case watch
}

/// The buffer a manager's connections read into. The loop is single-threaded and each read's bytes are
/// copied into the connection's decoder before the next read, so one buffer serves every connection.
final class ReadBuffer {
    var bytes = [UInt8](repeating: 0, count: ClientConnection.readSize)
}

/// A client connected to the daemon's socket.
///
/// Reads are level-triggered: each readiness reads what is there (bounded per turn, for fairness) and hands
/// complete messages to the manager in order. Writes go out at once when the socket takes them and are
/// buffered otherwise; a client whose buffer keeps growing is not reading and is disconnected, so a slow or
/// stuck client can never block the loop or make the daemon hold unbounded memory.
final class ClientConnection {
    /// Bytes buffered for a client before it counts as not reading. A single larger reply (a long `ListApps`)
    /// still goes out when the buffer was empty before it.
    static let outputLimit = 1 << 20
    /// Above this many buffered bytes the daemon stops reading the client's calls until it catches up.
    static let readPauseThreshold = 256 << 10
    /// Bytes read per readiness: one read, then back to the loop, so a client that answers each reply at
    /// once (from another CPU) cannot keep the daemon reading it while others wait. Level-triggered polling
    /// brings the connection back on the next iteration if more is there.
    static let readSize = 64 << 10

    /// A number for logs, unique while the daemon runs.
    let serial: Int
    let descriptor: FileDescriptor
    let credentials: PeerCredentials
    /// The peer's supplementary groups when it connected (`SO_PEERGROUPS`), for `ControllerGroup`.
    var groups: [gid_t] = []
    /// The peer process's pidfd from `SO_PEERPIDFD`, when the kernel provides it.
    var peerPidFD: PidFD?
    var source: IOSource?
    var decoder: VarlinkFrameDecoder
    /// What this connection streams, once a streaming call was accepted; later calls wait until it ends.
    var stream: StreamRole?
    private var output: [UInt8] = []
    private var outputStart = 0
    private(set) var isClosed = false
    private var isReadingPaused = false

    /// Called for each complete message, in order.
    var onMessage: ((ClientConnection, Data) -> Void)?
    /// Called once when the connection closes, for whatever reason.
    var onClose: ((ClientConnection, String) -> Void)?

    /// Where reads land before they are copied into the decoder; shared by the manager's connections.
    private let readBuffer: ReadBuffer

    init(
        serial: Int, descriptor: FileDescriptor, credentials: PeerCredentials, maximumMessageSize: Int,
        readBuffer: ReadBuffer
    ) {
        self.serial = serial
        self.readBuffer = readBuffer
        self.descriptor = descriptor
        self.credentials = credentials
        decoder = VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)
    }

    /// Starts watching the socket on `loop`.
    func attach(to loop: EventLoop) throws(Errno) {
        source = try loop.addIO(fd: descriptor, events: [.readable, .readHangUp], name: "client-\(serial)") {
            [unowned self] _, events in
            self.handle(events)
        }
    }

    private var bufferedOutput: Int { output.count - outputStart }

    private func handle(_ events: IOEvents) {
        if events.contains(.writable) {
            flush()
        }
        if !isClosed && (events.contains(.readable) || events.contains(.readHangUp)) && !isReadingPaused {
            readAvailable()
        }
        if !isClosed && (events.contains(.error) || (events.contains(.hangUp) && !events.contains(.readable))) {
            close(because: "the client hung up")
        }
    }

    private func readAvailable() {
        let result = readBuffer.bytes.withUnsafeMutableBytes { bytes in
            Self.attempt { () throws(Errno) in
                try descriptor.read(into: bytes)
            }
        }
        switch result {
        case .wouldBlock:
            return
        case .failed(let error):
            close(because: "read failed: \(error)")
        case .done(0):
            close(because: "the client closed the connection")
        case .done(let count):
            decoder.append(contentsOf: readBuffer.bytes[0..<count])
            processMessages()
        }
    }

    /// The outcome of one non-blocking read or write.
    private enum Attempt {
        case done(Int)
        case wouldBlock
        case failed(Errno)
    }

    private static func attempt(_ body: () throws(Errno) -> Int) -> Attempt {
        do {
            return .done(try body())
        } catch {
            return error == .wouldBlock ? .wouldBlock : .failed(error)
        }
    }

    /// Hands complete messages to the manager while no stream is active on this connection.
    func processMessages() {
        while !isClosed && stream == nil && !isReadingPaused {
            let message: Data?
            do {
                message = try decoder.nextMessage()
            } catch {
                close(because: "protocol error: \(error)")
                return
            }
            guard let message else { return }
            onMessage?(self, message)
        }
    }

    /// Queues an encoded, NUL-terminated message for the client.
    func send(_ message: Data) {
        guard !isClosed else { return }
        let wasEmpty = bufferedOutput == 0
        if wasEmpty {
            let result = message.withUnsafeBytes { bytes in
                Self.attempt { () throws(Errno) in
                    try descriptor.send(bytes)
                }
            }
            switch result {
            case .failed(let error):
                close(because: "write failed: \(error)")
                return
            case .done(let written) where written == message.count:
                return
            case .done(let written):
                output.append(contentsOf: message.dropFirst(written))
            case .wouldBlock:
                output.append(contentsOf: message)
            }
        } else {
            output.append(contentsOf: message)
        }
        if !wasEmpty && bufferedOutput > Self.outputLimit {
            close(because: "the client is not reading (\(bufferedOutput) bytes unsent)")
            return
        }
        updateInterest()
    }

    private func flush() {
        writing: while bufferedOutput > 0 {
            let result = output[outputStart...].withUnsafeBytes { bytes in
                Self.attempt { () throws(Errno) in
                    try descriptor.send(bytes)
                }
            }
            switch result {
            case .wouldBlock:
                break writing
            case .failed(let error):
                close(because: "write failed: \(error)")
                return
            case .done(let written):
                outputStart += written
            }
        }
        if outputStart > 0 && (bufferedOutput == 0 || outputStart > 1 << 20) {
            output.removeFirst(outputStart)
            outputStart = 0
        }
        updateInterest()
        if !isReadingPaused && stream == nil {
            processMessages()
        }
    }

    private func updateInterest() {
        guard let source, !isClosed else { return }
        isReadingPaused = bufferedOutput > Self.readPauseThreshold
        var events: IOEvents = [.readHangUp]
        if !isReadingPaused { events.insert(.readable) }
        if bufferedOutput > 0 { events.insert(.writable) }
        do {
            if try events != source.events {
                try source.setEvents(events)
            }
        } catch {
            close(because: "cannot watch the socket: \(error)")
        }
    }

    /// Closes the connection once; `reason` goes to the close handler for the log.
    func close(because reason: String) {
        guard !isClosed else { return }
        isClosed = true
        source?.cancel()
        source = nil
        try? peerPidFD?.close()
        peerPidFD = nil
        // A failed close still releases the descriptor (close(2) never leaves it open on Linux).
        try? descriptor.close()
        output = []
        let handler = onClose
        onClose = nil
        onMessage = nil
        handler?(self, reason)
    }
}
