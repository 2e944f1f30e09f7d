// The connection server alone, beside a fake of its host, on a real socket and loop: the per-uid limit, protocol
// errors answered without the host, pipelined calls served a turn's budget at a time, and streams that end.

import BGTaskConfig
import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Testing

@testable import BGTaskDaemon

/// The server's neighbour, faked: limits the test sets, every call answered with an empty reply at once, and a
/// record of the calls and closes.
private final class FakeServerHost: ConnectionServerHost {
    var connectionLimits = DaemonConfiguration.Limits()
    /// The members called, in order, and the closed connections with the app whose stream each ended.
    var dispatched: [String] = []
    var closed: [(serial: Int, app: AppID?)] = []
    /// What each call does besides its reply (a stream attached, say).
    var onCall: (IncomingCall) -> Void = { _ in }
    private let codec = VarlinkCodec()

    func dispatch(_ call: IncomingCall, to method: CallableMethod) {
        dispatched.append(call.header.method.member)
        onCall(call)
        guard !call.header.oneway, call.connection.stream == nil else { return }
        do {
            transmit(try codec.encodeReply(EmptyReply()), on: call.connection, reflectsChange: false)
        } catch {
            Issue.record("cannot encode an empty reply: \(error)")
        }
    }

    func transmit(_ message: [UInt8], on connection: ClientConnection, reflectsChange: Bool) {
        connection.send(message)
    }

    func connectionClosed(_ connection: ClientConnection, endingStreamOf app: AppID?, because reason: String) {
        closed.append((connection.serial, app))
    }
}

/// A listening server on a scratch socket with its fake host, stepped by the test.
private final class ServerFixture {
    let directory: ScratchDirectory
    let loop: EventLoop
    let host = FakeServerHost()
    let server: ConnectionServer
    let logPath: String

    init(_ configure: (inout DaemonConfiguration.Limits) -> Void = { _ in }) throws {
        directory = try ScratchDirectory(prefix: "connection-server")
        loop = try EventLoop()
        logPath = directory.path + "/log"
        let logger = Logger(
            destination: .stream, threshold: .debug,
            stream: try FileDescriptor.open(logPath, .writeOnly, options: [.create, .append]))
        server = ConnectionServer(
            loop: loop, clock: ManagerClock(mode: .loop, loop: loop), logger: logger,
            socketPath: directory.path + "/run/io.bgtask.Lifecycle")
        configure(&host.connectionLimits)
        server.host = host
        try server.makeBacklogSource()
        try server.openListeners()
    }

    /// What the server logged so far.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func connect() throws -> RawVarlinkClient { try RawVarlinkClient(path: server.socketPath) }

    /// Runs loop iterations until `condition` holds (at most 10 s); each iteration's effect is seen by `each`.
    func step(until condition: () throws -> Bool, each: () -> Void = {}) throws {
        let deadline = MonotonicClock.now() + Duration.seconds(10).nanosecondCount
        while try !condition() {
            guard MonotonicClock.now() < deadline else { throw HarnessError("the server did not get there") }
            try loop.runIteration(timeout: .milliseconds(50))
            each()
        }
    }

    /// The next reply on `client`, stepping the loop until it comes; nil when the server closed the connection.
    func reply(on client: RawVarlinkClient) throws -> [String: JSONValue]? {
        var arrival = RawVarlinkClient.Arrival.nothing
        try step { arrival = try client.poll(); return arrival != .nothing }
        if case .reply(let object) = arrival { return object }
        return nil
    }

    deinit { server.stop() }
}

@Suite("The connection server, alone")
struct ConnectionServerTests {
    @Test("ConnectionsPerUserMax: a uid's connection past it is closed at once, logged once; a close makes room")
    func perUserLimit() throws {
        let fixture = try ServerFixture { $0.connectionsPerUserMax = 2 }
        let first = try fixture.connect()
        let second = try fixture.connect()
        try fixture.step { fixture.server.connections.count == 2 }
        let refused = try [fixture.connect(), fixture.connect()]
        for client in refused {
            #expect(try fixture.reply(on: client) == nil, "a connection past the limit is served")
        }
        #expect(fixture.server.connections.count == 2)
        #expect(fixture.log.components(separatedBy: "ConnectionsPerUserMax=2 reached").count == 2)

        first.close()
        try fixture.step { fixture.server.connections.count == 1 }
        #expect(fixture.host.closed.map(\.app) == [nil])
        let third = try fixture.connect()
        try third.send("org.varlink.service.GetInfo")
        #expect(try fixture.reply(on: third)?["error"] == nil)
        _ = second
    }

