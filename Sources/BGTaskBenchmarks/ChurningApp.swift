// One benchmark app churning through the lifecycle: background, lease, expiration warning, suspension, foreground.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import Foundation
import Synchronization

/// What every churning app of one run shares.
struct ChurnSettings: Sendable {
    /// The bgtask-bench executable, started as each app's stand-in process.
    var benchExecutable: String
    /// The daemon's socket.
    var socketPath: String
    /// The background time budget each app asks for when it registers.
    var backgroundTime: Duration
    /// How long before the budget ends the daemon sends `backgroundTaskExpiring` to these apps.
    var warningLead: Duration
    /// How long a stand-in may live at most (its `timeout`).
    var standInLifetime: Duration
    /// Every app's name, for notifications to the others.
    var appNames: [String]
    /// When the churn ends: no cycle starts unless it can be over by then.
    var window: RunWindow
}

/// The end of a run's churn, set once every app has registered, just before the apps start.
final class RunWindow: Sendable {
    private let storage = Atomic<Int64>(.max)

    /// The end in `CLOCK_MONOTONIC` nanoseconds; `Int64.max` until set.
    var endNanoseconds: Int64 { storage.load(ordering: .acquiring) }

    /// Sets the end.
    func end(at nanoseconds: Int64) { storage.store(nanoseconds, ordering: .releasing) }
}

/// What one app did and saw during a run.
struct AppTally: Sendable {
    /// Per expiration warning: its arrival minus its due time, in nanoseconds (negative when early).
    var latenessNanoseconds: [Int64] = []
    /// Warnings that never came (the app waited `ChurningApp.missingWarningWait` past the due time).
    var missingWarnings = 0
    /// Warnings left out because the app asked for its lease only after the warning was already due (the app
    /// was late, not the daemon).
    var warningsAfterLateBegin = 0
    /// `SetState` calls made.
    var stateChanges = 0
    /// `BeginBackgroundTask` calls that returned a task.
    var tasksBegun = 0
    /// `Post` calls made, refused ones included.
    var posts = 0
    /// Notifications the app received.
    var notificationsReceived = 0
    /// Registrations made: 1, plus one per registration again after the daemon ended the app.
    var registrations = 0
    /// Why registrations ended before the run did, with names and numbers blanked out so that like reasons
    /// add up, and how often each.
    var endings: [String: Int] = [:]
    /// How many registrations ended before the run did.
    var endingCount: Int { endings.values.reduce(0, +) }
}

/// One app: a driver thread making calls, an `EventStream` thread receiving events, and a stand-in process.
///
/// A cycle: `SetState background` and wait for `didEnterBackground` (its arrival fixes the due time of the
/// warning: arrival + budget − warning lead); begin the task; acknowledge; sometimes begin and end a short extra
/// task, post to another app, or post to every app; wait for `backgroundTaskExpiring` and record its lateness;
/// end the task, which suspends the app (its stand-in is stopped); after a pause, `SetState active`, which
/// resumes it; pause again. When the daemon ends the app (a warning so late that the task expired, for
/// example), the app registers again with a fresh stand-in and name and carries on.
struct ChurningApp: Sendable {
    /// The app's name for its first registration; later ones add `.2`, `.3`, ...
    let baseName: String
    /// What all the apps of the run share.
    let settings: ChurnSettings

    /// The longest wait for a reply or an event other than the warning.
    static let stepTimeout: Duration = .seconds(10)
    /// How long past its due time a warning is waited for before it counts as missing.
    static let missingWarningWait: Duration = .seconds(5)
    /// Pauses between steps, in milliseconds: short next to the cycle, random so the apps do not march in step.
    static let pauseMilliseconds = 20...200

    /// A registration: the stand-in, its event stream, and the name it registered under.
    private struct Registration {
        var name: String
        var standIn: AppStandIn
        var events: EventStream

        func end() {
            events.close()
            standIn.stop()
        }
    }

