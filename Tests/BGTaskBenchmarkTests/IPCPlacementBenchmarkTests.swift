// `bgtask-bench ipc --pin` runs end to end against the debug build and prints a row and a verdict per placement.

import BGTaskBenchmarks
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Testing

@Suite("IPC placement benchmark")
struct IPCPlacementBenchmarkTests {
    /// The placements' names as the table starts their rows.
    static let placements = ["across CPUs", "same CPU"]

    @Test(
        "bgtask-bench ipc --pin --rounds 2 prints both placements with positive latencies and a verdict each",
        // The limit covers the wait for the other tests to leave it alone, which can be most of the suite.
        // With the soak tests (Tests/BGTaskSoakRunTests), about four and a half minutes more.
        .timeLimit(.minutes(10)))
    func printsBothPlacements() async throws {
        let scratch = try ScratchDirectory(prefix: "bgtask-ipc-pin-smoke")
        // Alone: it pins threads to CPUs, and other tests' processes would only slow its rounds.
        let (status, output) = try await offThePool(alone: true) { () throws -> (BGTaskPOSIX.ExitStatus, [String]) in
            let errors = try FileDescriptor.open(
                scratch.path + "/stderr", .writeOnly, options: [.create, .truncate], permissions: 0o644)
            defer { try? errors.close() }
            let bench = try ChildProcess(
                [try Products.path("bgtask-bench"), "ipc", "--pin", "--rounds", "2"], standardError: errors)
            defer { bench.terminate() }
            var lines: [String] = []
            // The bench prints its table at the end: about 10 s of debug-build round trips.
            while let line = try bench.nextLine(timeout: .seconds(45)) { lines.append(line) }
            return (try bench.waitForExit(timeout: .seconds(10)), lines)
        }
        let errors = (try? String(contentsOfFile: scratch.path + "/stderr", encoding: .utf8)) ?? ""
        let transcript = (output + [errors]).joined(separator: "\n")
        print(transcript)
        #expect(status == .exited(0), "\(transcript)")

        let allowedCPUs = try CPUAffinity.allowedCPUs().numbers.count
        for placement in Self.placements {
            let row = output.first { $0.hasPrefix(placement + " ") }
            #expect(row != nil, "no row for \(placement):\n\(transcript)")
            guard let row else { continue }
            if placement == "across CPUs" && allowedCPUs < 2 {
                #expect(row.contains("not available here: only CPU"), "\(row)")
                continue
            }
            checkMeasured(row: row, placement: placement)
            let verdict = output.first { $0.hasPrefix(placement + ": bgtaskd p50 ") }
            #expect(
                verdict?.contains("meets the aim") == true || verdict?.contains("misses the aim") == true,
                "no verdict for \(placement):\n\(transcript)")
        }
    }

    /// A measured row: client and server CPUs as the placement says, 2 rounds of 2,000 round trips per server,
    /// and positive latencies with each p99 at least its p50.
    private func checkMeasured(row: String, placement: String) {
        let columns = row.dropFirst(placement.count).split(separator: " ").compactMap { Double($0) }
        guard columns.count == 8 else {
            Issue.record("not 8 numbers in the row: \(row)")
            return
        }
        let (client, server, roundTrips) = (columns[0], columns[1], columns[2])
        let (daemonP50, daemonP99, rawP50, rawP99, ratio) = (columns[3], columns[4], columns[5], columns[6], columns[7])
        #expect((client == server) == (placement == "same CPU"), "CPUs not as placed: \(row)")
        #expect(roundTrips == 4_000, "not 2 rounds of 2,000 round trips: \(row)")
        #expect(daemonP50 > 0 && rawP50 > 0 && ratio > 0, "a latency not positive: \(row)")
        #expect(daemonP99 >= daemonP50 && rawP99 >= rawP50, "a p99 under its p50: \(row)")
    }
}
