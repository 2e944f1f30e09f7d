// The memory pressure policy: levels and amounts from readings (with hysteresis), and the warn → grace →
// reclaim sequence as a timeline.

import BGTaskCore
import Testing

private let mebibyte: UInt64 = 1 << 20

private struct AssessmentRow: Sendable, CustomTestStringConvertible {
    var label: String
    var reading: MemoryReading
    var level: MemoryLevel
    var bytesToFree: UInt64
    var testDescription: String { label }
}

private let thresholds = MemoryThresholds(
    appsMemoryMax: 100 * mebibyte, warnPercent: 10, criticalPercent: 5, warningGrace: .milliseconds(500))

private let assessmentRows: [AssessmentRow] = [
    AssessmentRow(
        label: "under every limit",
        reading: MemoryReading(appsBytes: 50 * mebibyte, availableBytes: 500, totalBytes: 1000),
        level: .normal, bytesToFree: 0),
    AssessmentRow(
        label: "at AppsMemoryMax exactly is not over", reading: MemoryReading(appsBytes: 100 * mebibyte),
        level: .normal, bytesToFree: 0),
    AssessmentRow(
        label: "over AppsMemoryMax: warn, free down to 90%", reading: MemoryReading(appsBytes: 120 * mebibyte),
        level: .warning, bytesToFree: 120 * mebibyte - UInt64(Double(100 * mebibyte) * 0.9)),
    AssessmentRow(
        label: "MemAvailable under the warning percentage",
        reading: MemoryReading(appsBytes: 0, availableBytes: 80, totalBytes: 1000), level: .warning,
        bytesToFree: 30),
    AssessmentRow(
        label: "MemAvailable under the critical percentage",
        reading: MemoryReading(appsBytes: 0, availableBytes: 40, totalBytes: 1000), level: .critical,
        bytesToFree: 70),
    AssessmentRow(
        label: "both triggers: the larger amount",
        reading: MemoryReading(appsBytes: 101 * mebibyte, availableBytes: 0, totalBytes: 4000 * mebibyte),
        level: .critical, bytesToFree: 440 * mebibyte),
    AssessmentRow(
        label: "no meminfo: only the apps' limit counts", reading: MemoryReading(appsBytes: 10 * mebibyte),
        level: .normal, bytesToFree: 0),
    AssessmentRow(
        label: "zero MemTotal is ignored, not a division by zero",
        reading: MemoryReading(appsBytes: 0, availableBytes: 0, totalBytes: 0), level: .normal, bytesToFree: 0),
]

@Suite("Memory pressure")
struct MemoryPressureTests {
    @Test("assessment", arguments: assessmentRows)
    private func assessment(row: AssessmentRow) {
        let machine = MemoryPressureMachine(thresholds: thresholds)
        let assessment = machine.assess(row.reading)
        #expect(assessment.level == row.level)
        #expect(assessment.bytesToFree == row.bytesToFree)
        #expect(assessment.trigger.isEmpty == (row.level == .normal))
    }

