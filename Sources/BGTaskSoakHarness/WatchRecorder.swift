// The daemon's audit trail as the harness receives it: `Watch()` stamped on arrival, its replayed history filling
// gaps.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSoak
import Glibc
import Synchronization

/// Follows `Watch()` on a thread of its own, stamping each entry with the harness's clock as it arrives. Each
/// subscription asks for the kept history first (`Watch(history:)`), so when the stream ends (the daemon went down)
/// and it subscribes again, the gap is filled from the same stream, with no entry lost between the two: kept
/// entries it has not seen are added, stamped by their wall-clock time mapped onto the harness's clock (never
/// earlier than the last entry received); then the daemon's listing of the apps, taken once the subscription is
/// in effect, tells what the history does not keep (state changes above all); then come the new entries.
final class WatchRecorder: Sendable {
    private struct State {
        var entries: [ObservedEntry] = []
        var seen: Set<HistoryEntry> = []
        var reconnects = 0
        var gaps: [ClosedRange<Duration>] = []
        var listings: [AppSnapshot] = []
    }

    private let state = Mutex(State())
    private let stopping = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)
    private let clock: SoakClock

    /// Starts following the daemon at `socketPath`.
    init(socketPath: String, clock: SoakClock) throws {
        self.clock = clock
        try DetachedThread.start(name: "soak-watch") { [self] in
            follow(socketPath: socketPath)
            finished.store(true, ordering: .releasing)
        }
    }

    /// The entries so far.
    var entries: [ObservedEntry] { state.withLock { $0.entries } }

    /// When no stream was followed: from the last entry received before a stream ended (or the start) until a new
    /// one was subscribed (its first reply received) and the apps listed.
    var gaps: [ClosedRange<Duration>] { state.withLock { $0.gaps } }

    /// The daemon's listings of the apps, each taken right after a stream was subscribed and its gap filled.
    var listings: [AppSnapshot] { state.withLock { $0.listings } }

    /// How many times the stream was followed again after it ended.
    var reconnects: Int { state.withLock { $0.reconnects } }

    /// Adds entries received, each once.
    private func add(_ items: [HistoryEntry], stamp: (HistoryEntry) -> Duration) {
        state.withLock { state in
            for entry in items where state.seen.insert(entry).inserted {
                let last = state.entries.last?.observedAt ?? .zero
                state.entries.append(ObservedEntry(observedAt: max(last, stamp(entry)), entry: entry))
            }
        }
    }

    /// Kept entries asked for at each subscription: more than any `HistorySize` the harness configures.
    static let replayedEntries = 1 << 20

    private func follow(socketPath: String) {
        var isFirst = true
        var lastReceived = Duration.zero
        let clock = clock
        // A kept entry the subscription replayed is stamped by its wall-clock time; a new one on arrival.
        func receive(_ reply: (entry: HistoryEntry, isReplayed: Bool)) {
            if reply.isReplayed {
                add([reply.entry]) { clock.fromWallClock($0.time) }
            } else {
                let now = clock.now()
                lastReceived = now
                add([reply.entry]) { _ in now }
            }
        }
        while !stopping.load(ordering: .relaxed) {
            guard let client = try? LifecycleClient(socketPath: socketPath, timeout: .seconds(5)),
                let stream = try? client.watch(history: Self.replayedEntries)
            else {
                usleep(100_000)
                continue
            }
            if !isFirst { state.withLock { $0.reconnects += 1 } }
            // The first reply shows the subscription in effect; the kept entries it replays fill the gap, with
            // nothing lost between them and the new ones (the daemon starts both in one step).
            var first: (entry: HistoryEntry, isReplayed: Bool)?
            var isOpen = true
            while first == nil && isOpen && !stopping.load(ordering: .relaxed) {
                do {
                    first = try stream.nextReply(timeout: .milliseconds(500))
                    if first == nil { isOpen = false }
                } catch .timedOut {
                    continue
                } catch {
                    isOpen = false
                }
            }
            if let first { receive(first) }
            // Taken after the subscription: whatever changes after it, the new stream brings. It tells what the
            // history does not keep (state changes above all).
            var listing: AppSnapshot?
            if isOpen, let gap = try? LifecycleClient(socketPath: socketPath, timeout: .seconds(5)) {
                let asked = clock.now()
                listing = (try? gap.listApps()).map { AppSnapshot(takenAt: asked, apps: $0) }
                gap.close()
            }
            let subscribed = listing?.takenAt ?? clock.now()
            state.withLock {
                $0.gaps.append(lastReceived...max(lastReceived, subscribed))
                if let listing { $0.listings.append(listing) }
            }
            isFirst = false
            while isOpen && !stopping.load(ordering: .relaxed) {
                do {
                    guard let reply = try stream.nextReply(timeout: .milliseconds(500)) else { break }
                    receive(reply)
                } catch .timedOut {
                    continue
                } catch {
                    break
                }
            }
            stream.close()
            client.close()
        }
    }

    /// Stops following (within about a second).
    func stop() {
        stopping.store(true, ordering: .relaxed)
        for _ in 0..<40 where !finished.load(ordering: .acquiring) { usleep(50_000) }
    }
}

/// The harness's clock: `CLOCK_MONOTONIC` since the run began, and the wall clock mapped onto it.
struct SoakClock: Sendable {
    /// `CLOCK_MONOTONIC` at the start, in nanoseconds.
    let startNanoseconds: Int64
    /// The wall clock at the start, in seconds since the epoch.
    let startWallSeconds: Double

    init() {
        startNanoseconds = MonotonicClock.now()
        startWallSeconds = WallClock.secondsSince1970()
    }

    /// Now, since the start.
    func now() -> Duration { .nanoseconds(MonotonicClock.now() - startNanoseconds) }

    /// A monotonic reading in nanoseconds, since the start.
    func since(_ nanoseconds: Int64) -> Duration { .nanoseconds(nanoseconds - startNanoseconds) }

    /// A wall-clock time (the daemon's `HistoryEntry.time`), since the start.
    func fromWallClock(_ seconds: Double) -> Duration {
        .nanoseconds(Int64((seconds - startWallSeconds) * 1e9))
    }
}
