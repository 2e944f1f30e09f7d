// A scripted io.bgtask.Lifecycle server on a real Unix socket, for running the real bgtask binary before the
// daemon exists: it answers every method the CLI calls, logs the calls, and lets a test push Register events.
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import Foundation
import Synchronization
import Testing

/// A call the server received.
struct ReceivedCall: Sendable, CustomStringConvertible {
    /// The method's name within the interface (`Register`).
    var method: String
    /// The call's parameters.
    var parameters: JSONValue
    /// The connection it came on, numbered from 1 in accept order.
    var connection: Int

    var description: String { "#\(connection) \(method)(\(parameters))" }
}

/// A stand-in for bgtaskd's Varlink surface, served from threads on a socket in a fresh temporary directory.
///
/// Answers like a small daemon: `Register` replies with the app (state as asked) and keeps the stream open for
/// `push(_:)`; `BeginBackgroundTask` hands out task ids from 1; `GetApp`, `SetState` and `Terminate` know the apps
/// in `apps` and answer `NoSuchApp` for others; `Launch` adds a `notRunning` app to `apps`, in `launchCgroup`, or
/// answers `AppExists` for the name of a live one; `Watch` streams `history` and stays open; `errors` makes a
/// method answer with an error instead.
final class ScriptedServer: Sendable {
    /// A directory of the server's own (not a `ScratchDirectory`, which is not `Sendable`), removed by `stop()`.
    let directory: String
    let socketPath: String
    private let listener: FileDescriptor
    private let state: Mutex<State>
    private let changed = NSCondition()
    private let threads = DispatchGroup()

    struct State {
        var calls: [ReceivedCall] = []
        var connections: [Int: FileDescriptor] = [:]
        var closedConnections: Set<Int> = []
        var nextConnection = 1
        var nextTaskId = 1
        var registerConnection: Int?
        var isStopped = false
        /// What the server knows and answers.
        var apps: [AppInfo] = []
        var history: [HistoryEntry] = []
        var remainingSeconds: Double? = 600
        /// The cgroup `Launch` puts an app in; nil for a daemon that launches without one.
        var launchCgroup: String? = "/sys/fs/cgroup/bgtaskd.slice/launched.scope"
        var errors: [String: VarlinkError] = [:]
        /// Whether `Watch` ends its stream after the history instead of staying open.
        var watchEnds = false
    }