    /// A registration ended, for the reason given.
    private struct Ended: Error, CustomStringConvertible {
        var reason: String
        var description: String { reason }
    }

    /// Registers with the stand-in `launch` (already started), waits at `startGate`, then churns until the
    /// run's end; returns what it did. Every wait is bounded, so this returns even if the daemon hangs.
    func run(firstStandIn launch: AppStandIn.Launch, startGate: DispatchSemaphore, ready: DispatchGroup) -> AppTally {
        var tally = AppTally()
        var registration: Registration?
        do {
            registration = try register(name: baseName, launch: launch, tally: &tally)
        } catch {
            note(ending: "first registration: \(error)", of: baseName, in: &tally)
        }
        ready.leave()
        startGate.wait()
        guard var current = registration else { return tally }
        let client: LifecycleClient
        do {
            client = try LifecycleClient(socketPath: settings.socketPath, timeout: Self.stepTimeout)
        } catch {
            note(ending: "connecting for calls: \(error)", of: baseName, in: &tally)
            current.end()
            return tally
        }
        defer { client.close() }
        // Spread the first cycles over one cycle's length, so the apps do not move in step.
        var random = SystemRandomNumberGenerator()
        pause(
            milliseconds: Int.random(in: 0...Int(settings.backgroundTime.components.seconds * 1000), using: &random))
        while MonotonicClock.now() + cycleLength.nanosecondCount < settings.window.endNanoseconds {
            do {
                try cycle(current, client: client, tally: &tally, random: &random)
            } catch {
                note(ending: "\(error)", of: current.name, in: &tally)
                current.end()
                guard MonotonicClock.now() + cycleLength.nanosecondCount < settings.window.endNanoseconds else {
                    return tally
                }
                do {
                    let launch = try AppStandIn.launch(
                        executable: settings.benchExecutable, socketPath: settings.socketPath,
                        lifetime: settings.standInLifetime)
                    current = try register(
                        name: "\(baseName).\(tally.registrations + 1)", launch: launch, tally: &tally)
                } catch {
                    note(ending: "registering again: \(error)", of: baseName, in: &tally)
                    return tally
                }
            }
        }
        current.end()
        return tally
    }

    /// The longest a cycle can take when all goes well: the warning's due time plus the pauses.
    private var cycleLength: Duration {
        settings.backgroundTime - settings.warningLead + .milliseconds(3 * Self.pauseMilliseconds.upperBound)
    }

    private func register(name: String, launch: AppStandIn.Launch, tally: inout AppTally) throws -> Registration {
        let standIn = try launch.connected(timeout: .seconds(30))
        do {
            let events = try EventStream(
                name: name, connection: standIn.connection, standInPID: standIn.process.pid,
                backgroundTime: settings.backgroundTime, timeout: Self.stepTimeout)
            tally.registrations += 1
            return Registration(name: name, standIn: standIn, events: events)
        } catch {
            standIn.stop()
            throw error
        }
    }

    /// Counts a registration of `name` that ended early for `reason`.
    private func note(ending reason: String, of name: String, in tally: inout AppTally) {
        var blanked = ""
        var previousWasDigit = false
        for character in reason.replacingOccurrences(of: name, with: "APP") {
            if character.isWholeNumber {
                if !previousWasDigit { blanked.append("N") }
                previousWasDigit = true
            } else {
                blanked.append(character)
                previousWasDigit = false
            }
        }
        tally.endings[blanked, default: 0] += 1
    }

