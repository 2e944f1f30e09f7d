// `bgtask-bench reclaim`, and `reclaim --systemd`, run end to end against the debug build and leave no cgroup or
// process behind.

import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@testable import BGTaskBenchmarks

@Suite("Reclaim benchmark")
struct ReclaimBenchmarkTests {
    /// `/proc/zoneinfo` texts and the free pages in them (zones' free pages plus per-CPU lists), nil when refused.
    static let zoneinfoRows: [(String, UInt64?)] = [
        (
            "Node 0, zone   Normal\n  pages free     1000\n        min      10\n  pagesets\n    cpu: 0\n"
                + "              count:    40\n              high:     4473\n    cpu: 1\n              count:    2\n",
            1042
        ),
        ("Node 0, zone DMA\n  pages free 3\nNode 0, zone DMA32\n  pages free 5\n", 8),
        ("", nil),
        ("Node 0, zone Normal\n  count: 5\n", nil),
        ("  pages free -1\n", nil),
        ("  pages free 12x\n", nil),
        ("  pages free 18446744073709551615\n  count: 1\n", nil),
    ]

    @Test("free pages are the zones' free pages plus the per-CPU lists; malformed counts are refused")
    func freePages() {
        for (text, expected) in Self.zoneinfoRows {
            #expect((try? FreeMemory.parse(text)) == expected, "\(text.debugDescription)")
        }
    }

    @Test(
        "reclaim's options: --help names --systemd; a repeated --systemd, a bad --rounds or an unknown option exit 64",
        arguments: [
            (["--systemd", "--systemd"], "unexpected argument --systemd"),
            (["--rounds", "0"], "--rounds takes a positive integer"),
            (["--rounds"], "--rounds takes a positive integer"),
            (["--pin"], "unexpected argument --pin"),
        ])
    func options(arguments: [String], error: String) throws {
        let (helpStatus, help) = try runProgram([try Products.path("bgtask-bench"), "--help"])
        #expect(helpStatus == 0 && help.contains("reclaim [--rounds N] [--systemd]"), "\(help)")
        let (status, output) = try runProgram([try Products.path("bgtask-bench"), "reclaim"] + arguments)
        #expect(status == 64 && output.contains("reclaim: \(error)"), "\(arguments): \(status) \(output)")
    }

    /// Runs `bgtask-bench reclaim ARGUMENTS` of the debug build alone (the apps' memory is what crosses the limit,
    /// and other tests' processes would only slow the rounds); its status, its output lines, the transcript with
    /// its standard error, and its pid.
    static func runBench(_ arguments: [String]) async throws -> (
        status: BGTaskPOSIX.ExitStatus, output: [String], transcript: String, pid: pid_t
    ) {
        let scratch = try ScratchDirectory(prefix: "bgtask-reclaim-smoke")
        let (status, output, pid) = try await offThePool(alone: true) {
            () throws -> (BGTaskPOSIX.ExitStatus, [String], pid_t) in
            let errors = try FileDescriptor.open(
                scratch.path + "/stderr", .writeOnly, options: [.create, .truncate], permissions: 0o644)
            defer { try? errors.close() }
            let bench = try ChildProcess(
                [try Products.path("bgtask-bench"), "reclaim"] + arguments, standardError: errors)
            defer { bench.terminate() }
            var lines: [String] = []
            // The bench prints its table at the end; its own waits are bounded well within this.
            while let line = try bench.nextLine(timeout: .seconds(150)) { lines.append(line) }
            return (try bench.waitForExit(timeout: .seconds(30)), lines, bench.pid)
        }
        let errors = (try? String(contentsOfFile: scratch.path + "/stderr", encoding: .utf8)) ?? ""
        let transcript = (output + [errors]).joined(separator: "\n")
        print(transcript)
        return (status, output, transcript, pid)
    }

