// CPU sets as sched_setaffinity(2) takes them, and pinning real threads: the calling one, and every thread of a child.
import BGTaskBenchmarks
import BGTaskPOSIX
import BGTaskTestSupport
import Glibc
import Testing

@Suite("CPU affinity")
struct CPUAffinityTests {
    /// Numbers given and the set they make, as `taskset -c` would print it.
    static let setRows: [([Int], String)] = [
        ([], ""),
        ([0], "0"),
        ([3, 1, 3, 0], "0,1,3"),
        ([-1, 2], "2"),
        ([1_023, 64, 63], "63,64,1023"),
    ]

    @Test("a CPU set keeps each non-negative number once, ascending")
    func cpuSets() {
        for (numbers, expected) in Self.setRows {
            #expect(CPUSet(numbers).description == expected, "\(numbers)")
        }
    }

    @Test("the calling thread pinned to its last allowed CPU reads back that CPU alone, then gets its CPUs back")
    func pinsTheCallingThread() async throws {
        // On a thread of its own: the runner's cooperative threads keep every CPU.
        try await offThePool {
            let allowed = try CPUAffinity.allowedCPUs()
            let last = try #require(allowed.numbers.last, "sched_getaffinity allowed no CPU")
            defer { try? CPUAffinity.restrict(thread: 0, to: allowed) }
            try CPUAffinity.restrict(thread: 0, to: CPUSet([last]))
            #expect(try CPUAffinity.allowedCPUs() == CPUSet([last]))
            try CPUAffinity.restrict(thread: 0, to: allowed)
            #expect(try CPUAffinity.allowedCPUs() == allowed)
        }
    }

    @Test("pinning a process pins every thread in its task directory; a gone process and no usable CPU are errors")
    func pinsEveryThreadOfAProcess() async throws {
        try await offThePool {
            let allowed = try CPUAffinity.allowedCPUs()
            let first = try #require(allowed.numbers.first, "sched_getaffinity allowed no CPU")
            let child = try ProcessSpawner.spawn(["sleep", "30"])
            defer {
                // The child may have been killed and reaped below already (ESRCH, ECHILD then).
                try? child.pidFD.sendSignal(.kill)
                _ = try? child.waitForExit()
                try? child.pidFD.close()
            }
            let pinned = try CPUAffinity.restrict(process: child.pid, to: CPUSet([first]))
            let threads = try ProcFS().threadIDs(of: child.pid)
            #expect(pinned == threads.count && threads.contains(child.pid))
            for thread in threads {
                #expect(try CPUAffinity.allowedCPUs(ofThread: thread) == CPUSet([first]))
            }
            // No CPU the kernel knows: refused, the thread keeps its mask.
            #expect(throws: Errno.invalidArgument) {
                try CPUAffinity.restrict(thread: child.pid, to: CPUSet([65_535]))
            }
            #expect(try CPUAffinity.allowedCPUs(ofThread: child.pid) == CPUSet([first]))
            try child.pidFD.sendSignal(.kill)
            _ = try child.waitForExit()
            #expect(throws: Errno.noSuchFileOrDirectory) {
                try CPUAffinity.restrict(process: child.pid, to: allowed)
            }
        }
    }
}
