// Connection floods: up to and past ConnectionsPerUserMax and ConnectionsMax as other users, and past the
// daemon's descriptor limit.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Connection floods")
struct ConnectionFloodTests {
    @Test("nobody opening connections past ConnectionsPerUserMax gets the cap; others are served")
    func perUserCap() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: configuration(limits: ["ConnectionsPerUserMax=20"]))
            let vitals = try DaemonVitals(daemon)
            let nobody = try nobodyWithHostileClient()
            let flooder = try hostileClient(as: nobody, daemon, "connections", ["--count", "30"])
            defer { flooder.terminate() }
            let outcome = numbers(in: try flooder.waitForLine(startingWith: "answered"))
            #expect(outcome["answered"] == 20 && outcome["closed"] == 10, "\(outcome)")
            try vitals.expectWithstood(
                rssGrowthBelow: 8 << 20, while: "nobody holds 20 connections",
                release: {
                    flooder.closeInput()
                    _ = try flooder.waitForExit()
                })
        }
    }

    @Test("two users together past ConnectionsMax: later connections, root's included, are closed at once")
    func totalCap() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(
                configuration: configuration(limits: ["ConnectionsMax=30", "ConnectionsPerUserMax=20"]))
            let vitals = try DaemonVitals(daemon)
            let nobody = try nobodyWithHostileClient()
            let other = try ForeignUser(uid: 4245, gid: 4245, executables: ["BGTaskHostileClient"])
            let first = try hostileClient(as: nobody, daemon, "connections", ["--count", "20"])
            defer { first.terminate() }
            #expect(numbers(in: try first.waitForLine(startingWith: "answered"))["answered"] == 20)
            let descriptorsOfFirst = try daemon.openDescriptorCount()
            let second = try hostileClient(as: other, daemon, "connections", ["--count", "20"])
            defer { second.terminate() }
            let outcome = numbers(in: try second.waitForLine(startingWith: "answered"))
            #expect(outcome["answered"] == 10 && outcome["closed"] == 10, "uid 4245 past ConnectionsMax=30: \(outcome)")
            let root = try daemon.connect()
            #expect(try root.isClosedByServer(timeout: .seconds(3)), "root's connection past ConnectionsMax was kept")
            root.close()
            try vitals.expectNoSpin(while: "30 connections are held at ConnectionsMax")
            try vitals.expectResidentGrowth(below: 8 << 20)
            second.closeInput()
            _ = try second.waitForExit()
            // Once the daemon has closed the second user's connections, there is room again: a fresh client is served
            // normally.
            let descriptors = try daemon.waitForDescriptorCount(atMost: descriptorsOfFirst)
            #expect(descriptors <= descriptorsOfFirst, "the second user's connections are still open")
            try vitals.expectNormalLatency()
            first.closeInput()
            _ = try first.waitForExit()
            try vitals.expectDescriptorsReturned()
        }
    }
}

extension HeavyHostileClientTests {
    @Suite("Descriptor exhaustion")
    struct DescriptorExhaustionTests {
        /// The daemon's descriptor limit, soft and hard (the daemon may raise its soft limit to the hard one).
        static let descriptorLimit = 64

        /// Lines of the daemon's log about accepting (other than a note of each accepted connection) from byte
        /// `offset` on, counted up to `limit` + 1: a daemon logging in a loop writes hundreds of megabytes, and
        /// past the limit the exact number does not matter.
        private func acceptLogLines(_ daemon: DaemonHarness, from offset: UInt64 = 0, limit: Int) throws -> Int {
            guard let log = FileHandle(forReadingAtPath: daemon.logPath) else {
                throw HarnessError("cannot read \(daemon.logPath)")
            }
            defer { try? log.close() }
            try log.seek(toOffset: offset)
            var count = 0
            var line: [UInt8] = []
            while count <= limit, let chunk = try log.read(upToCount: 1 << 16), !chunk.isEmpty {
                for byte in chunk {
                    guard byte == UInt8(ascii: "\n") else {
                        if line.count < 4096 { line.append(byte) }
                        continue
                    }
                    let text = String(decoding: line, as: UTF8.self).lowercased()
                    if text.contains("accept") && !text.contains("accepted") { count += 1 }
                    line.removeAll(keepingCapacity: true)
                }
            }
            return count
        }

