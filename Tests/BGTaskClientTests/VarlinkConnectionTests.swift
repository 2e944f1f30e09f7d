// The blocking Varlink client against a scripted server: error mapping, streams, oneway, limits and timeouts.
import BGTaskClient
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

/// A scripted answer to `GetApp` and the error the client must turn it into; nil for any `.protocolViolation`
/// (its text comes from the protocol module's descriptions).
struct ErrorMappingCase: Sendable, CustomStringConvertible {
    var name: String
    var response: ScriptedResponse
    var expected: ClientError?

    var description: String { name }
}

/// Stands for the scripted daemon's socket path in expected errors, which only exists once the test runs.
private let socketPlaceholder = "SOCKET"

private let getApp = GetAppParameters.methodName

@Suite struct VarlinkConnectionTests {
    static let errorCases: [ErrorMappingCase] = [
        ErrorMappingCase(
            name: "NoSuchApp", response: .error(.noSuchApp(app: "x")), expected: .lifecycle(.noSuchApp(app: "x"))),
        ErrorMappingCase(
            name: "BackgroundTimeExhausted", response: .error(.backgroundTimeExhausted(app: "x")),
            expected: .lifecycle(.backgroundTimeExhausted(app: "x"))),
        ErrorMappingCase(
            name: "InvalidState", response: .error(.invalidState(app: "x", state: .terminated)),
            expected: .lifecycle(.invalidState(app: "x", state: .terminated))),
        ErrorMappingCase(
            name: "LimitExceeded", response: .error(.limitExceeded(limit: "TasksPerAppMax", max: 64)),
            expected: .lifecycle(.limitExceeded(limit: "TasksPerAppMax", max: 64))),
        ErrorMappingCase(
            name: "NoSuchEvent", response: .error(.noSuchEvent(app: "x", eventId: 9)),
            expected: .lifecycle(.noSuchEvent(app: "x", eventId: 9))),
        ErrorMappingCase(
            name: "Lifecycle PermissionDenied", response: .error(.permissionDenied()),
            expected: .permissionDenied(socketPath: socketPlaceholder, method: getApp)),
        ErrorMappingCase(
            name: "service PermissionDenied", response: .error(.servicePermissionDenied()),
            expected: .permissionDenied(socketPath: socketPlaceholder, method: getApp)),
        ErrorMappingCase(
            name: "MethodNotFound", response: .error(.methodNotFound(method: getApp)),
            expected: .service(.methodNotFound(method: getApp))),
        ErrorMappingCase(
            name: "InvalidParameter", response: .error(.invalidParameter(parameter: "app")),
            expected: .service(.invalidParameter(parameter: "app"))),
        ErrorMappingCase(
            name: "ExpectedMore", response: .error(.expectedMore()), expected: .service(.expectedMore)),
        ErrorMappingCase(
            name: "unknown error", response: .error(VarlinkError(name: "com.example.Odd", parameters: ["a": 1])),
            expected: .remote(VarlinkError(name: "com.example.Odd", parameters: ["a": 1]))),
        ErrorMappingCase(
            name: "known name with parameters of the wrong type",
            response: .error(VarlinkError(name: "io.bgtask.Lifecycle.NoSuchApp", parameters: ["app": 5])),
            expected: .remote(VarlinkError(name: "io.bgtask.Lifecycle.NoSuchApp", parameters: ["app": 5]))),
        // Hostile replies.
        ErrorMappingCase(name: "not JSON", response: .raw(Data("{oops\0".utf8)), expected: nil),
        ErrorMappingCase(name: "not an object", response: .raw(Data("[1]\0".utf8)), expected: nil),
        ErrorMappingCase(name: "empty message", response: .raw(Data([0])), expected: nil),
        ErrorMappingCase(name: "invalid UTF-8", response: .raw(Data([0x7B, 0xFF, 0x7D, 0])), expected: nil),
        ErrorMappingCase(
            name: "reply of the wrong shape", response: .raw(Data(#"{"parameters":{"app":7}}"#.utf8) + Data([0])),
            expected: nil),
        ErrorMappingCase(
            name: "error name that is not a string", response: .raw(Data(#"{"error":1}"#.utf8) + Data([0])),
            expected: nil),
        ErrorMappingCase(
            name: "continues set on a plain call",
            response: .reply(
                GetAppReply(app: AppInfo(name: "x", state: .active, pid: 1, uid: 0, managed: false)), continues: true),
            expected: nil),
        ErrorMappingCase(name: "connection closed without a reply", response: .close, expected: .disconnected),
    ]

    @Test(arguments: errorCases)
    func mapsErrorReplies(_ row: ErrorMappingCase) async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, _ in
                call.method == GetAppParameters.methodName ? row.response : nil
            }) { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                do throws(ClientError) {
                    let reply = try connection.call(GetAppParameters(app: "x"), timeout: .seconds(10))
                    Issue.record("\(row.name): expected an error, got \(reply)")
                } catch {
                    switch (row.expected, error) {
                    case (nil, .protocolViolation):
                        break
                    case (.permissionDenied(_, let method)?, _):
                        #expect(
                            error == .permissionDenied(socketPath: daemon.socketPath, method: method), "\(row.name)")
                    case (let expected?, _):
                        #expect(error == expected, "\(row.name)")
                    default:
                        Issue.record("\(row.name): expected a protocol violation, got \(error)")
                    }
                    #expect(!error.description.isEmpty)
                }
            }
        }
    }

    @Test func protocolViolationsAndDisconnectsCloseTheConnection() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, _ in
                call.method == GetAppParameters.methodName ? .raw(Data("nonsense\0".utf8)) : nil
            }) { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                #expect(throws: ClientError.self) { try connection.call(GetAppParameters(app: "x")) }
                #expect(!connection.isUsable)
                #expect(throws: ClientError.disconnected) { try connection.call(GetStatusParameters()) }
            }
        }
    }

    @Test func daemonNotRunningWhenNoSocketFile() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "bgtask-client-nosocket")
            defer { directory.remove() }
            let path = directory.path + "/" + LifecycleInterface.name
            do throws(ClientError) {
                _ = try VarlinkConnection(socketPath: path)
                Issue.record("connected to a socket that does not exist")
            } catch {
                guard case .daemonNotRunning(let reported, let errno) = error else {
                    Issue.record("expected daemonNotRunning, got \(error)")
                    return
                }
                #expect(reported == path)
                #expect(errno == .noSuchFileOrDirectory)
                #expect(
                    error.description
                        == "bgtaskd is not running at \(path): start it with `systemctl start bgtaskd` "
                        + "(or `systemctl --user start bgtaskd`), or run `bgtaskd --socket \(path)`")
            }
        }
    }

    @Test func daemonNotRunningWhenSocketIsStale() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "bgtask-client-stale")
            defer { directory.remove() }
            let path = directory.path + "/" + LifecycleInterface.name
            try makeStaleSocketFile(at: path)
            #expect(throws: ClientError.daemonNotRunning(socketPath: path, .connectionRefused)) {
                _ = try VarlinkConnection(socketPath: path)
            }
        }
    }

    @Test func otherConnectFailuresAreSystemErrors() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "bgtask-client-notdir")
            defer { directory.remove() }
            let file = directory.path + "/file"
            #expect(FileManager.default.createFile(atPath: file, contents: Data()))
            #expect(throws: ClientError.io(Errno(rawValue: ENOTDIR))) {
                _ = try VarlinkConnection(socketPath: file + "/socket")
            }
            let tooLong = directory.path + "/" + String(repeating: "s", count: UnixSocket.maximumPathLength)
            #expect(throws: ClientError.io(Errno(rawValue: ENAMETOOLONG))) {
                _ = try VarlinkConnection(socketPath: tooLong)
            }
        }
    }

    @Test func streamsRepliesUntilTheLast() async throws {
        try await offThePool {
            let entries = (1...4).map { HistoryEntry(time: Double($0), app: "a\($0)", kind: .registered) }
            try withScriptedDaemon(respond: { call, _ in
                call.method == WatchParameters.methodName ? .replies(entries.map { WatchReply(entry: $0) }) : nil
            }) { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                let stream = try connection.callStreaming(WatchParameters())
                var received: [HistoryEntry] = []
                while let reply = try stream.next(timeout: .seconds(10)) {
                    received.append(reply.entry)
                }
                #expect(received == entries)
                #expect(try stream.next(timeout: .seconds(1)) == nil)
                #expect(daemon.calls(WatchParameters.methodName).first?.more == true)
                // Once the last reply is in, the connection takes plain calls again.
                #expect(throws: ClientError.service(.methodNotFound(method: GetStatusParameters.methodName))) {
                    try connection.call(GetStatusParameters(), timeout: .seconds(10))
                }
            }
        }
    }

    @Test func streamEndsWithAnErrorReply() async throws {
        try await offThePool {
            let entry = HistoryEntry(time: 1, app: "a", kind: .registered)
            try withScriptedDaemon(respond: { call, _ in
                guard call.method == WatchParameters.methodName else { return nil }
                return .repliesThenError([WatchReply(entry: entry)], .permissionDenied())
            }) { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                let stream = try connection.callStreaming(WatchParameters())
                #expect(try stream.next(timeout: .seconds(10))?.entry == entry)
                #expect(
                    throws: ClientError.permissionDenied(
                        socketPath: daemon.socketPath, method: WatchParameters.methodName)
                ) {
                    try stream.next(timeout: .seconds(10))
                }
                #expect(try stream.next(timeout: .seconds(1)) == nil)
                #expect(connection.isUsable)
            }
        }
    }

    @Test func streamStaysUsableAfterATimedOutRead() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, daemon in
                guard call.method == WatchParameters.methodName else { return nil }
                return .reply(WatchReply(entry: HistoryEntry(time: 1, app: "a", kind: .registered)), continues: true)
            }) { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                let stream = try connection.callStreaming(WatchParameters())
                #expect(try stream.next(timeout: .seconds(10))?.entry.app == "a")
                // While the stream is open, the connection is the stream's.
                #expect(throws: ClientError.connectionBusy) { try connection.call(GetStatusParameters()) }
                // No further reply yet: a timed-out read leaves the stream usable.
                #expect(throws: ClientError.timedOut) { try stream.next(timeout: .milliseconds(50)) }
                stream.cancel()
                #expect(throws: ClientError.disconnected) { try stream.next(timeout: .seconds(1)) }
            }
        }
    }

    @Test func cancelWakesABlockedReader() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, _ in
                call.method == WatchParameters.methodName ? .silence : nil
            }) { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                let stream = try connection.callStreaming(WatchParameters())
                let outcome = Recorder<String>()
                let reader = Thread {
                    do {
                        _ = try stream.next()
                        outcome.append("reply")
                    } catch {
                        outcome.append("\(error)")
                    }
                }
                reader.start()
                daemon.waitForCall(WatchParameters.methodName)
                stream.cancel()
                #expect(outcome.wait(forCount: 1) == [ClientError.disconnected.description])
            }
        }
    }

    @Test func timedOutCallClosesTheConnection() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, _ in
                call.method == GetStatusParameters.methodName ? .silence : nil
            }) { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                #expect(throws: ClientError.timedOut) {
                    try connection.call(GetStatusParameters(), timeout: .milliseconds(100))
                }
                #expect(throws: ClientError.disconnected) { try connection.call(GetStatusParameters()) }
            }
        }
    }

    @Test func onewayCallsGetNoReply() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                try connection.callOneway(AcknowledgeParameters(app: "a", eventId: 3))
                // The next call's reply is its own: the oneway call got none to confuse it with.
                let remaining = try connection.call(BackgroundTimeRemainingParameters(app: "a"), timeout: .seconds(10))
                #expect(remaining.seconds == nil)
                let acknowledgement = daemon.waitForCall(AcknowledgeParameters.methodName)
                #expect(acknowledgement?.oneway == true)
                #expect(acknowledgement?.parameters == ["app": "a", "eventId": 3])
            }
        }
    }

    @Test func largeRepliesWithinTheLimitAreRead() async throws {
        try await offThePool {
            // 20,000 apps: about 4 MiB of JSON, far over the daemon's 64 KiB call limit.
            let apps = (0..<20_000).map { index in
                AppInfo(
                    name: "app-\(index)-" + String(repeating: "x", count: 100), state: .suspended, pid: index,
                    uid: 1000, managed: true, tasks: [TaskInfo(id: index, name: "t", ageSec: 1.5)])
            }
            try withScriptedDaemon(respond: { call, _ in
                call.method == ListAppsParameters.methodName ? .reply(ListAppsReply(apps: apps)) : nil
            }) { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                let reply = try connection.call(ListAppsParameters(), timeout: .seconds(30))
                #expect(reply.apps == apps)
                let small = try VarlinkConnection(socketPath: daemon.socketPath, maximumMessageSize: 64 * 1024)
                defer { small.close() }
                do throws(ClientError) {
                    _ = try small.call(ListAppsParameters(), timeout: .seconds(30))
                    Issue.record("a reply over the limit was accepted")
                } catch {
                    guard case .protocolViolation = error else {
                        Issue.record("expected a protocol violation, got \(error)")
                        return
                    }
                }
            }
        }
    }

    @Test func unencodableCallIsRefusedBeforeSending() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let connection = try VarlinkConnection(socketPath: daemon.socketPath)
                defer { connection.close() }
                #expect(throws: ClientError.self) {
                    try connection.call(PostParameters(name: "n", payload: ["bad": .number(.nan)]))
                }
                // Nothing was sent, so the connection is still in step.
                #expect(connection.isUsable)
                #expect(daemon.calls(PostParameters.methodName).isEmpty)
            }
        }
    }
}
