// The state journal: a change is saved as one appended record, the snapshot stays as it was, and a daemon that
// ended without saving (a kill -9) restores the snapshot with the journal applied.

import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskDaemon

@Suite("State journal on a manual clock")
struct StateJournalTests {
    /// The snapshot and the journals in the harness's directory, by name.
    private func savedFiles(_ harness: ManagerHarness) throws -> [String: Data] {
        var files: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: harness.directory.path)
        where name == "state.json" || name.hasPrefix("state.journal.") {
            files[name] = try Data(contentsOf: URL(fileURLWithPath: harness.directory.path + "/" + name))
        }
        return files
    }

    /// The records of a journal file as the daemon left it: the bytes before the first NUL (past them is the
    /// space reserved for the next records).
    private func records(_ data: Data?) -> Data {
        guard let data else { return Data() }
        return data.prefix { $0 != 0 }
    }

    /// `journal` as a kill in the middle of copying a record leaves it: `torn` right after the records, over the
    /// reserved space.
    private func tearing(_ journal: Data, with torn: Data) -> Data {
        let kept = records(journal)
        return kept + torn + journal.dropFirst(kept.count + torn.count)
    }

    /// Restarts the manager as if it had been killed at the moment `files` were taken: its clean stop's final
    /// snapshot is replaced by them.
    private func restartAsAfterKill(_ harness: ManagerHarness, with files: [String: Data]) throws {
        try harness.restart(after: .seconds(1)) {
            for name in try FileManager.default.contentsOfDirectory(atPath: harness.directory.path)
            where name == "state.json" || name.hasPrefix("state.journal.") {
                try FileManager.default.removeItem(atPath: harness.directory.path + "/" + name)
            }
            for (name, data) in files { try data.write(to: URL(fileURLWithPath: harness.directory.path + "/" + name)) }
        }
    }

    @Test("a lease call appends one record and leaves the snapshot alone; after a kill the lease is restored from it")
    func leaseFromJournal() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let mail = try harness.register("mail")
            defer { withExtendedLifetime(mail) {} }
            try harness.settle()
            let before = try savedFiles(harness)
            let journalName = try #require(before.keys.first { $0.hasPrefix("state.journal.") }, "\(before.keys)")
            let begun = try harness.call("BeginBackgroundTask", ["app": "mail", "name": "upload"])
            let task = try #require(begun.parameters["taskId"]?.intValue, "\(begun) \(harness.log)")
            try harness.settle()
            let after = try savedFiles(harness)
            #expect(after["state.json"] == before["state.json"], "the snapshot was rewritten for one call")
            let raw = try #require(after[journalName])
            let journal = String(decoding: records(raw), as: UTF8.self)
            #expect(raw.count > journal.utf8.count, "no space reserved past the records")
            let added = journal.dropFirst(records(before[journalName]).count)
            #expect(added.filter { $0 == "\n" }.count == 1 && added.hasSuffix("\n"), "\(added)")
            #expect(added.contains("\"upload\""))
            // mail is in the foreground: the call changes its lease alone, and the record carries that, not the app.
            #expect(added.contains("\"tasks\":[{\"app\":") && !added.contains("\"policy\""), "\(added)")
            #expect(added.utf8.count < 400, "\(added.utf8.count) bytes: \(added)")
            try restartAsAfterKill(harness, with: after)
            #expect(harness.log.contains("restored 1 registrations (1 live, 1 tasks)"), "\(harness.log)")
            let tasks = try #require(try harness.app("mail")["tasks"]?.arrayValue)
            #expect(tasks.count == 1 && tasks.first?.objectValue?["id"]?.intValue == task, "\(tasks)")
            // The next task id is not handed out again.
            let next = try harness.call("BeginBackgroundTask", ["app": "mail"])
            #expect((next.parameters["taskId"]?.intValue ?? 0) > task)
        }
    }

    @Test("compacting at every record: at any moment the snapshot and the journals present restore the state as it was")
    func compaction() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            harness.manager.persistence.journalCompactionFloor = 1
            let apps = try ["a", "b", "c"].map { try harness.register($0) }
            defer { withExtendedLifetime(apps) {} }
            var taken: [(files: [String: Data], apps: [String: Int])] = []
            var open: [String: [Int]] = ["a": [], "b": [], "c": []]
            var journalsSeen: Set<String> = []
            for round in 0..<30 {
                let name = ["a", "b", "c"][round % 3]
                if round % 4 == 3, let task = open[name]?.first {
                    #expect(
                        try harness.call("EndBackgroundTask", ["app": .string(name), "taskId": .number(Double(task))])
                            .errorName == nil)
                    open[name]?.removeFirst()
                } else {
                    let reply = try harness.call("BeginBackgroundTask", ["app": .string(name)])
                    open[name]?.append(try #require(reply.parameters["taskId"]?.intValue))
                }
                // Taken without waiting for the writer: a snapshot may be under way.
                if round % 7 == 0 { taken.append((try savedFiles(harness), open.mapValues(\.count))) }
                let journals = try savedFiles(harness).keys.filter { $0.hasPrefix("state.journal.") }
                #expect(journals.count <= 3, "journals pile up: \(journals)")
                journalsSeen.formUnion(journals)
            }
            #expect(journalsSeen.count >= 3, "compacted only into \(journalsSeen.sorted())")
            try harness.settle()
            taken.append((try savedFiles(harness), open.mapValues(\.count)))
            for (files, expected) in taken {
                try restartAsAfterKill(harness, with: files)
                for (name, count) in expected {
                    let tasks = try #require(try harness.app(name)["tasks"]?.arrayValue, "\(harness.log)")
                    #expect(tasks.count == count, "\(name) after restoring \(files.keys.sorted())")
                }
            }
        }
    }

    @Test("a record cut short at the end is skipped and logged; a damaged record before the end sets the state aside")
    func damagedJournal() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let mail = try harness.register("mail")
            defer { withExtendedLifetime(mail) {} }
            #expect(try harness.call("BeginBackgroundTask", ["app": "mail"]).errorName == nil)
            try harness.settle()
            var files = try savedFiles(harness)
            let journalName = try #require(files.keys.first { $0.hasPrefix("state.journal.") })
            files[journalName] = tearing(try #require(files[journalName]), with: Data(#"{"savedAt":1,"histo"#.utf8))
            try restartAsAfterKill(harness, with: files)
            #expect(harness.log.contains("cut short"), "\(harness.log)")
            #expect(try harness.app("mail")["tasks"]?.arrayValue?.count == 1)
            try harness.settle()
            var damaged = try savedFiles(harness)
            let name = try #require(damaged.keys.first { $0.hasPrefix("state.journal.") })
            damaged[name] = Data("{\"not\":\"a record\"}\n".utf8) + (damaged[name] ?? Data())
            try restartAsAfterKill(harness, with: damaged)
            #expect(harness.log.contains("does not decode"), "\(harness.log)")
            #expect(FileManager.default.fileExists(atPath: harness.statePath + ".bad"))
        }
    }
}

