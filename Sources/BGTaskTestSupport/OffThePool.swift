// Runs test bodies that block (on processes, sockets, the clock) on threads of their own, a few at a time, so they
// neither hold the test runner's cooperative threads nor all run at once.

import Foundation
import Testing

/// Runs `body`, a test's blocking work, on a thread of its own rather than on one of the test runner's cooperative
/// threads, of which there are as many as CPUs (two here): a blocked test there holds every other test back, even
/// those that would run in a millisecond. The body still runs in the test's task, so `#expect` and `Issue.record`
/// report to the test as usual.
///
/// At most `BlockingTestLimiter.width` bodies run at once (`BGTASK_TEST_PARALLELISM`, default 6): enough to overlap
/// the waiting of end-to-end tests, few enough that daemons with millisecond policies still get the CPU on time. A
/// body that measures time as the machine gives it (wake-ups, dispatch durations, lateness) asks to run `alone`:
/// it waits for the others to finish, and none starts until it is done. A body that loads the machine for a long
/// while without measuring its timing (a soak: a daemon and dozens of apps for a minute or more) asks to run `heavy`:
/// it takes all places but two, so at most two other bodies run beside it and no two heavy ones run at once.
///
/// With `BGTASK_TEST_TIMELINE=PATH`, each body appends a line to PATH when it ends: the test, whether it ran alone,
/// and when it asked for its place, got it and ended (seconds on `CLOCK_MONOTONIC`): where the suite's time goes.
public func offThePool<Value>(alone: Bool = false, heavy: Bool = false, _ body: () throws -> Value) async rethrows
    -> Value
{
    let limiter = BlockingTestLimiter.shared
    let places = alone ? limiter.width : heavy ? max(1, limiter.width - 2) : 1
    let asked = TestTimeline.now()
    await limiter.acquire(places)
    let admitted = TestTimeline.now()
    let executor = DedicatedThreadExecutor()
    defer {
        executor.stop()
        Task { await limiter.release(places) }
        TestTimeline.record(alone: alone, heavy: heavy, asked: asked, admitted: admitted)
    }
    return try await withTaskExecutorPreference(executor) { try body() }
}

/// The optional record of when each blocking test body waited and ran (`BGTASK_TEST_TIMELINE`).
enum TestTimeline {
    static let path = ProcessInfo.processInfo.environment["BGTASK_TEST_TIMELINE"]
    static let lock = NSLock()

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    static func record(alone: Bool, heavy: Bool, asked: Double, admitted: Double) {
        guard let path else { return }
        let name = Test.current.map { "\($0.id)" } ?? "?"
        let line = String(
            format: "%.3f %.3f %.3f %@ %@\n", asked, admitted, now(), alone ? "alone" : heavy ? "heavy" : "shared",
            name)
        lock.lock()
        defer { lock.unlock() }
        if let handle = FileHandle(forWritingAtPath: path) ?? {
            FileManager.default.createFile(atPath: path, contents: nil)
            return FileHandle(forWritingAtPath: path)
        }() {
            handle.seekToEndOfFile()
            handle.write(Data(line.utf8))
            try? handle.close()
        }
    }
}

/// Admits a bounded number of blocking test bodies at a time, first come first served, but for one exception: while
/// a heavy body runs (one that leaves places for others), bodies of one place may pass the waiters that cannot start
/// before it ends, into the places it leaves free.
public actor BlockingTestLimiter {
    /// The limiter every `offThePool` shares.
    public static let shared = BlockingTestLimiter(
        width: ProcessInfo.processInfo.environment["BGTASK_TEST_PARALLELISM"].flatMap(Int.init).map { max(1, $0) } ?? 6)

    /// How many places there are: bodies that may run at once.
    public nonisolated let width: Int
    private var taken = 0
    /// Waiters in arrival order, with the places each needs. A waiter that cannot start is passed only by bodies of
    /// one place, and only into places it could not have had: while a heavy body runs, or behind a heavy waiter.
    /// Neither can starve: a heavy waiter finds its places once the heavy body before it ends (the small ones hold
    /// at most the places a heavy body leaves), and once no heavy body runs, nothing passes a waiter that needs
    /// every place (a body running alone), which then gets them as the bodies running end.
    private var waiting: [(places: Int, continuation: CheckedContinuation<Void, Never>)] = []
    /// Heavy bodies running (more than one place, fewer than all).
    private var heavyRunning = 0

    init(width: Int) {
        self.width = width
    }

    /// Waits for `places` places (at most `width`).
    func acquire(_ places: Int) async {
        let places = min(places, width)
        if waiting.isEmpty && taken + places <= width {
            take(places)
            return
        }
        await withCheckedContinuation {
            waiting.append((places, $0))
            admit()
        }
    }

    /// Gives `places` places back and admits the waiters that now fit.
    func release(_ places: Int) {
        let places = min(places, width)
        taken -= places
        if places > 1 && places < width { heavyRunning -= 1 }
        admit()
    }

    private func take(_ places: Int) {
        taken += places
        if places > 1 && places < width { heavyRunning += 1 }
    }

    /// Admits waiters in order while they fit; past one that does not, only bodies of one place, and past one that
    /// needs every place only while a heavy body runs.
    private func admit() {
        var index = 0
        var isPastAWaiter = false
        while index < waiting.count {
            let waiter = waiting[index]
            if (!isPastAWaiter || waiter.places == 1) && taken + waiter.places <= width {
                waiting.remove(at: index)
                take(waiter.places)
                waiter.continuation.resume()
                continue
            }
            if waiter.places >= width && heavyRunning == 0 { return }
            isPastAWaiter = true
            index += 1
        }
    }
}

/// A task executor with one thread of its own, running its jobs in order until stopped.
final class DedicatedThreadExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs` and `isStopping` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var isStopping = false

    init() {
        let thread = Thread { [self] in runJobs() }
        thread.name = "bgtask-blocking-test"
        thread.start()
    }

    private func runJobs() {
        while true {
            condition.lock()
            while jobs.isEmpty && !isStopping { condition.wait() }
            guard !jobs.isEmpty else {
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Ends the thread once its jobs are done.
    func stop() {
        condition.lock()
        isStopping = true
        condition.signal()
        condition.unlock()
    }
}
