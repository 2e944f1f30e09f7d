// A blocking Varlink client over one Unix socket: plain, streaming (`more`) and oneway calls, with timeouts.
import BGTaskPOSIX
import FoundationEssentials
import Synchronization

/// One connection to a Varlink service, used from any thread.
///
/// Varlink answers calls in order, so calls on one connection take turns: each holds the connection from sending
/// its call to reading its reply. A streaming call holds it until its last reply; other calls meanwhile fail with
/// `.connectionBusy` (give the stream its own connection). A call that times out closes the connection, since the
/// late reply would otherwise be read as the next call's; later calls fail with `.disconnected`.
///
/// `close()` may be called from any thread, also while another thread is blocked reading: it shuts the socket
/// down, which wakes the reader with `.disconnected`, and releases the descriptor once the reader is out.
public final class VarlinkConnection: Sendable {
    /// 16 MiB: replies listing every app (`ListApps`) or the whole history (`History`) are far larger than the
    /// daemon's 64 KiB limit for calls; this still bounds what a misbehaving peer can make the client buffer.
    public static let defaultMaximumMessageSize = 16 << 20

    /// The socket path connected to.
    public let socketPath: String

    /// The largest reply accepted, in bytes; a larger one is a `.protocolViolation` and closes the connection.
    public let maximumMessageSize: Int

    private let socket: FileDescriptor
    private let codec = VarlinkCodec()
    /// Reading, writing and the framing state; held for a whole call, so calls take turns.
    private let io: Mutex<Channel>
    /// Set once by `close()`; separate from `io` so that `close()` can shut the socket down while a reader
    /// holds `io`. The descriptor is released only under both locks, so no thread can use a closed number.
    private let closing = Mutex(false)

    /// What `io` protects.
    private struct Channel {
        var decoder: VarlinkFrameDecoder
        var status: Status = .idle
        var isReleased = false
    }

    /// Whether the connection can take a call.
    private enum Status {
        /// No call in progress.
        case idle
        /// A streaming call is waiting for more replies.
        case streaming
        /// The connection cannot be used any more, for this reason.
        case failed(ClientError)
    }

    /// Connects to the service at `socketPath`.
    ///
    /// Throws `.daemonNotRunning` when no socket file exists or nobody accepts on it, `.permissionDenied` when
    /// the socket may not be opened, `.io` for other failures (such as a path longer than a socket address holds).
    public init(socketPath: String, maximumMessageSize: Int = VarlinkConnection.defaultMaximumMessageSize)
        throws(ClientError)
    {
        self.socketPath = socketPath
        self.maximumMessageSize = maximumMessageSize
        do throws(Errno) {
            socket = try UnixSocket.connect(path: socketPath)
        } catch {
            throw ClientError.connecting(to: socketPath, error)
        }
        io = Mutex(Channel(decoder: VarlinkFrameDecoder(maximumMessageSize: maximumMessageSize)))
    }

    deinit {
        close()
    }

    // MARK: Calls

    /// Calls the method `parameters` belongs to and waits for its reply, at most `timeout` (nil: no limit).
    public func call<M: VarlinkMethodCall>(_ parameters: M, timeout: Duration? = nil) throws(ClientError) -> M.Reply {
        let deadline = timeout.map { MonotonicClock.now() &+ $0.nanosecondCount }
        return try io.withLock { (channel: inout Channel) throws(ClientError) -> M.Reply in
            try checkIdle(channel)
            try send(encode(parameters, more: false, oneway: false), channel: &channel)
            let reply = try readReply(M.Reply.self, method: M.methodName, deadline: deadline, channel: &channel)
            switch reply {
            case .reply(let value, continues: false):
                return value
            case .reply(_, continues: true):
                let violation = ClientError.protocolViolation(
                    "\(M.methodName) replied with continues set to a call without more")
                channel.status = .failed(violation)
                shutDown()
                throw violation
            case .error(let error):
                throw ClientError.reply(error, method: M.methodName, socketPath: socketPath)
            }
        }
    }

    /// Sends a call with `oneway` set: the service runs it and sends no reply, so nothing says whether it worked.
    public func callOneway<M: VarlinkMethodCall>(_ parameters: M) throws(ClientError) {
        try io.withLock { (channel: inout Channel) throws(ClientError) in
            try checkIdle(channel)
            try send(encode(parameters, more: false, oneway: true), channel: &channel)
        }
    }

