// Registration floods: apps per user, and the descriptors the daemon keeps for a process with many app names.

import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Registration floods")
struct RegistrationFloodTests {
    @Test("nobody registering past AppsPerUserMax is refused with LimitExceeded, from any of its processes")
    func appsPerUser() throws {
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

    /// Registers `name` from the test process on a fresh connection and returns the connection (the event stream).
    private func register(_ name: String, on daemon: DaemonHarness) throws -> RawVarlinkClient {
        let stream = try daemon.connect()
        let reply = try stream.call("io.bgtask.Lifecycle.Register", ["name": .string(name)], more: true)
        guard reply.errorName == nil else { throw HarnessError("Register \(name): \(reply)") }
        return stream
    }

    @Test("one live process registering and closing 300 app names, one after another, leaves no descriptor behind")
    func registerAndCloseManyNames() throws {
        let daemon = try DaemonHarness(configuration: configuration(limits: ["AppsPerUserMax=1000"]))
        let vitals = try DaemonVitals(daemon)
        for index in 0..<300 {
            // The test process registers as an app; each name starts active and is never moved, so the daemon
            // never stops this process.
            try register("churn-\(index)", on: daemon).close()
        }
        try vitals.expectWithstood(
            rssGrowthBelow: 16 << 20, while: "the process that registered 300 names idles", release: {})
    }

    @Test("one process holding 100 app names costs one pidfd beyond what 100 plain connections cost")
    func oneDescriptorPerProcess() throws {
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
        var streams: [RawVarlinkClient] = []
        defer { streams.forEach { $0.close() } }
        for index in 0..<100 { streams.append(try register("held-\(index)", on: daemon)) }
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
                streams.forEach { $0.close() }
                streams.removeAll()
            })
    }
}
