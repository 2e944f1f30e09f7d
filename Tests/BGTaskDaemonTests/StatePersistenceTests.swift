// The persistence alone, with a fake of the manager behind it: what it saves, when held output goes, compaction,
// and the final save at a stop.

import BGTaskCore
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskDaemon

/// The manager as the persistence sees it: a policy core and nothing else (no processes, no history).
private final class FakeStateSource: PersistedStateSource {
    var core = Lifecycle()
    var isStopping = false
    var savedLifecycle: SavedLifecycle { core.saved }
    func takeLifecycleChanges() -> LifecycleChanges { core.takeChanges() }
    var savedProcesses: [SavedProcess] { [] }
    func savedProcess(serial: Int) -> SavedProcess? { nil }
    var lastHistorySerial: Int { 0 }
    func takeUnsavedHistory() -> [SavedHistoryEntry] { [] }
    var keptHistory: [SavedHistoryEntry] { [] }
    var historyCapacity: Int { 100 }
    var freshNow: MonotonicInstant { .seconds(1_000) }

    init() { core.tracksChanges = true }

    func register(_ name: String, pid: Int32) throws {
        _ = try core.register(name: name, process: ProcessIdentity(pid: pid, uid: 1000), now: freshNow)
    }
}

@Suite("State persistence alone")
struct StatePersistenceTests {
    private let bootID = "5e1f-boot"

    private func make(in directory: ScratchDirectory) throws -> (StatePersistence, FakeStateSource, EventLoop) {
        let loop = try EventLoop()
        let persistence = StatePersistence(
            store: StateStore(path: directory.path + "/state.json"), bootID: bootID, loop: loop,
            logger: Logger(destination: .stream, threshold: .error))
        let source = FakeStateSource()
        persistence.source = source
        return (persistence, source, loop)
    }

    private func journalText(_ directory: ScratchDirectory, _ generation: Int) -> String? {
        try? String(contentsOfFile: directory.path + "/state.journal.\(generation)", encoding: .utf8)
            .filter { $0 != "\0" }
    }

    @Test("a change is appended to the journal on the loop's next turn, and what waited for it goes only then")
    func heldUntilSaved() throws {
        let directory = try ScratchDirectory(prefix: "bgtaskd-persistence")
        let (persistence, source, loop) = try make(in: directory)
        persistence.startJournal()
        #expect(persistence.isSettled && persistence.journalGeneration == 1)
        #expect(journalText(directory, 1) == "")

        try source.register("mail", pid: 4242)
        persistence.stateChanged()
        var released = false
        persistence.whenStateSaved { released = true }
        #expect(!released && !persistence.isSettled, "released before the state was saved")
        _ = try loop.runIteration(timeout: .milliseconds(100))
        #expect(released && persistence.isSettled)
        let journal = try #require(journalText(directory, 1))
        #expect(journal.filter { $0 == "\n" }.count == 1 && journal.contains("\"mail\""), "\(journal)")

        // Nothing waits once the change is saved.
        var ranAtOnce = false
        persistence.whenStateSaved { ranAtOnce = true }
        #expect(ranAtOnce)

        // What a restart reads: the snapshot with the journal applied.
        guard case .state(let loaded) = StateStore(path: directory.path + "/state.json").load(
            bootID: bootID, now: .seconds(2_000))
        else {
            Issue.record("the saved state does not load")
            return
        }
        #expect(loaded.state.lifecycle.appCount == 1 && loaded.records == 1)
    }

    @Test("a journal past the compaction size becomes a snapshot on the writer thread, and the old journal goes")
    func compaction() throws {
        let directory = try ScratchDirectory(prefix: "bgtaskd-persistence")
        let (persistence, source, loop) = try make(in: directory)
        try persistence.startWriter()
        defer { persistence.stopWriter() }
        persistence.journalCompactionFloor = 1
        persistence.startJournal()
        // A record of three new apps outgrows the snapshot of none.
        for (index, name) in ["mail", "maps", "news"].enumerated() { try source.register(name, pid: 4242 + Int32(index)) }
        persistence.stateChanged()
        _ = try loop.runIteration(timeout: .milliseconds(100))
        #expect(persistence.journalGeneration == 2, "no compaction after a record past the floor")
        let deadline = ContinuousClock.now + .seconds(20)
        while !persistence.isSettled, ContinuousClock.now < deadline {
            _ = try loop.runIteration(timeout: .milliseconds(100))
        }
        #expect(persistence.isSettled, "the writer never finished the snapshot")
        #expect(journalText(directory, 1) == nil, "the compacted journal is still there")
        let snapshot = try String(contentsOfFile: directory.path + "/state.json", encoding: .utf8)
        #expect(snapshot.contains("\"journal\":2") && snapshot.contains("\"mail\""), "\(snapshot)")
    }

    @Test("the final save writes the whole state with no journal, and nothing is held after it")
    func finalSave() throws {
        let directory = try ScratchDirectory(prefix: "bgtaskd-persistence")
        let (persistence, source, _) = try make(in: directory)
        try persistence.startWriter()
        persistence.startJournal()
        try source.register("mail", pid: 4242)
        persistence.stateChanged()
        var released = false
        persistence.whenStateSaved { released = true }
        source.isStopping = true
        persistence.saveFinalState()
        // The final save covers every change: what waited goes, and nothing waits after it.
        #expect(released && persistence.isFinalStateSaved && persistence.journalGeneration == 2)
        var ranAtOnce = false
        persistence.stateChanged()
        persistence.whenStateSaved { ranAtOnce = true }
        #expect(ranAtOnce)
        #expect(journalText(directory, 1) == nil && journalText(directory, 2) == nil)
        let snapshot = try String(contentsOfFile: directory.path + "/state.json", encoding: .utf8)
        #expect(snapshot.contains("\"journal\":2") && snapshot.contains("\"mail\""), "\(snapshot)")
    }

    @Test("without a store nothing is saved and nothing is held")
    func withoutStore() throws {
        let loop = try EventLoop()
        let persistence = StatePersistence(
            store: nil, bootID: bootID, loop: loop, logger: Logger(destination: .stream, threshold: .error))
        let source = FakeStateSource()
        persistence.source = source
        persistence.startJournal()
        persistence.stateChanged()
        var ran = false
        persistence.whenStateSaved { ran = true }
        #expect(ran && persistence.isSettled && !persistence.isEnabled)
    }
}
