// The invariant checker against a clean soak run, and against the same run doctored to break one invariant each.

import BGTaskProtocol
import BGTaskSoak
import Testing

@Suite("Soak invariant checker")
struct SoakCheckerTests {
    /// The one invariant a doctored run must fail, with its first counter-example.
    func failure(
        of scenario: SoakScenario, _ invariant: Invariant, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> CounterExample {
        let report = scenario.report
        #expect(report.failedInvariants == [invariant], sourceLocation: sourceLocation)
        let result = try #require(report[invariant], sourceLocation: sourceLocation)
        return try #require(result.counterExamples.first, sourceLocation: sourceLocation)
    }

    @Test("clean evidence passes every invariant, each of them judged at least once")
    func cleanEvidencePasses() {
        let report = SoakScenario().report
        #expect(report.results.map(\.invariant) == Invariant.allCases)
        for result in report.results {
            #expect(result.verdict == .pass, "\(result.invariant.rawValue): \(result.counterExamples)")
            #expect(result.checkedCount > 0, "\(result.invariant.rawValue) judged nothing")
        }
        #expect(report.isPassing)
    }

    @Test("empty evidence is reported unexercised, not passed")
    func emptyEvidenceIsUnexercised() {
        let report = SoakChecker.check(SoakEvidence(end: at(1)), criteria: SoakCriteria())
        #expect(report.results.allSatisfy { $0.verdict == .unexercised })
    }

    @Test("a task ended twice fails task-ends-once at the second end")
    func taskEndedTwice() throws {
        var scenario = SoakScenario()
        let again = HistoryEntry(time: 0, app: "mail", kind: .taskEnded, taskId: 1, taskEnd: .appEnded)
        scenario.receive(again, at: at(20))
        let example = try failure(of: scenario, .taskEndsOnce)
        #expect(example.app == "mail")
        #expect(example.at == at(20))
        #expect(example.evidence.contains("task 1 ended twice"))
    }

    @Test("a task never ended fails task-ends-once at its beginning")
    func taskNeverEnded() throws {
        var scenario = SoakScenario()
        scenario.evidence.entries.removeAll { $0.entry.kind == .taskEnded && $0.entry.taskId == 3 }
        let example = try failure(of: scenario, .taskEndsOnce)
        #expect(example.app == "notes")
        #expect(example.at == at(26))
        #expect(example.evidence.contains("task 3 began at t=26.000s and never ended; its app ended at t=55.000s"))
    }

    @Test("an app in background with a task open past its budget fails budget-respected")
    func budgetOverrun() throws {
        var scenario = SoakScenario()
        // maps holds task 2 until t=40 instead of t=25 (still in background when it re-attaches after the first
        // restart): its budget began at t=4, so 30 s and the grace of 2 s end at t=36.
        let maps = scenario.evidence.entries.filter { $0.entry.app == "maps" && $0.observedAt == at(25) }
        scenario.evidence.entries.removeAll { $0.entry.app == "maps" && $0.observedAt == at(25) }
        for observed in maps { scenario.receive(observed.entry, at: at(40)) }
        let reattached = try #require(
            scenario.evidence.entries.firstIndex { $0.entry.app == "maps" && $0.entry.kind == .reattached })
        scenario.evidence.entries[reattached].entry.state = .background
        let example = try failure(of: scenario, .budgetRespected)
        #expect(example.app == "maps")
        #expect(example.at == at(36))
    }

