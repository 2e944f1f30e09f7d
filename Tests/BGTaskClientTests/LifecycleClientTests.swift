// The typed calls of LifecycleClient: each sends its method with its parameters and returns the scripted reply.
import BGTaskClient
import BGTaskJSON
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

/// One typed method: what it must send, what the server answers, and whether the method returned that answer.
struct TypedCallCase: Sendable, CustomStringConvertible {
    var method: String
    /// Whether the parameters the server received are the expected ones.
    var sentExpectedParameters: @Sendable (JSONValue) -> Bool
    var reply: any Encodable & Sendable
    /// Calls the method and says whether it returned what `reply` carries.
    var call: @Sendable (LifecycleClient) throws -> Bool

    var description: String { method }
}

/// Whether `json`, the parameters a server received, decode to `expected`.
func parameters<M: VarlinkMethodCall & Equatable>(_ json: JSONValue, are expected: M) -> Bool {
    do {
        let message = try JSONEncoder().encode(["method": .string(M.methodName), "parameters": json] as JSONValue)
        return try VarlinkCodec().decodeParameters(M.self, from: message) == expected
    } catch {
        return false
    }
}

private let sampleApp = AppInfo(
    name: "mail", state: .background, pid: 42, uid: 1000, managed: false,
    tasks: [TaskInfo(id: 3, name: "sync", ageSec: 2.5)], backgroundTimeRemaining: 590, memoryBytes: 1 << 20)
private let sampleEntry = HistoryEntry(
    time: 1_700_000_000, app: "mail", kind: .terminated, reason: .memoryReclaim, band: .suspended,
    memoryBytes: 1 << 24, latencyMs: 12.5)
private let sampleStatus = GetStatusReply(
    version: "1.0", uptimeSec: 12, backends: ["freeze": "cgroup2"], apps: 2, suspended: 1, tasks: 3,
    memory: ["level": "normal"])

