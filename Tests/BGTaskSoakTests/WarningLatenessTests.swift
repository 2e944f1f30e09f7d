// How late expiration warnings came: each kind of due moment, and the warnings left out, on doctored entries.

import BGTaskProtocol
import BGTaskSoak
import Testing

@Suite("Expiration-warning lateness")
struct WarningLatenessTests {
    /// A 12 s budget, warned 3 s before it runs out; refresh tasks 4 s, processing 7 s.
    static let criteria = SoakCriteria(
        backgroundTime: .seconds(12), expirationWarning: .seconds(3),
        scheduledTaskTimes: ["refresh": .seconds(4), "processing": .seconds(7)])

    /// Entries received at their times: `mail` goes to background at t=2 holding task 1 (begun at t=1) and is
    /// warned 40 ms after t=11; `notes` goes to background at t=20 holding task 5, is warned at t=29.010, begins
    /// task 6 at t=30 and is warned of it 2 ms later; `clock` runs scheduled task 7 (`scheduled-any`, submitted as
    /// refresh at t=3) from t=4 and is warned of its time at t=5.010, and task 8 (`scheduled-ac-0`) from t=6, warned
    /// at t=6.5 because `ac` stopped holding.
    static var entries: [ObservedEntry] {
        var entries: [ObservedEntry] = []
        func add(
            _ time: Double, _ app: String, _ kind: AuditKind, state: AppState? = nil, taskId: Int? = nil,
            taskName: String? = nil, taskIds: [Int]? = nil, trigger: String? = nil
        ) {
            entries.append(
                ObservedEntry(
                    observedAt: at(time),
                    entry: HistoryEntry(
                        time: 0, app: app, kind: kind, state: state, taskId: taskId, taskName: taskName,
                        taskIds: taskIds, trigger: trigger)))
        }
        for app in ["mail", "notes", "clock"] {
            add(0, app, .registered)
            add(0, app, .stateChanged, state: .active)
        }
        add(1, "mail", .taskBegan, taskId: 1, taskName: "upload")
        add(2, "mail", .stateChanged, state: .inactive)
        add(2, "mail", .stateChanged, state: .background)
        add(4, "clock", .taskBegan, taskId: 7, taskName: "scheduled-any")
        add(5.01, "clock", .expirationWarning, taskIds: [7], trigger: "its scheduled task's time is nearly up")
        add(6, "clock", .taskBegan, taskId: 8, taskName: "scheduled-ac-0")
        add(6.5, "clock", .expirationWarning, taskIds: [8], trigger: "ac stopped holding")
        add(11.04, "mail", .expirationWarning, taskIds: [1])
        add(19, "notes", .taskBegan, taskId: 5, taskName: "sync")
        add(20, "notes", .stateChanged, state: .inactive)
        add(20, "notes", .stateChanged, state: .background)
        add(29.01, "notes", .expirationWarning, taskIds: [5])
        add(30, "notes", .taskBegan, taskId: 6, taskName: "late")
        add(30.002, "notes", .expirationWarning, taskIds: [6])
        return entries
    }

    static var scheduled: ScheduledEvidence {
        ScheduledEvidence(operations: [
            RequestOperation(
                at: at(3), key: RequestKey(app: "clock", identifier: "scheduled-any"), kind: .submit,
                taskKind: "refresh", outcome: .accepted, answeredAt: at(3.01)),
            RequestOperation(
                at: at(5.5), key: RequestKey(app: "clock", identifier: "scheduled-ac-0"), kind: .submit,
                requires: ["ac"], taskKind: "processing", outcome: .accepted, answeredAt: at(5.51)),
        ])
    }

    static func lateness(_ evidence: SoakEvidence) -> [(WarningLateness.Kind, String, Double)] {
        SoakChecker.warningLateness(evidence, criteria).samples.map {
            ($0.kind, $0.app, ($0.lateness.secondsValue * 1_000).rounded())
        }
    }

