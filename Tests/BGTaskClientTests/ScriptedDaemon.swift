// A scripted Varlink server on a real Unix socket, standing in for bgtaskd's transport in client tests.
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Synchronization
import Testing

/// What the scripted server does with one call.
enum ScriptedResponse: Sendable {
    /// Reply with these parameters; `continues` for a streamed reply that is not the last.
    case reply(any Encodable & Sendable, continues: Bool = false)
    /// Several replies in a row, the last without `continues`.
    case replies([any Encodable & Sendable])
    /// An error reply.
    case error(VarlinkError)
    /// Streamed replies, each with `continues`, then an error that ends the stream.
    case repliesThenError([any Encodable & Sendable], VarlinkError)
    /// These bytes exactly, for malformed replies.
    case raw(Data)
    /// Close the connection without answering.
    case close
    /// Say nothing and keep the connection open.
    case silence
}

/// An entry of the server's log: a call received, or a note a test wrote in the same order.
struct LogEntry: Sendable, CustomStringConvertible {
    /// The entry's place in the log, from 0.
    var sequence: Int
    /// The connection the call came on (numbered from 1 in accept order); 0 for notes.
    var connection: Int
    /// The fully qualified method, or the note's text.
    var method: String
    /// The call's flags.
    var more: Bool
    var oneway: Bool
    /// The call's parameters as JSON; null for notes.
    var parameters: JSONValue

    var isNote: Bool { connection == 0 }

    /// Whether this is a call of `method` whose parameter `name` is `value`.
    func isCall(_ method: String, _ name: String, _ value: JSONValue) -> Bool {
        self.method == method && parameters[name] == value
    }

    var description: String {
        isNote ? "note \(method)" : "#\(connection) \(method)(\(parameters))"
    }
}

/// A Varlink server on a socket in a fresh temporary directory, served from threads, answering calls as
/// `respond` says, and logging every call so tests can wait for and inspect them.
///
/// By default it behaves like a minimal bgtaskd for one app: `Register` answers with the app and keeps the stream
/// open for `push(_:)`, `BeginBackgroundTask` hands out increasing task ids, the other app calls succeed.
final class ScriptedDaemon: Sendable {
    typealias Responder = @Sendable (_ call: LogEntry, _ daemon: ScriptedDaemon) -> ScriptedResponse?

    /// A fresh directory of its own, holding the socket; removed by `stop()`.
    let directory: String
    private let scratch: ScratchDirectory
    let socketPath: String
    private let listener: FileDescriptor
    private let responder: Responder?
    private let state = Mutex(ServerState())
    /// Signalled on every log append, so waiters re-check without polling.
    private let logChanged = NSCondition()
    private let threads = DispatchGroup()

    private struct ServerState {
        var log: [LogEntry] = []
        var connections: [Int: ServerConnection] = [:]
        var nextConnection = 1
        var nextTaskId = 1
        var nextEventId = 1
        /// The connection of the current `Register` stream, if any.
        var registerStream: Int?
        var isStopped = false
        /// Leases a restarted daemon kept, listed by every `Register` reply (as a re-attach) until ended.
        var keptTasks: [TaskInfo] = []
        var remainingSeconds: Double? = nil
    }

    /// Starts serving. `respond` overrides the default answer: return nil from it to fall back to the default.
    init(respond: Responder? = nil) throws {
        scratch = try ScratchDirectory(prefix: "bgtask-client-test")
        directory = scratch.path
        socketPath = directory + "/" + LifecycleInterface.name
        listener = try UnixSocket.listen(path: socketPath)
        responder = respond
        threads.enter()
        let thread = Thread { [self] in
            defer { threads.leave() }
            acceptLoop()
        }
        thread.name = "scripted-daemon-accept"
        thread.start()
    }

    /// Stops serving: shuts every connection and the listener down, waits for the server threads, and removes
    /// the directory.
    func stop() {
        let connections = state.withLock { (state: inout ServerState) -> [ServerConnection] in
            state.isStopped = true
            return Array(state.connections.values)
        }
        try? UnixSocket.shutdown(listener)  // Wakes the accept loop; failure means it is already down.
        for connection in connections { connection.shutDown() }
        if threads.wait(timeout: .now() + .seconds(20)) == .timedOut {
            Issue.record("scripted daemon threads did not finish")
        }
        try? listener.close()  // Test cleanup; nothing to do about a failure.
        scratch.remove()
    }

    // MARK: Script controls

    /// Sends `event` on the current `Register` stream; false when there is none.
    @discardableResult
    func push(_ event: EventInfo) -> Bool {
        guard let connection = state.withLock({ state in state.registerStream.flatMap { state.connections[$0] } })
        else { return false }
        return connection.send(reply: RegisterReply(event: event), continues: true)
    }

    /// A fresh event id, increasing like the daemon's.
    func nextEventId() -> Int {
        state.withLock { state in
            defer { state.nextEventId += 1 }
            return state.nextEventId
        }
    }

