// The cgroup backends on this host's real cgroups: cgroups the tests make, holding only processes they started.

import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// A busy process (state `R` while it runs) that waits for a line on stdin before it starts, so the test can move
/// it into a cgroup first and its child is born there; it ends by itself after a minute.
private func busyProcess() throws -> ChildProcess {
    try ChildProcess(["/bin/sh", "-c", "read go; exec timeout 60 sh -c 'while :; do :; done'"])
}

/// A busy process moved into `scratch` and started there: the process and its busy child, both in the cgroup.
private func startBusyProcess(in scratch: ScratchCgroup) throws -> (ChildProcess, [pid_t]) {
    let child = try busyProcess()
    do {
        try scratch.move(child.pid)
        try child.send("go")
        guard try within(.seconds(10), { try scratch.cgroup.processes().count == 2 }) else {
            throw HarnessError("the busy loop did not start in \(scratch.cgroup)")
        }
        return (child, try scratch.cgroup.processes())
    } catch {
        child.terminate()
        throw error
    }
}

/// Waits at most `timeout` for `condition`, checking every millisecond; whether it came true.
private func within(_ timeout: Duration, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    while try !condition() {
        guard MonotonicClock.now() < deadline else { return false }
        usleep(1000)
    }
    return true
}

private func state(_ pid: pid_t) -> ProcessState? {
    try? ProcFS().stat(pid).state
}