    @Test("a budget that runs out while the daemon hangs is enforced once it is back, plus the grace")
    func budgetEndingDuringHang() throws {
        // With a budget of 36 s, maps's budget (from t=4) ends at t=40, when the hang (t=40 to t=45) begins: the
        // daemon can act only from t=45, so holding task 2 until t=46 passes and until t=48 fails at t=47.
        var scenario = SoakScenario()
        scenario.criteria.backgroundTime = .seconds(36)
        let maps = scenario.evidence.entries.filter { $0.entry.app == "maps" && $0.observedAt == at(25) }
        scenario.evidence.entries.removeAll { $0.entry.app == "maps" && $0.observedAt == at(25) }
        var late = scenario
        for observed in maps { scenario.receive(observed.entry, at: at(46)) }
        for observed in maps { late.receive(observed.entry, at: at(48)) }
        for index in [scenario, late].indices {
            var doctored = index == 0 ? scenario : late
            let reattached = try #require(
                doctored.evidence.entries.firstIndex { $0.entry.app == "maps" && $0.entry.kind == .reattached })
            doctored.evidence.entries[reattached].entry.state = .background
            if index == 0 { scenario = doctored } else { late = doctored }
        }
        #expect(SoakChecker.check(.budgetRespected, scenario.evidence, scenario.criteria).violationCount == 0)
        let example = try failure(of: late, .budgetRespected)
        #expect(example.app == "maps")
        #expect(example.at == at(47))
    }

    @Test("a task whose end fell in a Watch gap stops counting as open once its app is suspended after the gap")
    func endInWatchGapThenSuspended() throws {
        // maps's end of task 2 (t=25) is lost; it is suspended at t=25 all the same, and woken to background for
        // a moment at t=46, past its budget (t=4 + 30 s + 2 s of grace).
        var scenario = SoakScenario()
        scenario.evidence.entries.removeAll { $0.entry.kind == .taskEnded && $0.entry.taskId == 2 }
        let woken = HistoryEntry(time: 1_700_000_023, app: "maps", kind: .stateChanged, state: .background)
        scenario.receive(woken, at: at(46))
        var suspended = woken
        suspended.state = .suspended
        scenario.receive(suspended, at: at(46.5))
        // Without a gap the open task is held against the budget: the checker cannot tell it ended.
        let example = try #require(
            SoakChecker.check(.budgetRespected, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(example.app == "maps" && example.evidence.contains("task(s) 2 open"), "\(example)")
        // With the stream not followed from t=24 to t=24.9, the end may have come then: the suspension after
        // the gap says it did.
        scenario.evidence.watchGaps = [at(24)...at(24.9)]
        let result = SoakChecker.check(.budgetRespected, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0, "\(result.counterExamples)")
        #expect(result.measurements.first { $0.name.contains("Watch gap") }?.value == 1)
        // A gap before the task began does not excuse it.
        scenario.evidence.watchGaps = [at(3)...at(3.5)]
        #expect(SoakChecker.check(.budgetRespected, scenario.evidence, scenario.criteria).violationCount == 1)
    }

    @Test("the listing after a Watch gap tells the checker an app went to the foreground inside it")
    func foregroundInsideWatchGap() throws {
        // clock (a budget of 10 s) goes to background at t=32; its budget ends at t=42, in the hang, and the
        // listing when the daemon is back (t=45) still has it in background. Then, inside the Watch gap that
        // lasts until t=45.8, it is brought to the foreground; in the foreground it holds task 9 from t=47.5 to
        // t=50. The entries alone have it in background with a task past its budget.
        var scenario = SoakScenario()
        scenario.criteria.backgroundTimeByApp["clock"] = .seconds(10)
        for state in [AppState.inactive, .background] {
            scenario.receive(HistoryEntry(time: 0, app: "clock", kind: .stateChanged, state: state), at: at(32))
        }
        func clock(_ state: AppState, remaining: Double? = nil) -> AppInfo {
            AppInfo(
                name: "clock", state: state, pid: 501, uid: 1000, managed: false, backgroundTimeRemaining: remaining)
        }
        for (index, restart) in scenario.evidence.restarts.enumerated() where restart.stoppedAt == at(40) {
            scenario.evidence.restarts[index].before.apps.removeAll { $0.name == "clock" }
            scenario.evidence.restarts[index].before.apps.append(clock(.background, remaining: 2.1))
            scenario.evidence.restarts[index].after.apps.removeAll { $0.name == "clock" }
            scenario.evidence.restarts[index].after.apps.append(clock(.background, remaining: 0))
        }
        scenario.receive(HistoryEntry(time: 0, app: "clock", kind: .taskBegan, taskId: 9), at: at(47.5))
        scenario.receive(HistoryEntry(time: 0, app: "clock", kind: .taskEnded, taskId: 9, taskEnd: .ended), at: at(50))
        scenario.evidence.watchGaps = [at(39.9)...at(45.8)]
        let example = try failure(of: scenario, .budgetRespected)
        #expect(example.app == "clock" && example.at == at(47), "\(example)")

        // The listing taken right after the new subscription has it active: no budget runs.
        var foreground = scenario
        foreground.evidence.watchListings = [AppSnapshot(takenAt: at(45.8), apps: [clock(.active)])]
        #expect(foreground.report.isPassing, "\(foreground.report.failedInvariants)")
        // In background again with a fresh budget: it went to the foreground and back inside the gap.
        var back = scenario
        back.evidence.watchListings = [AppSnapshot(takenAt: at(45.8), apps: [clock(.background, remaining: 9.5)])]
        #expect(back.report.isPassing, "\(back.report.failedInvariants)")
        // Still in background on the budget it had: the task is held against it.
        var stale = scenario
        stale.evidence.watchListings = [AppSnapshot(takenAt: at(45.8), apps: [clock(.background, remaining: 0)])]
        #expect(try failure(of: stale, .budgetRespected).at == at(47))
    }

    @Test("a task whose begin fell in a Watch gap is counted unverifiable; outside a gap it fails task-ends-once")
    func beginInWatchGap() throws {
        var scenario = SoakScenario()
        // Without the scheduled tasks (ids 11 to 13, numbered apart from the story's leases, which a gap judges
        // by their order).
        scenario.evidence.entries.removeAll { ($0.entry.taskId ?? 0) > 10 }
        scenario.evidence.scheduled = ScheduledEvidence()
        scenario.evidence.entries.removeAll { $0.entry.kind == .taskBegan && $0.entry.taskId == 3 }
        let example = try failure(of: scenario, .taskEndsOnce)
        #expect(example.evidence.contains("task 3 ended at t=50.000s but never began"))
        // The stream was not followed from t=25.5 to t=26.5: ids 1 and 2 came before, none began after, so task 3
        // began in the gap.
        scenario.evidence.watchGaps = [at(25.5)...at(26.5)]
        let result = SoakChecker.check(.taskEndsOnce, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0)
        #expect(result.measurements.first { $0.name.contains("Watch gap") }?.value == 1)
        // A gap before ids that came after it does not excuse a missing begin.
        scenario.evidence.watchGaps = [at(2.5)...at(3)]
        #expect(SoakChecker.check(.taskEndsOnce, scenario.evidence, scenario.criteria).violationCount == 1)
    }

    @Test("a task gone across a restart during a Watch gap is counted unverifiable, not a violation")
    func taskGoneDuringWatchGap() throws {
        var scenario = SoakScenario()
        scenario.evidence.restarts[0].after.apps[1].tasks = []
        _ = try failure(of: scenario, .restartKeepsState)
        scenario.evidence.watchGaps = [at(29.95)...at(31.2)]
        let result = SoakChecker.check(.restartKeepsState, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0)
        #expect(result.measurements.first { $0.name.contains("Watch gap") }?.value == 1)
    }

    @Test("a suspended app seen running fails suspended-means-stopped")
    func suspendedAppRunning() throws {
        var scenario = SoakScenario()
        scenario.evidence.processSamples.append(
            ProcessSample(
                takenAt: at(15), app: "mail", pid: 101, stateLetter: "R", isCgroupFrozen: false,
                reportedState: .suspended))
        let example = try failure(of: scenario, .suspendedMeansStopped)
        #expect(example.app == "mail")
        #expect(example.at == at(15))
        #expect(example.evidence.contains("pid 101 in state R, cgroup not frozen"))
    }

    @Test("a running app seen stopped fails suspended-means-stopped")
    func runningAppStopped() throws {
        var scenario = SoakScenario()
        scenario.evidence.processSamples.append(
            ProcessSample(takenAt: at(14), app: "notes", pid: 401, stateLetter: "T", reportedState: .active))
        let example = try failure(of: scenario, .suspendedMeansStopped)
        #expect(example.app == "notes")
        #expect(example.at == at(14))
    }

    @Test("a sample right after a state change is not judged")
    func settlingSampleNotJudged() {
        var scenario = SoakScenario()
        // mail was suspended at t=10; half a second later it may still be freezing.
        scenario.evidence.processSamples.append(
            ProcessSample(takenAt: at(10.5), app: "mail", pid: 101, stateLetter: "R", reportedState: .suspended))
        #expect(scenario.report.isPassing)
    }

    @Test("a process left stopped after its app ended fails no-stray-stops")
    func stoppedAfterAppEnded() throws {
        var scenario = SoakScenario()
        scenario.evidence.processSamples.append(
            ProcessSample(takenAt: at(56.8), app: "maps", pid: 301, stateLetter: "T", reportedState: .terminated))
        let example = try failure(of: scenario, .noStrayStops)
        #expect(example.app == "maps")
        #expect(example.at == at(56.8))
        #expect(example.evidence.contains("after the app ended at t=55.000s"))
    }

    @Test("a process left frozen after the daemon stopped fails no-stray-stops")
    func frozenAfterDaemonStopped() throws {
        var scenario = SoakScenario()
        scenario.evidence.processSamples.append(
            ProcessSample(
                takenAt: at(59.8), app: "clock", pid: 501, stateLetter: "S", isCgroupFrozen: true, reportedState: nil))
        let example = try failure(of: scenario, .noStrayStops)
        #expect(example.app == "clock")
        #expect(example.at == at(59.8))
    }

    @Test("a light app killed before a heavier one in its band fails heaviest-first")
    func lightKilledFirst() throws {
        var scenario = SoakScenario()
        // The same two kills in the other order: mail (250 MiB) while photos (300 MiB) is still suspended.
        let isMailKill = { (observed: ObservedEntry) in observed.entry.app == "mail" && observed.observedAt == at(20) }
        let mailKill = scenario.evidence.entries.filter(isMailKill)
        scenario.evidence.entries.removeAll(where: isMailKill)
        let photosKill = try #require(
            scenario.evidence.entries.firstIndex { $0.entry.app == "photos" && $0.observedAt == at(20) })
        scenario.evidence.entries.insert(contentsOf: mailKill, at: photosKill)
        let example = try failure(of: scenario, .heaviestFirst)
        #expect(example.app == "mail")
        #expect(example.at == at(20))
        #expect(example.evidence.contains("while photos in the same band suspended had 314572800 bytes"))
    }

    @Test("a survivor read heavier only after a kill (memory it shared with the victim now its own) is no violation")
    func survivorHeavierOnlyAfterTheKill() throws {
        // photos stays suspended: mail (250 MiB) is the only victim at t=20. photos is read at 300 MiB only after
        // the kill (the harness had not read it before): that says nothing of what it weighed when the daemon chose.
        var scenario = SoakScenario()
        scenario.evidence.entries.removeAll {
            $0.entry.app == "photos" && (at(20)...at(20.3)).contains($0.observedAt)
        }
        scenario.evidence.memorySamples.removeAll { $0.app == "photos" }
        scenario.evidence.memorySamples.append(
            MemorySample(takenAt: at(20.5), app: "photos", memoryBytes: mebibytes(300)))
        let result = SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0, "\(result.counterExamples)")
        // Read at 240 MiB before the kill, it was the lighter.
        scenario.evidence.memorySamples.append(
            MemorySample(takenAt: at(19.5), app: "photos", memoryBytes: mebibytes(240)))
        #expect(SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).violationCount == 0)
        // Read as heavy before the kill, it should have gone first.
        scenario.evidence.memorySamples[scenario.evidence.memorySamples.count - 1].memoryBytes = mebibytes(300)
        let example = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(example.app == "mail" && example.evidence.contains("while photos in the same band suspended"))
    }

    @Test("a survivor that freed memory between the harness's reading and the kill is judged by its reading after")
    func survivorLighterAfterTheKill() throws {
        // The seeds 3831752957692394277 and 8360582566104785993: photos was read at 300 MiB a second before the
        // kill of mail (250 MiB), freed most of it, and the daemon weighed it at its decision as the harness read
        // it right after: 2 MiB. Sparing it was right.
        var scenario = SoakScenario()
        scenario.evidence.entries.removeAll {
            $0.entry.app == "photos" && (at(20)...at(20.3)).contains($0.observedAt)
        }
        scenario.evidence.memorySamples.removeAll { $0.app == "photos" }
        scenario.evidence.memorySamples += [
            MemorySample(takenAt: at(19.1), app: "photos", memoryBytes: mebibytes(300)),
            MemorySample(takenAt: at(20.1), app: "photos", memoryBytes: mebibytes(2)),
        ]
        let result = SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0, "\(result.counterExamples)")
        // Heavy on both sides of the kill, it should have gone first; a lighter reading earlier in the window does
        // not excuse it (only the readings nearest the kill bracket the decision).
        scenario.evidence.memorySamples[scenario.evidence.memorySamples.count - 1].memoryBytes = mebibytes(300)
        scenario.evidence.memorySamples.append(
            MemorySample(takenAt: at(18.5), app: "photos", memoryBytes: mebibytes(2)))
        let example = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(example.app == "mail" && example.evidence.contains("while photos in the same band suspended"))
    }

    @Test("a survivor read while it touched a new chunk is judged with that chunk whole, as it may not have had it")
    func survivorReadWhileTouching() throws {
        // Seed 8360582566104785993 under two busy loops: soak-21 was read at 18.1 MiB just before the kill while
        // its log still said nothing was mapped (it logs a chunk once touched); the daemon had weighed it before.
        // Here photos holds 10 MiB, starts touching 290 MiB more at t=19, is read at 300 MiB at t=19.1 and after
        // the kill, and logs the chunk touched at t=19.3.
        var scenario = SoakScenario()
        scenario.evidence.entries.removeAll {
            $0.entry.app == "photos" && (at(20)...at(20.3)).contains($0.observedAt)
        }
        scenario.evidence.memorySamples.removeAll { $0.app == "photos" }
        scenario.evidence.memorySamples += [
            MemorySample(takenAt: at(19.1), app: "photos", memoryBytes: mebibytes(300), pid: 700),
            MemorySample(takenAt: at(20.6), app: "photos", memoryBytes: mebibytes(300), pid: 700),
        ]
        let change = { (time: Double, held: Int, touching: Bool) in
            AllocationChange(
                at: at(time), app: "photos", pid: 700, allocatedBytes: mebibytes(held), isTouching: touching)
        }
        scenario.evidence.allocationChanges = [
            change(1, 0, false), change(5, 10, false), change(19, 300, true), change(19.3, 300, false),
        ]
        let result = SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0, "\(result.counterExamples)")
        // Without the mark the reading counts whole, and the daemon is blamed.
        scenario.evidence.allocationChanges = [change(1, 0, false), change(5, 10, false), change(19.3, 300, false)]
        let example = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(example.app == "mail" && example.evidence.contains("while photos in the same band suspended"))
        // A chunk being touched never lowers the least it held: touching since before the window, photos held 10
        // MiB at its least, so a reading of 300 MiB with the chunk counted whole is 10 MiB, as above, and one of
        // 300 MiB while it held 290 MiB all along (marked chunk of 10 MiB) is heavy.
        scenario.evidence.allocationChanges = [change(1, 0, false), change(5, 290, false), change(19, 300, true)]
        let heavy = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(heavy.app == "mail")
    }

    @Test("a name registered again after its reclaim is weighed by its new process alone, not the dead one's readings")
    func newRegistrationAfterReclaim() throws {
        // Seed 3831752957692394277 under two busy loops: soak-24 (14.1 MiB) was reclaimed, registered again from a
        // fresh process 0.3 s later, and the daemon was blamed for sparing that newcomer on the dead process's
        // weight. Here photos (300 MiB) is reclaimed at t=20, registers again at t=20.4 and is suspended at 20.5;
        // clock, suspended too, is reclaimed at t=21 with 50 MiB.
        var scenario = SoakScenario()
        scenario.receive(20.4, "photos", .registered)
        scenario.receive(20.4, "photos", .stateChanged, state: .active)
        scenario.receive(20.5, "photos", .stateChanged, state: .background)
        scenario.receive(20.5, "photos", .stateChanged, state: .suspended)
        scenario.receive(20.6, "clock", .stateChanged, state: .background)
        scenario.receive(20.6, "clock", .stateChanged, state: .suspended)
        scenario.receive(21, "clock", .stateChanged, state: .terminated)
        scenario.receive(
            HistoryEntry(
                time: 0, app: "clock", kind: .terminated, reason: .memoryReclaim, band: .suspended,
                memoryBytes: mebibytes(50)),
            at: at(21))
        let result = SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0, "\(result.counterExamples)")
        // A reading of the new process counts: light, it excuses the daemon; heavy, it does not.
        scenario.evidence.memorySamples.append(
            MemorySample(takenAt: at(20.8), app: "photos", memoryBytes: mebibytes(20), pid: 900))
        #expect(SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).violationCount == 0)
        scenario.evidence.memorySamples.removeLast()
        scenario.evidence.memorySamples.append(
            MemorySample(takenAt: at(20.8), app: "photos", memoryBytes: mebibytes(400), pid: 900))
        let example = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(example.app == "clock" && example.evidence.contains("while photos in the same band suspended"))
    }

    @Test("a name registered again moments before a reclamation, read by nobody yet, is not held against the bands")
    func unreadNewcomerIsNoCandidate() throws {
        // Seed 3831752957692394277 on a fresh clone: soak-24, reclaimed at t=44.98, registered again at 47.35 and
        // went to background (no task) at 47.394; at 47.402 the daemon reclaimed from backgroundWithTasks, and was
        // blamed for sparing the newcomer, of which it had no reading (the daemon reclaims only apps it has read).
        // Here photos, reclaimed at t=20, registers again at t=20.4 and goes to background (no task) at 20.5; maps, in
        // background with task 2, is reclaimed at t=20.6.
        var scenario = SoakScenario()
        scenario.receive(20.4, "photos", .registered)
        scenario.receive(20.4, "photos", .stateChanged, state: .active)
        scenario.receive(20.5, "photos", .stateChanged, state: .background)
        scenario.receive(20.6, "maps", .stateChanged, state: .terminated)
        scenario.receive(
            HistoryEntry(
                time: 0, app: "maps", kind: .terminated, reason: .memoryReclaim, band: .backgroundWithTasks,
                memoryBytes: mebibytes(400)),
            at: at(20.6))
        let result = SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0, "\(result.counterExamples)")
        // Once the newcomer has been read, sparing it in an earlier band is a violation.
        scenario.evidence.memorySamples.append(
            MemorySample(takenAt: at(20.52), app: "photos", memoryBytes: mebibytes(20), pid: 900))
        let example = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(
            example.app == "maps" && example.evidence.contains("while photos was still in band backgroundIdle"),
            "\(example)")
    }

    @Test("a survivor that freed memory and mapped more between two readings is judged by its own allocation log")
    func survivorLighterOnlyBetweenReadings() throws {
        // Seed 8360582566104785993 again, once the bracket was in: soak-37 was read at 7.8 MiB before the kill and
        // 18.7 MiB after; the daemon weighed it at 6.1 MiB in between: it had freed a chunk and mapped a larger one
        // between the readings. Here photos reads 300 MiB before the kill of mail (250 MiB) and 400 MiB after.
        var scenario = SoakScenario()
        scenario.evidence.entries.removeAll {
            $0.entry.app == "photos" && (at(20)...at(20.3)).contains($0.observedAt)
        }
        scenario.evidence.memorySamples.removeAll { $0.app == "photos" }
        scenario.evidence.memorySamples += [
            MemorySample(takenAt: at(19.1), app: "photos", memoryBytes: mebibytes(300), pid: 700),
            MemorySample(takenAt: at(20.6), app: "photos", memoryBytes: mebibytes(400), pid: 700),
        ]
        // Holding 290 MiB of its 300 at the reading; it freed 100 MiB at t=19.6 and mapped 200 MiB at t=20.2.
        let log = { (changes: [(Double, Int)]) in
            changes.map { AllocationChange(at: at($0.0), app: "photos", pid: 700, allocatedBytes: mebibytes($0.1)) }
        }
        scenario.evidence.allocationChanges = log([(1, 0), (5, 290), (19.6, 190), (20.2, 390)])
        let result = SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria)
        #expect(result.violationCount == 0, "\(result.counterExamples)")
        // A log that never dipped below the reading's weight excuses nothing.
        scenario.evidence.allocationChanges = log([(1, 0), (5, 290), (20.2, 390)])
        var example = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(example.app == "mail" && example.evidence.contains("while photos in the same band suspended"))
        // Nor does a dip before the window the daemon weighs in, or one of another process of the app.
        scenario.evidence.allocationChanges = log([(1, 0), (5, 290), (17, 10), (17.5, 290), (20.2, 390)])
        example = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(example.app == "mail")
        scenario.evidence.allocationChanges =
            log([(1, 0), (5, 290)])
            + [AllocationChange(at: at(19.6), app: "photos", pid: 701, allocatedBytes: 0)]
        example = try #require(
            SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria).counterExamples.first)
        #expect(example.app == "mail")
    }

    @Test("a kill from a later band while an earlier band has apps fails heaviest-first")
    func bandSkipped() throws {
        var scenario = SoakScenario()
        let maps = HistoryEntry(
            time: 0, app: "maps", kind: .terminated, reason: .memoryReclaim, band: .backgroundWithTasks,
            memoryBytes: mebibytes(400))
        scenario.receive(maps, at: at(19.9))
        scenario.evidence.processSamples.removeAll { $0.app == "maps" && $0.takenAt > at(19.9) }
        let example = try failure(of: scenario, .heaviestFirst)
        #expect(example.app == "maps")
        #expect(example.at == at(19.9))
        #expect(example.evidence.contains("while mail was still in band suspended"))
    }

    @Test("heaviest-first takes the bands from the listing after a restart, not from entries a Watch gap made stale")
    func bandsRefreshedAfterRestart() throws {
        // During the hang (t=40 to t=45) maps was terminated and notes went to background with task 3, neither
        // seen as an entry; at t=47 notes is reclaimed from band backgroundWithTasks.
        var scenario = SoakScenario()
        for (app, state, reason) in [
            ("notes", AppState.terminated, nil), ("notes", nil, TerminationReason.memoryReclaim),
        ] {
            var entry = HistoryEntry(
                time: 1_700_000_024, app: app, kind: state == nil ? .terminated : .stateChanged, state: state)
            entry.reason = reason
            if state == nil {
                entry.band = .backgroundWithTasks
                entry.memoryBytes = mebibytes(350)
            }
            scenario.receive(entry, at: at(47))
        }
        // The stream was not followed from just before the hang until after the daemon was back.
        scenario.evidence.watchGaps = [at(39.9)...at(45.5)]
        // The harness read maps's process just before: only an app read is a candidate the daemon could have spared.
        scenario.evidence.memorySamples.append(
            MemorySample(takenAt: at(46.5), app: "maps", memoryBytes: mebibytes(10), pid: 301))
        // Without the listing, maps still looks suspended: a band before the victim's.
        let stale = SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria)
        #expect(
            stale.counterExamples.contains { $0.evidence.contains("while maps was still in band suspended") },
            "\(stale.counterExamples)")
        var listed = scenario.evidence.restarts[1].after.apps
        for index in listed.indices {
            if listed[index].name == "maps" { listed[index].state = .terminated }
            if listed[index].name == "notes" { listed[index].state = .background }
        }
        scenario.evidence.restarts[1].after.apps = listed
        let refreshed = SoakChecker.check(.heaviestFirst, scenario.evidence, scenario.criteria)
        #expect(refreshed.violationCount == 0, "\(refreshed.counterExamples)")
    }

    @Test("a kill while under target fails heaviest-first")
    func killUnderTarget() throws {
        var scenario = SoakScenario()
        // maps and notes read 100 MiB each: 800 MiB in all, under 90% of AppsMemoryMax (900 MiB) less 10%.
        scenario.setMemory(of: ["maps", "notes"], to: mebibytes(100))
        let example = try failure(of: scenario, .heaviestFirst)
        #expect(example.app == "photos")
        #expect(example.at == at(20))
        #expect(example.evidence.contains("the apps used 838860800 bytes (800.0 MiB), not over the target"))
        #expect(scenario.report[.heaviestFirst]?.violationCount == 2)
        // Without a reading of clock (live, in the foreground) the total is partial: not judged, and counted.
        scenario.evidence.memorySamples.removeAll { $0.app == "clock" }
        let partial = try #require(scenario.report[.heaviestFirst])
        #expect(partial.violationCount == 0, "\(partial.counterExamples)")
        #expect(partial.measurements.first { $0.name.contains("not judged") }?.value == 2)
    }

    @Test("a kill under the configured target is justified once the harness lowered AppsMemoryMax under the apps")
    func killAfterLimitLowered() throws {
        var scenario = SoakScenario()
        scenario.setMemory(of: ["maps", "notes"], to: mebibytes(100))
        // 800 MiB in all: over 90% of a limit lowered to 600 MiB just before the kills, put back after them.
        scenario.evidence.memoryLimitChanges = [
            MemoryLimitChange(at: at(19), appsMemoryMax: mebibytes(600)),
            MemoryLimitChange(at: at(40), appsMemoryMax: mebibytes(1_000)),
        ]
        #expect(scenario.report[.heaviestFirst]?.violationCount == 0, "\(scenario.report)")
        // Put back before the kills, the configured limit judges them again.
        scenario.evidence.memoryLimitChanges = [
            MemoryLimitChange(at: at(5), appsMemoryMax: mebibytes(600)),
            MemoryLimitChange(at: at(10), appsMemoryMax: mebibytes(1_000)),
        ]
        #expect(scenario.report[.heaviestFirst]?.violationCount == 2)
    }

    @Test("a budget that grew across a restart fails restart-keeps-state")
    func budgetGrewAcrossRestart() throws {
        var scenario = SoakScenario()
        let index = try #require(scenario.evidence.restarts[0].after.apps.firstIndex { $0.name == "maps" })
        scenario.evidence.restarts[0].after.apps[index].backgroundTimeRemaining = 10
        let example = try failure(of: scenario, .restartKeepsState)
        #expect(example.app == "maps")
        #expect(example.at == at(31))
        #expect(example.evidence.contains("4.100s of background time before the kill-9 restart at t=30.000s"))
    }

    @Test("a task lost across a restart fails restart-keeps-state")
    func taskLostAcrossRestart() throws {
        var scenario = SoakScenario()
        let index = try #require(scenario.evidence.restarts[0].after.apps.firstIndex { $0.name == "notes" })
        scenario.evidence.restarts[0].after.apps[index].tasks = []
        let example = try failure(of: scenario, .restartKeepsState)
        #expect(example.app == "notes")
        #expect(example.at == at(31))
        #expect(example.evidence.contains("task 3 was open"))
    }

    @Test("an app lost across a restart fails restart-keeps-state")
    func appLostAcrossRestart() throws {
        var scenario = SoakScenario()
        scenario.evidence.restarts[1].after.apps.removeAll { $0.name == "clock" }
        let example = try failure(of: scenario, .restartKeepsState)
        #expect(example.app == "clock")
        #expect(example.at == at(45))
    }

    @Test("a watchdog restart without a hang fails watchdog-only-on-hang")
    func watchdogWithoutHang() throws {
        var scenario = SoakScenario()
        scenario.evidence.restarts[1].wasHangInjected = false
        let example = try failure(of: scenario, .watchdogOnlyOnHang)
        #expect(example.app == nil)
        #expect(example.at == at(40))
    }

    @Test("resident memory growing 30% over a daemon's run fails resources-flat")
    func residentMemoryGrows() throws {
        var scenario = SoakScenario()
        scenario.evidence.resourceSamples =
            SoakScenario.resourceSamples(pid: 100, from: 0, to: 29)
            + SoakScenario.resourceSamples(pid: 200, from: 31, to: 58, residentGrowth: 0.3)
        let example = try failure(of: scenario, .resourcesFlat)
        #expect(example.app == nil)
        #expect(example.at == at(58))
        #expect(example.evidence.contains("resident memory grew"))
        #expect(example.evidence.contains("daemon pid 200"))
    }

    @Test("bursts of resident memory late in a daemon's run that it comes back from pass resources-flat")
    func residentMemoryBursts() throws {
        var scenario = SoakScenario()
        var samples = SoakScenario.resourceSamples(pid: 200, from: 31, to: 58)
        // Two bursts of a fifth more, four of the last third's seven samples (a reclamation, a snapshot), each gone a
        // few seconds later: the median of the last third is raised, its floor is not.
        for index in samples.indices where [52, 53, 55, 56].contains(Int(samples[index].takenAt.components.seconds)) {
            samples[index].residentBytes = samples[index].residentBytes / 5 * 6
        }
        scenario.evidence.resourceSamples = SoakScenario.resourceSamples(pid: 100, from: 0, to: 29) + samples
        let result = try #require(scenario.report[.resourcesFlat])
        #expect(result.violationCount == 0, "\(result)")
    }

    @Test("a few descriptors more are within the slack; many more fail resources-flat")
    func descriptorGrowth() throws {
        var scenario = SoakScenario()
        func descriptors(extra: Int) -> [ResourceSample] {
            SoakScenario.resourceSamples(pid: 200, from: 31, to: 58).map { sample in
                var sample = sample
                if sample.takenAt > at(50) { sample.openDescriptors += extra }
                return sample
            }
        }
        scenario.evidence.resourceSamples = descriptors(extra: 3)
        #expect(scenario.report.isPassing)
        scenario.evidence.resourceSamples = descriptors(extra: 12)
        let example = try failure(of: scenario, .resourcesFlat)
        #expect(example.evidence.contains("open descriptors grew"))
    }

    @Test("CPU per operation is reported, not judged")
    func cpuPerOperation() throws {
        let result = try #require(SoakScenario().report[.resourcesFlat])
        let perOperation = try #require(result.measurements.first { $0.name == "CPU seconds per operation" })
        // 0.01 s of CPU and 50 operations a second.
        #expect(abs(perOperation.value - 0.0002) < 1e-9)
    }

    @Test("only the first counter-examples are kept, earliest first, with the full count")
    func counterExampleLimit() {
        var scenario = SoakScenario()
        scenario.criteria.counterExampleLimit = 2
        for second in [16.0, 14.0, 18.0] {
            scenario.evidence.processSamples.append(
                ProcessSample(takenAt: at(second), app: "mail", pid: 101, stateLetter: "R", reportedState: .suspended))
        }
        let result = scenario.report[.suspendedMeansStopped]
        #expect(result?.violationCount == 3)
        #expect(result?.counterExamples.map(\.at) == [at(14), at(16)])
    }
}

