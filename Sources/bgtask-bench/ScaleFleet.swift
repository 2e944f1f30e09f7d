// The apps of `bgtask-bench scale`: one registration connection each, held open, their event streams drained.

import BGTaskBenchmarks
import BGTaskPOSIX
import Dispatch
import Foundation
import Glibc
import Synchronization

/// Many apps registered from this process, each on a connection of its own that stays open (closing it would end
/// the registration), with one thread reading every event stream so the daemon never holds unsent events for them.
///
/// The apps all register from this process: the daemon ties each to the process behind its connection, and keeps
/// one pidfd per process however many names it registers, so apps in processes of their own would cost it one
/// descriptor more each. They stay in the foreground, where no deadline runs and few events are sent.
final class ScaleFleet {
    /// The registration connections, in the order the apps registered.
    private(set) var registrations: [FileDescriptor] = []
    /// The thread reading every registered app's event stream.
    private let drain: EventDrain

    /// Registrations sent before their first replies are read: the daemon answers a registration once the state
    /// holding it is saved, so a batch sent together shares a few saves instead of one each.
    static let registrationBatch = 64
    /// How long one `Register` may wait for its first reply: the daemon answers once the state is saved.
    static let replyTimeout: Duration = .seconds(30)

    /// A fleet with no app yet, its reading thread started.
    init() throws {
        drain = try EventDrain()
    }

    /// Events read from the apps' streams after their first replies.
    var eventsRead: Int { drain.messagesRead }
    /// Streams the daemon closed or broke: each one an app the daemon dropped.
    var streamsEnded: Int { drain.streamsEnded }
    /// Why the reading thread stopped early, if it did: the streams are no longer read.
    var drainFailure: String? { drain.failureDescription }

    /// Registers `names` on `socketPath`, each on a new connection, `registrationBatch` at a time (sent together,
    /// then their first replies read), and hands each connection to the reading thread. Checks for an interruption
    /// between batches.
    func register(_ names: [String], socketPath: String) throws {
        var remaining = names[...]
        while !remaining.isEmpty {
            try BenchmarkInterruption.check()
            let batch = remaining.prefix(Self.registrationBatch)
            remaining = remaining.dropFirst(batch.count)
            var pending: [(name: String, connection: FileDescriptor)] = []
            for name in batch {
                let connection = try UnixSocket.connect(path: socketPath)
                registrations.append(connection)
                pending.append((name, connection))
                try connection.sendAll(Self.registerMessage(name: name))
            }
            var extraMessages = 0
            for (name, connection) in pending {
                extraMessages += try Self.readFirstReply(of: name, on: connection)
            }
            try drain.add(pending.map(\.connection), messagesAlreadyRead: extraMessages)
        }
    }

    /// Stops the reading thread, then closes every registration connection. Call once, after the daemon stopped
    /// (it then ends no registration one by one).
    func close() {
        drain.stop()
        for connection in registrations { try? connection.close() }
        registrations = []
    }

    /// `Register` of `name` in the foreground, as a streaming call, NUL-terminated.
    private static func registerMessage(name: String) -> [UInt8] {
        Array(#"{"method":"io.bgtask.Lifecycle.Register","parameters":{"name":"\#(name)"},"more":true}"#.utf8) + [0]
    }

    /// Reads the first reply of `name`'s `Register` on `connection` within `replyTimeout` and checks that it
    /// carries the app and continues; returns how many further messages (events) came in the same reads.
    private static func readFirstReply(of name: String, on connection: FileDescriptor) throws -> Int {
        let deadline = MonotonicClock.now() + replyTimeout.nanosecondCount
        var bytes: [UInt8] = []
        while !bytes.contains(0) {
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0, try !connection.poll(for: .readable, timeout: .nanoseconds(remaining)).isEmpty else {
                throw BenchError("Register of \(name) got no reply within \(replyTimeout)")
            }
            let chunk = try connection.read(upTo: 65_536)
            guard !chunk.isEmpty else { throw BenchError("the daemon closed \(name)'s connection before replying") }
            bytes += chunk
        }
        // `bytes` holds a NUL: the loop above ends only then.
        let end = bytes.firstIndex(of: 0)!
        let reply = String(decoding: bytes[..<end], as: UTF8.self)
        guard !reply.contains(#""error":"#), reply.contains(#""app":"#), reply.contains(#""continues":true"#) else {
            throw BenchError("Register of \(name) failed: \(reply)")
        }
        return bytes[(end + 1)...].filter { $0 == 0 }.count
    }
}

/// One thread reading many connections through `poll(2)`, counting the messages it reads and the connections that
/// end. Connections are added from any thread; a byte on a pipe the thread also polls tells it to look at the list
/// again, or to stop.
final class EventDrain: Sendable {
    /// Read end of the wake-up pipe, polled with the connections.
    private let wakeReadEnd: FileDescriptor
    /// Write end of the wake-up pipe: `add` and `stop` write a byte to it.
    private let wakeWriteEnd: FileDescriptor
    /// The connections to read, in the order added; the thread copies it when woken.
    private let connections = Mutex<[FileDescriptor]>([])
    /// Set by `stop()`; the thread returns when it next wakes.
    private let isStopping = Atomic<Bool>(false)
    /// NUL-terminated messages read so far, plus those handed over by `add`.
    private let messages = Atomic<Int>(0)
    /// Connections that reached end of file or failed.
    private let ended = Atomic<Int>(0)
    /// What stopped the thread early, if something did.
    private let failure = Mutex<String?>(nil)
    /// Signalled once when the thread returns.
    private let finished = DispatchSemaphore(value: 0)

