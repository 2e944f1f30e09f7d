// The calls any user may make (GetStatus, ListApps, GetApp) must not read /proc on the event loop's thread.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Testing

extension HeavyHostileClientTests {
    @Suite("/proc off the loop")
    struct ProcOffLoopTests {
        static let callsPerMethod = 200
        /// Read calls the loop thread may make per call: reading the request (and perhaps one more read finding
        /// nothing), plus a little for timers firing meanwhile.
        static let readsPerCall = 2.5

        @Test("200 calls each of GetStatus, ListApps and GetApp, with apps holding memory, read no /proc on the loop")
        func statusCallsDoNotReadProc() async throws {
            try await offThePool {
                let daemon = try DaemonHarness(configuration: configuration())
                var apps: [ChildProcess] = []
                defer { apps.forEach { $0.terminate() } }
                for index in 1...3 {
                    let app = try daemon.startPythonApp(name: "resident-\(index)")
                    try app.send("alloc 32")
                    try app.waitForLine(startingWith: "allocated")
                    apps.append(app)
                }
                let vitals = try DaemonVitals(daemon)
                let client = try daemon.connect()
                defer { client.close() }
                let usage = ProcessUsage(pid: daemon.pid)
                let calls: [(method: String, parameters: [String: JSONValue])] = [
                    ("GetStatus", [:]), ("ListApps", [:]), ("GetApp", ["app": "resident-1"]),
                ]
                for (method, parameters) in calls {
                    // One call first, so that nothing done once per connection or method is counted.
                    #expect(try client.lifecycle(method, parameters).errorName == nil)
                    let before = try usage.mainThreadReadCalls()
                    for _ in 0..<Self.callsPerMethod {
                        let reply = try client.lifecycle(method, parameters)
                        guard reply.errorName == nil else { throw HarnessError("\(method) failed: \(reply)") }
                    }
                    let reads = try usage.mainThreadReadCalls() - before
                    let allowed = Int(Double(Self.callsPerMethod) * Self.readsPerCall)
                    #expect(
                        reads <= allowed,
                        Comment(
                            rawValue: "\(Self.callsPerMethod) \(method) calls made the loop thread read \(reads) times "
                                + "(allowed \(allowed))"))
                }
                try vitals.expectWithstood(
                    rssGrowthBelow: 16 << 20, while: "the client idles",
                    release: {
                        client.close()
                        apps.forEach { $0.terminate() }
                    })
            }
        }
    }
}