extension SoakCheckerTests {
    @Test("a kill with the apps' PSS a little under the target is within the tolerance between the two measures")
    func killJustUnderTarget() throws {
        var scenario = SoakScenario()
        // maps and notes read 125 MiB each: 850 MiB in all with clock's 50, 5.6% under the target of 900 MiB; the
        // daemon's own readings (memory.current, taken at another moment) may well be over it.
        scenario.setMemory(of: ["maps", "notes"], to: mebibytes(125))
        #expect(scenario.report[.heaviestFirst]?.violationCount == 0, "\(scenario.report)")
    }

    // MARK: Scheduled work

    @Test("a scheduled task begun while the power it requires was off fails constraint-respected at its begin")
    func scheduledTaskBegunWithoutPower() throws {
        // Power comes back at t=22 instead of t=20: task 12 (requires ac) began at t=20.3, off since t=12.
        var scenario = SoakScenario()
        scenario.evidence.scheduled.powerChanges[2].at = at(22)
        let example = try failure(of: scenario, .constraintRespected)
        #expect(example.app == "clock" && example.at == at(20.3), "\(example)")
        #expect(example.evidence.contains("began at t=20.300s with external power off since t=12.000s"))
        // Back at t=19.5: within the reaction bound of the begin, the daemon may have begun it before it saw more.
        scenario.evidence.scheduled.powerChanges[2].at = at(19.5)
        scenario.evidence.scheduled.powerChanges.insert(PowerChange(at: at(19.4), isOnline: false), at: 2)
        #expect(SoakChecker.check(.constraintRespected, scenario.evidence, scenario.criteria).violationCount == 0)
    }

