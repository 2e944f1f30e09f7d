// What the daemon tells people about apps: the journal, the bounded history, and live Watch streams.

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem

/// Stable journal message ids (`MESSAGE_ID=`), so `journalctl MESSAGE_ID=...` finds every event of a kind
/// across versions. Never change a value once released.
enum MessageID {
    /// An app registered (a new registration; a re-attach logs without it).
    static let registered = "e2447215fdee45da9a26e1f3dcce598d"
    /// The policy ended an app (any reason), or saw it end.
    static let terminated = "e988254e4d8f4f88bfb51e5f7384e969"
    /// SIGKILL was sent to an app.
    static let killed = "a2478b7e6b4049baaa2fb132f7882cd2"
    /// `backgroundTaskExpiring` was sent: an app's background time is about to end.
    static let expirationWarning = "19a38df8fa13415988d0612acc980932"
    /// An app was terminated to reclaim memory.
    static let reclaimed = "3e5eec69627a4d01827ef127a8a82faf"
    /// A process killed to reclaim memory had not exited `MemoryMonitor.victimExitTimeout` after its kill:
    /// reclamation stopped waiting for it and went on with the next victim.
    static let reclaimVictimStuck = "e8c7aed02d8440fb8439a015783cc195"
    /// Suspension was put off because the app holds a file lock.
    static let suspensionDeferred = "d3c338efa4e842e98c5d15dbd1a7b4e3"
    /// An app is never to be suspended: its unit is stopping, or has a watchdog a suspended process could not ping.
    static let suspensionExempted = "392a7f3d73e64911b466a380189f397e"
    /// A lease ended by expiry (the app kept it open past its budget): a policy violation.
    static let taskExpired = "962703a73a624a5d8fed129fa46b667b"
    /// A suspended app's event queue was full: its oldest events are being dropped.
    static let eventsDropped = "2e2191f699c544de89e4ad737ba5d33c"
    /// The daemon cancelled a held scheduled request that no longer fits the configuration (a pin changed).
    static let requestCancelled = "580f89de10fd469e96c90ff7d8159a70"
    /// A configuration file or directory was refused by the trust rule (someone other than root or the daemon's
    /// user could have written it, or it is not a regular file): none of its settings are used.
    static let configurationRefused = "7e1ee76c47364c91b9092fbb45d141c4"
}

/// The audit trail: every record the policy emits goes to the journal (or stderr), to live watchers, and,
/// when it explains an app's end or a warning, to the bounded history `History()` serves.
final class AuditTrail {
    private(set) var entries: [(record: AuditEntry, entry: HistoryEntry, serial: Int)] = []
    private var start = 0
    var capacity: Int
    let logger: Logger
    /// The serial of the newest kept entry: each kept entry gets the next one, across restarts.
    private(set) var lastSerial = 0
    /// Whether kept entries are gathered for the state file's history (only when there is a state file).
    var gathersUnsaved = false
    /// Kept entries not yet handed to the state writer, oldest first.
    private var unsaved: [SavedHistoryEntry] = []

    init(capacity: Int, logger: Logger) {
        self.capacity = capacity
        self.logger = logger
    }

    /// The kept entries, oldest first, as the state file keeps them.
    var savedEntries: [SavedHistoryEntry] {
        entries[start...].map { SavedHistoryEntry(serial: $0.serial, record: $0.record, entry: $0.entry) }
    }

    /// The entries kept since the last call, for the state file's history to append.
    func takeUnsaved() -> [SavedHistoryEntry] {
        defer { unsaved = [] }
        return unsaved
    }

    /// Takes back the entries a previous daemon saved (the newest `capacity` of them), before any new one;
    /// serials go on from `lastSerial`.
    func restore(_ saved: [SavedHistoryEntry], lastSerial: Int) {
        entries = saved.suffix(capacity).map { ($0.record, $0.entry, $0.serial) }
        start = 0
        self.lastSerial = max(lastSerial, saved.last?.serial ?? 0)
        unsaved = []
    }

    /// Whether `History()` keeps this kind of record (Watch streams them all). Every task's end is kept, an end
    /// as asked (`ended`) too: it is what tells a job that finished its work from one the policy cut short.
    static func isKeptInHistory(_ record: AuditEntry) -> Bool {
        switch record.kind {
        case .taskBegan, .stateChanged: false
        case .registered, .reattached, .taskEnded, .expirationWarning, .suspensionDeferred, .suspensionExempted,
            .memoryWarning, .terminated, .killed, .processExited, .unregistered, .eventsDropped, .requestCancelled:
            true
        }
    }

    /// Records an entry: journal always, history when kept. Returns the wire entry when it is kept or
    /// `isWatched` (building it reads the wall clock; a lease's begin on the hot path needs neither).
    func publish(_ record: AuditEntry, isWatched: Bool) -> HistoryEntry? {
        log(record)
        let isKept = Self.isKeptInHistory(record)
        guard isKept || isWatched else { return nil }
        let entry = HistoryEntry(record, wallClockSeconds: WallClock.secondsSince1970())
        if isKept {
            lastSerial += 1
            entries.append((record, entry, lastSerial))
            if gathersUnsaved { unsaved.append(SavedHistoryEntry(serial: lastSerial, record: record, entry: entry)) }
            let overflow = entries.count - start - capacity
            if overflow > 0 { start += overflow }
            if start > 1024 && start * 2 > entries.count {
                entries.removeFirst(start)
                start = 0
            }
        }
        return entry
    }

    /// The newest `limit` kept entries, oldest first, that `isVisible` allows.
    func history(limit: Int?, isVisible: (AuditEntry) -> Bool) -> [HistoryEntry] {
        var result: [HistoryEntry] = []
        for (record, entry, _) in entries[start...].reversed() where isVisible(record) {
            if let limit, result.count >= limit { break }
            result.append(entry)
        }
        return result.reversed()
    }

