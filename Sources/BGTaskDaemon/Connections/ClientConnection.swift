// One client connection: bounded non-blocking reads into the Varlink frame decoder, bounded buffered writes.

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import Glibc

/// What a connection streams after a call with `more: true`.
enum StreamRole: Equatable {
    /// The event stream of a registered app.
    case registration(AppID)
    /// The audit stream of `Watch`.
    case watch
}

/// The buffer a connection server's connections read into. The loop is single-threaded and each read's bytes are
/// copied into the connection's decoder before the next read, so one buffer serves every connection.
final class ReadBuffer {
    var bytes = [UInt8](repeating: 0, count: ClientConnection.readSize)
}

/// A client connected to the daemon's socket.
///
/// Everything a client can make the daemon hold is bounded here:
/// - input: one read per readiness, and no read while `MessageSizeMax` of unprocessed input is buffered, so a
///   connection holds at most one message and one read; while it streams (after `Register` or `Watch`), input
///   past `MessageSizeMax` closes it, since no call is read until the stream ends;
/// - calls: at most `callsPerTurn` per loop turn; more complete calls wait for the server's backlog source, so a
///   pipelining client cannot hold the loop; while a call's reply is deferred (`Launch`, until its program has
///   started), the calls after it wait, so replies still come in order;
/// - output: past `readPauseThreshold` unsent bytes the daemon reads and processes no more calls until the client
///   catches up (its replies are never dropped); a streaming connection past `streamOutputLimit` is not reading
///   its events and is disconnected.
///
/// Readiness is level-triggered, so the watched events always match what the connection can act on: no readable
/// interest while reads are held (a half-closed peer would otherwise report readable forever), writable only
/// while output waits. End of input (a half-close) means no more calls: the calls already received are answered
/// and flushed, then the connection closes; a stream ends with it. A hang-up (the peer closed entirely) discards
/// pending output and reads what is left so oneway calls still take effect.
final class ClientConnection {
    /// Unsent bytes past which a streaming connection (events, watch) counts as not reading and is disconnected.
    /// 256 KiB is a thousand events: far more than a live app falls behind by.
    static let streamOutputLimit = 256 << 10
    /// Unsent bytes past which the daemon stops reading and processing the client's calls until it catches up.
    static let readPauseThreshold = 64 << 10
    /// Bytes read per readiness: one read, then back to the loop, so a client that answers each reply at
    /// once (from another CPU) cannot keep the daemon reading it while others wait.
    static let readSize = 64 << 10
    /// Calls processed per loop turn before the connection yields to the others: a turn is then a few hundred
    /// microseconds at most, however many calls a client pipelines.
    static let callsPerTurn = 16

    /// A number for logs, unique while the daemon runs.
    let serial: Int
    let descriptor: FileDescriptor
    let credentials: PeerCredentials
    /// `CLOCK_BOOTTIME` in clock ticks when the connection was accepted: a process that started later cannot be
    /// the peer (the start-time check that keeps a reused pid from passing for it when the kernel has no
    /// `SO_PEERPIDFD`).
    let acceptedAtTicks: UInt64
    /// The peer's supplementary groups when it connected (`SO_PEERGROUPS`), for `ControllerGroup`.
    var groups: [gid_t] = []
    var source: IOSource?
    var decoder: VarlinkFrameDecoder
    /// What this connection streams, once a streaming call was accepted; later calls wait until it ends.
    var stream: StreamRole?
    /// The name this connection is kept under in systemd's fd store (an app's event stream), or nil.
    var storedName: String?
    /// Whether closing shuts the socket down for both ends first: a copy of it in the fd store would otherwise
    /// keep it open, and the client would never see it closed. Off while the daemon stops, so the copy carries
    /// the stream to the next daemon.
    var shutsDownOnClose = false
    /// Limits already logged for this peer, so a client hammering one is logged once.
    var loggedLimits: Set<String> = []
    /// Whether the server's backlog holds this connection (complete calls wait for a later turn).
    var isBacklogged = false
    /// Whether a call's reply is deferred (`holdCalls()`): the calls after it wait until `releaseCalls()`.
    private(set) var isAwaitingReply = false
    private var output: [UInt8] = []
    private var outputStart = 0
    private(set) var isClosed = false
    /// The peer shut down its writing half (end of input was read): no more calls will come.
    private var isInputFinished = false
    /// The peer closed entirely (hang-up): output can no longer be delivered.
    private var isPeerGone = false

