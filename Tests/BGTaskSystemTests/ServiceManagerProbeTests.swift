// Finding a service manager where there is none to find: each place tried says why it was passed over.
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Glibc
import Testing

/// Turns `loop` until `condition` holds, at most `timeout`; whether it came to hold.
func turn(_ loop: EventLoop, timeout: Duration = .seconds(30), until condition: () -> Bool) throws -> Bool {
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    while !condition() {
        let remaining = deadline - MonotonicClock.now()
        guard remaining > 0 else { return false }
        try loop.runIteration(timeout: .nanoseconds(remaining))
    }
    return true
}

@Suite("finding a service manager")
struct ServiceManagerProbeTests {
    @Test("a missing socket, a file, a dead socket and a silent one: each place says why, and none is chosen")
    func nothingAnswers() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let loop = try EventLoop()
                let file = try directory.write("not-a-socket", "")
                let deadPath = directory.path + "/dead"
                try UnixSocket.listen(path: deadPath).close()
                // Accepts nothing: the kernel completes the connection into the backlog, and nobody ever answers.
                let silentPath = directory.path + "/silent"
                let silent = try UnixSocket.listen(path: silentPath)
                defer { try? silent.close() }
                let endpoints = [
                    ServiceManagerEndpoint(kind: .direct, socketPath: directory.path + "/missing"),
                    ServiceManagerEndpoint(kind: .direct, socketPath: file),
                    ServiceManagerEndpoint(kind: .bus, socketPath: deadPath),
                    ServiceManagerEndpoint(kind: .direct, socketPath: silentPath),
                ]
                var outcome: (ServiceManagerConnection?, ServiceManagerProbe)?
                ServiceManagerConnection.probe(endpoints, loop: loop, timeout: .milliseconds(300)) {
                    outcome = ($0, $1)
                }
                #expect(try turn(loop, timeout: .seconds(20)) { outcome != nil })
                let (connection, probe) = try #require(outcome)
                #expect(connection == nil)
                #expect(probe.chosen == nil)
                let outcomes = probe.attempts.map(\.outcome)
                #expect(outcomes.count == 4)
                #expect(outcomes.first == .missing)
                #expect(outcomes.dropFirst().first == .notASocket)
                if case .unreachable(.system(let errno)) = outcomes[2] {
                    #expect(errno == Errno(rawValue: ECONNREFUSED), "\(errno)")
                } else {
                    Issue.record("a dead socket: \(outcomes[2])")
                }
                if case .notAServiceManager(.timedOut) = outcomes[3] {
                } else {
                    Issue.record("a silent socket: \(outcomes[3])")
                }
                print("probe with nothing to find: \(probe)")
                #expect(probe.description.hasPrefix("no service manager: the manager's socket"))
            }
        }
    }

    @Test("connecting to a socket that does not exist fails at once with ENOENT, naming the call")
    func missingSocket() throws {
        let loop = try EventLoop()
        let endpoint = ServiceManagerEndpoint(kind: .direct, socketPath: "/nonexistent-bgtask/systemd/private")
        do throws(ServiceManagerError) {
            _ = try ServiceManagerConnection(endpoint: endpoint, loop: loop)
            Issue.record("connected to nothing")
        } catch {
            #expect(error == .system(Errno(rawValue: ENOENT)))
            #expect("\(error)".contains("sd_bus_start(/nonexistent-bgtask/systemd/private)"), "\(error)")
        }
    }

    @Test("the system instance's probe ends, within its bound, with a manager or a reason for each place")
    func systemScope() async throws {
        try await offThePool {
            let loop = try EventLoop()
            var outcome: (ServiceManagerConnection?, ServiceManagerProbe)?
            ServiceManagerConnection.probe(.system, loop: loop, timeout: .seconds(5)) { outcome = ($0, $1) }
            #expect(try turn(loop, timeout: .seconds(20)) { outcome != nil })
            let (connection, probe) = try #require(outcome)
            defer { connection?.close() }
            print("the system instance here: \(probe)")
            if connection != nil {
                #expect(probe.version?.isEmpty == false)
            } else {
                let places = probe.attempts.map(\.endpoint.socketPath)
                #expect(places == ["/run/systemd/private", "/run/dbus/system_bus_socket"])
            }
        }
    }
}

@Suite("a service manager that goes away")
struct ServiceManagerDisconnectionTests {
    @Test("the peer hangs up with calls in flight: each completes once with .disconnected, then onDisconnect runs once")
    func peerHangsUp() async throws {
        try await offThePool {
            try withTemporaryDirectory { directory in
                let loop = try EventLoop()
                let path = directory.path + "/manager"
                let listener = try UnixSocket.listen(path: path)
                defer { try? listener.close() }
                let connection = try ServiceManagerConnection(
                    endpoint: ServiceManagerEndpoint(kind: .direct, socketPath: path), loop: loop)
                var log: [String] = []
                connection.onDisconnect = { log.append("disconnected") }
                connection.managerVersion { log.append("version: \($0)") }
                connection.getUnit("x.service") { log.append("unit: \($0)") }
                #expect(connection.pendingCallCount == 2)
                // The "manager" accepts the connection and closes it unanswered.
                let accepted = try #require(try UnixSocket.accept(listener))
                try accepted.close()
                #expect(try turn(loop, timeout: .seconds(20)) { log.contains("disconnected") })
                #expect(
                    log == [
                        "version: failure(the connection to the service manager is closed)",
                        "unit: failure(the connection to the service manager is closed)", "disconnected",
                    ])
                #expect(!connection.isConnected && connection.pendingCallCount == 0)
                // Nothing more is reported, and a later call fails the same way, on the loop.
                var later: Result<BusObjectPath, ServiceManagerError>?
                connection.getUnit("y.service") { later = $0 }
                #expect(later == nil)
                #expect(try turn(loop, timeout: .seconds(5)) { later != nil })
                #expect(later == .failure(.disconnected))
                #expect(try !loop.runIteration(timeout: .milliseconds(50)))
                #expect(log.filter { $0 == "disconnected" }.count == 1)
                connection.close()
            }
        }
    }
}