    private func log(_ record: AuditEntry) {
        let app = record.appName
        // Built only for a message the logger's level lets through (the fields are an autoclosure): a lease's
        // entries are debug messages, on every call.
        func fields() -> [LogField] {
            var fields: [LogField] = [.app(app)]
            if let task = record.taskID { fields.append(.task(task.rawValue)) }
            if let reason = record.reason { fields.append(.reason(reason.rawValue)) }
            return fields
        }
        switch record.kind {
        case .registered:
            logger.info("\(app) registered", fields() + [.messageID(MessageID.registered)])
        case .reattached:
            logger.info("\(app) re-attached to its registration", fields())
        case .unregistered:
            logger.info("\(app) closed its registration; its leases ended", fields())
        case .stateChanged:
            logger.debug("\(app) is now \(record.state?.rawValue ?? "?")", fields())
        case .taskBegan:
            logger.debug("\(app) began task \(record.taskID?.rawValue ?? 0) \(quoted(record.taskName))", fields())
        case .taskEnded where record.taskEnd == .expired:
            logger.warning(
                "\(app) kept task \(record.taskID?.rawValue ?? 0) \(quoted(record.taskName)) open past its "
                    + "background time: the task expired (policy violation)",
                fields() + [.messageID(MessageID.taskExpired)])
        case .taskEnded:
            logger.debug(
                "\(app) task \(record.taskID?.rawValue ?? 0) ended (\(record.taskEnd?.rawValue ?? "?"))", fields())
        case .expirationWarning:
            let tasks = (record.taskIDs ?? []).map { String($0.rawValue) }.joined(separator: ", ")
            // A scheduled task's warning says why it must end; the shared budget's needs no reason.
            let message =
                record.trigger.map { "\(app) was asked to end scheduled task \(tasks): \($0)" }
                ?? "\(app)'s background time is nearly used up; asked it to end task(s) \(tasks)"
            logger.notice(message, fields() + [.messageID(MessageID.expirationWarning)])
        case .suspensionDeferred:
            logger.notice(
                "\(app) holds a file lock: not suspending it yet; it is terminated if it still holds one "
                    + "when its grace ends",
                fields() + [.messageID(MessageID.suspensionDeferred)])
        case .suspensionExempted:
            logger.notice(
                "\(app) is not suspended from now on: \(record.trigger ?? "its unit forbids it")",
                fields() + [.messageID(MessageID.suspensionExempted)])
        case .memoryWarning:
            let rank = record.rank.map { ", likely victim #\($0)" } ?? ""
            logger.info("memory warning sent to \(app)\(rank)", fields())
        case .terminated where record.reason == .memoryReclaim:
            let memory = record.memoryBytes.map { " using \($0) bytes" } ?? ""
            let latency = record.latency.map { ", \(milliseconds($0)) ms after the trigger" } ?? ""
            let trigger = record.trigger.map { "; \($0)" } ?? ""
            logger.warning(
                "terminating \(app) to reclaim memory (band \(record.band?.name ?? "?")\(memory)\(latency)\(trigger))",
                fields() + [.messageID(MessageID.reclaimed)])
        case .terminated:
            let reason = record.reason?.rawValue ?? "?"
            let initiated = record.reason?.isDaemonInitiated ?? false
            // An app with ExitsOnSuspend asked to be ended once its work is done: news, not a warning.
            let chosen = record.reason == .exitsOnSuspend
            logger.log(
                initiated && !chosen ? .warning : .info,
                initiated ? "terminating \(app): \(explanation(record.reason))" : "\(app) ended (\(reason))",
                fields() + [.messageID(MessageID.terminated)])
        case .killed:
            logger.warning(
                "killed \(app) with SIGKILL (\(record.reason?.rawValue ?? "?"))",
                fields() + [.messageID(MessageID.killed)])
        case .processExited:
            let latency = record.latency.map { ", \(milliseconds($0)) ms after the kill" } ?? ""
            logger.info("\(app)'s process is gone (\(record.reason?.rawValue ?? "?")\(latency))", fields())
        case .eventsDropped:
            logger.warning(
                "\(app)'s event queue is full (QueuedEventsPerAppMax): dropping its oldest events while it is "
                    + "suspended; GetApp counts them",
                fields() + [.messageID(MessageID.eventsDropped)])
        case .requestCancelled:
            let owner = record.ownerUID.map { "uid \($0)" } ?? "no owner"
            logger.warning(
                "cancelled the scheduled request \(quoted(record.requestIdentifier)) of \(app) (\(owner)): "
                    + (record.trigger ?? "it no longer fits the configuration"),
                fields() + [.messageID(MessageID.requestCancelled)])
        }
    }

    /// A duration in milliseconds with two decimals.
    private func milliseconds(_ duration: Duration) -> String {
        let hundredths = (duration.nanosecondCount + 5_000) / 10_000
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
    }

    private func quoted(_ name: String?) -> String {
        name.map { "\"\($0)\"" } ?? "(unnamed)"
    }

    private func explanation(_ reason: TerminationReason?) -> String {
        switch reason {
        case .enterBackgroundTimeout: "it did not acknowledge didEnterBackground in time and held no lease"
        case .taskExpired: "its background time ran out with tasks still open"
        case .launchTimeout: "it did not register within its launch timeout"
        case .suspendedHoldingLock: "it kept a file lock past its grace instead of letting itself be suspended"
        case .memoryReclaim: "memory reclamation"
        case .controller: "a controller asked"
        case .exitsOnSuspend: "it has ExitsOnSuspend and its work is done"
        case .exited: "it exited"
        case .crashed: "it crashed"
        case nil: "unknown reason"
        }
    }
}
