// Sample values of every wire type and of every method's parameters and reply: one with every optional field
// set and one with every optional field nil, so both encodings are exercised.
import BGTaskProtocol

enum Samples {
    static let task = TaskInfo(id: 7, name: "upload", ageSec: 1.25)

    static let fullApp = AppInfo(
        name: "org.example.mail", state: .background, pid: 4242, uid: 1000, managed: true,
        tasks: [task, TaskInfo(id: 9, name: "", ageSec: 0)], backgroundTimeRemaining: 512.5,
        memoryBytes: 73_400_320, exitReason: .memoryReclaim, queuedEvents: 3, droppedEvents: 2,
        suspendedWith: .cgroup2, cgroup: "/sys/fs/cgroup/user.slice/app-mail.scope"
    )

    static let minimalApp = AppInfo(name: "org.example.clock", state: .active, pid: 17, uid: 0, managed: false)

    static let fullEvent = EventInfo(
        id: 31, kind: .notification, taskIds: [7, 9], name: "sync", payload: ["folder": "inbox", "unread": 12],
        count: 2, likelyVictim: true, rank: 1
    )

    static let minimalEvent = EventInfo(id: 1, kind: .didBecomeActive)

    static let fullHistoryEntry = HistoryEntry(
        time: 1_764_480_000.125, app: "org.example.mail", kind: .terminated, reason: .memoryReclaim,
        band: .backgroundIdle, memoryBytes: 73_400_320, latencyMs: 12.75, state: .terminated, taskId: 4,
        taskName: "upload", taskEnd: .appEnded, taskIds: [4, 5], rank: 2
    )

    static let minimalHistoryEntry = HistoryEntry(time: 1_764_480_001, app: "org.example.clock", kind: .registered)

    /// Parameters of `method`: every optional set, then every optional nil.
    static func parameters(for method: LifecycleMethod) -> [any VarlinkMethodCall & Hashable] {
        switch method {
        case .register:
            [
                RegisterParameters(name: "org.example.mail", exitsOnSuspend: true, state: .background),
                RegisterParameters(name: "org.example.mail"),
            ]
        case .beginBackgroundTask:
            [
                BeginBackgroundTaskParameters(app: "org.example.mail", name: "upload"),
                BeginBackgroundTaskParameters(app: "org.example.mail"),
            ]
        case .endBackgroundTask: [EndBackgroundTaskParameters(app: "org.example.mail", taskId: 7)]
        case .backgroundTimeRemaining: [BackgroundTimeRemainingParameters(app: "org.example.mail")]
        case .acknowledge: [AcknowledgeParameters(app: "org.example.mail", eventId: 31)]
        case .listApps: [ListAppsParameters()]
        case .getApp: [GetAppParameters(app: "org.example.mail")]
        case .setState: [SetStateParameters(app: "org.example.mail", state: .inactive)]
        case .launch:
            [
                LaunchParameters(name: "org.example.job", argv: ["/bin/sleep", "30"], exitsOnSuspend: false),
                LaunchParameters(name: "org.example.job", argv: []),
            ]
        case .terminate: [TerminateParameters(app: "org.example.mail")]
        case .post:
            [
                PostParameters(
                    name: "sync", payload: ["nested": ["a": [1, 2.5, .null, true]]], behavior: .wake,
                    app: "org.example.mail"
                ),
                PostParameters(name: "sync"),
            ]
        case .history: [HistoryParameters(limit: 50), HistoryParameters()]
        case .watch: [WatchParameters()]
        case .getStatus: [GetStatusParameters()]
        case .submitRequest:
            [
                SubmitRequestParameters(
                    app: "org.example.backup", identifier: "nightly", kind: .processing, earliestBegin: 1_800_000_000.5,
                    requires: [.externalPower, .unmeteredNetwork]),
                SubmitRequestParameters(app: "org.example.backup", identifier: "nightly"),
            ]
        case .cancelRequest: [CancelRequestParameters(app: "org.example.backup", identifier: "nightly")]
        case .listRequests: [ListRequestsParameters(app: "org.example.backup"), ListRequestsParameters()]
        case .setTaskCompleted:
            [
                SetTaskCompletedParameters(app: "org.example.backup", taskId: 9, success: false, retry: true),
                SetTaskCompletedParameters(app: "org.example.backup", taskId: 9, success: true),
            ]
        }
    }

    static let pendingRequest = RequestInfo(
        app: "org.example.backup", identifier: "nightly", kind: .processing, earliestBegin: 1_800_000_000.5,
        requires: [.externalPower, .network], uid: 1000, state: .pending, due: 1_800_000_030.5,
        waitingOn: [.externalPower], failures: 1, replaced: false)

    static let runningRequest = RequestInfo(
        app: "org.example.mail", identifier: "refresh", kind: .refresh, earliestBegin: 1_800_000_000, requires: [],
        uid: 1000, state: .running, taskId: 12, failures: 0, replaced: true)

    /// Replies of `method`: every optional set, then every optional nil.
    static func replies(for method: LifecycleMethod) -> [any Codable & Hashable & Sendable] {
        switch method {
        case .register:
            [
                RegisterReply(app: fullApp), RegisterReply(event: fullEvent), RegisterReply(event: minimalEvent),
                RegisterReply(),
            ]
        case .beginBackgroundTask: [BeginBackgroundTaskReply(taskId: 7)]
        case .endBackgroundTask, .acknowledge, .terminate: [EmptyReply()]
        case .backgroundTimeRemaining:
            [BackgroundTimeRemainingReply(seconds: 12.5), BackgroundTimeRemainingReply(seconds: nil)]
        case .listApps: [ListAppsReply(apps: [fullApp, minimalApp]), ListAppsReply(apps: [])]
        case .getApp: [GetAppReply(app: fullApp), GetAppReply(app: minimalApp)]
        case .setState: [SetStateReply(app: fullApp)]
        case .launch: [LaunchReply(app: minimalApp)]
        case .post: [PostReply(delivered: 2, queued: 1)]
        case .history: [HistoryReply(entries: [fullHistoryEntry, minimalHistoryEntry])]
        case .watch: [WatchReply(entry: fullHistoryEntry), WatchReply(entry: minimalHistoryEntry)]
        case .submitRequest: [SubmitRequestReply(request: pendingRequest)]
        case .cancelRequest, .setTaskCompleted: [EmptyReply()]
        case .listRequests:
            [ListRequestsReply(requests: [pendingRequest, runningRequest]), ListRequestsReply(requests: [])]
        case .getStatus:
            [
                GetStatusReply(
                    version: "0.1.0", uptimeSec: 3600.5,
                    backends: ["freeze": "cgroup2", "memory": "pss", "kill": "pidfd"], apps: 4, suspended: 1,
                    tasks: 2, memory: ["memAvailableBytes": 1_073_741_824, "level": "normal"]
                )
            ]
        }
    }
}
