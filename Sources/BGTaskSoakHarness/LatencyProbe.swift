// Lease call latency under load: an app registered by the harness itself, beginning and ending a task every
// 100 ms and timing each call.

import BGTaskClient
import BGTaskPOSIX
import Glibc
import Synchronization

/// The `soak-probe` app: always in the foreground (so the daemon never stops the harness), its event stream read by
/// `BackgroundApplication`, its lease calls timed on a connection of their own.
final class LatencyProbe: Sendable {
    private let application: BackgroundApplication
    private let samples = Mutex<[Int64]>([])
    private let stopping = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)

    static let name = "soak-probe"

    init(socketPath: String) throws {
        application = try BackgroundApplication(name: Self.name, socketPath: socketPath)
        try DetachedThread.start(name: "soak-probe") { [self] in
            var client: LifecycleClient?
            while !stopping.load(ordering: .relaxed) {
                usleep(100_000)
                do {
                    let connected = try client ?? LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
                    client = connected
                    let start = MonotonicClock.now()
                    let task = try connected.beginBackgroundTask(app: Self.name, name: "probe")
                    let middle = MonotonicClock.now()
                    try connected.endBackgroundTask(app: Self.name, taskId: task)
                    let end = MonotonicClock.now()
                    samples.withLock { $0 += [middle - start, end - middle] }
                } catch {
                    client?.close()
                    client = nil
                }
            }
            client?.close()
            finished.store(true, ordering: .releasing)
        }
    }

    /// Every call's round trip in nanoseconds.
    var latencies: [Int64] { samples.withLock { $0 } }

    /// Stops timing and ends the registration.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        for _ in 0..<100 where !finished.load(ordering: .acquiring) { usleep(20_000) }
        application.close()
    }
}