@Suite struct LifecycleClientTests {
    static let typedCalls: [TypedCallCase] = [
        TypedCallCase(
            method: ListAppsParameters.methodName,
            sentExpectedParameters: { parameters($0, are: ListAppsParameters()) },
            reply: ListAppsReply(apps: [sampleApp]), call: { try $0.listApps() == [sampleApp] }),
        TypedCallCase(
            method: GetAppParameters.methodName,
            sentExpectedParameters: { parameters($0, are: GetAppParameters(app: "mail")) },
            reply: GetAppReply(app: sampleApp), call: { try $0.getApp("mail") == sampleApp }),
        TypedCallCase(
            method: SetStateParameters.methodName,
            sentExpectedParameters: { parameters($0, are: SetStateParameters(app: "mail", state: .background)) },
            reply: SetStateReply(app: sampleApp), call: { try $0.setState("mail", to: .background) == sampleApp }),
        TypedCallCase(
            method: LaunchParameters.methodName,
            sentExpectedParameters: {
                parameters(
                    $0, are: LaunchParameters(name: "mail", argv: ["/usr/bin/mail", "-x"], exitsOnSuspend: true))
            },
            reply: LaunchReply(app: sampleApp),
            call: { try $0.launch(name: "mail", argv: ["/usr/bin/mail", "-x"], exitsOnSuspend: true) == sampleApp }),
        TypedCallCase(
            method: TerminateParameters.methodName,
            sentExpectedParameters: { parameters($0, are: TerminateParameters(app: "mail")) },
            reply: EmptyReply(), call: { try $0.terminate("mail") == () }),
        TypedCallCase(
            method: PostParameters.methodName,
            sentExpectedParameters: {
                parameters($0, are: PostParameters(name: "sync", payload: ["n": 1], behavior: .wake, app: "mail"))
            },
            reply: PostReply(delivered: 1, queued: 2),
            call: {
                try $0.post(name: "sync", payload: ["n": 1], behavior: .wake, app: "mail")
                    == PostReply(delivered: 1, queued: 2)
            }),
        TypedCallCase(
            method: HistoryParameters.methodName,
            sentExpectedParameters: { parameters($0, are: HistoryParameters(limit: 5)) },
            reply: HistoryReply(entries: [sampleEntry]), call: { try $0.history(limit: 5) == [sampleEntry] }),
        TypedCallCase(
            method: GetStatusParameters.methodName,
            sentExpectedParameters: { parameters($0, are: GetStatusParameters()) },
            reply: sampleStatus, call: { try $0.getStatus() == sampleStatus }),
        TypedCallCase(
            method: BeginBackgroundTaskParameters.methodName,
            sentExpectedParameters: { parameters($0, are: BeginBackgroundTaskParameters(app: "mail", name: "sync")) },
            reply: BeginBackgroundTaskReply(taskId: 17),
            call: { try $0.beginBackgroundTask(app: "mail", name: "sync") == 17 }),
        TypedCallCase(
            method: EndBackgroundTaskParameters.methodName,
            sentExpectedParameters: { parameters($0, are: EndBackgroundTaskParameters(app: "mail", taskId: 17)) },
            reply: EmptyReply(), call: { try $0.endBackgroundTask(app: "mail", taskId: 17) == () }),
        TypedCallCase(
            method: BackgroundTimeRemainingParameters.methodName,
            sentExpectedParameters: { parameters($0, are: BackgroundTimeRemainingParameters(app: "mail")) },
            reply: BackgroundTimeRemainingReply(seconds: 12.5),
            call: { try $0.backgroundTimeRemaining(app: "mail") == 12.5 }),
        TypedCallCase(
            method: AcknowledgeParameters.methodName,
            sentExpectedParameters: { parameters($0, are: AcknowledgeParameters(app: "mail", eventId: 9)) },
            reply: EmptyReply(), call: { try $0.acknowledge(app: "mail", eventId: 9) == () }),
        TypedCallCase(
            method: SubmitRequestParameters.methodName,
            sentExpectedParameters: {
                parameters(
                    $0,
                    are: SubmitRequestParameters(
                        app: "backup", identifier: "nightly", kind: .processing, earliestBegin: 1_800_000_000,
                        requires: [.externalPower, .network]))
            },
            reply: SubmitRequestReply(request: scheduledRequest),
            call: {
                try $0.submitRequest(
                    app: "backup", identifier: "nightly", kind: .processing, earliestBegin: 1_800_000_000,
                    requires: [.externalPower, .network]) == scheduledRequest
            }),
        TypedCallCase(
            method: CancelRequestParameters.methodName,
            sentExpectedParameters: { parameters($0, are: CancelRequestParameters(app: "backup", identifier: "n")) },
            reply: EmptyReply(), call: { try $0.cancelRequest(app: "backup", identifier: "n") == () }),
        TypedCallCase(
            method: ListRequestsParameters.methodName,
            sentExpectedParameters: { parameters($0, are: ListRequestsParameters(app: "backup")) },
            reply: ListRequestsReply(requests: [scheduledRequest]),
            call: { try $0.listRequests(app: "backup") == [scheduledRequest] }),
        TypedCallCase(
            method: SetTaskCompletedParameters.methodName,
            sentExpectedParameters: {
                parameters(
                    $0, are: SetTaskCompletedParameters(app: "backup", taskId: 4, success: false, retry: true))
            },
            reply: EmptyReply(),
            call: { try $0.setTaskCompleted(app: "backup", taskId: 4, success: false, retry: true) == () }),
        TypedCallCase(
            method: GetInfoParameters.methodName, sentExpectedParameters: { parameters($0, are: GetInfoParameters()) },
            reply: GetInfoReply.bgtaskd(version: "1.0"), call: { try $0.getInfo() == .bgtaskd(version: "1.0") }),
        TypedCallCase(
            method: GetInterfaceDescriptionParameters.methodName,
            sentExpectedParameters: {
                parameters($0, are: GetInterfaceDescriptionParameters(interface: LifecycleInterface.name))
            },
            reply: GetInterfaceDescriptionReply(description: LifecycleInterface.description),
            call: { try $0.getInterfaceDescription(LifecycleInterface.name) == LifecycleInterface.description }),
    ]

    /// A scheduled request as the daemon would describe it.
    static let scheduledRequest = RequestInfo(
        app: "backup", identifier: "nightly", kind: .processing, earliestBegin: 1_800_000_000,
        requires: [.externalPower, .network], uid: 1000, state: .pending, due: 1_800_000_000,
        waitingOn: [.externalPower], failures: 0, replaced: false)