    @Test("over the limit: warn at once, reclaim only after the grace, while it persists")
    func warnThenReclaim() {
        var machine = MemoryPressureMachine(thresholds: thresholds)
        let over = MemoryReading(appsBytes: 130 * mebibyte)
        let start = MonotonicInstant.seconds(100)
        #expect(machine.observe(over, victimsPending: false, now: start).decision == .warn(bytesToFree: 40 * mebibyte))
        #expect(
            machine.observe(over, victimsPending: false, now: start + .milliseconds(499)).decision
                == MemoryPressureMachine.Decision.none)
        #expect(
            machine.observe(over, victimsPending: false, now: start + .milliseconds(500)).decision
                == .reclaim(bytesToFree: 40 * mebibyte, triggeredAt: start))
        // While victims are exiting, no new ones.
        #expect(
            machine.observe(over, victimsPending: true, now: start + .milliseconds(600)).decision
                == MemoryPressureMachine.Decision.none)
        #expect(
            machine.observe(over, victimsPending: false, now: start + .milliseconds(700)).decision
                == .reclaim(bytesToFree: 40 * mebibyte, triggeredAt: start))
    }

    @Test("hysteresis: an episode ends only under 90% of the limit")
    func hysteresis() {
        var machine = MemoryPressureMachine(thresholds: thresholds)
        let start = MonotonicInstant.seconds(100)
        _ = machine.observe(MemoryReading(appsBytes: 101 * mebibyte), victimsPending: false, now: start)
        #expect(machine.isUnderPressure)
        // At 95% the episode goes on (a total hovering at the limit does not flap).
        let hovering = machine.observe(
            MemoryReading(appsBytes: 95 * mebibyte), victimsPending: false, now: start + .seconds(1))
        #expect(hovering.assessment.level == .warning)
        #expect(machine.isUnderPressure)
        _ = machine.observe(MemoryReading(appsBytes: 89 * mebibyte), victimsPending: false, now: start + .seconds(2))
        #expect(!machine.isUnderPressure)
        // A new episode warns again.
        #expect(
            machine.observe(MemoryReading(appsBytes: 101 * mebibyte), victimsPending: false, now: start + .seconds(3))
                .decision
                == .warn(bytesToFree: 101 * mebibyte - UInt64(Double(100 * mebibyte) * 0.9)))
    }

    @Test("critical: reclaim at once, with no warning grace")
    func criticalReclaimsAtOnce() {
        var machine = MemoryPressureMachine(thresholds: thresholds)
        let now = MonotonicInstant.seconds(5)
        let critical = MemoryReading(appsBytes: 0, availableBytes: 10, totalBytes: 1000)
        #expect(
            machine.observe(critical, victimsPending: false, now: now).decision
                == .reclaim(bytesToFree: 100, triggeredAt: now))
    }

    @Test(
        "polling speeds up as headroom shrinks: 1 s at ease with AppsMemoryMax, 50 ms at the limit and under pressure")
    func adaptiveInterval() {
        var machine = MemoryPressureMachine(thresholds: thresholds)
        #expect(machine.interval(after: MemoryReading(appsBytes: 0)) == .seconds(1))
        #expect(machine.interval(after: MemoryReading(appsBytes: 50 * mebibyte)) == .seconds(1))
        // By the square of the headroom: a quarter left is 288 ms, a tenth 88 ms.
        #expect(machine.interval(after: MemoryReading(appsBytes: 75 * mebibyte)) == .milliseconds(288))
        #expect(machine.interval(after: MemoryReading(appsBytes: 90 * mebibyte)) == .milliseconds(88))
        #expect(machine.interval(after: MemoryReading(appsBytes: 100 * mebibyte)) == .milliseconds(50))
        _ = machine.observe(MemoryReading(appsBytes: 120 * mebibyte), victimsPending: false, now: .seconds(1))
        #expect(machine.interval(after: MemoryReading(appsBytes: 0)) == .milliseconds(50))
    }

    @Test("without AppsMemoryMax, MemAvailable far from the thresholds is read 5 s apart, faster as it falls")
    func availableOnlyInterval() {
        var machine = MemoryPressureMachine(thresholds: MemoryThresholds(warnPercent: 10, criticalPercent: 5))
        let total: UInt64 = 1000
        #expect(
            machine.interval(after: MemoryReading(appsBytes: 0, availableBytes: 900, totalBytes: total)) == .seconds(5))
        #expect(
            machine.interval(after: MemoryReading(appsBytes: 0, availableBytes: 550, totalBytes: total)) == .seconds(5))
        let closer = machine.interval(after: MemoryReading(appsBytes: 0, availableBytes: 200, totalBytes: total))
        #expect(closer > .milliseconds(50) && closer < .seconds(5))
        #expect(
            machine.interval(after: MemoryReading(appsBytes: 0, availableBytes: 100, totalBytes: total))
                == .milliseconds(50))
        _ = machine.observe(
            MemoryReading(appsBytes: 0, availableBytes: 40, totalBytes: total), victimsPending: false, now: .seconds(1))
        #expect(
            machine.interval(after: MemoryReading(appsBytes: 0, availableBytes: 900, totalBytes: total))
                == .milliseconds(50))
    }

    @Test("a reclamation record carries its band, memory and trigger-to-kill latency")
    func reclamationRecord() throws {
        var core = Lifecycle()
        let app = try core.register(name: "heavy", process: ProcessIdentity(pid: 5, uid: 1), now: .seconds(1)).app
        _ = try core.setState(app, to: .background, now: .seconds(1))
        _ = try core.acknowledge(app, event: EventID(rawValue: 2), now: .seconds(1))
        let actions = try core.reclaim(app, memoryBytes: 42, triggeredAt: .seconds(2), now: .seconds(3))
        let records = actions.compactMap { action -> AuditEntry? in
            if case .audit(let record) = action, record.kind == .terminated { return record }
            return nil
        }
        #expect(records.count == 1)
        #expect(records.first?.band == .suspended)
        #expect(records.first?.memoryBytes == 42)
        #expect(records.first?.latency == .seconds(1))
        #expect(actions.contains(.kill(app, reason: .memoryReclaim)))
    }
}
