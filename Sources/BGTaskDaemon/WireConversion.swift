// The wire forms of the policy core's values: snapshots, events, audit entries and refusals.
//
// The words themselves (states, kinds, reasons, bands) are BGTaskVocabulary's, shared by both sides, so nothing
// here converts a word: it only assembles the interface's structures.

import BGTaskConfig
import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol

extension AppInfo {
    /// The wire form of a snapshot; `memoryBytes` is measured by the shell.
    init(
        _ snapshot: AppSnapshot, memoryBytes: Int?, now: MonotonicInstant, suspendedWith: SuspensionMethod? = nil,
        cgroup: String? = nil, memoryBackend: String? = nil, unit: String? = nil
    ) {
        var exitStatus: Int?
        var exitSignal: String?
        switch snapshot.processExit {
        case .status(let status)?: exitStatus = Int(status)
        case .signal(let number)?: exitSignal = Signal(rawValue: number)?.name ?? "signal \(number)"
        case nil: break
        }
        self.init(
            name: snapshot.name, state: snapshot.state, pid: Int(snapshot.pid), uid: Int(snapshot.uid),
            managed: snapshot.isManaged,
            tasks: snapshot.tasks.map {
                TaskInfo(id: Int($0.id.rawValue), name: $0.name ?? "", ageSec: (now - $0.began).secondsValue)
            },
            backgroundTimeRemaining: snapshot.backgroundTimeRemaining?.secondsValue,
            memoryBytes: snapshot.state == .terminated ? nil : memoryBytes, exitReason: snapshot.exitReason,
            queuedEvents: snapshot.queuedEvents, droppedEvents: snapshot.droppedEvents, suspendedWith: suspendedWith,
            cgroup: cgroup, memoryBackend: snapshot.state == .terminated ? nil : memoryBackend,
            exitStatus: exitStatus, exitSignal: exitSignal, unit: unit,
            suspensionExemption: snapshot.suspensionExemption?.description)
    }
}

extension HistoryEntry {
    /// The wire form of an audit entry, stamped with wall-clock time.
    init(_ record: AuditEntry, wallClockSeconds: Double) {
        self.init(
            time: wallClockSeconds, app: record.appName, kind: record.kind, reason: record.reason, band: record.band,
            memoryBytes: record.memoryBytes.map { Int(clamping: $0) },
            latencyMs: record.latency.map { $0.secondsValue * 1000 }, state: record.state,
            taskId: record.taskID.map { Int($0.rawValue) },
            taskName: record.taskID == nil ? nil : (record.taskName ?? ""), taskEnd: record.taskEnd,
            taskIds: record.taskIDs?.map { Int($0.rawValue) }, rank: record.rank, trigger: record.trigger,
            identifier: record.requestIdentifier, uid: record.ownerUID.map(Int.init))
    }
}

/// The typed Varlink error for a refusal of the policy core.
func varlinkError(_ error: BGTaskCore.LifecycleError) -> VarlinkError {
    switch error {
    case .noSuchApp(let app): .noSuchApp(app: app)
    case .appExists(let app): .appExists(app: app)
    case .noSuchTask(let app, let task): .noSuchTask(app: app, taskId: Int(task.rawValue))
    case .backgroundTimeExhausted(let app): .backgroundTimeExhausted(app: app)
    case .invalidState(let app, let state): .invalidState(app: app, state: state)
    case .limitExceeded(let limit, let max): .limitExceeded(limit: limit, max: max)
    case .noSuchEvent(let app, let event): .noSuchEvent(app: app, eventId: Int(event.rawValue))
    }
}

/// `RegisterReply` carrying one event, as the daemon sends it: the same JSON as `RegisterReply(event:)`, with a
/// notification's payload copied from the text validated and written once at `Post`, rather than parsed and
/// encoded again for every recipient and every delivery.
struct EventReply: Encodable {
    /// `EventInfo` with the payload as JSON text; the members in `EventInfo`'s order.
    struct Event: Encodable {
        var id: Int
        var kind: EventKind
        var taskIds: [Int]?
        var name: String?
        var payload: RawJSON?
        var count: Int?
        var likelyVictim: Bool?
        var rank: Int?
    }

    /// Always absent: the app goes only in the first reply.
    var app: AppInfo? = nil
    var event: Event

    init(_ event: AppEvent) {
        self.event = Event(
            id: Int(event.id.rawValue), kind: event.kind, taskIds: event.taskIDs?.map { Int($0.rawValue) },
            name: event.name, payload: event.payloadJSON.map { RawJSON(validatedText: Array($0.utf8)) },
            count: event.count, likelyVictim: event.likelyVictim, rank: event.rank)
    }
}

extension ConfigurationInfo {
    /// The wire form of where the configuration came from.
    init(_ sources: ConfigurationSources) {
        self.init(
            root: sources.root, read: sources.read,
            refused: sources.refused.map {
                RefusedFileInfo(path: $0.path, reason: $0.refusal.description, directory: $0.isDirectory)
            })
    }
}