    /// Called for each complete message, in order.
    var onMessage: ((ClientConnection, [UInt8]) -> Void)?
    /// Called once when the connection closes, for whatever reason.
    var onClose: ((ClientConnection, String) -> Void)?
    /// Called when complete calls remain after a turn's budget: the server calls `processMessages()` again on a
    /// later turn.
    var onBacklog: ((ClientConnection) -> Void)?

    /// Where reads land before they are copied into the decoder; shared by the server's connections.
    private let readBuffer: ReadBuffer

    init(
        serial: Int, descriptor: FileDescriptor, credentials: PeerCredentials, acceptedAtTicks: UInt64,
        maximumMessageSize: Int, readBuffer: ReadBuffer
    ) {
        self.serial = serial
        self.readBuffer = readBuffer
        self.descriptor = descriptor
        self.credentials = credentials
        self.acceptedAtTicks = acceptedAtTicks
        decoder = VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)
    }

    /// Starts watching the socket on `loop`.
    func attach(to loop: EventLoop) throws(Errno) {
        source = try loop.addIO(fd: descriptor, events: wantedEvents, name: "client-\(serial)") {
            [unowned self] _, events in
            self.handle(events)
        }
    }

    private var bufferedOutput: Int { output.count - outputStart }
    /// Bytes a stream began with (`Watch` replaying the kept history, bounded by `HistorySize`), not yet written:
    /// allowed on top of `streamOutputLimit`, so a client reading its replay is not taken for one not reading.
    var streamOutputAllowance = 0

    private func noteWritten(_ count: Int) {
        if streamOutputAllowance > 0 { streamOutputAllowance = max(0, streamOutputAllowance - count) }
    }
    /// Bytes of replies and events for this client the manager holds until the state they reflect is saved
    /// (`Manager.transmit`): they count against the read pause like unsent output.
    var heldOutputBytes = 0
    private var pendingOutput: Int { bufferedOutput + heldOutputBytes }

    /// Whether the client's calls may be processed now: no stream holds the connection, no call waits for its
    /// deferred reply, and its replies are being read (or can no longer be).
    private var mayProcessCalls: Bool {
        !isClosed && stream == nil && !isAwaitingReply && (isPeerGone || pendingOutput <= Self.readPauseThreshold)
    }

    /// Whether to read now: input not finished, room for a whole message, and replies not piling up (a streaming
    /// connection is still read, so its close is seen, up to the input bound).
    private var mayRead: Bool {
        guard !isClosed, !isInputFinished else { return false }
        if !isPeerGone && pendingOutput > Self.readPauseThreshold { return false }
        return decoder.bufferedByteCount <= decoder.maximumMessageSize
    }

    private var wantedEvents: IOEvents {
        var events: IOEvents = []
        if mayRead { events.insert(.readable) }
        if bufferedOutput > 0 && !isPeerGone { events.insert(.writable) }
        return events
    }

    private func handle(_ events: IOEvents) {
        if events.contains(.error) {
            let pending = UnixSocket.pendingError(of: descriptor).map { "\($0)" } ?? "none pending"
            close(because: "socket error: \(pending) (\(events))")
            return
        }
        if events.contains(.hangUp) && !isPeerGone {
            isPeerGone = true
            output = []
            outputStart = 0
        }
        if events.contains(.writable) {
            flush()
        }
        if !isClosed && mayRead && (events.contains(.readable) || events.contains(.hangUp)) {
            readOnce()
        }
        // A hang-up with nothing left to read (or no room to read it): nothing more can happen here.
        if !isClosed && isPeerGone && !mayRead {
            close(because: "the client hung up")
            return
        }
        updateInterest()
    }

    private func readOnce() {
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
            isInputFinished = true
            // Nothing left to answer or to send (replies held for a save, or deferred, are still owed).
            let isAllAnswered = decoder.bufferedByteCount == 0 && pendingOutput == 0 && !isAwaitingReply
            if isPeerGone || stream != nil || isAllAnswered {
                close(because: "the client closed the connection")
            } else {
                processMessages()
            }
        case .done(let count):
            readBuffer.bytes.withUnsafeBytes {
                decoder.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[0..<count]))
            }
            if stream != nil && decoder.bufferedByteCount > decoder.maximumMessageSize {
                close(
                    because:
                        "more than \(decoder.maximumMessageSize) bytes (MessageSizeMax) of input while its stream is "
                        + "open")
                return
            }
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

    /// Hands up to `callsPerTurn` complete messages to the server, in order; asks for another turn when more may
    /// wait. After the input ended, closes once every call is answered and flushed.
    func processMessages() {
        var processed = 0
        while mayProcessCalls {
            guard processed < Self.callsPerTurn else {
                onBacklog?(self)
                return
            }
            let message: [UInt8]?
            do {
                message = try decoder.nextMessage()
            } catch {
                close(because: "protocol error: \(error)")
                return
            }
            guard let message else { break }
            processed += 1
            onMessage?(self, message)
        }
        guard !isClosed else { return }
        if isInputFinished && mayProcessCalls && pendingOutput == 0 {
            // Every call that came before the end of input is answered, and the answers sent.
            close(because: "the client finished")
            return
        }
        updateInterest()
    }

    /// The call just handed to the manager is answered later (its work goes on off the loop): the calls after it
    /// wait, read but not processed, until `releaseCalls()`. Input stays bounded as while replies pile up: reads
    /// stop once a message's worth is buffered.
    func holdCalls() {
        isAwaitingReply = true
    }

    /// The deferred reply has been handed to `Manager.transmit`: the calls after it go on, on a turn of the backlog
    /// (this may run in the middle of another connection's call), and a client that finished its input is closed
    /// once everything is answered.
    func releaseCalls() {
        guard isAwaitingReply else { return }
        isAwaitingReply = false
        guard !isClosed else { return }
        if decoder.bufferedByteCount > 0 || isInputFinished {
            onBacklog?(self)
        } else {
            updateInterest()
        }
    }

    /// Sends a message the manager held until the state it reflects was saved (counted in `heldOutputBytes` until
    /// now); a client that finished its input is closed, on a turn of the backlog, once nothing more is owed to it.
    func sendHeld(_ message: [UInt8]) {
        heldOutputBytes -= message.count
        send(message)
        if !isClosed && isInputFinished && heldOutputBytes == 0 {
            onBacklog?(self)
        } else {
            updateInterest()
        }
    }

    /// Queues an encoded, NUL-terminated message for the client.
    func send(_ message: [UInt8]) {
        guard !isClosed, !isPeerGone else { return }
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
                noteWritten(written)
                return
            case .done(let written):
                noteWritten(written)
                output.append(contentsOf: message.dropFirst(written))
            case .wouldBlock:
                output.append(contentsOf: message)
            }
        } else {
            output.append(contentsOf: message)
        }
        if stream != nil && !wasEmpty && bufferedOutput > Self.streamOutputLimit + streamOutputAllowance {
            close(because: "the client is not reading its stream (\(bufferedOutput) bytes unsent)")
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
                noteWritten(written)
            }
        }
        if outputStart > 0 && (bufferedOutput == 0 || outputStart > 1 << 20) {
            output.removeFirst(outputStart)
            outputStart = 0
        }
        // Replies drained below the threshold: calls held back (or left after the input ended) may go on.
        if mayProcessCalls && (decoder.bufferedByteCount > 0 || isInputFinished) {
            processMessages()
        }
    }

    /// Makes the watched events match what the connection can act on now.
    func updateInterest() {
        guard let source, !isClosed else { return }
        let events = wantedEvents
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
        if shutsDownOnClose { _ = Glibc.shutdown(descriptor.rawValue, Int32(SHUT_RDWR)) }
        // A failed close still releases the descriptor (close(2) never leaves it open on Linux).
        try? descriptor.close()
        output = []
        let handler = onClose
        onClose = nil
        onMessage = nil
        onBacklog = nil
        handler?(self, reason)
    }
}
