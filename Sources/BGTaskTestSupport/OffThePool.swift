// Runs test bodies that block (on processes, sockets, the clock) on threads of their own, a few at a time, so they
// neither hold the test runner's cooperative threads nor all run at once.

import BGTaskPOSIX
import Foundation
import Testing

/// Runs `body`, a test's blocking work, on a thread of its own rather than on one of the test runner's cooperative
/// threads, of which there are as many as CPUs (two here): a blocked test there holds every other test back, even
/// those that would run in a millisecond. The body still runs in the test's task, so `#expect` and `Issue.record`
/// report to the test as usual.
///
/// At most `BlockingTestLimiter.width` bodies that take a place run at once (`BGTASK_TEST_PARALLELISM`, default 6):
/// enough to overlap the waiting of end-to-end tests, few enough that daemons with millisecond policies still get
/// the CPU on time. A body that measures time as the machine gives it (wake-ups, dispatch durations, lateness) asks
/// to run `alone`: it waits for the others that take a place to finish, and none of those starts until it is done. A
/// body that loads the machine
/// for a long while without measuring its timing (a soak: a daemon and dozens of apps for a minute or more) asks to
/// run `heavy`: it takes all places but two, so at most two other bodies that take a place run beside it and no two
/// heavy ones run at once. A body that only computes for a long while (a seeded model test: no process, no socket,
/// no clock) asks to run `computing`: it takes no place, so it neither holds a cooperative thread (where it would
/// keep other tests from even starting) nor a place a blocking body could use, and it runs beside every other body.
/// A heavy body is admitted before the others (`BlockingTestLimiter`).
///
/// With `BGTASK_TEST_TIMELINE=PATH`, each body appends a line to PATH when it ends: when it asked for its place, got
/// it and ended (seconds on `CLOCK_MONOTONIC`), how it ran (`shared`, `alone`, `heavy` or `computing`) and the test:
/// where the suite's time goes.
public func offThePool<Value>(
    alone: Bool = false, heavy: Bool = false, computing: Bool = false, _ body: () throws -> Value
) async rethrows -> Value {
    precondition([alone, heavy, computing].filter { $0 }.count <= 1, "offThePool: one of alone, heavy or computing")
    let limiter = BlockingTestLimiter.shared
    let places = computing ? 0 : alone ? limiter.width : heavy ? max(1, limiter.width - 2) : 1
    let asked = TestTimeline.now()
    await limiter.acquire(places)
    let admitted = TestTimeline.now()
    let executor = DedicatedThreadExecutor()
    defer {
        executor.stop()
        Task { await limiter.release(places) }
        TestTimeline.record(
            kind: alone ? "alone" : heavy ? "heavy" : computing ? "computing" : "shared", asked: asked,
            admitted: admitted)
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

    static func record(kind: String, asked: Double, admitted: Double) {
        guard let path else { return }
        let name = Test.current.map { "\($0.id)" } ?? "?"
        let line = String(
            format: "%.3f %.3f %.3f %@ %@\n", asked, admitted, now(), kind, name)
        lock.lock()
        defer { lock.unlock() }
        if let handle = FileHandle(forWritingAtPath: path)
            ?? {
                FileManager.default.createFile(atPath: path, contents: nil)
                return FileHandle(forWritingAtPath: path)
            }()
        {
            handle.seekToEndOfFile()
            handle.write(Data(line.utf8))
            try? handle.close()
        }
    }
}

/// Admits a bounded number of blocking test bodies at a time, in an order that keeps the suite short: a heavy body
/// (a soak: a minute or more of real time whatever the machine does) first, as soon as its places are free, so that
/// the longest bodies start at the beginning of the run and everything else runs beside them; computing bodies (no
/// place) at once; the others in the order they asked, bodies of one place into the places a waiting heavy body
/// does not need. A body running alone waits for the bodies running when it asked and holds back those that ask
/// after it, but while a heavy body runs or waits (the body running alone cannot start before it ends), bodies of
/// one place pass it. A heavy waiter is never passed into the places it needs. Computing bodies run beside every
/// other, one running alone included: they are few, and a body running alone compares its timings with a
/// reference measured in the same run (`docs/TESTING.md`); waiting for them would leave it waiting for as long as
/// a busy machine starves them, past its time limit.
public actor BlockingTestLimiter {
    /// The limiter every `offThePool` shares.
    public static let shared = BlockingTestLimiter(
        width: ProcessInfo.processInfo.environment["BGTASK_TEST_PARALLELISM"].flatMap(Int.init).map { max(1, $0) } ?? 6)

    /// How many places there are: bodies that may run at once.
    public nonisolated let width: Int
    private var taken = 0
    /// Waiters in arrival order, with the places each needs: none for a computing body, `width` for one running
    /// alone.
    private var waiting: [(places: Int, continuation: CheckedContinuation<Void, Never>)] = []
    /// Heavy bodies running (more than one place, fewer than all).
    private var heavyRunning = 0

    init(width: Int) {
        self.width = width
    }

    /// The places each waiting body asked for, in arrival order (for tests of the order).
    var waitingPlaces: [Int] { waiting.map(\.places) }

    /// Waits for `places` places (at most `width`; none for a computing body).
    func acquire(_ places: Int) async {
        await withCheckedContinuation {
            waiting.append((min(places, width), $0))
            admit()
        }
    }

    /// Gives `places` places back and admits the waiters that now fit.
    func release(_ places: Int) {
        let places = min(places, width)
        taken -= places
        if isHeavy(places) { heavyRunning -= 1 }
        admit()
    }

    private func isHeavy(_ places: Int) -> Bool { places > 1 && places < width }

    /// Admits computing waiters, heavy waiters that fit, then the others in order: bodies of one place into the
    /// places the first heavy waiter that does not fit leaves (all of them while a heavy body runs: the waiter
    /// cannot start before it ends anyway), and a body running alone once nothing runs.
    private func admit() {
        while let index = waiting.firstIndex(where: { $0.places == 0 }) { start(at: index) }
        while let index = waiting.firstIndex(where: { isHeavy($0.places) && taken + $0.places <= width }) {
            start(at: index)
        }
        let isHeavyWaiting = waiting.contains { isHeavy($0.places) }
        let reserved = heavyRunning > 0 ? 0 : waiting.first { isHeavy($0.places) }?.places ?? 0
        var index = 0
        while index < waiting.count {
            let places = waiting[index].places
            if places >= width {
                if taken == 0 {
                    start(at: index)
                    return
                }
                // Bodies of one place pass it only while a heavy body runs or waits.
                guard heavyRunning > 0 || isHeavyWaiting else { return }
            } else if places == 1 && taken + 1 + reserved <= width {
                start(at: index)
                continue
            }
            index += 1
        }
    }

    /// Admits the waiter at `index`.
    private func start(at index: Int) {
        let places = waiting[index].places
        taken += places
        if isHeavy(places) { heavyRunning += 1 }
        waiting.remove(at: index).continuation.resume()
    }
}

/// A task executor with one thread of its own, running its jobs in order until stopped.
final class DedicatedThreadExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs` and `isStopping` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var isStopping = false

    /// The name its thread shows in `/proc/PID/task/TID/comm`, `top -H` and a debugger's thread list. (Foundation's
    /// `Thread.name` names no thread on Linux: `Thread.current.name` there reads the dispatch thread's name.)
    static let threadName = "bgtask-blocking"

    init() {
        do {
            try DetachedThread.start(name: Self.threadName) { [self] in runJobs() }
        } catch {
            fatalError("offThePool cannot start a thread for a test body: \(error)")
        }
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