    /// Shuts down every open connection, as a daemon restart does.
    func dropConnections() {
        let connections = state.withLock { (state: inout ServerState) -> [ServerConnection] in
            state.registerStream = nil
            return Array(state.connections.values)
        }
        for connection in connections { connection.shutDown() }
    }

    /// Makes `Register` replies list these leases, as a daemon that kept its state re-attaches; an
    /// `EndBackgroundTask` of one removes it.
    func keepTasks(_ tasks: [TaskInfo]) {
        state.withLock { $0.keptTasks = tasks }
    }

    /// Sets what `BackgroundTimeRemaining` answers.
    func setRemainingSeconds(_ seconds: Double?) {
        state.withLock { $0.remainingSeconds = seconds }
    }

    /// Appends a note to the log, ordered with the calls received.
    func note(_ text: String) {
        append(connection: 0, method: text, header: nil, parameters: .null)
    }

    // MARK: Log

    /// The log so far.
    var log: [LogEntry] { state.withLock { $0.log } }

    /// The calls of `method` so far.
    func calls(_ method: String) -> [LogEntry] { log.filter { $0.method == method } }

    /// Waits until the log satisfies `condition`, at most `timeout`; returns whether it did.
    @discardableResult
    func waitUntil(timeout: Duration = .seconds(10), _ condition: ([LogEntry]) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(Double(timeout.components.seconds))
        logChanged.lock()
        defer { logChanged.unlock() }
        while !condition(log) {
            if !logChanged.wait(until: deadline) { return condition(log) }
        }
        return true
    }

    /// Waits for the `count`-th call of `method` and returns it; records an issue on timeout.
    @discardableResult
    func waitForCall(
        _ method: String, count: Int = 1, timeout: Duration = .seconds(10),
        sourceLocation: SourceLocation = #_sourceLocation
    ) -> LogEntry? {
        let found = waitUntil(timeout: timeout) { log in log.filter { $0.method == method }.count >= count }
        guard found else {
            Issue.record("no call \(count) of \(method); log: \(log)", sourceLocation: sourceLocation)
            return nil
        }
        return calls(method)[count - 1]
    }

    /// Waits until the event `eventId` is acknowledged; records an issue on timeout.
    @discardableResult
    func waitForAcknowledgement(
        of eventId: Int, timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation
    ) -> LogEntry? {
        let isIt = { (entry: LogEntry) in
            entry.isCall(AcknowledgeParameters.methodName, "eventId", .number(Double(eventId)))
        }
        guard waitUntil(timeout: timeout, { $0.contains(where: isIt) }) else {
            Issue.record("event \(eventId) was not acknowledged; log: \(log)", sourceLocation: sourceLocation)
            return nil
        }
        return log.first(where: isIt)
    }

    // MARK: Serving

    private func acceptLoop() {
        while true {
            do {
                _ = try listener.poll(for: .readable, timeout: nil)
                if state.withLock({ $0.isStopped }) { return }
                guard let fd = try UnixSocket.accept(listener) else { continue }
                try fd.setNonBlocking(false)
                let connection = ServerConnection(fd: fd)
                let number = state.withLock { (state: inout ServerState) -> Int in
                    defer { state.nextConnection += 1 }
                    state.connections[state.nextConnection] = connection
                    return state.nextConnection
                }
                threads.enter()
                let thread = Thread { [self] in
                    defer { threads.leave() }
                    serve(connection, number: number)
                }
                thread.name = "scripted-daemon-\(number)"
                thread.start()
            } catch {
                if !state.withLock({ $0.isStopped }) { Issue.record("scripted daemon accept failed: \(error)") }
                return
            }
        }
    }

    /// The method logged when a client's connection ends.
    static let connectionClosed = "(connection closed)"

    private func serve(_ connection: ServerConnection, number: Int) {
        defer {
            append(connection: number, method: ScriptedDaemon.connectionClosed, header: nil, parameters: .null)
            state.withLock { state in
                state.connections[number] = nil
                if state.registerStream == number { state.registerStream = nil }
            }
            connection.close()
        }
        let codec = VarlinkCodec()
        while let message = connection.receive() {
            guard let header = try? codec.decodeCallHeader(message),  // A malformed call ends the connection.
                let parameters = try? JSONDecoder().decode(CallParameters.self, from: Data(message)).parameters
            else { return }
            let entry = append(
                connection: number, method: header.method.qualified, header: header, parameters: parameters)
            let response = responder?(entry, self) ?? defaultResponse(to: entry, connection: number)
            if header.oneway { continue }
            switch response {
            case .reply(let reply, let continues):
                connection.send(reply: reply, continues: continues)
            case .replies(let replies):
                for (index, reply) in replies.enumerated() {
                    connection.send(reply: reply, continues: index < replies.count - 1)
                }
            case .error(let error):
                connection.send(error: error)
            case .repliesThenError(let replies, let error):
                for reply in replies { connection.send(reply: reply, continues: true) }
                connection.send(error: error)
            case .raw(let bytes):
                connection.send(raw: Array(bytes))
            case .close:
                return
            case .silence:
                continue
            }
        }
    }

