// The daemon's four vital signs under a hostile client, each checked against a baseline taken in the same test.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// What every hostile-client test asserts about the daemon (acceptance 1 of the hardening issue): its memory grew
/// by less than a stated bound, it burnt (almost) no CPU while the hostile client waited, it still served a fresh
/// client with normal latency, and it let go of every descriptor once the hostile client was gone.
///
/// Take the baseline first, right after the daemon started; then do the hostile act; then check. Bounds are
/// relative to the baseline or generous (the machine is shared and busy), never a tight absolute window.
struct DaemonVitals {
    /// The daemon measured.
    let daemon: DaemonHarness
    /// Its resident memory once it had served a client.
    let baselineResidentBytes: Int
    /// Its descriptors when the baseline was taken (what was connected then, such as apps, counts in it).
    let baselineDescriptors: Int
    /// The median round trip of `GetInfo` on a fresh connection before the hostile act.
    let baselineLatency: Duration

    /// Round trips per latency measurement.
    static let latencySamples = 20
    /// Normal latency is within this factor of the baseline...
    static let latencyFactor = 10
    /// ...or under this floor, whichever is larger: a baseline of 100 µs must not make 2 ms a failure.
    static let latencyFloor: Duration = .milliseconds(50)
    /// How long the daemon is watched for spinning while the hostile client waits. A spinning daemon burns
    /// nearly all of it; an idle one nearly none.
    static let quietWindow: Duration = .seconds(2)
    /// The CPU time the daemon may use during the quiet window.
    static let quietCPULimit: Duration = .milliseconds(500)

    private var usage: ProcessUsage { ProcessUsage(pid: daemon.pid) }

    /// Takes the baseline: descriptors first, then latency and memory once the daemon has served a probe client.
    init(_ daemon: DaemonHarness) throws {
        self.daemon = daemon
        let usage = ProcessUsage(pid: daemon.pid)
        baselineDescriptors = try usage.descriptorCount()
        // The first calls warm up what the daemon allocates once (coders, buffers): measure after them.
        _ = try Self.medianLatency(of: daemon)
        baselineLatency = try Self.medianLatency(of: daemon)
        baselineResidentBytes = try usage.residentBytes()
        // The probes' connections are closed; wait until the daemon has closed its ends, so that a test counting
        // connections against a cap starts from what it set up itself.
        let settled = try daemon.waitForDescriptorCount(atMost: baselineDescriptors)
        guard settled <= baselineDescriptors else {
            throw HarnessError("the daemon kept \(settled - baselineDescriptors) descriptors of closed probe clients")
        }
    }

    /// The median of `latencySamples` `GetInfo` round trips on one fresh connection (set-up not counted).
    static func medianLatency(of daemon: DaemonHarness) throws -> Duration {
        let client = try daemon.connect()
        defer { client.close() }
        var samples: [Int64] = []
        for _ in 0..<latencySamples {
            let start = MonotonicClock.now()
            let reply = try client.call("org.varlink.service.GetInfo")
            samples.append(MonotonicClock.now() - start)
            guard reply.errorName == nil else { throw HarnessError("GetInfo failed: \(reply)") }
        }
        return .nanoseconds(samples.sorted()[samples.count / 2])
    }

    /// The latency a fresh client may see and still count as normal.
    var latencyLimit: Duration { max(baselineLatency * Self.latencyFactor, Self.latencyFloor) }

    /// Expects the daemon to burn less than `quietCPULimit` over `quietWindow` while `situation` holds (the
    /// hostile client waiting): a level-triggered source left firing burns the whole window.
    func expectNoSpin(while situation: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(daemon.isRunning, "bgtaskd died (\(situation))", sourceLocation: sourceLocation)
        let before = try usage.cpuTime()
        sleepQuietly(for: Self.quietWindow)
        let burnt = try usage.cpuTime() - before
        #expect(
            burnt < Self.quietCPULimit,
            "bgtaskd burnt \(burnt) of CPU in \(Self.quietWindow) while \(situation) (limit \(Self.quietCPULimit))",
            sourceLocation: sourceLocation)
    }

    /// Expects the daemon's resident memory to exceed the baseline by less than `limit` bytes.
    func expectResidentGrowth(below limit: Int, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let grown = try usage.residentBytes() - baselineResidentBytes
        #expect(
            grown < limit, "bgtaskd's RSS grew by \(mebibytes(grown)) (limit \(mebibytes(limit)))",
            sourceLocation: sourceLocation)
    }

    /// Expects a fresh client's median `GetInfo` round trip within `latencyLimit`.
    func expectNormalLatency(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let latency = try Self.medianLatency(of: daemon)
        #expect(
            latency <= latencyLimit,
            "a fresh client's median round trip is \(latency), baseline \(baselineLatency) (limit \(latencyLimit))",
            sourceLocation: sourceLocation)
    }

    /// Expects the daemon's descriptor count back at the baseline (within a bounded wait: it closes
    /// connections asynchronously).
    func expectDescriptorsReturned(sourceLocation: SourceLocation = #_sourceLocation) throws {
        let count = try daemon.waitForDescriptorCount(atMost: baselineDescriptors)
        guard count > baselineDescriptors else { return }
        let targets = try descriptorTargets().suffix(12)
        Issue.record(
            Comment(
                rawValue: "bgtaskd holds \(count) descriptors, \(count - baselineDescriptors) more than its baseline "
                    + "of \(baselineDescriptors); last ones: \(targets)"),
            sourceLocation: sourceLocation)
    }

    /// The four checks in order: no spin while the hostile client waits (skipped when `situation` is nil, for a
    /// test that already watched the daemon while the hostile client waited), bounded memory growth, normal latency
    /// for a fresh client, then `release` (the hostile client goes away) and every descriptor given back.
    func expectWithstood(
        rssGrowthBelow limit: Int, while situation: String?, release: () throws -> Void,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        if let situation { try expectNoSpin(while: situation, sourceLocation: sourceLocation) }
        try expectResidentGrowth(below: limit, sourceLocation: sourceLocation)
        try expectNormalLatency(sourceLocation: sourceLocation)
        try release()
        try expectDescriptorsReturned(sourceLocation: sourceLocation)
        #expect(daemon.isRunning, "bgtaskd died", sourceLocation: sourceLocation)
    }

    /// What the daemon's descriptors point at, for failure messages.
    private func descriptorTargets() throws -> [String] {
        let directory = "/proc/\(daemon.pid)/fd"
        return try FileManager.default.contentsOfDirectory(atPath: directory).compactMap {
            try? FileManager.default.destinationOfSymbolicLink(atPath: directory + "/" + $0)
        }
    }
}

/// Sleeps for `duration`: only for a measuring window, never instead of a readiness signal.
func sleepQuietly(for duration: Duration) {
    var request = timespec(
        tv_sec: Int(duration.components.seconds), tv_nsec: Int(duration.components.attoseconds / 1_000_000_000))
    var remaining = timespec()
    // An interrupting signal resumes the sleep for what was left.
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

/// A byte count in MiB for messages.
func mebibytes(_ bytes: Int) -> String {
    let value = Double(bytes) / 1_048_576
    return "\((value * 10).rounded() / 10) MiB"
}
