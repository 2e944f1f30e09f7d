// `bgtask-bench reclaim` runs end to end against the debug build and leaves no cgroup or process behind.

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
        "bgtask-bench reclaim --rounds 2 prints a row per backend and leaves no cgroup or process behind",
        // The limit covers waiting for a place to run: the soak tests (Tests/BGTaskSoakRunTests) hold every place
        // for about four and a half minutes.
        .timeLimit(.minutes(8)),
        .requires(.root(for: "making the cgroup backends' cgroups, and checking what is left,")))
    func runsAndCleansUp() async throws {
        let scratch = try ScratchDirectory(prefix: "bgtask-reclaim-smoke")
        // Alone: the apps' memory is what crosses the limit, and other tests' processes would only slow the rounds.
        let (status, output, pid) = try await offThePool(alone: true) {
            () throws -> (BGTaskSystem.ExitStatus, [String], pid_t) in
            let errors = try FileDescriptor.open(
                scratch.path + "/stderr", .writeOnly, options: [.create, .truncate], permissions: 0o644)
            defer { try? errors.close() }
            let bench = try ChildProcess(
                [try Products.path("bgtask-bench"), "reclaim", "--rounds", "2"], standardError: errors)
            defer { bench.terminate() }
            var lines: [String] = []
            // The bench prints its table at the end; its own waits are bounded well within this.
            while let line = try bench.nextLine(timeout: .seconds(150)) { lines.append(line) }
            return (try bench.waitForExit(timeout: .seconds(30)), lines, bench.pid)
        }
        let errors = (try? String(contentsOfFile: scratch.path + "/stderr", encoding: .utf8)) ?? ""
        let transcript = (output + [errors]).joined(separator: "\n")
        print(transcript)
        #expect(status == .exited(0), "\(transcript)")

        // A row per backend: measured where this host has it, said to be unavailable where it has not.
        for backend in ReclaimBenchmark.Backend.allCases {
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

        // Nothing of the run is left: its cgroups (named for its pid, under this process's own, which it
        // inherited) and every process naming its directory (the daemon's arguments, the apps' BGTASK_SOCKET).
        let marker = "bgtask-bench-reclaim-\(pid)-"
        let hierarchies = CgroupHierarchies.probe()
        let own = try hierarchies.cgroups(of: getpid())
        for parent in [own.unified, own.freezer, own.memory].compactMap({ $0 }) {
            let left = ((try? FileManager.default.contentsOfDirectory(atPath: parent.path)) ?? [])
                .filter { $0.hasPrefix(marker) }
            #expect(left.isEmpty, "cgroups left in \(parent.path): \(left)")
        }
        let procFS = ProcFS()
        var processes: [String] = []
        for process in try procFS.processIDs() {
            for file in ["cmdline", "environ"] {
                // A process that exited meanwhile, or a kernel thread, has nothing to show.
                guard let text = try? procFS.read("\(process)/\(file)"), text.contains(marker) else { continue }
                processes.append("\(process): " + text.split(separator: "\0").joined(separator: " ").prefix(200))
                break
            }
        }
        #expect(processes.isEmpty, "processes of the run still alive:\n\(processes.joined(separator: "\n"))")
    }
}