    private func defaultResponse(to call: LogEntry, connection: Int) -> ScriptedResponse {
        let app = call.parameters["app"]?.stringValue ?? call.parameters["name"]?.stringValue ?? "app"
        switch call.method {
        case RegisterParameters.methodName:
            let (tasks, isFirstStream) = state.withLock { (state: inout ServerState) -> ([TaskInfo], Bool) in
                let isFirst = state.registerStream == nil
                state.registerStream = connection
                return (state.keptTasks, isFirst)
            }
            if !isFirstStream { return .error(.appExists(app: app)) }
            let requested = call.parameters["state"]?.stringValue.flatMap(AppState.init(rawValue:)) ?? .active
            let info = AppInfo(
                name: app, state: requested, pid: Int(getpid()), uid: Int(getuid()), managed: false, tasks: tasks)
            return .reply(RegisterReply(app: info), continues: true)
        case BeginBackgroundTaskParameters.methodName:
            let taskId = state.withLock { state in
                defer { state.nextTaskId += 1 }
                return state.nextTaskId
            }
            return .reply(BeginBackgroundTaskReply(taskId: taskId))
        case BackgroundTimeRemainingParameters.methodName:
            return .reply(BackgroundTimeRemainingReply(seconds: state.withLock { $0.remainingSeconds }))
        case EndBackgroundTaskParameters.methodName:
            let taskId = call.parameters["taskId"]?.intValue
            state.withLock { $0.keptTasks.removeAll { $0.id == taskId } }
            return .reply(EmptyReply())
        case AcknowledgeParameters.methodName, TerminateParameters.methodName:
            return .reply(EmptyReply())
        default:
            return .error(.methodNotFound(method: call.method))
        }
    }

    @discardableResult
    private func append(connection: Int, method: String, header: VarlinkCallHeader?, parameters: JSONValue)
        -> LogEntry
    {
        logChanged.lock()
        let entry = state.withLock { (state: inout ServerState) -> LogEntry in
            let entry = LogEntry(
                sequence: state.log.count, connection: connection, method: method, more: header?.more ?? false,
                oneway: header?.oneway ?? false, parameters: parameters)
            state.log.append(entry)
            return entry
        }
        logChanged.broadcast()
        logChanged.unlock()
        return entry
    }
}

/// The `parameters` of a call, as free-form JSON.
private struct CallParameters: Decodable {
    var parameters: JSONValue

    enum Key: String, CodingKey { case parameters }

    init(from decoder: any Decoder) throws {
        parameters =
            try decoder.container(keyedBy: Key.self).decodeIfPresent(JSONValue.self, forKey: .parameters)
            ?? .object([:])
    }
}

/// One accepted connection: blocking reads on its own thread, writes from any thread.
private final class ServerConnection: Sendable {
    let fd: FileDescriptor
    private let decoder = Mutex(VarlinkFrameDecoder())
    /// Held while writing, shutting down or closing; true once closed.
    private let writing = Mutex(false)
    private let codec = VarlinkCodec()

    init(fd: FileDescriptor) {
        self.fd = fd
    }

    /// The next message, or nil at end of file or on any failure.
    func receive() -> [UInt8]? {
        while true {
            do {
                if let message = try decoder.withLock({ try $0.nextMessage() }) { return message }
                let bytes = try fd.read(upTo: 64 * 1024)
                if bytes.isEmpty { return nil }
                decoder.withLock { $0.append(contentsOf: bytes) }
            } catch {
                return nil
            }
        }
    }

    @discardableResult
    func send(reply: any Encodable & Sendable, continues: Bool) -> Bool {
        guard let data = try? encodeReply(reply, continues: continues) else { return false }
        return send(raw: data)
    }

    func send(error: VarlinkError) {
        guard let data = try? codec.encodeError(error) else { return }
        send(raw: data)
    }

    @discardableResult
    func send(raw: [UInt8]) -> Bool {
        writing.withLock { isClosed in
            guard !isClosed else { return false }
            do {
                try fd.sendAll(raw)
                return true
            } catch {
                return false  // The client went away; the read side will see it.
            }
        }
    }

    /// Wakes the serving thread; does nothing once the descriptor is closed (its number may be reused).
    func shutDown() {
        writing.withLock { isClosed in
            if !isClosed { try? UnixSocket.shutdown(fd) }  // Already shut down is fine.
        }
    }

    func close() {
        writing.withLock { isClosed in
            isClosed = true
            try? fd.close()  // Test cleanup.
        }
    }

    private func encodeReply(_ reply: any Encodable & Sendable, continues: Bool) throws -> [UInt8] {
        func encode<R: Encodable>(_ value: R) throws -> [UInt8] { try codec.encodeReply(value, continues: continues) }
        return try encode(reply)
    }
}
