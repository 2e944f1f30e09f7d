// Registration floods: apps per user, and the descriptors the daemon keeps for a process with many app names.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Registration floods")
struct RegistrationFloodTests {
    @Test("nobody registering past AppsPerUserMax is refused with LimitExceeded, from any of its processes")
    func appsPerUser() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(
                configuration: configuration(limits: ["AppsPerUserMax=5", "ConnectionsPerUserMax=64"]))
            let vitals = try DaemonVitals(daemon)
            let nobody = try nobodyWithHostileClient()
            let flooder = try hostileClient(as: nobody, daemon, "register", ["--count", "7", "--prefix", "mine"])
            defer { flooder.terminate() }
            let line = try flooder.waitForLine(startingWith: "registered")
            #expect(numbers(in: line)["registered"] == 5 && numbers(in: line)["refused"] == 2, "\(line)")
            let errorText = String(line.split(separator: "=", maxSplits: 1).last ?? "")
            let error = try? JSONDecoder().decode(JSONValue.self, from: Data(errorText.utf8))
            #expect(error?["error"] == "io.bgtask.Lifecycle.LimitExceeded", "first refusal: \(errorText)")
            #expect(error?["parameters"] == ["limit": "AppsPerUserMax", "max": 5], "first refusal: \(errorText)")
            // The bound is per user: a second process of the same user gets nothing more.
            let second = try hostileClient(as: nobody, daemon, "register", ["--count", "1", "--prefix", "more"])
            defer { second.terminate() }
            #expect(numbers(in: try second.waitForLine(startingWith: "registered"))["registered"] == 0)
            try vitals.expectWithstood(
                rssGrowthBelow: 8 << 20, while: "nobody holds 5 apps",
                release: {
                    for process in [flooder, second] {
                        process.closeInput()
                        _ = try process.waitForExit()
                    }
                })
        }
    }

    /// The hostile fixture run as root (this test's own uid), in `mode`.
    private func rootClient(_ daemon: DaemonHarness, _ mode: String, _ arguments: [String]) throws -> ChildProcess {
        try ChildProcess(
            [try Products.path("BGTaskHostileClient"), mode, "--socket", daemon.socketPath, "--lifetime", "60"]
                + arguments)
    }

    @Test("one live process registering and closing 300 app names, one after another, leaves no descriptor behind")
    func registerAndCloseManyNames() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: configuration(limits: ["AppsPerUserMax=1000"]))
            let vitals = try DaemonVitals(daemon)
            let cycler = try rootClient(daemon, "cycle", ["--count", "300", "--prefix", "churn"])
            defer { cycler.terminate() }
            let outcome = try cycler.waitForLine(startingWith: "registered", timeout: .seconds(60))
            #expect(numbers(in: outcome)["registered"] == 300, "\(outcome)")
            // While the process lives the daemon watches it, once however many names it had (to mark them exited
            // when it ends); today's bug held one pidfd per name.
            let whileAlive = try daemon.waitForDescriptorCount(atMost: vitals.baselineDescriptors + 1)
            #expect(
                whileAlive <= vitals.baselineDescriptors + 1,
                Comment(
                    rawValue: "\(whileAlive) descriptors while the process that registered 300 names lives, baseline "
                        + "\(vitals.baselineDescriptors)"))
            try vitals.expectWithstood(
                rssGrowthBelow: 16 << 20, while: "the process that registered 300 names idles",
                release: {
                    cycler.closeInput()
                    _ = try cycler.waitForExit()
                })
        }
    }

    @Test("one process holding 100 app names costs one pidfd beyond what 100 plain connections cost")
    func oneDescriptorPerProcess() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: configuration(limits: ["AppsPerUserMax=1000"]))
            let vitals = try DaemonVitals(daemon)
            // What 100 connections cost by themselves (the socket, and whatever the daemon keeps per connection).
            var plain: [RawVarlinkClient] = []
            defer { plain.forEach { $0.close() } }
            for _ in 0..<100 {
                let client = try daemon.connect()
                #expect(try client.call("org.varlink.service.GetInfo").errorName == nil)
                plain.append(client)
            }
            let connectionCost = try daemon.openDescriptorCount() - vitals.baselineDescriptors
            plain.forEach { $0.close() }
            plain.removeAll()
            try vitals.expectDescriptorsReturned()
            let holder = try rootClient(daemon, "register", ["--count", "100", "--prefix", "held"])
            defer { holder.terminate() }
            let outcome = try holder.waitForLine(startingWith: "registered", timeout: .seconds(60))
            #expect(numbers(in: outcome)["registered"] == 100, "\(outcome)")
            let registrationCost = try daemon.openDescriptorCount() - vitals.baselineDescriptors
            // The connections, one pidfd for the process, and a little room for the daemon's own.
            #expect(
                registrationCost <= connectionCost + 1 + 2,
                Comment(
                    rawValue: "100 registrations of one process cost \(registrationCost) descriptors, 100 plain "
                        + "connections \(connectionCost)"))
            try vitals.expectWithstood(
                rssGrowthBelow: 16 << 20, while: "one process holds 100 names",
                release: {
                    holder.closeInput()
                    _ = try holder.waitForExit()
                })
        }
    }

    @Test("many live processes that registered and closed a name hold no more pidfds than HistorySize remembers")
    func detachedProcessesAreBounded() async throws {
        try await offThePool {
            let remembered = 10
            let daemon = try DaemonHarness(configuration: configuration(limits: ["HistorySize=\(remembered)"]))
            let vitals = try DaemonVitals(daemon)
            var cyclers: [ChildProcess] = []
            defer { cyclers.forEach { $0.terminate() } }
            for index in 0..<30 {
                let cycler = try rootClient(daemon, "cycle", ["--count", "1", "--prefix", "detached-\(index)"])
                cyclers.append(cycler)
                let outcome = try cycler.waitForLine(startingWith: "registered", timeout: .seconds(30))
                #expect(numbers(in: outcome)["registered"] == 1, "\(outcome)")
            }
            // Each closed registration waits for its process's end to be marked exited, but only the newest
            // HistorySize are remembered: the daemon lets go of the other processes' pidfds.
            let held = try daemon.waitForDescriptorCount(atMost: vitals.baselineDescriptors + remembered)
            #expect(
                held <= vitals.baselineDescriptors + remembered,
                Comment(
                    rawValue: "\(held) descriptors with 30 detached processes, baseline \(vitals.baselineDescriptors)"))
            try vitals.expectWithstood(
                rssGrowthBelow: 16 << 20, while: "30 processes that closed their registrations idle",
                release: {
                    for cycler in cyclers {
                        cycler.closeInput()
                        _ = try cycler.waitForExit()
                    }
                })
        }
    }
}