    /// One cycle through background, lease, warning, suspension and foreground.
    private func cycle(
        _ registration: Registration, client: LifecycleClient, tally: inout AppTally,
        random: inout SystemRandomNumberGenerator
    ) throws {
        let app = registration.name
        let events = registration.events
        _ = try client.setState(app, to: .background)
        tally.stateChanges += 1
        let entered = try wait(for: "didEnterBackground", on: events, timeout: Self.stepTimeout, tally: &tally)
        let due =
            entered.arrivalNanoseconds + (settings.backgroundTime - settings.warningLead).nanosecondCount
        let beginSent = MonotonicClock.now()
        let task = try client.beginBackgroundTask(app: app, name: "cycle")
        tally.tasksBegun += 1
        try client.acknowledge(app: app, eventId: entered.id)
        if Int.random(in: 0..<10, using: &random) < 3 {
            // A short extra task, ended well before the warning.
            let extra = try client.beginBackgroundTask(app: app, name: "extra")
            tally.tasksBegun += 1
            pause(milliseconds: Int.random(in: 10...100, using: &random))
            try client.endBackgroundTask(app: app, taskId: extra)
        }
        if Int.random(in: 0..<2, using: &random) == 0, let peer = settings.appNames.randomElement(using: &random),
            peer != baseName
        {
            let behavior = [DeliveryBehavior.coalesce, .hold, .drop].randomElement(using: &random)
            tally.posts += 1
            // A peer between registrations refuses the post (NoSuchApp): part of the churn, not a failure.
            _ = try? client.post(name: "bench.ping", payload: ["from": .string(app)], behavior: behavior, app: peer)
        }
        if Int.random(in: 0..<50, using: &random) == 0 {
            tally.posts += 1
            _ = try? client.post(name: "bench.broadcast", payload: ["from": .string(app)])
        }
        let warningWait = (due - MonotonicClock.now()) + Self.missingWarningWait.nanosecondCount
        let warning: ReceivedEvent
        do {
            warning = try wait(
                for: "backgroundTaskExpiring", on: events, timeout: .nanoseconds(warningWait), tally: &tally)
        } catch is WarningTimeout {
            // Counted at the longest wait, a bound below the truth, so a lost warning cannot flatter the figures.
            tally.missingWarnings += 1
            tally.latenessNanoseconds.append(Self.missingWarningWait.nanosecondCount)
            throw Ended(reason: "no backgroundTaskExpiring within \(Self.missingWarningWait) of its due time")
        }
        if beginSent > due {
            tally.warningsAfterLateBegin += 1
        } else {
            tally.latenessNanoseconds.append(warning.arrivalNanoseconds - due)
        }
        do {
            try client.endBackgroundTask(app: app, taskId: task)
        } catch {
            // A warning later than its lead arrives after the budget ran out: the daemon has already ended the
            // task and terminated the app (task-expired), so the end is refused.
            guard warning.arrivalNanoseconds - due < settings.warningLead.nanosecondCount else {
                throw Ended(reason: "the task expired before its late warning came (task-expired)")
            }
            throw error
        }
        pause(milliseconds: Int.random(in: Self.pauseMilliseconds, using: &random))
        _ = try client.setState(app, to: .active)
        tally.stateChanges += 1
        pause(milliseconds: Int.random(in: Self.pauseMilliseconds, using: &random))
    }

    /// The wait for a warning ran out.
    private struct WarningTimeout: Error {}

    /// Takes events until one of `kind`; counts notifications on the way; throws `Ended` when the daemon
    /// terminates the app or the stream ends, and `WarningTimeout` when nothing matching comes in time.
    private func wait(for kind: String, on events: EventStream, timeout: Duration, tally: inout AppTally) throws
        -> ReceivedEvent
    {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            switch events.next(until: deadline) {
            case .event(let event) where event.kind == kind:
                return event
            case .event(let event):
                if event.kind == "notification" { tally.notificationsReceived += 1 }
                if event.kind == "willTerminate" { throw Ended(reason: "the daemon terminated the app") }
            case .timedOut:
                if kind == "backgroundTaskExpiring" { throw WarningTimeout() }
                throw Ended(reason: "no \(kind) within \(timeout)")
            case .ended(let reason):
                throw Ended(reason: reason)
            }
        }
    }

    private func pause(milliseconds: Int) {
        Thread.sleep(forTimeInterval: Double(milliseconds) / 1000)
    }
}