    @Test("a begin first seen during an injected hang is judged from the hang's start: the daemon decided it before")
    func scheduledTaskSeenLateThroughAHang() throws {
        // Power on from t=18 to t=19 only, back at t=22: task 12, first seen at t=20.3, began with it off.
        var scenario = SoakScenario()
        scenario.evidence.scheduled.powerChanges[2].at = at(22)
        scenario.evidence.scheduled.powerChanges.insert(
            contentsOf: [
                PowerChange(at: at(18), isOnline: true), PowerChange(at: at(19), isOnline: false),
            ], at: 2)
        let example = try failure(of: scenario, .constraintRespected)
        #expect(example.evidence.contains("began at t=20.300s with external power off since t=19.000s"), "\(example)")
        // The daemon was made to hang at t=19.2 (ready again at t=25): it may have begun the task at t=19.2, and
        // delivered it late.
        scenario.evidence.restarts.append(
            RestartEvidence(
                cause: .watchdog, wasHangInjected: true, before: AppSnapshot(takenAt: at(19.1), apps: []),
                stoppedAt: at(19.2), readyAt: at(25), after: AppSnapshot(takenAt: at(25), apps: [])))
        let result = SoakChecker.check(.constraintRespected, scenario.evidence, scenario.criteria)
        #expect(!result.counterExamples.contains { $0.evidence.contains("began at") }, "\(result)")
    }