/// Holds the state writer in `open(2)` of a temporary file made a FIFO beforehand (as a hung disk would hold a
/// write), and lets it go when asked: the FIFO is opened for reading and drained until the writer is done with its
/// path (renamed or removed). If nobody asks within `fallback`, it lets go by itself and says so, so that a stop
/// blocked by the FIFO still ends.
final class HeldWriterRelease: @unchecked Sendable {
    // @unchecked: `didFallBack` is written by the queue before `done` is signalled and read only after.
    private let release = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private(set) var didFallBack = false

    init(fifos: [String], fallback: Duration) throws {
        for path in fifos {
            guard mkfifo(path, 0o600) == 0 else { throw Errno(rawValue: errno, operation: "mkfifo(\(path))") }
        }
        let seconds = Double(fallback.components.seconds)
        DispatchQueue.global().async { [self] in
            if release.wait(timeout: .now() + seconds) == .timedOut { didFallBack = true }
            Self.drain(fifos)
            done.signal()
        }
    }

    /// Reads every FIFO (non-blocking, so one no writer opens does not hold the rest) until one of their paths is
    /// gone: the writer has closed it and renamed or removed it. At most 30 s.
    private static func drain(_ fifos: [String]) {
        let descriptors = fifos.map { open($0, O_RDONLY | O_NONBLOCK | O_CLOEXEC) }
        defer { for descriptor in descriptors where descriptor >= 0 { close(descriptor) } }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
        while MonotonicClock.now() < deadline {
            for descriptor in descriptors where descriptor >= 0 {
                _ = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            }
            if fifos.contains(where: { access($0, F_OK) != 0 }) { return }
            usleep(2_000)
        }
    }

