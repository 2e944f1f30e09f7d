// Memory warnings and reclamation with real processes holding real memory, against AppsMemoryMax.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// A small apps' budget (the fixture apps use ~10–20 MiB of PSS each) and a short warning grace.
private let memoryPolicy =
    DaemonHarness.fastPolicy + """

        [Memory]
        AppsMemoryMax=96M
        MemoryWarningGraceSec=300ms
        """

@Suite("Memory reclamation", .serialized)
struct MemoryReclamationTests {
    @Test("over AppsMemoryMax: every app is warned, the heaviest as likely victim #1; still over, it is reclaimed")
    func warnThenReclaimTheHeaviest() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: memoryPolicy)
            let watch = try WatchStream(daemon)
            let light = try pythonApp(daemon, name: "light")
            let heavy = try pythonApp(daemon, name: "heavy")
            try heavy.send("begin crunch")
            try heavy.waitForLine(startingWith: "began")
            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "heavy", "state": "background"])
            try heavy.waitForLine(startingWith: "event didEnterBackground")
            try heavy.send("alloc 128")
            try heavy.waitForLine(startingWith: "allocated")

            // The warning may come while the allocation is still going on (the daemon samples every 50 ms near the
            // limit), before "allocated".
            let warning = try heavy.seenLine(startingWith: "event memoryWarning")
            #expect(warning.contains("likelyVictim=True") && warning.contains("rank=1"), "\(warning)")
            let safe = try light.waitForLine(startingWith: "event memoryWarning")
            #expect(safe.contains("likelyVictim=False"), "\(safe)")
            // Still over after the grace: the heaviest (in background with a lease) is reclaimed, with notice. On a
            // busy machine the 300 ms grace can end, and the notice come, before the allocation is done.
            try heavy.seenLine(startingWith: "event willTerminate")
            let reclaimed = try watch.waitFor("terminated", app: "heavy", ["reason": "memory-reclaim"])
            #expect(reclaimed["band"] == "backgroundWithTasks")
            #expect((reclaimed["memoryBytes"]?.doubleValue ?? 0) > 128 * 1_048_576)
            #expect((reclaimed["latencyMs"]?.doubleValue ?? -1) >= 300)
            #expect(try heavy.waitForExit() == .signaled(.kill))
            // The light app, in the foreground, is left alone; the episode ends.
            #expect(try control.app("light")["state"] == "active")
            #expect(daemon.log.contains("terminating heavy to reclaim memory (band backgroundWithTasks"))
            let history = try control.lifecycle("History").parameters["entries"]?.arrayValue ?? []
            #expect(history.contains { $0["kind"] == "terminated" && $0["reason"] == "memory-reclaim" })
            _ = light
        }
    }

    @Test("a suspended app is reclaimed with no notice")
    func suspendedAppIsReclaimedSilently() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: memoryPolicy)
            let watch = try WatchStream(daemon)
            let heavy = try pythonApp(daemon, name: "heavy")
            try heavy.send("alloc 128")
            try heavy.waitForLine(startingWith: "allocated")
            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "heavy", "state": "background"])
            let reclaimed = try watch.waitFor("terminated", app: "heavy", ["reason": "memory-reclaim"])
            #expect(reclaimed["band"] == "suspended")
            #expect(try heavy.waitForExit() == .signaled(.kill))
            #expect(!heavy.transcript.contains { $0.hasPrefix("event willTerminate") })
        }
    }

    @Test("ReclaimDryRun=yes logs the victim instead of killing it")
    func dryRun() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: memoryPolicy + "\nReclaimDryRun=yes\n")
            let heavy = try pythonApp(daemon, name: "heavy")
            try heavy.send("alloc 128")
            try heavy.waitForLine(startingWith: "allocated")
            // Warned while in the foreground, where nothing can be reclaimed; then suspended, where it can.
            _ = try heavy.seenLine(startingWith: "event memoryWarning")
            let control = try daemon.connect()
            try control.lifecycle("SetState", ["app": "heavy", "state": "background"])
            let deadline = MonotonicClock.now() + 10_000_000_000
            while !daemon.log.contains("ReclaimDryRun: would reclaim heavy") && MonotonicClock.now() < deadline {
                _ = try daemon.daemonPidFD.waitForExit(timeout: .milliseconds(50))
            }
            #expect(daemon.log.contains("ReclaimDryRun: would reclaim heavy (band suspended"))
            #expect(!heavy.hasExited)
            #expect(try control.app("heavy")["state"] == "suspended")
        }
    }
}