    /// Starts the reading thread with no connection yet.
    init() throws {
        (wakeReadEnd, wakeWriteEnd) = try FileDescriptor.pipe()
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "event drain"
        thread.start()
    }

    /// Messages read from the connections, and those counted by `add`.
    var messagesRead: Int { messages.load(ordering: .relaxed) }
    /// Connections the peer closed or broke.
    var streamsEnded: Int { ended.load(ordering: .relaxed) }
    /// Why the thread stopped before `stop()`, if it did.
    var failureDescription: String? { failure.withLock { $0 } }

    /// Starts reading `added`, counting `messagesAlreadyRead` read from them elsewhere before.
    func add(_ added: [FileDescriptor], messagesAlreadyRead: Int) throws {
        messages.add(messagesAlreadyRead, ordering: .relaxed)
        connections.withLock { $0 += added }
        try wakeWriteEnd.writeAll([1])
    }

    /// Wakes the thread, waits for it to return and closes the pipe; the connections stay open (their owner closes
    /// them). Call once.
    func stop() {
        isStopping.store(true, ordering: .sequentiallyConsistent)
        // Fails only if the thread already returned and the pipe is full, when nothing needs waking.
        try? wakeWriteEnd.writeAll([1])
        finished.wait()
        try? wakeReadEnd.close()
        try? wakeWriteEnd.close()
    }

    /// The thread: polls the pipe and every connection not yet ended, reads what arrived, and after a byte on the
    /// pipe takes the list again or returns.
    private func run() {
        var polled: [pollfd] = []
        var endedConnections: Set<Int32> = []
        var isListChanged = true
        while !isStopping.load(ordering: .sequentiallyConsistent) {
            if isListChanged {
                let current = connections.withLock { $0 }
                polled =
                    [pollfd(fd: wakeReadEnd.rawValue, events: Int16(POLLIN), revents: 0)]
                    + current.filter { !endedConnections.contains($0.rawValue) }.map {
                        pollfd(fd: $0.rawValue, events: Int16(POLLIN), revents: 0)
                    }
                isListChanged = false
            }
            guard Glibc.poll(&polled, nfds_t(polled.count), -1) >= 0 else {
                if errno == EINTR { continue }
                failure.withLock { $0 = "\(Errno(rawValue: errno, operation: "poll"))" }
                return
            }
            if polled[0].revents != 0 {
                // Bytes on the pipe only say "look again": how many does not matter.
                _ = try? wakeReadEnd.read(upTo: 4096)
                isListChanged = true
            }
            for index in polled.indices.dropFirst() where polled[index].revents != 0 {
                let connection = FileDescriptor(rawValue: polled[index].fd)
                if !read(connection) {
                    endedConnections.insert(connection.rawValue)
                    polled[index].fd = -1
                }
            }
        }
    }

    /// Reads what `connection` has and counts its messages; false at end of file or on an error (counted as an
    /// ended connection).
    private func read(_ connection: FileDescriptor) -> Bool {
        // poll said readable, so this read does not block; a failing read ends the stream like end of file.
        let bytes = (try? connection.read(upTo: 65_536)) ?? []
        guard bytes.isEmpty else {
            messages.add(bytes.filter { $0 == 0 }.count, ordering: .relaxed)
            return true
        }
        ended.add(1, ordering: .relaxed)
        return false
    }
}