    /// Sends a call with `more` set and returns its stream of replies.
    ///
    /// The connection belongs to the stream until the service sends the last reply (or an error); cancelling the
    /// stream closes the connection.
    public func callStreaming<M: VarlinkMethodCall>(_ parameters: M) throws(ClientError)
        -> VarlinkReplyStream<M.Reply>
    {
        try io.withLock { (channel: inout Channel) throws(ClientError) in
            try checkIdle(channel)
            try send(encode(parameters, more: true, oneway: false), channel: &channel)
            channel.status = .streaming
        }
        return VarlinkReplyStream(connection: self, method: M.methodName)
    }

    /// The next reply of the streaming call in progress; nil once the last one was returned.
    func nextStreamedReply<Reply: Decodable & Sendable>(_ type: Reply.Type, method: String, timeout: Duration?)
        throws(ClientError) -> (Reply, isLast: Bool)?
    {
        let deadline = timeout.map { MonotonicClock.now() &+ $0.nanosecondCount }
        return try io.withLock { (channel: inout Channel) throws(ClientError) -> (Reply, isLast: Bool)? in
            switch channel.status {
            case .idle: return nil
            case .failed(let error): throw error
            case .streaming: break
            }
            if channel.isReleased { throw ClientError.disconnected }
            let reply: VarlinkReply<Reply>
            do throws(ClientError) {
                reply = try readReply(type, method: method, deadline: deadline, channel: &channel)
            } catch .timedOut {
                // Nothing was sent that a late reply could answer, so the stream is still in step.
                throw ClientError.timedOut
            }
            switch reply {
            case .reply(let value, let continues):
                if !continues { channel.status = .idle }
                return (value, isLast: !continues)
            case .error(let error):
                channel.status = .idle
                throw ClientError.reply(error, method: method, socketPath: socketPath)
            }
        }
    }

    // MARK: State

    /// Whether a call could be sent now: open, not failed, not streaming, and the peer has not hung up.
    ///
    /// A connection that sat idle while the daemon restarted only learns of it on the next call; asking this
    /// first lets a caller reconnect instead of sending a call that cannot be answered.
    public var isUsable: Bool {
        io.withLock { (channel: inout Channel) -> Bool in
            guard !channel.isReleased, case .idle = channel.status, !isClosing else { return false }
            guard channel.decoder.bufferedByteCount == 0 else { return false }
            do throws(Errno) {
                // Idle, so nothing is owed to us: readable means end of file (or an unsolicited message).
                let events = try socket.poll(for: .readable, timeout: .zero)
                if events.isEmpty { return true }
            } catch {
                // The poll failure itself is the answer: the connection cannot be trusted.
            }
            channel.status = .failed(.disconnected)
            return false
        }
    }

    /// Closes the connection; a thread blocked on it returns `.disconnected`. Safe to call more than once.
    public func close() {
        let isFirst = closing.withLock { (isClosing: inout Bool) -> Bool in
            if isClosing { return false }
            isClosing = true
            // The descriptor is still open: it is released below, after this lock is dropped, under `io`.
            shutDownSocket()
            return true
        }
        guard isFirst else { return }
        io.withLock { (channel: inout Channel) in
            if !channel.isReleased {
                channel.isReleased = true
                channel.status = .failed(.disconnected)
                // Nothing useful can follow a failed close: the descriptor is released either way on Linux.
                do throws(Errno) { try socket.close() } catch {}
            }
        }
    }

    private var isClosing: Bool { closing.withLock { $0 } }

    // MARK: Helpers

    private func checkIdle(_ channel: Channel) throws(ClientError) {
        if channel.isReleased { throw ClientError.disconnected }
        switch channel.status {
        case .idle: return
        case .streaming: throw ClientError.connectionBusy
        case .failed(let error):
            // A timeout or protocol violation was reported to the call that met it; later calls see the
            // connection as closed.
            if case .disconnected = error { throw error }
            throw ClientError.disconnected
        }
    }

    private func encode<M: VarlinkMethodCall>(_ parameters: M, more: Bool, oneway: Bool) throws(ClientError) -> [UInt8]
    {
        do throws(VarlinkEncodingError) {
            return try codec.encodeCall(parameters, more: more, oneway: oneway)
        } catch {
            throw ClientError.invalidRequest(error.description)
        }
    }