    @Test(
        "a task whose end was never seen is over by the first listing without it: no power flip after is held against it"
    )
    func scheduledTaskEndedUnseen() throws {
        var scenario = SoakScenario()
        scenario.evidence.entries.removeAll { $0.entry.kind == .taskEnded && $0.entry.taskId == 12 }
        let unended = SoakChecker.check(.constraintRespected, scenario.evidence, scenario.criteria)
        let example = try #require(unended.counterExamples.first)
        #expect(example.evidence.contains("task 12 of clock/scheduled-ac-1 (requires ac) never ended"), "\(example)")
        let clock = AppInfo(name: "clock", state: .active, pid: 501, uid: 1000, managed: false)
        // A listing that still holds it changes nothing.
        var holding = clock
        holding.tasks = [TaskInfo(id: 12, name: "scheduled-ac-1", ageSec: 5.7)]
        scenario.evidence.watchListings = [AppSnapshot(takenAt: at(26), apps: [holding])]
        #expect(SoakChecker.check(.constraintRespected, scenario.evidence, scenario.criteria).violationCount == 1)
        // One without it: the task ended by t=26, within the bound plus ExpirationWarningSec of the flip.
        scenario.evidence.watchListings.append(AppSnapshot(takenAt: at(26.5), apps: [clock]))
        #expect(SoakChecker.check(.constraintRespected, scenario.evidence, scenario.criteria).violationCount == 0)
        // And a later task of the same request does not run beside it.
        scenario.receive(
            HistoryEntry(time: 0, app: "clock", kind: .taskBegan, taskId: 15, taskName: "scheduled-ac-1"), at: at(40))
        let once = SoakChecker.check(.requestRunsOnceAtATime, scenario.evidence, scenario.criteria)
        #expect(once.violationCount == 0, "\(once)")
        #expect(once.measurements.contains { $0.name.hasPrefix("scheduled tasks ended unseen") && $0.value == 1 })
    }

