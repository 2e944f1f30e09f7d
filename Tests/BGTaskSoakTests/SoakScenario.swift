// A clean soak run, written out as the harness would gather it, for the tests to doctor.

import BGTaskProtocol
import BGTaskSoak

/// Seconds on the harness's clock.
func at(_ seconds: Double) -> Duration { .nanoseconds(Int64((seconds * 1e9).rounded())) }

/// Mebibytes in bytes.
func mebibytes(_ count: Int) -> Int { count * 1_048_576 }

/// The story of the clean run, with the times the doctored tests refer to:
/// - `mail` begins task 1 in the foreground (t=1), goes to background (t=2), ends it (t=10) and is suspended;
/// - `photos` goes to background (t=3) and is suspended at once (t=3.5);
/// - `maps` goes to background (t=4) holding task 2, ends it at t=25 and is suspended;
/// - memory: the apps read 1350 MiB against `AppsMemoryMax` 1000 MiB (target 900 MiB) at t=19.5, so at t=20 the
///   daemon reclaims the suspended band heaviest first: `photos` (300 MiB), then `mail` (250 MiB);
/// - `notes` begins task 3 in the foreground (t=26);
/// - restart at t=30 (kill -9; `maps` suspended with 4.1 s left, `notes` holding task 3), ready at t=31;
/// - restart at t=40 (watchdog after an injected hang), ready at t=45;
/// - `notes` ends task 3 (t=50); `maps` and `notes` are terminated by the controller (t=55), exit at t=57;
/// - `clock` runs in the foreground throughout; the daemon stops at t=58; the evidence closes at t=60.
/// - scheduled work (external power on at the start, off at t=12, on at t=20, off at t=24 for good), all in `clock`:
///   `scheduled-ac-0` (requires ac) submitted at t=5 runs as task 11 from t=5.2, is told to stop at t=12.3 and
///   completes (success) at t=12.4; `scheduled-any` submitted at t=8 runs as task 13 from t=10 and fails with retry
///   at t=10.5 (held again); `scheduled-ac-1` (requires ac) submitted at t=13 waits for power, runs as task 12 from
///   t=20.3, is told to stop at t=24.2 and never completes: it ends `constraints-lost` at t=27.2 (held again);
///   `notes`'s `scheduled-any` is submitted at t=46 and cancelled at t=47; a submit at t=48 is refused. The requests
///   held at the end are `clock/scheduled-ac-1` and `clock/scheduled-any`.
struct SoakScenario {
    var evidence: SoakEvidence
    var criteria = SoakCriteria(
        backgroundTime: .seconds(30), budgetGrace: .seconds(2), settling: .seconds(1),
        appsMemoryMax: mebibytes(1000), readingWindow: .seconds(2), restartTolerance: .seconds(1))

