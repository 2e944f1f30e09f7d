// What wakes the memory monitor: what the service manager names in $MEMORY_PRESSURE_WATCH (systemd's
// protocol), turned off by /dev/null, else a PSI trigger of the daemon's own; reported by GetStatus.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@Suite("Memory pressure triggers")
struct PressureTriggerTests {
    private func trigger(_ daemon: DaemonHarness) throws -> String {
        let memory = try daemon.connect().lifecycle("GetStatus").parameters["memory"]?.objectValue
        return memory?["trigger"]?.stringValue ?? ""
    }

    @Test("a FIFO named by MEMORY_PRESSURE_WATCH wakes the monitor when written to")
    func watchesWhatTheServiceManagerNames() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "bgtaskd-pressure")
            let fifo = directory.path + "/pressure"
            #expect(mkfifo(fifo, 0o600) == 0)
            let daemon = try DaemonHarness(environment: [MemoryPressureWatch.watchVariable: fifo])
            defer { daemon.terminate() }
            let armed = try trigger(daemon)
            #expect(armed.contains("fifo \(fifo)"), "\(armed)")
            let app = try pythonApp(daemon, name: "watched")
            defer { app.terminate() }
            // The service manager reports pressure: the daemon samples at once.
            let writer = try FileDescriptor.open(fifo, .writeOnly, options: [.nonBlocking])
            defer { try? writer.close() }
            try writer.writeAll(Array("pressure\n".utf8))
            let deadline = MonotonicClock.now() + Duration.seconds(15).nanosecondCount
            while !daemon.log.contains("memory trigger: memory pressure"), MonotonicClock.now() < deadline {
                usleep(20_000)
            }
            #expect(daemon.log.contains("memory trigger: memory pressure (fifo \(fifo)"), "\(daemon.log)")
        }
    }

    @Test("MEMORY_PRESSURE_WATCH=/dev/null turns watching off: polling alone")
    func devNullTurnsItOff() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(environment: [MemoryPressureWatch.watchVariable: "/dev/null"])
            defer { daemon.terminate() }
            #expect(try trigger(daemon) == "polling")
            #expect(daemon.log.contains("memory pressure watching is turned off by the service manager"))
        }
    }

    @Test(
        "without one named, a PSI trigger on /proc/pressure/memory (its window widened to 2 s unprivileged)",
        .requires(.systemPressure))
    func armsItsOwnTrigger() async throws {
        try await offThePool {
            let daemon = try DaemonHarness()
            defer { daemon.terminate() }
            let armed = try trigger(daemon)
            #expect(armed.hasPrefix("psi /proc/pressure/memory (some 100000 "), "\(armed)\n\(daemon.log)")
            #expect(armed.hasSuffix(" + polling"), "\(armed)")
        }
    }
}