    /// Starts serving, with `configure` setting what the server answers.
    init(_ configure: (inout State) -> Void = { _ in }) throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-cli-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        socketPath = directory + "/" + LifecycleInterface.name
        listener = try UnixSocket.listen(path: socketPath)
        var initial = State()
        configure(&initial)
        state = Mutex(initial)
        threads.enter()
        Thread.detachNewThread { [self] in
            acceptLoop()
            threads.leave()
        }
    }

    /// Stops serving: shuts every connection and the listener down, waits for the threads, removes the directory.
    func stop() throws {
        try UnixSocket.shutdown(listener)
        // Under the lock: a connection's thread removes its descriptor from the table (under the lock) before
        // closing it, so every descriptor still in the table is open, and its number cannot belong to another
        // socket by now.
        try state.withLock { state in
            state.isStopped = true
            for connection in state.connections.values { try UnixSocket.shutdown(connection) }
        }
        #expect(threads.wait(timeout: .now() + .seconds(20)) == .success, "server threads finished")
        try listener.close()
        try FileManager.default.removeItem(atPath: directory)
    }

    // MARK: Script

    /// Sends `event` on the open `Register` stream; false when there is none.
    @discardableResult
    func push(_ event: EventInfo) throws -> Bool {
        guard let connection = state.withLock({ state in state.registerConnection.flatMap { state.connections[$0] } })
        else { return false }
        try send(try VarlinkCodec().encodeReply(RegisterReply(event: event), continues: true), on: connection)
        return true
    }

    /// Changes what the server answers from now on.
    func update(_ change: (inout State) -> Void) {
        record(change)
    }

    /// The calls received so far.
    var calls: [ReceivedCall] { state.withLock { $0.calls } }

    /// The calls of `method` so far.
    func calls(_ method: String) -> [ReceivedCall] { calls.filter { $0.method == method } }

    /// Waits at most 10 s until `condition` holds of the server's state, woken by each call and each closed
    /// connection; records an issue and returns false on timeout.
    @discardableResult
    func waitUntil(
        _ what: String, sourceLocation: SourceLocation = #_sourceLocation, _ condition: (State) -> Bool
    ) -> Bool {
        let deadline = Date().addingTimeInterval(10)
        changed.lock()
        defer { changed.unlock() }
        while !state.withLock({ condition($0) }) {
            if !changed.wait(until: deadline) {
                if state.withLock({ condition($0) }) { return true }
                Issue.record("timed out waiting for \(what); calls: \(calls)", sourceLocation: sourceLocation)
                return false
            }
        }
        return true
    }

    /// Waits for the `count`-th call of `method` and returns it.
    @discardableResult
    func waitForCall(_ method: String, count: Int = 1, sourceLocation: SourceLocation = #_sourceLocation)
        -> ReceivedCall?
    {
        guard
            waitUntil(
                "call \(count) of \(method)", sourceLocation: sourceLocation,
                {
                    $0.calls.filter { $0.method == method }.count >= count
                })
        else { return nil }
        return calls(method)[count - 1]
    }

    // MARK: Serving

    private func acceptLoop() {
        while !state.withLock({ $0.isStopped }) {
            do {
                _ = try listener.poll(for: .readable, timeout: nil)
                guard let connection = try UnixSocket.accept(listener) else { continue }
                let number = state.withLock { state in
                    defer { state.nextConnection += 1 }
                    state.connections[state.nextConnection] = connection
                    return state.nextConnection
                }
                threads.enter()
                Thread.detachNewThread { [self] in
                    serve(connection, number: number)
                    threads.leave()
                }
            } catch {
                return  // The listener was shut down.
            }
        }
    }

    private func serve(_ connection: FileDescriptor, number: Int) {
        var decoder = VarlinkFrameDecoder()
        let codec = VarlinkCodec()
        reading: while true {
            do {
                _ = try connection.poll(for: .readable, timeout: nil)
                let bytes = try connection.read(upTo: 65_536)
                if bytes.isEmpty { break reading }
                decoder.append(contentsOf: bytes)
                while let message = try decoder.nextMessage() {
                    let header = try codec.decodeCallHeader(message)
                    let parameters = try JSONDecoder().decode(CallEnvelope.self, from: Data(message)).parameters ?? [:]
                    let call = ReceivedCall(method: header.method.member, parameters: parameters, connection: number)
                    let replies = answer(call, codec: codec)
                    record { $0.calls.append(call) }
                    for reply in replies { try send(reply, on: connection) }
                }
            } catch {
                break reading
            }
        }
        record { state in
            state.closedConnections.insert(number)
            state.connections[number] = nil
        }
        do { try connection.close() } catch { Issue.record("closing a server connection: \(error)") }
    }

    /// The call's parameters, for the log.
    private struct CallEnvelope: Decodable {
        var parameters: JSONValue?
    }

    private func record(_ change: (inout State) -> Void) {
        changed.lock()
        state.withLock { change(&$0) }
        changed.broadcast()
        changed.unlock()
    }

    private func send(_ message: [UInt8], on connection: FileDescriptor) throws {
        _ = try connection.poll(for: .writable, timeout: .seconds(10))
        try connection.sendAll(message)
    }

    /// The framed replies to `call`.
    private func answer(_ call: ReceivedCall, codec: VarlinkCodec) -> [[UInt8]] {
        let parameters = call.parameters
        let app = parameters["app"]?.stringValue ?? parameters["name"]?.stringValue ?? ""
        do {
            if let error = state.withLock({ $0.errors[call.method] }) { return [try codec.encodeError(error)] }
            let known = state.withLock { state in state.apps.first { $0.name == app } }
            switch call.method {
            case "Register":
                let requested = parameters["state"]?.stringValue.flatMap(AppState.init(rawValue:)) ?? .active
                let remaining = state.withLock { state in
                    state.registerConnection = call.connection
                    return state.remainingSeconds
                }
                let info = AppInfo(
                    name: app, state: requested, pid: 1, uid: Int(getuid()), managed: false,
                    backgroundTimeRemaining: requested == .background ? remaining : nil)
                return [try codec.encodeReply(RegisterReply(app: info), continues: true)]
            case "BeginBackgroundTask":
                let taskId = state.withLock { state in
                    defer { state.nextTaskId += 1 }
                    return state.nextTaskId
                }
                return [try codec.encodeReply(BeginBackgroundTaskReply(taskId: taskId))]
            case "EndBackgroundTask", "Acknowledge":
                return [try codec.encodeReply(EmptyReply())]
            case "BackgroundTimeRemaining":
                let seconds = state.withLock { $0.remainingSeconds }
                return [try codec.encodeReply(BackgroundTimeRemainingReply(seconds: seconds))]
            case "ListApps":
                return [try codec.encodeReply(ListAppsReply(apps: state.withLock { $0.apps }))]
            case "GetApp", "SetState", "Terminate":
                guard var info = known else { return [try codec.encodeError(.noSuchApp(app: app))] }
                if call.method == "GetApp" { return [try codec.encodeReply(GetAppReply(app: info))] }
                if call.method == "Terminate" { return [try codec.encodeReply(EmptyReply())] }
                info.state = parameters["state"]?.stringValue.flatMap(AppState.init(rawValue:)) ?? info.state
                return [try codec.encodeReply(SetStateReply(app: info))]
            case "Launch":
                let launched = state.withLock { state -> AppInfo? in
                    guard !state.apps.contains(where: { $0.name == app && $0.state != .terminated }) else { return nil }
                    let info = AppInfo(
                        name: app, state: .notRunning, pid: 4242, uid: Int(getuid()), managed: true,
                        cgroup: state.launchCgroup, memoryBackend: state.launchCgroup == nil ? "pss" : "cgroup2")
                    state.apps.append(info)
                    return info
                }
                guard let launched else { return [try codec.encodeError(.appExists(app: app))] }
                return [try codec.encodeReply(LaunchReply(app: launched))]
            case "Post":
                return [try codec.encodeReply(PostReply(delivered: 2, queued: 1))]
            case "History":
                let entries = state.withLock { $0.history }
                let limit = parameters["limit"]?.intValue ?? entries.count
                return [try codec.encodeReply(HistoryReply(entries: Array(entries.suffix(limit))))]
            case "Watch":
                let (entries, ends) = state.withLock { ($0.history, $0.watchEnds) }
                return try entries.enumerated().map { index, entry in
                    try codec.encodeReply(WatchReply(entry: entry), continues: !(ends && index == entries.count - 1))
                }
            case "GetStatus":
                return [try codec.encodeReply(sampleStatus)]
            default:
                return [try codec.encodeError(.methodNotFound(method: call.method))]
            }
        } catch {
            Issue.record("cannot encode the reply to \(call): \(error)")
            return []
        }
    }
}

/// What the scripted server answers to `GetStatus`.
let sampleStatus = GetStatusReply(
    version: "0.1.0", uptimeSec: 3_725, backends: ["freeze": "cgroup2", "kill": "cgroup", "memory": "pss"], apps: 2,
    suspended: 1, tasks: 3, memory: ["appsBytes": 52_428_800])
