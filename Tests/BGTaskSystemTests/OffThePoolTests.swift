// `offThePool` runs a test's blocking body on a thread of its own, not on one of the test runner's cooperative
// threads (two on a two-CPU machine): a body that blocks or computes there holds every other test back.
import Glibc
import Testing

@testable import BGTaskTestSupport

/// The calling thread's name, as the kernel has it.
private func threadName() -> String {
    guard let file = fopen("/proc/thread-self/comm", "r") else { return "?" }
    defer { fclose(file) }
    var buffer = [CChar](repeating: 0, count: 64)
    guard fgets(&buffer, Int32(buffer.count), file) != nil else { return "?" }
    return String(cString: buffer).trimmingSuffix("\n")
}

@Suite struct OffThePoolTests {
    @Test func aBodyRunsOnAThreadOfItsOwn() async {
        let outside = threadName()
        let inside = await offThePool { threadName() }
        #expect(inside == "bgtask-blocking")
        #expect(outside != inside)
    }

    @Test func aBodyRunningAloneRunsOnAThreadOfItsOwnToo() async {
        let inside = await offThePool(alone: true) { threadName() }
        #expect(inside == "bgtask-blocking")
    }

    @Test func aThrowingBodyRunsThereAndItsErrorReachesTheTest() async {
        struct Expected: Error {}
        var inside: String?
        await #expect(throws: Expected.self) {
            try await offThePool {
                inside = threadName()
                throw Expected()
            }
        }
        #expect(inside == "bgtask-blocking")
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        hasSuffix(suffix) ? String(dropLast(suffix.count)) : self
    }
}

@Suite struct OffThePoolComputingTests {
    @Test func aComputingBodyRunsOnAThreadOfItsOwn() async {
        let outside = threadName()
        let inside = await offThePool(computing: true) { threadName() }
        #expect(inside == "bgtask-blocking")
        #expect(outside != inside)
    }
}

/// The limiter's order on its own, with six places: who is admitted when others give places back. Admission happens
/// inside the limiter, so what still waits is known the moment a call returns.
@Suite struct BlockingTestLimiterTests {
    /// Starts a body asking for `places` places and returns once it is admitted or waiting.
    private func ask(_ limiter: BlockingTestLimiter, _ places: Int, admitted: Bool) async -> Task<Void, Never> {
        let before = await limiter.waitingPlaces.count
        let task = Task { await limiter.acquire(places) }
        if !admitted {
            while await limiter.waitingPlaces.count == before { await Task.yield() }
        } else {
            await task.value
        }
        return task
    }

    @Test func heavyFirstComputingAtOnceThenTheOthersInOrder() async {
        let limiter = BlockingTestLimiter(width: 6)
        for _ in 0..<6 { _ = await ask(limiter, 1, admitted: true) }
        // Every place is taken: these wait, in this order, but a computing body starts at once.
        var tasks: [Task<Void, Never>] = []
        for places in [6, 1, 4, 4, 1] { tasks.append(await ask(limiter, places, admitted: false)) }
        tasks.append(await ask(limiter, 0, admitted: true))
        #expect(await limiter.waitingPlaces == [6, 1, 4, 4, 1])

        // Two places back: not enough for the first heavy body, and the bodies of one place may not take them.
        await limiter.release(1)
        await limiter.release(1)
        #expect(await limiter.waitingPlaces == [6, 1, 4, 4, 1])
        // Four back: the first heavy body starts, before the body running alone that asked first.
        await limiter.release(1)
        await limiter.release(1)
        #expect(await limiter.waitingPlaces == [6, 1, 4, 1])
        // The second cannot start beside it, so the two places left go to the bodies of one place, past the body
        // running alone, which cannot start before the heavy ones end.
        await limiter.release(1)
        await limiter.release(1)
        #expect(await limiter.waitingPlaces == [6, 4])
        // The first heavy body ends: the second starts at once beside the two.
        await limiter.release(4)
        #expect(await limiter.waitingPlaces == [6])
        // Once nothing that takes a place runs, the body running alone starts, the computing one still running.
        await limiter.release(1)
        await limiter.release(1)
        #expect(await limiter.waitingPlaces == [6])
        await limiter.release(4)
        #expect(await limiter.waitingPlaces.isEmpty)
        // Beside it a computing body starts, a body of one place does not; nor, with no heavy body about, does one
        // that asks after a waiting body running alone.
        tasks.append(await ask(limiter, 0, admitted: true))
        tasks.append(await ask(limiter, 1, admitted: false))
        tasks.append(await ask(limiter, 6, admitted: false))
        tasks.append(await ask(limiter, 1, admitted: false))
        #expect(await limiter.waitingPlaces == [1, 6, 1])
        await limiter.release(6)
        #expect(await limiter.waitingPlaces == [6, 1])
        await limiter.release(1)
        #expect(await limiter.waitingPlaces == [1])
        await limiter.release(6)
        #expect(await limiter.waitingPlaces.isEmpty)
        for task in tasks { await task.value }
        await limiter.release(1)
        await limiter.release(0)
        await limiter.release(0)
    }
}