    init() {
        var entries: [ObservedEntry] = []
        func add(
            _ time: Double, _ app: String, _ kind: AuditKind, state: AppState? = nil, taskId: Int? = nil,
            taskEnd: TaskEndCause? = nil, reason: TerminationReason? = nil, band: ReclamationBand? = nil,
            memoryBytes: Int? = nil
        ) {
            // The daemon's wall clock is some other clock entirely: the checker must not use it.
            let entry = HistoryEntry(
                time: 1_700_000_000 + time * 0.5, app: app, kind: kind, reason: reason, band: band,
                memoryBytes: memoryBytes, state: state, taskId: taskId, taskEnd: taskEnd)
            entries.append(ObservedEntry(observedAt: at(time), entry: entry))
        }
        func registerActive(_ time: Double, _ app: String) {
            add(time, app, .registered)
            add(time, app, .stateChanged, state: .active)
        }
        func toBackground(_ time: Double, _ app: String) {
            add(time, app, .stateChanged, state: .inactive)
            add(time, app, .stateChanged, state: .background)
        }
        func reclaim(_ time: Double, _ app: String, _ band: ReclamationBand, _ memoryBytes: Int) {
            add(time, app, .stateChanged, state: .terminated)
            add(time, app, .terminated, reason: .memoryReclaim, band: band, memoryBytes: memoryBytes)
            add(time, app, .killed, reason: .memoryReclaim)
        }
        func terminate(_ time: Double, _ app: String) {
            add(time, app, .stateChanged, state: .terminated)
            add(time, app, .terminated, reason: .controller)
        }

        for app in ["mail", "photos", "maps", "notes", "clock"] { registerActive(0, app) }
        add(1, "mail", .taskBegan, taskId: 1)
        toBackground(2, "mail")
        toBackground(3, "photos")
        add(3.5, "photos", .stateChanged, state: .suspended)
        add(4, "maps", .taskBegan, taskId: 2)
        toBackground(4, "maps")
        add(10, "mail", .taskEnded, taskId: 1, taskEnd: .ended)
        add(10, "mail", .stateChanged, state: .suspended)
        add(19.5, "photos", .memoryWarning, band: .suspended, memoryBytes: mebibytes(300))
        reclaim(20, "photos", .suspended, mebibytes(300))
        reclaim(20, "mail", .suspended, mebibytes(250))
        add(20.3, "photos", .processExited, reason: .memoryReclaim)
        add(20.3, "mail", .processExited, reason: .memoryReclaim)
        add(25, "maps", .taskEnded, taskId: 2, taskEnd: .ended)
        add(25, "maps", .stateChanged, state: .suspended)
        add(26, "notes", .taskBegan, taskId: 3)
        add(31.2, "maps", .reattached, state: .suspended)
        add(31.2, "notes", .reattached, state: .active)
        add(50, "notes", .taskEnded, taskId: 3, taskEnd: .ended)
        terminate(55, "maps")
        terminate(55, "notes")
        add(57, "maps", .processExited, reason: .controller)
        add(57, "notes", .processExited, reason: .controller)
        func scheduledTask(_ began: Double, _ id: Int, _ identifier: String, ended: Double, _ cause: TaskEndCause) {
            entries.append(
                ObservedEntry(
                    observedAt: at(began),
                    entry: HistoryEntry(time: 0, app: "clock", kind: .taskBegan, taskId: id, taskName: identifier)))
            entries.append(
                ObservedEntry(
                    observedAt: at(ended),
                    entry: HistoryEntry(time: 0, app: "clock", kind: .taskEnded, taskId: id, taskEnd: cause)))
        }
        scheduledTask(5.2, 11, "scheduled-ac-0", ended: 12.45, .ended)
        scheduledTask(10, 13, "scheduled-any", ended: 10.55, .ended)
        scheduledTask(20.3, 12, "scheduled-ac-1", ended: 27.2, .constraintsLost)
        entries.sort { $0.observedAt < $1.observedAt }

        let task3 = TaskInfo(id: 3, name: "sync", ageSec: 3.9)
        func maps(remaining: Double) -> AppInfo {
            AppInfo(
                name: "maps", state: .suspended, pid: 301, uid: 1000, managed: true, backgroundTimeRemaining: remaining)
        }
        func notes(tasks: [TaskInfo]) -> AppInfo {
            AppInfo(name: "notes", state: .active, pid: 401, uid: 1000, managed: false, tasks: tasks)
        }
        let clock = AppInfo(name: "clock", state: .active, pid: 501, uid: 1000, managed: false)
        let restarts = [
            RestartEvidence(
                cause: .killed, wasHangInjected: false,
                before: AppSnapshot(takenAt: at(29.9), apps: [maps(remaining: 4.1), notes(tasks: [task3]), clock]),
                stoppedAt: at(30), readyAt: at(31),
                after: AppSnapshot(takenAt: at(31), apps: [maps(remaining: 3.0), notes(tasks: [task3]), clock])),
            RestartEvidence(
                cause: .watchdog, wasHangInjected: true,
                before: AppSnapshot(takenAt: at(39.9), apps: [maps(remaining: 0), notes(tasks: [task3]), clock]),
                stoppedAt: at(40), readyAt: at(45),
                after: AppSnapshot(takenAt: at(45), apps: [maps(remaining: 0), notes(tasks: [task3]), clock])),
        ]

        let processSamples = [
            ProcessSample(takenAt: at(5), app: "photos", pid: 201, stateLetter: "T", reportedState: .suspended),
            ProcessSample(takenAt: at(6), app: "maps", pid: 301, stateLetter: "S", reportedState: .background),
            ProcessSample(
                takenAt: at(12), app: "mail", pid: 101, stateLetter: "S", isCgroupFrozen: true,
                reportedState: .suspended),
            ProcessSample(takenAt: at(12), app: "notes", pid: 401, stateLetter: "R", reportedState: .active),
            ProcessSample(
                takenAt: at(27), app: "maps", pid: 301, stateLetter: "S", isCgroupFrozen: true,
                reportedState: .suspended),
            // In its willTerminate grace, thawed and running its handlers.
            ProcessSample(takenAt: at(56.5), app: "maps", pid: 301, stateLetter: "S", reportedState: .terminated),
            // After the daemon stopped: nothing is left frozen.
            ProcessSample(takenAt: at(59.5), app: "clock", pid: 501, stateLetter: "S", reportedState: nil),
        ]

        let memorySamples = [
            MemorySample(takenAt: at(19.5), app: "photos", memoryBytes: mebibytes(300)),
            MemorySample(takenAt: at(19.5), app: "mail", memoryBytes: mebibytes(250)),
            MemorySample(takenAt: at(19.5), app: "maps", memoryBytes: mebibytes(400)),
            MemorySample(takenAt: at(19.5), app: "notes", memoryBytes: mebibytes(350)),
            MemorySample(takenAt: at(19.5), app: "clock", memoryBytes: mebibytes(50)),
        ]

        evidence = SoakEvidence(
            entries: entries, processSamples: processSamples, memorySamples: memorySamples, restarts: restarts,
            resourceSamples: Self.resourceSamples(pid: 100, from: 0, to: 29)
                + Self.resourceSamples(pid: 200, from: 31, to: 58),
            daemonStoppedAt: at(58), end: at(60), scheduled: Self.scheduledWork)
    }

