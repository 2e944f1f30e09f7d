// One benchmark app's event stream: registers, then reads every event on its own thread, stamped as it is read.

import BGTaskPOSIX
import BGTaskProtocol
import Dispatch
import Foundation
import Synchronization

/// An event as the app received it.
struct ReceivedEvent: Sendable {
    /// The event id, for `Acknowledge`.
    var id: Int
    /// The event's kind, in the interface's words (`didEnterBackground`, `backgroundTaskExpiring`, ...).
    var kind: String
    /// `CLOCK_MONOTONIC` nanoseconds right after the read that brought the event returned.
    var arrivalNanoseconds: Int64
}

/// What waiting on an event stream gave.
enum StreamItem: Sendable {
    /// The next event.
    case event(ReceivedEvent)
    /// Nothing arrived in time.
    case timedOut
    /// The stream ended (the daemon closed it or sent an error), for this reason; nothing follows.
    case ended(String)
}

/// The event stream of one registration, on a connection the app's stand-in made.
///
/// A thread of its own blocks in `read` on the connection and stamps what it reads with `MonotonicClock` right
/// when the read returns, before decoding, so neither the app's own work nor a busy CPU between the read and the
/// app's look at the event makes a warning look late. The app takes events in order with `next(until:)`.
final class EventStream: Sendable {
    private let connection: FileDescriptor
    private let queue = Mutex<[StreamItem]>([])
    /// Signalled once per queued item.
    private let available = DispatchSemaphore(value: 0)
    /// Signalled once when the reading thread is done with the connection.
    private let readerFinished = DispatchSemaphore(value: 0)

    /// The first reply of `Register`, as far as the benchmark checks it.
    private struct FirstReply: Decodable {
        struct App: Decodable {
            var name: String
            var pid: Int
        }
        var app: App?
    }

    /// A later reply of `Register`: one event.
    private struct EventReply: Decodable {
        struct Event: Decodable {
            var id: Int
            var kind: String
        }
        var event: Event?
    }

    /// Registers `name` on `connection` (the stand-in's, whose pid is `standInPID`), asking for a background time
    /// budget of `backgroundTime`, and starts reading its events. Fails if the daemon refuses or does not answer
    /// within `timeout`, or registers the app to another process than the stand-in (it would then stop the
    /// wrong process). The connection is closed by `close()`, or here when registering fails.
    init(
        name: String, connection: FileDescriptor, standInPID: pid_t, backgroundTime: Duration, timeout: Duration
    ) throws {
        self.connection = connection
        let codec = VarlinkCodec()
        var decoder = VarlinkFrameDecoder(maximumMessageSize: 1 << 20)
        do {
            let seconds =
                Double(backgroundTime.components.seconds)
                + Double(backgroundTime.components.attoseconds) / 1e18
            try connection.sendAll(
                codec.encodeCall(RegisterParameters(name: name, backgroundTimeSec: seconds), more: true))
            let deadline = MonotonicClock.now() + timeout.nanosecondCount
            var first: [UInt8]?
            while first == nil {
                let remaining = deadline - MonotonicClock.now()
                guard remaining > 0, try !connection.poll(for: .readable, timeout: .nanoseconds(remaining)).isEmpty
                else {
                    throw BenchmarkError("Register of \(name) got no reply within \(timeout)")
                }
                let bytes = try connection.read(upTo: 65_536)
                if bytes.isEmpty { throw BenchmarkError("the daemon closed the connection of \(name)'s Register") }
                decoder.append(contentsOf: bytes)
                first = try decoder.nextMessage()
            }
            switch try codec.decodeReply(FirstReply.self, from: first!) {
            case .error(let error):
                throw BenchmarkError("Register of \(name) failed: \(error)")
            case .reply(let reply, _):
                guard let app = reply.app else { throw BenchmarkError("Register of \(name) replied without the app") }
                guard app.pid == Int(standInPID) else {
                    throw BenchmarkError(
                        "the daemon registered \(name) to pid \(app.pid), not to its stand-in (pid \(standInPID))")
                }
            }
        } catch {
            try? connection.close()
            readerFinished.signal()
            throw error
        }
        let leftover = decoder
        let thread = Thread { [self] in
            read(from: leftover, codec: codec)
            readerFinished.signal()
        }
        thread.name = "events \(name)"
        thread.start()
    }

    /// The reading thread: every read is stamped, then its messages are decoded and queued in order.
    private func read(from leftover: VarlinkFrameDecoder, codec: VarlinkCodec) {
        var decoder = leftover
        while true {
            let bytes: [UInt8]
            do {
                bytes = try connection.read(upTo: 65_536)
            } catch {
                push(.ended("reading the event stream failed: \(error)"))
                return
            }
            let arrival = MonotonicClock.now()
            if bytes.isEmpty {
                push(.ended("the event stream closed"))
                return
            }
            decoder.append(contentsOf: bytes)
            do {
                while let message = try decoder.nextMessage() {
                    switch try codec.decodeReply(EventReply.self, from: message) {
                    case .error(let error):
                        push(.ended("the event stream ended with \(error)"))
                        return
                    case .reply(let reply, let continues):
                        if let event = reply.event {
                            push(.event(ReceivedEvent(id: event.id, kind: event.kind, arrivalNanoseconds: arrival)))
                        }
                        if !continues {
                            push(.ended("the event stream ended"))
                            return
                        }
                    }
                }
            } catch {
                push(.ended("the event stream carried a bad message: \(error)"))
                return
            }
        }
    }

    private func push(_ item: StreamItem) {
        queue.withLock { $0.append(item) }
        available.signal()
    }

    /// The next item, waiting until `deadline` (`CLOCK_MONOTONIC` nanoseconds) at most.
    func next(until deadline: Int64) -> StreamItem {
        let remaining = max(0, deadline - MonotonicClock.now())
        guard available.wait(timeout: .now() + .nanoseconds(Int(remaining))) == .success else { return .timedOut }
        return queue.withLock { items in
            let item = items.removeFirst()
            // An end stays at the head, so every later wait sees it too.
            if case .ended = item {
                items.insert(item, at: 0)
                available.signal()
            }
            return item
        }
    }

    /// Ends the registration: shuts the connection down (the daemon ends the app and its leases), waits for the
    /// reading thread and closes the descriptor. Call once.
    func close() {
        // A failure means the socket is already unusable, which is what this is for.
        try? UnixSocket.shutdown(connection)
        readerFinished.wait()
        try? connection.close()
    }
}