    private var isDone = false

    /// Lets the writer go now, and waits (at most 40 s) until it is done with its file; the test's thread only.
    func releaseAndWait() -> Bool {
        guard !isDone else { return true }
        release.signal()
        isDone = done.wait(timeout: .now() + 40) == .success
        return isDone
    }
}

@Suite("State writer held up at a stop")
struct HeldStateWriterTests {
    @Test("a stop while the writer is held up in a snapshot: the final state is saved, the older one never replaces it")
    func stopWhileWriterIsHeldUp() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            harness.manager.persistence.stateWriterStopTimeout = .seconds(1)
            let mail = try harness.register("mail")
            defer { withExtendedLifetime(mail) {} }
            try harness.settle()
            // The next compaction writes the snapshot of the next generation; its temporary file is a FIFO, and so
            // is the name a single temporary file would have, so the writer is held whichever it opens.
            let generation = harness.manager.persistence.journalGeneration + 1
            let held = try HeldWriterRelease(
                fifos: [harness.statePath + ".tmp-\(generation)", harness.statePath + ".tmp"], fallback: .seconds(20))
            defer { _ = held.releaseAndWait() }
            harness.manager.persistence.journalCompactionFloor = 1
            #expect(try harness.call("BeginBackgroundTask", ["app": "mail", "name": "first"]).errorName == nil)
            // The compaction is on the writer thread (taken from its queue), which blocks in open(2) on the FIFO.
            try harness.step(until: "the writer to take the snapshot") {
                harness.manager.persistence.isSnapshotInFlight
                    && harness.manager.persistence.stateWriter?.pendingJobCount == 0
            }
            #expect(try harness.call("BeginBackgroundTask", ["app": "mail", "name": "second"]).errorName == nil)
            // Stopped with the snapshot still on the writer thread.
            try harness.restart(after: .seconds(1), settlingFirst: false) {
                #expect(!held.didFallBack, "the stop waited for the held-up writer")
                #expect(harness.log.contains("did not finish its snapshot"), "\(harness.log)")
                // The final state is in place, after the snapshot being written.
                let final = try String(contentsOfFile: harness.statePath, encoding: .utf8)
                #expect(final.contains("\"journal\":\(generation + 1)"), "\(final)")
                // Now the writer finishes its older snapshot: it must not replace the final one.
                #expect(held.releaseAndWait(), "the held writer never finished")
                let after = try String(contentsOfFile: harness.statePath, encoding: .utf8)
                #expect(after == final, "the older snapshot replaced the final state")
                unlink(harness.statePath + ".tmp")
            }
            // Both tasks are restored: nothing of the final state was lost to the older snapshot.
            let tasks = try #require(try harness.app("mail")["tasks"]?.arrayValue, "\(harness.log)")
            #expect(tasks.compactMap { $0.objectValue?["name"]?.stringValue }.sorted() == ["first", "second"])
        }
    }
}

@Suite("State journal file")
struct StateJournalFileTests {
    /// Lines of every length from 1 byte to past the mapped window, none holding a NUL, each ending in a newline.
    private func lines() -> [[UInt8]] {
        var generator = SeededGenerator(seed: 0x6A6F_7572_6E61_6C)
        var lines: [[UInt8]] = []
        for index in 0..<2_000 {
            let length =
                index == 700 ? StateJournal.windowSize + 5_000 : Int(generator.next() % 900)
            var line = (0..<length).map { _ in UInt8(ascii: "a") + UInt8(generator.next() % 26) }
            line.append(UInt8(ascii: "\n"))
            lines.append(line)
        }
        return lines
    }

    @Test("records go through the mapped window and pwrite alike, in order; a clean end cuts the reserved space")
    func recordsInOrder() throws {
        let directory = try ScratchDirectory(prefix: "journal-file")
        let store = StateStore(path: directory.path + "/state.json")
        var expected: [UInt8] = []
        var journal: StateJournal? = try StateJournal(store: store, generation: 7)
        let path = try #require(journal?.path)
        for (index, line) in lines().enumerated() {
            try journal?.append(line)
            expected += line
            #expect(journal?.size == expected.count)
            if index % 250 == 0 || index == 700 {
                // As a kill would leave it at this moment: the records, then NULs only.
                let raw = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
                #expect(raw.count >= expected.count)
                #expect(Array(raw.prefix(expected.count)) == expected, "after record \(index)")
                #expect(raw.dropFirst(expected.count).allSatisfy { $0 == 0 }, "after record \(index)")
            }
        }
        #expect(expected.count > 2 * StateJournal.windowSize, "the records did not cross windows")
        journal = nil
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == expected)
    }
}