    /// The scheduled work of the story (see the type's summary).
    static var scheduledWork: ScheduledEvidence {
        func key(_ app: String, _ identifier: String) -> RequestKey { RequestKey(app: app, identifier: identifier) }
        func receipt(_ time: Double, _ task: Int, _ kind: ScheduledReceipt.Kind) -> ScheduledReceipt {
            ScheduledReceipt(at: at(time), app: "clock", taskId: task, kind: kind)
        }
        return ScheduledEvidence(
            powerChanges: [
                PowerChange(at: at(0), isOnline: true), PowerChange(at: at(12), isOnline: false),
                PowerChange(at: at(20), isOnline: true), PowerChange(at: at(24), isOnline: false),
            ],
            operations: [
                RequestOperation(
                    at: at(5), key: key("clock", "scheduled-ac-0"), kind: .submit, requires: ["ac"], outcome: .accepted),
                RequestOperation(at: at(8), key: key("clock", "scheduled-any"), kind: .submit, outcome: .accepted),
                RequestOperation(
                    at: at(13), key: key("clock", "scheduled-ac-1"), kind: .submit, requires: ["ac"], outcome: .accepted
                ),
                RequestOperation(at: at(46), key: key("notes", "scheduled-any"), kind: .submit, outcome: .accepted),
                RequestOperation(at: at(47), key: key("notes", "scheduled-any"), kind: .cancel, outcome: .accepted),
                RequestOperation(
                    at: at(48), key: key("clock", "scheduled-ac-0"), kind: .submit, requires: ["ac"],
                    outcome: .refused("LimitExceeded")),
            ],
            receipts: [
                receipt(5.25, 11, .run(identifier: "scheduled-ac-0")),
                receipt(12.3, 11, .expiring),
                receipt(12.4, 11, .completing(success: true, retry: false)),
                receipt(10.05, 13, .run(identifier: "scheduled-any")),
                receipt(10.5, 13, .completing(success: false, retry: true)),
                receipt(20.35, 12, .run(identifier: "scheduled-ac-1")),
                receipt(24.2, 12, .expiring),
            ],
            heldAtEnd: [key("clock", "scheduled-ac-1"), key("clock", "scheduled-any")])
    }

    /// One sample a second of a daemon process from `from` to `to`; `residentGrowth` is how much its resident
    /// memory has grown by the last sample, linearly from the first (around 12 MiB, with a little noise).
    static func resourceSamples(pid: Int, from: Int, to: Int, residentGrowth: Double = 0) -> [ResourceSample] {
        (from...to).map { second in
            let progress = Double(second - from) / Double(max(1, to - from))
            let noise = [0, 40_960, -20_480, 8_192][second % 4]
            return ResourceSample(
                takenAt: at(Double(second)), daemonPid: pid,
                residentBytes: Int(Double(mebibytes(12)) * (1 + residentGrowth * progress)) + noise,
                openDescriptors: 24 + second % 3, cpuSeconds: Double(second - from) * 0.01,
                operations: (second - from) * 50)
        }
    }

    /// Adds an entry received at `time`, after those received before or at it.
    mutating func receive(_ entry: HistoryEntry, at time: Duration) {
        let index = evidence.entries.firstIndex { $0.observedAt > time } ?? evidence.entries.endIndex
        evidence.entries.insert(ObservedEntry(observedAt: time, entry: entry), at: index)
    }

    /// Adds an entry of `kind` for `app` (with `state`, for `stateChanged`) received at `seconds`.
    mutating func receive(_ seconds: Double, _ app: String, _ kind: AuditKind, state: AppState? = nil) {
        receive(HistoryEntry(time: 0, app: app, kind: kind, state: state), at: at(seconds))
    }

    /// Sets every harness reading of `apps` to `memoryBytes`.
    mutating func setMemory(of apps: Set<String>, to memoryBytes: Int) {
        for index in evidence.memorySamples.indices where apps.contains(evidence.memorySamples[index].app) {
            evidence.memorySamples[index].memoryBytes = memoryBytes
        }
    }

    /// The report on the evidence as it stands.
    var report: SoakReport { SoakChecker.check(evidence, criteria: criteria) }
}