    /// What the run of the bench with pid `pid` left: its cgroups (named for its pid, under this process's own,
    /// which it inherited, and a contained manager's, at the hierarchies' roots) and every process naming its
    /// directory (the daemon's arguments, the apps' `BGTASK_SOCKET` or log) or in a contained manager's cgroup.
    static func leftovers(ofBench pid: pid_t) throws -> (cgroups: [String], processes: [String]) {
        let marker = "bgtask-bench-reclaim-\(pid)-"
        let managerMarker = "bgtask-test-\(pid)-"
        let hierarchies = CgroupHierarchies.probe()
        let own = try hierarchies.cgroups(of: getpid())
        let parents =
            [own.unified, own.freezer, own.memory].compactMap { $0?.path }
            + ["/sys/fs/cgroup", "/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified"]
        var cgroups: [String] = []
        for parent in Set(parents).sorted() {
            cgroups += ((try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? [])
                .filter { $0.hasPrefix(marker) || $0.hasPrefix(managerMarker) }.map { parent + "/" + $0 }
        }
        let procFS = ProcFS()
        var processes: [String] = []
        for process in try procFS.processIDs() {
            for file in ["cmdline", "environ", "cgroup"] {
                // A process that exited meanwhile, or a kernel thread, has nothing to show.
                guard let text = try? procFS.read("\(process)/\(file)"),
                    text.contains(marker) || text.contains(managerMarker)
                else { continue }
                processes.append("\(process): " + text.split(separator: "\0").joined(separator: " ").prefix(200))
                break
            }
        }
        return (cgroups, processes)
    }

    @Test(
        "bgtask-bench reclaim --rounds 2 prints a row per backend and leaves no cgroup or process behind",
        // The limit covers waiting for a place to run: the soak tests (Tests/BGTaskSoakRunTests) hold every place
        // for about four and a half minutes.
        .timeLimit(.minutes(8)),
        .requires(.root(for: "making the cgroup backends' cgroups, and checking what is left,")))
    func runsAndCleansUp() async throws {
        let (status, output, transcript, pid) = try await Self.runBench(["--rounds", "2"])
        #expect(status == .exited(0), "\(transcript)")

        // A row per backend: measured where this host has it, said to be unavailable where it has not.
        for backend in ReclaimBenchmark.Backend.forked {
            let row = output.first { $0.hasPrefix(backend.rawValue + " ") }
            #expect(row != nil, "no row for \(backend.rawValue):\n\(transcript)")
            guard let row else { continue }
            if let reason = backend.unavailableReason {
                #expect(row.contains("not available here: \(reason)"), "\(row)")
            } else {
                let columns = row.dropFirst(backend.rawValue.count).split(separator: " ")
                #expect(columns.first == "2", "not 2 rounds measured: \(row)")
                #expect(!row.contains("failed") && !row.contains("not available"), "\(row)")
            }
        }
        #expect(!output.contains { $0.hasPrefix("unit") }, "a unit row without --systemd:\n\(transcript)")

        let (cgroups, processes) = try Self.leftovers(ofBench: pid)
        #expect(cgroups.isEmpty, "cgroups left: \(cgroups)")
        #expect(processes.isEmpty, "processes of the run still alive:\n\(processes.joined(separator: "\n"))")
    }

    @Test(
        "bgtask-bench reclaim --systemd --rounds 2 reclaims units of a contained manager and leaves nothing behind",
        .timeLimit(.minutes(8)),
        .requires(.containedSystemd, .root(for: "checking the run's cgroups and processes")))
    func unitsUnderAContainedManager() async throws {
        let (status, output, transcript, pid) = try await Self.runBench(["--systemd", "--rounds", "2"])
        #expect(status == .exited(0), "\(transcript)")

        // One row, the unit backend's (its note after the table starts with its name too), naming the chains the
        // daemon froze and measured the units with: through the unit's cgroup where the host has cgroup2.
        let rows = output.filter { $0.hasPrefix("unit") && !$0.contains(": daemon freeze=") }
        #expect(rows.count == 1, "not one unit row:\n\(transcript)")
        if let row = rows.first {
            let label = row.range(of: "  ").map { String(row[..<$0.lowerBound]) } ?? row
            let columns = row.dropFirst(label.count).split(separator: " ")
            #expect(columns.first == "2", "not 2 rounds measured: \(row)")
            #expect(!row.contains("failed") && !row.contains("not available"), "\(row)")
            if CgroupHierarchies.probe().unified != nil {
                #expect(label.hasPrefix("unit: cgroup2 freeze + "), "not frozen through the unit's cgroup: \(row)")
            }
        }
        for backend in ReclaimBenchmark.Backend.forked {
            #expect(!output.contains { $0.hasPrefix(backend.rawValue + " ") }, "\(backend.rawValue) ran too")
        }

        let (cgroups, processes) = try Self.leftovers(ofBench: pid)
        #expect(cgroups.isEmpty, "cgroups left: \(cgroups)")
        #expect(processes.isEmpty, "processes of the run still alive:\n\(processes.joined(separator: "\n"))")
    }
}