    private func send(_ message: [UInt8], channel: inout Channel) throws(ClientError) {
        do throws(Errno) {
            try socket.sendAll(message)
        } catch {
            let failure = ClientError.transfer(error)
            channel.status = .failed(failure)
            throw failure
        }
    }

    /// Reads and decodes one reply; any failure but a timeout of a stream read leaves the connection failed.
    private func readReply<Reply: Decodable>(
        _ type: Reply.Type, method: String, deadline: Int64?, channel: inout Channel
    ) throws(ClientError) -> VarlinkReply<Reply> {
        let message: [UInt8]
        do throws(ClientError) {
            message = try readMessage(deadline: deadline, channel: &channel)
        } catch {
            if case .timedOut = error, case .streaming = channel.status {
                throw error
            }
            channel.status = .failed(error)
            if case .timedOut = error { shutDown() }
            throw error
        }
        do throws(VarlinkProtocolError) {
            return try codec.decodeReply(type, from: message)
        } catch {
            let violation = ClientError.protocolViolation("reply to \(method): \(error)")
            channel.status = .failed(violation)
            shutDown()
            throw violation
        }
    }

    private func readMessage(deadline: Int64?, channel: inout Channel) throws(ClientError) -> [UInt8] {
        while true {
            do throws(VarlinkFramingError) {
                if let message = try channel.decoder.nextMessage() { return message }
            } catch {
                shutDown()
                throw ClientError.protocolViolation(error.description)
            }
            if isClosing { throw ClientError.disconnected }
            if let deadline {
                let remaining = deadline - MonotonicClock.now()
                if remaining <= 0 { throw ClientError.timedOut }
                let events: IOEvents
                do throws(Errno) {
                    events = try socket.poll(for: .readable, timeout: .nanoseconds(remaining))
                } catch {
                    throw ClientError.transfer(error)
                }
                if events.isEmpty { throw ClientError.timedOut }
            }
            let bytes: [UInt8]
            do throws(Errno) {
                // 64 KiB per read: replies are usually a few hundred bytes; a large one arrives in a few reads.
                bytes = try socket.read(upTo: 64 * 1024)
            } catch {
                throw ClientError.transfer(error)
            }
            if bytes.isEmpty { throw ClientError.disconnected }
            channel.decoder.append(contentsOf: bytes)
        }
    }

    /// Shuts the socket down after a failure, so the daemon sees the connection end at once.
    private func shutDown() {
        closing.withLock { (isClosing: inout Bool) in
            if !isClosing { shutDownSocket() }
        }
    }

    /// Called with `closing` held and the descriptor known to be open.
    private func shutDownSocket() {
        // A failure means the socket is already unusable, which is what this is for.
        do throws(Errno) { try UnixSocket.shutdown(socket) } catch {}
    }
}

/// The replies of one streaming call (`more: true`), read one at a time.
public final class VarlinkReplyStream<Reply: Decodable & Sendable>: Sendable {
    /// The connection the call was made on.
    public let connection: VarlinkConnection
    /// The fully qualified method called.
    public let method: String
    private let isFinished = Mutex(false)

    init(connection: VarlinkConnection, method: String) {
        self.connection = connection
        self.method = method
    }

    /// The next reply, waiting at most `timeout` (nil: no limit); nil once the service sent its last reply.
    ///
    /// The last reply is returned like the others; the call after it returns nil. An error reply ends the stream
    /// and is thrown. `.timedOut` leaves the stream usable: call again to keep waiting.
    public func next(timeout: Duration? = nil) throws(ClientError) -> Reply? {
        if isFinished.withLock({ $0 }) { return nil }
        do throws(ClientError) {
            guard let (reply, isLast) = try connection.nextStreamedReply(Reply.self, method: method, timeout: timeout)
            else {
                isFinished.withLock { $0 = true }
                return nil
            }
            if isLast { isFinished.withLock { $0 = true } }
            return reply
        } catch .timedOut {
            throw ClientError.timedOut
        } catch {
            isFinished.withLock { $0 = true }
            throw error
        }
    }

    /// Ends the stream by closing its connection; a thread blocked in `next` returns `.disconnected`.
    public func cancel() {
        connection.close()
    }
}