@Suite("cgroup backends on real cgroups")
struct CgroupTests {
    @Test("the probe finds each hierarchy that /proc/self/mountinfo lists, and nothing else")
    func probeMatchesTheMountTable() throws {
        let probed = CgroupHierarchies.probe()
        let mounts = try String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8).split(separator: "\n")
        // Fields: ... mount point (5th) ... " - " type source options.
        func mounted(_ point: String, type: String, option: String? = nil) -> Bool {
            mounts.contains { line in
                let parts = line.split(separator: " ")
                guard parts.count > 4, parts[4] == point, let dash = parts.firstIndex(of: "-"),
                    dash + 3 < parts.count, parts[dash + 1] == type
                else { return false }
                return option.map { parts[dash + 3].split(separator: ",").contains(Substring($0)) } ?? true
            }
        }
        for (found, point, type, option) in [
            (probed.unified, "/sys/fs/cgroup", "cgroup2", nil as String?),
            (probed.unified, "/sys/fs/cgroup/unified", "cgroup2", nil),
            (probed.freezer, "/sys/fs/cgroup/freezer", "cgroup", "freezer"),
            (probed.memory, "/sys/fs/cgroup/memory", "cgroup", "memory"),
        ] where mounted(point, type: type, option: option) {
            #expect(found == point, "\(point) is a \(type) mount; the probe found \(String(describing: found))")
        }
        if probed.unified == nil {
            #expect(!mounted("/sys/fs/cgroup", type: "cgroup2") && !mounted("/sys/fs/cgroup/unified", type: "cgroup2"))
        }
    }

    @Test("/proc/PID/cgroup names the cgroup a process was moved into", .requires(.cgroup(.unified)))
    func processCgroupsNameTheScratchCgroup() throws {
        let scratch = try ScratchCgroup(.unified)
        defer { scratch.close() }
        let child = try busyProcess()
        defer { child.terminate() }
        try scratch.move(child.pid)
        let found = try CgroupHierarchies.probe().cgroups(of: child.pid)
        #expect(found.unified == scratch.cgroup)
        #expect(try scratch.cgroup.processes() == [child.pid])
    }

    @Test(
        "cgroup2: freeze confirmed by cgroup.events (tasks show S), thaw confirmed, a frozen cgroup killed at once",
        .requires(.cgroup(.unified)))
    func unifiedFreezeThawKill() throws {
        let scratch = try ScratchCgroup(.unified)
        defer { scratch.close() }
        let cgroup = scratch.cgroup
        let (child, pids) = try startBusyProcess(in: scratch)
        defer { child.terminate() }
        #expect(within(.seconds(10)) { pids.contains { state($0) == .running } }, "nothing ran")

        try cgroup.requestFreeze(true)
        #expect(try cgroup.waitUntil(frozen: true, timeout: .seconds(5)), "cgroup.events never said frozen")
        for pid in pids { #expect(state(pid) == .sleeping, "pid \(pid) is \(String(describing: state(pid)))") }

        try cgroup.requestFreeze(false)
        #expect(try cgroup.waitUntil(frozen: false, timeout: .seconds(5)), "cgroup.events never said thawed")
        #expect(within(.seconds(10)) { pids.contains { state($0) == .running } }, "nothing ran after the thaw")

        // Killed while frozen: every process dies without a thaw.
        try cgroup.requestFreeze(true)
        #expect(try cgroup.waitUntil(frozen: true, timeout: .seconds(5)))
        #expect(cgroup.has("cgroup.kill"))
        try cgroup.killAll()
        #expect(try child.process.pidFD.waitForExit(timeout: .seconds(5)), "the frozen cgroup was not killed")
        #expect(try within(.seconds(5)) { try cgroup.processes().isEmpty })
        #expect(try cgroup.events()["populated"] == 0)
    }

    @Test(
        "cgroup2: a memory.pressure trigger arms (2 s window) and stays quiet without a stall",
        .requires(.cgroup(.unified)))
    func unifiedPressureTrigger() throws {
        let scratch = try ScratchCgroup(.unified)
        defer { scratch.close() }
        let trigger = try scratch.cgroup.armMemoryPressureTrigger(stall: .milliseconds(150), window: .seconds(2))
        defer { try? trigger.close() }
        #expect(try trigger.poll(for: .priority, timeout: .milliseconds(100)).isEmpty)
        // A window the kernel refuses unprivileged is an error, not a silent no-op.
        let refused = #expect(throws: Errno.self) {
            let descriptor = try scratch.cgroup.armMemoryPressureTrigger(
                stall: .milliseconds(1), window: .milliseconds(1))
            try? descriptor.close()
        }
        #expect(refused?.rawValue == EINVAL)
    }

    @Test(
        "v1 freezer: FROZEN confirmed (tasks show D), THAWED confirmed, a frozen task killed dies once thawed",
        .requires(.cgroup(.freezer)))
    func freezerFreezeThawKill() throws {
        let scratch = try ScratchCgroup(.freezer)
        defer { scratch.close() }
        let cgroup = scratch.cgroup
        let (child, pids) = try startBusyProcess(in: scratch)
        defer { child.terminate() }

        try cgroup.requestFreezer(true)
        #expect(try cgroup.waitUntilFreezer(frozen: true, timeout: .seconds(5)), "never FROZEN")
        for pid in pids { #expect(state(pid) == .diskSleep, "pid \(pid) is \(String(describing: state(pid)))") }
        try cgroup.requestFreezer(false)
        #expect(try cgroup.waitUntilFreezer(frozen: false, timeout: .seconds(5)), "never THAWED")
        #expect(within(.seconds(10)) { pids.contains { state($0) == .running } }, "nothing ran after the thaw")

        // SIGKILL of a v1-frozen task waits for the thaw (it stays in D state until THAWED): kill, see it still
        // there, thaw, gone.
        try cgroup.requestFreezer(true)
        #expect(try cgroup.waitUntilFreezer(frozen: true, timeout: .seconds(5)))
        for pid in pids { kill(pid, SIGKILL) }
        // Time to die, which a frozen task must not take: a window to watch, not a wait for a condition (nothing
        // says "would have died by now"). A busy machine can only make this check pass wrongly, never fail it.
        usleep(50_000)
        #expect(try !child.process.pidFD.hasExited, "a v1-frozen task died before the thaw")
        try cgroup.requestFreezer(false)
        #expect(try child.process.pidFD.waitForExit(timeout: .seconds(5)), "the killed task did not die on thaw")
        #expect(try within(.seconds(5)) { try cgroup.processes().isEmpty })
    }

    @Test(
        "v1 memory: memory.usage_in_bytes grows by what the process allocated, within 10%",
        .requires(.cgroup(.memory)))
    func memoryUsageMatchesTheAllocation() throws {
        let scratch = try ScratchCgroup(.memory)
        defer { scratch.close() }
        let mebibytes = 64
        let child = try ChildProcess([
            "/usr/bin/timeout", "60", "python3", "-c",
            """
            import sys
            print("ready", flush=True)
            sys.stdin.readline()
            block = bytearray(\(mebibytes) << 20)
            for offset in range(0, len(block), 4096):
                block[offset] = 1
            print("allocated", flush=True)
            sys.stdin.readline()
            """,
        ])
        defer { child.terminate() }
        _ = try child.waitForLine(startingWith: "ready")
        // `timeout` and python, which it started before the move: both move (their pages so far stay charged
        // where they were, so what grows is the allocation).
        let pids = [child.pid] + (try childProcesses(of: child.pid))
        for pid in pids { try scratch.move(pid) }
        let before = try scratch.cgroup.memoryUsage()
        try child.send("go")
        _ = try child.waitForLine(startingWith: "allocated", timeout: .seconds(30))
        let grown = Double(try scratch.cgroup.memoryUsage()) - Double(before)
        let allocated = Double(mebibytes << 20)
        #expect(abs(grown - allocated) <= allocated * 0.1, "grew \(grown / 1_048_576) MiB for \(mebibytes) MiB")
    }
}

/// The pids whose parent is `pid`, from /proc.
private func childProcesses(of pid: pid_t) throws -> [pid_t] {
    try FileManager.default.contentsOfDirectory(atPath: "/proc").compactMap { pid_t($0) }.filter {
        (try? ProcFS().stat($0).parentPID) == pid
    }
}