    @Test(arguments: typedCalls)
    func typedCall(_ row: TypedCallCase) async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, _ in call.method == row.method ? .reply(row.reply) : nil }) {
                daemon in
                let client = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
                defer { client.close() }
                #expect(try row.call(client), "\(row.method) did not return the scripted reply")
                let sent = daemon.calls(row.method)
                #expect(sent.count == 1)
                #expect(sent.first.map { row.sentExpectedParameters($0.parameters) } == true, "\(sent)")
            }
        }
    }

    @Test func everyMethodOfTheInterfaceHasATypedCall() async {
        await offThePool {
            let covered = Set(Self.typedCalls.map(\.method))
            let streaming: Set = [RegisterParameters.methodName, WatchParameters.methodName]
            for method in LifecycleMethod.allCases where !streaming.contains(method.qualifiedName) {
                #expect(covered.contains(method.qualifiedName), "no typed call for \(method.qualifiedName)")
            }
            for method in VarlinkServiceMethod.allCases {
                #expect(covered.contains(method.qualifiedName), "no typed call for \(method.qualifiedName)")
            }
        }
    }

    @Test func reconnectsWhenTheDaemonDroppedAnIdleConnection() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, _ in
                call.method == GetStatusParameters.methodName ? .reply(sampleStatus) : nil
            }) { daemon in
                let client = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
                defer { client.close() }
                #expect(try client.getStatus() == sampleStatus)
                daemon.dropConnections()
                #expect(try client.getStatus() == sampleStatus)
                let connections = daemon.calls(GetStatusParameters.methodName).map(\.connection)
                #expect(connections.count == 2)
                #expect(Set(connections).count == 2, "the second call must use a new connection")
            }
        }
    }

    @Test func callBrokenInFlightIsNotRepeated() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, daemon in
                guard call.method == TerminateParameters.methodName else { return nil }
                return daemon.calls(TerminateParameters.methodName).count == 1 ? .close : .reply(EmptyReply())
            }) { daemon in
                let client = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
                defer { client.close() }
                #expect(throws: ClientError.disconnected) { try client.terminate("mail") }
                #expect(daemon.calls(TerminateParameters.methodName).count == 1)
                try client.terminate("mail")
                #expect(daemon.calls(TerminateParameters.methodName).count == 2)
            }
        }
    }

    @Test func daemonNotRunningIsReportedAtInit() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "bgtask-client-absent")
            defer { directory.remove() }
            let path = directory.path + "/" + LifecycleInterface.name
            #expect(throws: ClientError.daemonNotRunning(socketPath: path, .noSuchFileOrDirectory)) {
                _ = try LifecycleClient(socketPath: path)
            }
        }
    }

    @Test func registerReadsTheAppThenStreamsEvents() async throws {
        try await offThePool {
            try withScriptedDaemon { daemon in
                let client = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
                defer { client.close() }
                let registration = try client.register(name: "mail", exitsOnSuspend: true, state: .background)
                #expect(registration.app.name == "mail")
                #expect(registration.app.state == .background)
                let register = daemon.calls(RegisterParameters.methodName).first
                #expect(register?.more == true)
                #expect(
                    register.map {
                        parameters(
                            $0.parameters,
                            are: RegisterParameters(name: "mail", exitsOnSuspend: true, state: .background))
                    } == true)
                let events = [
                    EventInfo(id: daemon.nextEventId(), kind: .didEnterBackground),
                    EventInfo(id: daemon.nextEventId(), kind: .notification, name: "n", payload: ["k": "v"], count: 3),
                ]
                for event in events { #expect(daemon.push(event)) }
                #expect(try registration.nextEvent(timeout: .seconds(10)) == events[0])
                #expect(try registration.nextEvent(timeout: .seconds(10)) == events[1])
                // The registration is on its own connection: plain calls go on while it streams.
                try client.acknowledge(app: "mail", eventId: events[0].id)
                #expect(daemon.calls(AcknowledgeParameters.methodName).first?.connection != register?.connection)
                registration.close()
                #expect(throws: ClientError.disconnected) { try registration.nextEvent(timeout: .seconds(1)) }
            }
        }
    }

    @Test func registerRefusedIsTyped() async throws {
        try await offThePool {
            try withScriptedDaemon(respond: { call, _ in
                call.method == RegisterParameters.methodName ? .error(.appExists(app: "mail")) : nil
            }) { daemon in
                let client = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
                defer { client.close() }
                #expect(throws: ClientError.lifecycle(.appExists(app: "mail"))) {
                    _ = try client.register(name: "mail")
                }
            }
        }
    }

    @Test func watchStreamsHistoryEntries() async throws {
        try await offThePool {
            let entries = (1...3).map {
                HistoryEntry(time: Double($0), app: "app\($0)", kind: .stateChanged, state: .suspended)
            }
            try withScriptedDaemon(respond: { call, _ in
                call.method == WatchParameters.methodName
                    ? .replies(entries.map { WatchReply(entry: $0) } as [any Encodable & Sendable]) : nil
            }) { daemon in
                let client = try LifecycleClient(socketPath: daemon.socketPath, timeout: .seconds(10))
                defer { client.close() }
                let watch = try client.watch()
                defer { watch.close() }
                var received: [HistoryEntry] = []
                while let entry = try watch.next(timeout: .seconds(10)) { received.append(entry) }
                #expect(received == entries)
            }
        }
    }
}
