// `bgtask-bench scale` runs end to end against the debug build, grows the daemon to every app and lease asked for,
// prints its table, and leaves nothing behind.

import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Scale benchmark")
struct ScaleBenchmarkTests {
    /// The size of the smoke run: small enough for a debug build in seconds.
    static let (apps, tasksPerApp, calls) = (20, 5, 500)

    @Test(
        "bgtask-bench scale --apps 20 --tasks-per-app 5 --calls 500 prints the three sizes, the latencies and every lease",
        // The limit covers waiting for a place to run: the soak tests (Tests/BGTaskSoakRunTests) hold every place
        // for about four and a half minutes.
        .timeLimit(.minutes(7)))
    func printsEverySize() async throws {
        let scratch = try ScratchDirectory(prefix: "bgtask-scale-smoke")
        // The benchmark's directories go into the scratch directory, so what it leaves there is what it left.
        let temporary = scratch.path + "/tmp"
        let runtime = scratch.path + "/run"
        for directory in [temporary, runtime] {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        }
        var environment = ProcessInfo.processInfo.environment
        environment["TMPDIR"] = temporary
        environment["XDG_RUNTIME_DIR"] = runtime
        let (status, output) = try await offThePool { () throws -> (BGTaskPOSIX.ExitStatus, [String]) in
            let errors = try FileDescriptor.open(
                scratch.path + "/stderr", .writeOnly, options: [.create, .truncate], permissions: 0o644)
            defer { try? errors.close() }
            let bench = try ChildProcess(
                [
                    try Products.path("bgtask-bench"), "scale", "--apps", String(Self.apps), "--tasks-per-app",
                    String(Self.tasksPerApp), "--calls", String(Self.calls),
                ], environment: environment, standardError: errors)
            defer { bench.terminate() }
            var lines: [String] = []
            // The bench prints its table at the end: a few seconds of a debug build, each measurement at most 20 s.
            while let line = try bench.nextLine(timeout: .seconds(90)) { lines.append(line) }
            return (try bench.waitForExit(timeout: .seconds(20)), lines)
        }
        let errors = (try? String(contentsOfFile: scratch.path + "/stderr", encoding: .utf8)) ?? ""
        let transcript = (output + [errors]).joined(separator: "\n")
        print(transcript)
        #expect(status == .exited(0), "\(transcript)")

        let sizes = ["empty", "\(Self.apps) apps", "\(Self.apps) apps + \(Self.apps * Self.tasksPerApp) tasks"]
        let sections = output.split(separator: "", omittingEmptySubsequences: false)
        guard sections.count >= 3 else {
            Issue.record("not a footprint table, a latency table and verdicts:\n\(transcript)")
            return
        }
        checkFootprints(Array(sections[0]), sizes: sizes)
        checkLatencies(Array(sections[1]), rows: ["1 app", sizes[2]])

        let counted = output.first { $0.hasPrefix("GetStatus at size") }
        #expect(
            counted?.contains(": \(Self.apps) apps, \(Self.apps * Self.tasksPerApp) open leases") == true,
            "the daemon did not count every app and lease:\n\(transcript)")
        let verdicts = output.filter { $0.hasPrefix("  ") && ($0.contains("meets") || $0.contains("misses")) }
        #expect(verdicts.count == 2, "no verdict on the latency and on the idle memory:\n\(transcript)")
        #expect(output.filter { $0.contains("not judged") }.count == 2, "the aims at 1,000 apps judged:\n\(transcript)")

        checkNothingLeft(in: [temporary, runtime])
    }

    /// The footprint table: a row per size with a positive RSS at most its peak, and a descriptor per app more
    /// once the apps registered.
    private func checkFootprints(_ section: [String], sizes: [String]) {
        var descriptors: [Double] = []
        for size in sizes {
            guard let columns = numbers(in: section, row: size, count: 3) else { continue }
            let (resident, open, peak) = (columns[0], columns[1], columns[2])
            #expect(resident > 0 && resident < 1024 && resident <= peak, "implausible memory: \(size) \(columns)")
            #expect(open > 0, "no descriptors: \(size) \(columns)")
            descriptors.append(open)
        }
        if descriptors.count == 3 {
            #expect(descriptors[1] >= descriptors[0] + Double(Self.apps), "not a connection per app: \(descriptors)")
        }
    }

    /// The latency table: each row with as many round trips as asked for or fewer (the time budget), positive, and
    /// a p99 at least its p50.
    private func checkLatencies(_ section: [String], rows: [String]) {
        for row in rows {
            guard let columns = numbers(in: section, row: row, count: 4) else { continue }
            let (calls, p50, p99, ratio) = (columns[0], columns[1], columns[2], columns[3])
            #expect(calls > 0 && calls <= Double(Self.calls), "not up to \(Self.calls) round trips: \(row) \(columns)")
            #expect(p50 > 0 && p99 >= p50 && ratio > 0, "implausible latencies: \(row) \(columns)")
        }
    }

    /// The `count` numbers after `row`'s name in the table `section`, or nil (recorded) when there are not.
    private func numbers(in section: [String], row: String, count: Int) -> [Double]? {
        // The name, then spaces, then a number: "20 apps" is not the start of "20 apps + 100 tasks".
        let line = section.first { line in
            line.hasPrefix(row + " ") && line.dropFirst(row.count).drop { $0 == " " }.first?.isNumber == true
        }
        guard let line else {
            Issue.record("no row \(row) in:\n\(section.joined(separator: "\n"))")
            return nil
        }
        let columns = line.dropFirst(row.count).split(separator: " ").compactMap { Double($0) }
        guard columns.count == count else {
            Issue.record("not \(count) numbers in the row: \(line)")
            return nil
        }
        return columns
    }

    /// Nothing of the run is left: no file in `directories` (its scratch and state directories), and no process
    /// naming them (the daemon's arguments hold both).
    private func checkNothingLeft(in directories: [String]) {
        for directory in directories {
            let left = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
            #expect(left.isEmpty, "left in \(directory): \(left)")
        }
        let procFS = ProcFS()
        var processes: [String] = []
        for process in (try? procFS.processIDs()) ?? [] {
            // A process that exited meanwhile, or a kernel thread, has nothing to show.
            guard let text = try? procFS.read("\(process)/cmdline"),
                directories.contains(where: { text.contains($0) })
            else { continue }
            processes.append("\(process): " + text.split(separator: "\0").joined(separator: " ").prefix(200))
        }
        #expect(processes.isEmpty, "processes of the run still alive:\n\(processes.joined(separator: "\n"))")
    }
}