    @Test("a scheduled task not told to stop within the reaction bound after its power went fails constraint-respected")
    func scheduledTaskNotWarned() throws {
        var scenario = SoakScenario()
        scenario.evidence.scheduled.receipts.removeAll { $0.taskId == 12 && $0.kind == .expiring }
        let example = try failure(of: scenario, .constraintRespected)
        #expect(example.app == "clock" && example.at == at(25), "\(example)")
        #expect(example.evidence.contains("task 12 of clock/scheduled-ac-1"))
        #expect(example.evidence.contains("had no backgroundTaskExpiring by t=25.000s"))
    }

    @Test("after a restart an app is told from its re-attach: within the bound of it passes, later fails")
    func scheduledTaskToldFromReattach() throws {
        var scenario = SoakScenario()
        var receipt = try #require(
            scenario.evidence.scheduled.receipts.first { $0.taskId == 12 && $0.kind == .expiring })
        scenario.evidence.scheduled.receipts.removeAll { $0.taskId == 12 && $0.kind == .expiring }
        // The daemon restarted before the flip at t=24 (down at t=22, ready at t=22.5); clock re-attached at t=26.
        scenario.evidence.restarts.append(
            RestartEvidence(
                cause: .killed, wasHangInjected: false, before: AppSnapshot(takenAt: at(21.9), apps: []),
                stoppedAt: at(22), readyAt: at(22.5), after: AppSnapshot(takenAt: at(22.5), apps: [])))
        scenario.receive(HistoryEntry(time: 0, app: "clock", kind: .reattached), at: at(26))
        receipt.at = at(26.8)
        scenario.evidence.scheduled.receipts.append(receipt)
        #expect(SoakChecker.check(.constraintRespected, scenario.evidence, scenario.criteria).violationCount == 0)
        // Told later than the bound after its re-attach: judged from it.
        scenario.evidence.scheduled.receipts.removeAll { $0.taskId == 12 && $0.kind == .expiring }
        receipt.at = at(27.5)
        scenario.evidence.scheduled.receipts.append(receipt)
        let example = try failure(of: scenario, .constraintRespected)
        #expect(example.evidence.contains("had no backgroundTaskExpiring by t=27.000s"), "\(example)")
    }

    @Test("a scheduled task still running past the bound plus ExpirationWarningSec after its power went fails")
    func scheduledTaskNotEndedAfterPowerLoss() throws {
        var scenario = SoakScenario()
        let index = try #require(
            scenario.evidence.entries.firstIndex { $0.entry.kind == .taskEnded && $0.entry.taskId == 12 })
        let ended = scenario.evidence.entries.remove(at: index)
        scenario.receive(ended.entry, at: at(29))
        let example = try failure(of: scenario, .constraintRespected)
        #expect(example.app == "clock" && example.at == at(28), "\(example)")
        #expect(example.evidence.contains("ended at t=29.000s, past t=28.000s"))
        // A daemon down at the flip is judged from when it is back: with a restart from t=23.5 to t=26, the end may
        // come until t=30.
        scenario.evidence.restarts.append(
            RestartEvidence(
                cause: .killed, wasHangInjected: false, before: AppSnapshot(takenAt: at(23.4), apps: []),
                stoppedAt: at(23.5), readyAt: at(26), after: AppSnapshot(takenAt: at(26), apps: [])))
        #expect(SoakChecker.check(.constraintRespected, scenario.evidence, scenario.criteria).violationCount == 0)
    }

    @Test("a request with two tasks running at once fails request-runs-once-at-a-time at the second begin")
    func requestRunningTwice() throws {
        var scenario = SoakScenario()
        scenario.receive(
            HistoryEntry(time: 0, app: "clock", kind: .taskBegan, taskId: 15, taskName: "scheduled-ac-1"), at: at(22))
        scenario.receive(HistoryEntry(time: 0, app: "clock", kind: .taskEnded, taskId: 15, taskEnd: .ended), at: at(23))
        let example = try failure(of: scenario, .requestRunsOnceAtATime)
        #expect(example.app == "clock" && example.at == at(22), "\(example)")
        #expect(example.evidence.contains("task 15 of clock/scheduled-ac-1 began at t=22.000s while its task 12"))
    }

    @Test("an accepted request neither completed, cancelled nor held at the end fails request-never-lost")
    func requestLost() throws {
        var scenario = SoakScenario()
        scenario.evidence.scheduled.heldAtEnd?.remove(RequestKey(app: "clock", identifier: "scheduled-any"))
        let example = try failure(of: scenario, .requestNeverLost)
        #expect(example.app == "clock" && example.at == at(60), "\(example)")
        #expect(example.evidence.contains("clock/scheduled-any, submitted at t=8.000s and accepted, was not held"))
        // Its cancel unanswered (the daemon may have done it): not judged.
        scenario.evidence.scheduled.operations.append(
            RequestOperation(
                at: at(50), key: RequestKey(app: "clock", identifier: "scheduled-any"), kind: .cancel,
                outcome: .unanswered))
        #expect(scenario.report.isPassing)
    }

    @Test("a submit while the request runs replaces it: that run's completion leaves the new request held")
    func submitWhileRunningReplaces() throws {
        // scheduled-ac-0 is submitted again at t=10, while task 11 (begun at t=5.2) runs; task 11 completes at
        // t=12.4, and the new request takes its place: it must be held at the end.
        var scenario = SoakScenario()
        scenario.evidence.scheduled.operations.insert(
            RequestOperation(
                at: at(10), key: RequestKey(app: "clock", identifier: "scheduled-ac-0"), kind: .submit,
                requires: ["ac"], outcome: .accepted), at: 2)
        let example = try failure(of: scenario, .requestNeverLost)
        #expect(example.evidence.contains("clock/scheduled-ac-0, submitted at t=10.000s"), "\(example)")
        scenario.evidence.scheduled.heldAtEnd?.insert(RequestKey(app: "clock", identifier: "scheduled-ac-0"))
        #expect(scenario.report.isPassing)
    }

    @Test("a scheduled task open in background is not held against the app's background budget")
    func scheduledTaskOutsideBudget() throws {
        // clock goes to background at t=46 with a budget of 2 s and runs scheduled-any as task 16 until t=56.
        var scenario = SoakScenario()
        scenario.criteria.backgroundTimeByApp["clock"] = .seconds(2)
        for state in [AppState.inactive, .background] {
            scenario.receive(HistoryEntry(time: 0, app: "clock", kind: .stateChanged, state: state), at: at(46))
        }
        scenario.receive(
            HistoryEntry(time: 0, app: "clock", kind: .taskBegan, taskId: 16, taskName: "scheduled-any"), at: at(46.5))
        scenario.receive(HistoryEntry(time: 0, app: "clock", kind: .taskEnded, taskId: 16, taskEnd: .ended), at: at(56))
        #expect(SoakChecker.check(.budgetRespected, scenario.evidence, scenario.criteria).violationCount == 0)
        // The same task begun by the app itself is.
        let index = try #require(scenario.evidence.entries.firstIndex { $0.entry.taskId == 16 })
        scenario.evidence.entries[index].entry.taskName = "work"
        #expect(SoakChecker.check(.budgetRespected, scenario.evidence, scenario.criteria).violationCount == 1)
    }
}