/// A tmpfs of `sizeBytes` over a scratch directory, inside a private mount namespace held by a `sleep` (bounded by
/// `timeout`), reached from this process through `/proc/HOLDER/root`: nothing outside the namespace is mounted
/// or filled, and the tmpfs goes with the holder.
private final class SmallDisk {
    let scratch: ScratchDirectory
    private let holder: SpawnedProcess
    /// The directory as this process reaches it.
    let path: String

    init(sizeBytes: Int) throws {
        scratch = try ScratchDirectory(prefix: "journal-disk")
        let script = """
            mount --make-rprivate / && mount -t tmpfs -o size=\(sizeBytes),mode=0700 bgtask-test-journal \
            '\(scratch.path)' && touch '\(scratch.path)/.mounted' && exec sleep 120
            """
        holder = try ProcessSpawner.spawn(
            ["timeout", "--kill-after=5", "130", "unshare", "--mount", "sh", "-c", script],
            options: SpawnOptions(flags: .newProcessGroup))
        let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
        while true {
            if let text = try? ProcFS().read("\(holder.pid)/task/\(holder.pid)/children"),
                let child = text.split(separator: " ").first.flatMap({ pid_t($0) }),
                access("/proc/\(child)/root\(scratch.path)/.mounted", F_OK) == 0
            {
                path = "/proc/\(child)/root\(scratch.path)"
                return
            }
            guard MonotonicClock.now() < deadline, (try? holder.pidFD.hasExited) == false else {
                try? ProcessGroup(id: holder.pid).send(.kill)
                _ = try? holder.waitForExit()
                throw HarnessError("a tmpfs could not be mounted in a private namespace (unshare, mount)")
            }
            usleep(20_000)
        }
    }

    /// Writes a filler file until the kernel says the disk is full; the bytes written.
    func fill() throws -> Int {
        let descriptor = try FileDescriptor.open(
            path + "/filler", .writeOnly, options: [.create, .truncate], permissions: 0o600)
        defer { try? descriptor.close() }
        let chunk = [UInt8](repeating: 0x5A, count: 4096)
        var written = 0
        while true {
            let count = chunk.withUnsafeBytes { Glibc.write(descriptor.rawValue, $0.baseAddress, $0.count) }
            if count <= 0 { return written }
            written += count
        }
    }

    func free() {
        unlink(path + "/filler")
    }

    deinit {
        try? ProcessGroup(id: holder.pid).send(.kill)
        _ = try? holder.waitForExit()
        try? holder.pidFD.close()
    }
}

@Suite("State journal on a full disk")
struct StateJournalFullDiskTests {
    @Test(
        "on a full disk the reserved window still takes records; past it the append fails cleanly and loses none",
        .requires(.root(for: "mounting a small tmpfs in a private mount namespace")))
    func fullDisk() throws {
        let disk = try SmallDisk(sizeBytes: 1 << 20)
        let store = StateStore(path: disk.path + "/state.json")
        var journal: StateJournal? = try StateJournal(store: store, generation: 1)
        let path = try #require(journal?.path)
        let line = Array(String(repeating: "r", count: 299).utf8) + [UInt8(ascii: "\n")]
        var expected: [UInt8] = []
        try journal?.append(line)
        expected += line
        let filled = try disk.fill()
        #expect(filled > 0)
        // The window reserved before the disk filled takes records with no system call: no SIGBUS.
        var accepted = 1
        var failure: Errno?
        while failure == nil, accepted < 2 * StateJournal.windowSize / line.count {
            do {
                try journal?.append(line)
                expected += line
                accepted += 1
            } catch {
                failure = error
            }
        }
        #expect(failure == .noSpace, "\(String(describing: failure))")
        #expect(accepted * line.count > StateJournal.windowSize - 4096, "only \(accepted) records before the failure")
        #expect(journal?.size == expected.count)
        let raw = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(Array(raw.prefix { $0 != 0 }) == expected, "the records before the failure are whole and in order")
        // Room again: the journal goes on after the records it kept.
        disk.free()
        try journal?.append(line)
        expected += line
        journal = nil
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == expected)
    }
}