    @Test("messages that are no call are answered by the server itself, and the connection goes on")
    func protocolErrors() throws {
        let fixture = try ServerFixture()
        let client = try fixture.connect()
        let rows: [(send: () throws -> Void, error: String)] = [
            ({ try client.sendRaw(Array("{not json".utf8) + [0]) }, "io.bgtask.Lifecycle.InvalidMessage"),
            ({ try client.send("io.bgtask.Lifecycle.NoSuchMethod") }, "org.varlink.service.MethodNotFound"),
            ({ try client.send("com.example.Other.Call") }, "org.varlink.service.InterfaceNotFound"),
            ({ try client.send("io.bgtask.Lifecycle.Watch") }, "org.varlink.service.ExpectedMore"),
        ]
        for row in rows {
            try row.send()
            let reply = try #require(try fixture.reply(on: client))
            #expect(reply["error"]?.stringValue == row.error)
        }
        #expect(fixture.host.dispatched.isEmpty)
        try client.send("org.varlink.service.GetInfo")
        #expect(try fixture.reply(on: client)?["error"] == nil)
        #expect(fixture.host.dispatched == ["GetInfo"])
    }

    @Test("40 pipelined calls: at most callsPerTurn per loop iteration, all served in order")
    func pipelinedCallsTakeTurns() throws {
        let fixture = try ServerFixture()
        let client = try fixture.connect()
        try fixture.step { fixture.server.connections.count == 1 }
        var order: [Int] = []
        let codec = VarlinkCodec()
        fixture.host.onCall = { call in
            order.append((try? codec.decodeParameters(HistoryParameters.self, of: call.decoded).limit) ?? -1)
        }
        var burst: [UInt8] = []
        for index in 0..<40 {
            burst += Array(#"{"method":"io.bgtask.Lifecycle.History","parameters":{"limit":\#(index)}}"#.utf8) + [0]
        }
        try client.sendRaw(burst)
        var mostInOneIteration = 0
        var seen = 0
        try fixture.step(until: { fixture.host.dispatched.count == 40 }) {
            mostInOneIteration = max(mostInOneIteration, fixture.host.dispatched.count - seen)
            seen = fixture.host.dispatched.count
        }
        #expect(mostInOneIteration <= ClientConnection.callsPerTurn)
        #expect(mostInOneIteration > 0)
        #expect(order == Array(0..<40))
        for _ in 0..<40 { #expect(try fixture.reply(on: client)?["error"] == nil) }
    }

    @Test("an app's event stream and a watcher: closing each ends its stream, the app's reported to the host")
    func streamsEnd() throws {
        let fixture = try ServerFixture()
        let app = AppID(rawValue: 7)
        fixture.host.onCall = { call in
            switch call.header.method.member {
            case "Register": fixture.server.attachEventStream(call.connection, of: app)
            case "Watch": fixture.server.addWatcher(call.connection)
            default: break
            }
        }
        let stream = try fixture.connect()
        try stream.send("io.bgtask.Lifecycle.Register", ["name": .string("mail")], more: true)
        let watcher = try fixture.connect()
        try watcher.send("io.bgtask.Lifecycle.Watch", more: true)
        try fixture.step { fixture.server.eventStreams[app] != nil && fixture.server.watchers.count == 1 }

        stream.close()
        watcher.close()
        try fixture.step { fixture.host.closed.count == 2 }
        #expect(fixture.server.eventStreams.isEmpty && fixture.server.watchers.isEmpty)
        #expect(fixture.host.closed.compactMap(\.app) == [app])

        // A stream detached (its app's process exited) is no longer the app's: its close ends nothing.
        let again = try fixture.connect()
        try again.send("io.bgtask.Lifecycle.Register", ["name": .string("mail")], more: true)
        try fixture.step { fixture.server.eventStreams[app] != nil }
        fixture.server.detachEventStream(of: app)?.close(because: "the app's process exited")
        #expect(fixture.host.closed.count == 3 && fixture.host.closed.last?.app == nil)
    }
}