        /// The size of the daemon's log now.
        private func logSize(_ daemon: DaemonHarness) throws -> UInt64 {
            let attributes = try FileManager.default.attributesOfItem(atPath: daemon.logPath)
            return (attributes[.size] as? NSNumber)?.uint64Value ?? 0
        }

        @Test("connections past RLIMIT_NOFILE: no spin, bounded log, connected clients served, accepts again")
        func connectionsPastDescriptorLimit() async throws {
            try await offThePool {
                let limit = Self.descriptorLimit
                let daemon = try DaemonHarness(
                    configuration: configuration(), launchPrefix: ["prlimit", "--nofile=\(limit):\(limit)"])
                let limits = try String(contentsOfFile: "/proc/\(daemon.pid)/limits", encoding: .utf8)
                try #require(
                    limits.split(separator: "\n").contains {
                        $0.hasPrefix("Max open files") && $0.contains(" \(limit) ")
                    },
                    "the daemon does not run under a limit of \(limit) descriptors:\n\(limits)")
                let vitals = try DaemonVitals(daemon)
                let connected = try daemon.connect()
                defer { connected.close() }
                #expect(try connected.call("org.varlink.service.GetInfo").errorName == nil)
                var flood: [RawVarlinkClient] = []
                defer { flood.forEach { $0.close() } }
                // Connecting succeeds past the daemon's limit: the kernel queues what the daemon cannot accept.
                for _ in 0..<(limit + 40) { flood.append(try daemon.connect()) }
                let reached = try waitUntil(timeout: .seconds(10)) { try daemon.openDescriptorCount() >= limit - 2 }
                let held = try daemon.openDescriptorCount()
                #expect(reached, "the daemon never ran out of descriptors: it holds \(held) of \(limit)")
                let logSizeBefore = try logSize(daemon)
                try vitals.expectNoSpin(while: "\(flood.count) connections exceed the daemon's \(limit) descriptors")
                let linesDuringWindow = try acceptLogLines(daemon, from: logSizeBefore, limit: 1000)
                #expect(
                    linesDuringWindow <= 2,
                    "\(linesDuringWindow) log lines about accept in the window (counting stops past 1,000)")
                let linesInAll = try acceptLogLines(daemon, limit: 1000)
                #expect(linesInAll <= 10, "\(linesInAll) log lines about accept in all (counting stops past 1,000)")
                // A client connected before the flood is still served, with normal latency.
                var samples: [Int64] = []
                for _ in 0..<DaemonVitals.latencySamples {
                    let start = MonotonicClock.now()
                    #expect(try connected.call("org.varlink.service.GetInfo").errorName == nil)
                    samples.append(MonotonicClock.now() - start)
                }
                let median = Duration.nanoseconds(samples.sorted()[samples.count / 2])
                #expect(median <= vitals.latencyLimit, "a connected client's median round trip: \(median)")
                try vitals.expectResidentGrowth(below: 8 << 20)
                flood.forEach { $0.close() }
                flood.removeAll()
                connected.close()
                // Descriptors free up: the daemon accepts again.
                try vitals.expectNormalLatency()
                try vitals.expectDescriptorsReturned()
            }
        }
    }
}

/// Evaluates `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
func waitUntil(timeout: Duration, _ condition: () throws -> Bool) throws -> Bool {
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    while try !condition() {
        guard MonotonicClock.now() < deadline else { return false }
        sleepQuietly(for: .milliseconds(10))
    }
    return true
}
