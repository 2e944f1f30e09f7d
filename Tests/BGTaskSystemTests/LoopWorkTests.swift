// Work that must not stall the loop: a repeating defer source that runs in slices, the loop's own statistics,
// and the background worker thread that hands outcomes back through an eventfd.
import BGTaskPOSIX
import BGTaskSystem
import Glibc
import Synchronization
import Testing

/// Evaluates `condition` every millisecond until it holds or `timeout` passes; whether it held.
private func waitUntil(_ timeout: Duration, _ condition: () -> Bool) -> Bool {
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    while !condition() {
        guard MonotonicClock.now() < deadline else { return false }
        var request = timespec(tv_sec: 0, tv_nsec: 1_000_000)
        _ = nanosleep(&request, nil)
    }
    return true
}

/// A flag shared with a worker thread.
private final class Flag: Sendable {
    let value = Atomic(false)
    var isSet: Bool { value.load(ordering: .relaxed) }
    func set() { value.store(true, ordering: .relaxed) }
}

@Suite struct LoopWorkTests {
    @Test func repeatingDeferRunsEachIterationWhileEnabledAndInterleavesWithOtherSources() throws {
        let loop = try EventLoop()
        var slices = 0
        var timerFiredAtSlice: Int?
        let work = try loop.addRepeatingDefer(name: "slices") { source in
            slices += 1
            if slices == 200 {
                try? source.setEnabled(false)
                try? loop.exit(code: 0)
            }
        }
        #expect(try work.isEnabled == false)
        // A timer due at once must get its turn between slices, not after all of them.
        try loop.addTimer(at: loop.now, name: "due") { _ in timerFiredAtSlice = slices }
        try work.setEnabled(true)
        #expect(try loop.run() == 0)
        #expect(slices == 200)
        let firedAt = try #require(timerFiredAtSlice)
        #expect(firedAt < 200)
    }

    @Test func statisticsNameTheLongestDispatch() throws {
        let loop = try EventLoop()
        try loop.addDefer(name: "quick") {}
        try loop.addTimer(at: loop.now, name: "slow") { _ in
            var request = timespec(tv_sec: 0, tv_nsec: 30_000_000)
            _ = nanosleep(&request, nil)
            try? loop.exit(code: 0)
        }
        #expect(try loop.run() == 0)
        let statistics = loop.statistics
        #expect(statistics.iterations >= 2)
        #expect(statistics.longestDispatchSource == "slow")
        #expect(statistics.longestDispatchNanoseconds >= 30_000_000)
    }

    @Test func workerRunsJobsInOrderOffTheLoopAndWakesIt() throws {
        let loop = try EventLoop()
        let loopThread = pthread_self()
        let ranOnLoopThread = Flag()
        let worker = try BackgroundWorker<Int, Int>(name: "test-worker", capacity: 8) { job in
            if pthread_equal(pthread_self(), loopThread) != 0 { ranOnLoopThread.set() }
            return job * 10
        }
        defer { worker.stop() }
        var outcomes: [Int] = []
        try loop.addIO(fd: worker.outcomesReady, events: .readable, name: "outcomes") { _, _ in
            outcomes += worker.takeOutcomes()
            if outcomes.count == 5 { try? loop.exit(code: 0) }
        }
        for job in 1...5 { #expect(worker.submit(job)) }
        #expect(try loop.run() == 0)
        #expect(outcomes == [10, 20, 30, 40, 50])
        #expect(!ranOnLoopThread.isSet)
    }

    @Test func workerRefusesPastItsCapacityAndAfterStop() throws {
        let gate = Flag()
        let worker = try BackgroundWorker<Int, Int>(name: "test-full", capacity: 2) { job in
            // The first job waits for the gate, so the queue behind it fills up; the deadline only ends the wait of
            // a test that failed before opening it.
            _ = waitUntil(.seconds(30)) { gate.isSet }
            return job
        }
        #expect(worker.submit(1))
        // Wait until the worker took job 1, so exactly two more fit.
        #expect(waitUntil(.seconds(30)) { worker.pendingJobCount == 0 }, "the worker never took job 1")
        #expect(worker.submit(2))
        #expect(worker.submit(3))
        #expect(!worker.submit(4))
        gate.set()
        worker.stop()
        #expect(!worker.submit(5))
    }
}
