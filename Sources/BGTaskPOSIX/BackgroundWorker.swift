// A thread of its own for slow, blocking reads (/proc), fed jobs by the event loop and handing outcomes back to it.
import CPOSIX
import Glibc
import Synchronization

/// Runs jobs on a dedicated thread so that work whose cost the daemon does not control (reading `/proc` files of
/// processes with large address spaces) never stalls the event loop.
///
/// The loop submits jobs with `submit(_:)` and watches `outcomesReady` (an eventfd, readable once an outcome is
/// waiting); on readiness it calls `takeOutcomes()`. Jobs run one at a time, in submission order. At most
/// `capacity` jobs wait: a full worker refuses more, so nothing a peer does can queue unbounded work. The thread
/// blocks every signal: signals are the loop's.
public final class BackgroundWorker<Job: Sendable, Outcome: Sendable>: WorkerThreadBody, @unchecked Sendable {
    // @unchecked: every mutable field is inside `state` (a Mutex); the descriptors and `perform` are immutable,
    // and the descriptors are closed only once the thread has finished (or was abandoned, see `stop`).

    private struct State: ~Copyable {
        var jobs: [Job] = []
        var outcomes: [Outcome] = []
        var isStopping = false
        var isFinished = false
    }

    /// The most jobs that may wait.
    public let capacity: Int
    /// Readable while outcomes are waiting for `takeOutcomes()`; watch it on the loop.
    public let outcomesReady: FileDescriptor
    private let wakeWorker: FileDescriptor
    private let finished: FileDescriptor
    private let state = Mutex(State())
    private let perform: @Sendable (Job) -> Outcome
    private let threadName: String
    private var thread: pthread_t?

    /// Starts the thread. `name` shows in `/proc/PID/task/TID/comm` (15 bytes at most).
    public init(name: String, capacity: Int, perform: @escaping @Sendable (Job) -> Outcome) throws(Errno) {
        self.capacity = capacity
        self.perform = perform
        threadName = String(decoding: name.utf8.prefix(15), as: UTF8.self)
        outcomesReady = FileDescriptor(rawValue: try systemCall("eventfd") { bgtask_eventfd(1) })
        do {
            wakeWorker = FileDescriptor(rawValue: try systemCall("eventfd") { bgtask_eventfd(0) })
        } catch {
            try? outcomesReady.close()
            throw error
        }
        do {
            finished = FileDescriptor(rawValue: try systemCall("eventfd") { bgtask_eventfd(1) })
        } catch {
            try? outcomesReady.close()
            try? wakeWorker.close()
            throw error
        }
        super.init()
        var handle = pthread_t()
        let body = Unmanaged.passRetained(self as WorkerThreadBody).toOpaque()
        let result = pthread_create(&handle, nil, workerThreadEntry, body)
        guard result == 0 else {
            Unmanaged<WorkerThreadBody>.fromOpaque(body).release()
            for descriptor in [outcomesReady, wakeWorker, finished] { try? descriptor.close() }
            throw Errno(rawValue: result, operation: "pthread_create(\(name))")
        }
        thread = handle
    }

    /// Queues `job`; false when `capacity` jobs already wait or the worker is stopping.
    @discardableResult
    public func submit(_ job: Job) -> Bool {
        let isQueued = state.withLock { state -> Bool in
            guard !state.isStopping, state.jobs.count < capacity else { return false }
            state.jobs.append(job)
            return true
        }
        if isQueued { Self.signal(wakeWorker) }
        return isQueued
    }

    /// The outcomes finished since the last call, in the order their jobs ran.
    public func takeOutcomes() -> [Outcome] {
        var counter: UInt64 = 0
        // Resets the eventfd so the loop's source stops firing; EAGAIN just means it was already reset.
        _ = withUnsafeMutableBytes(of: &counter) { Glibc.read(outcomesReady.rawValue, $0.baseAddress, 8) }
        return state.withLock { state in
            defer { state.outcomes.removeAll(keepingCapacity: true) }
            return state.outcomes
        }
    }

    /// The number of jobs waiting (not counting the one running).
    public var pendingJobCount: Int { state.withLock { $0.jobs.count } }

    /// Stops the thread after its current job (jobs still waiting are dropped) and closes the descriptors. Waits
    /// at most `timeout` for a job stuck in a read or a write; past it the thread is detached and left to finish
    /// on its own (the process is exiting), and its descriptors are left open for it. Returns whether the thread
    /// has finished: false means its current job may still be running, and the caller must not touch what that
    /// job uses.
    @discardableResult
    public func stop(timeout: Duration = .seconds(1)) -> Bool {
        let wasRunning = state.withLock { state -> Bool in
            defer { state.isStopping = true }
            return !state.isStopping
        }
        guard wasRunning, let thread else { return state.withLock { $0.isFinished } }
        Self.signal(wakeWorker)
        let isFinished = (try? finished.poll(for: .readable, timeout: timeout))?.contains(.readable) ?? false
        guard isFinished || state.withLock({ $0.isFinished }) else {
            pthread_detach(thread)
            return false
        }
        pthread_join(thread, nil)
        for descriptor in [outcomesReady, wakeWorker, finished] { try? descriptor.close() }
        return true
    }

    override func runThread() {
        var blocked = sigset_t()
        sigfillset(&blocked)
        pthread_sigmask(SIG_BLOCK, &blocked, nil)
        _ = threadName.withCString { bgtask_set_thread_name($0) }
        while true {
            var counter: UInt64 = 0
            // Blocks until work or a stop; EINTR cannot happen (signals are blocked) but is harmless.
            _ = withUnsafeMutableBytes(of: &counter) { Glibc.read(wakeWorker.rawValue, $0.baseAddress, 8) }
            while let job = nextJob() {
                let outcome = perform(job)
                state.withLock { $0.outcomes.append(outcome) }
                Self.signal(outcomesReady)
            }
            if state.withLock({ $0.isStopping }) { break }
        }
        state.withLock { $0.isFinished = true }
        Self.signal(finished)
    }

    private func nextJob() -> Job? {
        state.withLock { state -> Job? in
            guard !state.isStopping, !state.jobs.isEmpty else { return nil }
            return state.jobs.removeFirst()
        }
    }

    /// Adds 1 to an eventfd. It cannot overflow (the counter is 2^64) and EAGAIN cannot happen below that.
    private static func signal(_ eventfd: FileDescriptor) {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { Glibc.write(eventfd.rawValue, $0.baseAddress, 8) }
    }
}

/// The non-generic part of `BackgroundWorker` the C thread entry can call (a C function pointer cannot refer to
/// a generic type's parameters).
public class WorkerThreadBody {
    init() {}

    /// The thread's whole life.
    func runThread() {}
}

/// The thread entry: takes back the retain `BackgroundWorker.init` gave the thread and runs the body.
private let workerThreadEntry: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? = { raw in
    guard let raw else { return nil }
    let body = Unmanaged<WorkerThreadBody>.fromOpaque(raw).takeRetainedValue()
    body.runThread()
    return nil
}