    @Test("each warning against its due moment (budget, a lease begun late, a scheduled task); an early one left out")
    func dueMoments() {
        let evidence = SoakEvidence(entries: Self.entries, end: at(40), scheduled: Self.scheduled)
        let result = SoakChecker.warningLateness(evidence, Self.criteria)
        let measured = result.samples.map { ($0.kind, $0.app, ($0.lateness.secondsValue * 1_000).rounded()) }
        #expect(measured.map(\.0) == [.scheduled, .budget, .budget, .atBegin])
        #expect(measured.map(\.1) == ["clock", "mail", "notes", "notes"])
        #expect(measured.map(\.2) == [10, 40, 10, 2])
        #expect(result.samples.map(\.taskIds) == [[7], [1], [5], [6]])
        #expect(result.leftOut == ["brought early: ac stopped holding": 1])
    }

    @Test("a Watch gap or a restart before the warning leaves it out, and so does a scheduled task of unknown kind")
    func leftOut() {
        // A gap from t=8 to t=9: mail's budget warning (counted from t=2) is not measured; notes' are.
        var evidence = SoakEvidence(
            entries: Self.entries, end: at(40), watchGaps: [at(8)...at(9)], scheduled: Self.scheduled)
        var result = SoakChecker.warningLateness(evidence, Self.criteria)
        #expect(result.samples.map(\.app) == ["clock", "notes", "notes"])
        #expect(result.leftOut["a Watch gap or a restart between the entry into background and the warning"] == 1)
        // A restart from t=25 to t=26: notes' two warnings too (the budget they are judged against began before it).
        let empty = AppSnapshot(takenAt: at(26), apps: [])
        evidence.restarts = [
            RestartEvidence(
                cause: .killed, wasHangInjected: false, before: empty, stoppedAt: at(25), readyAt: at(26), after: empty)
        ]
        result = SoakChecker.warningLateness(evidence, Self.criteria)
        #expect(result.samples.map(\.kind) == [.scheduled])
        #expect(result.leftOut["a Watch gap or a restart between the entry into background and the warning"] == 3)
        // A processing submit asked at t=3.9 and answered at t=4.1, after task 7 began: its kind is not known.
        evidence = SoakEvidence(entries: Self.entries, end: at(40), scheduled: Self.scheduled)
        evidence.scheduled.operations.append(
            RequestOperation(
                at: at(3.9), key: RequestKey(app: "clock", identifier: "scheduled-any"), kind: .submit,
                taskKind: "processing", outcome: .accepted, answeredAt: at(4.1)))
        evidence.scheduled.operations.sort { $0.at < $1.at }
        result = SoakChecker.warningLateness(evidence, Self.criteria)
        #expect(result.samples.map(\.kind) == [.budget, .budget, .atBegin])
        #expect(result.leftOut["a scheduled task whose begin or kind is not known"] == 1)
        // The same submit refused: it changed nothing, and task 7 is measured as refresh again.
        evidence.scheduled.operations[1].outcome = .refused("LimitExceeded")
        let first = Self.lateness(evidence).first
        #expect(first?.0 == .scheduled && first?.2 == 10)
    }

    @Test("a warning late by 2 s shows it; a budget kept across suspension and waking counts from the first entry")
    func lateAndWoken() {
        var entries = Self.entries.filter { $0.entry.app == "mail" && $0.entry.kind != .expirationWarning }
        func add(_ time: Double, _ kind: AuditKind, state: AppState? = nil, taskIds: [Int]? = nil) {
            entries.append(
                ObservedEntry(
                    observedAt: at(time),
                    entry: HistoryEntry(time: 0, app: "mail", kind: kind, state: state, taskIds: taskIds)))
        }
        add(3, .stateChanged, state: .suspended)
        add(5, .stateChanged, state: .background)
        add(13, .expirationWarning, taskIds: [1])
        let evidence = SoakEvidence(entries: entries, end: at(20))
        #expect(Self.lateness(evidence).map(\.2) == [2_000])
    }
}
