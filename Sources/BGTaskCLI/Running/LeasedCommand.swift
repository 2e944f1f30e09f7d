// The waiting half of `bgtask run`: a lease held while CMD runs, the warning forwarded to CMD, CMD's exit status.
import BGTaskArguments
import BGTaskClient
import BGTaskPOSIX
import BGTaskSupervision
import Dispatch
import Foundation
import Glibc
import Synchronization

/// A background-task lease held for the lifetime of one command.
///
/// Either bgtask registers an app of its own (started in background) and the lease ends with that registration,
/// or it joins an app another process registered and ends its task explicitly. In the first case the daemon's
/// `backgroundTaskExpiring` and `willTerminate` events arrive on the registration and are forwarded to the command
/// as the chosen signal; in the second, the app's events go to that app, so bgtask watches the app's remaining
/// time instead.
final class LeasedCommand: Sendable {
    /// How long before the end of the background time the daemon warns, when bgtask must compute the warning
    /// itself: `ExpirationWarningSec`'s default; the interface does not report the configured value.
    static let warningLeadSeconds = 5.0

    private let client: LifecycleClient
    private let context: CommandContext
    private let app: String
    private let taskId: Int
    /// The app's event stream; nil when bgtask joined an app registered by another process.
    private let registration: Registration?
    /// The signals already sent to the command, so each is sent once.
    private let sent = Mutex<Set<Notice>>([])

    /// Why the command is signalled: the time is running out (the daemon's warning or `--budget`), or the daemon
    /// is terminating the app. Each is sent at most once.
    private enum Notice: Hashable {
        case expiration
        case termination
    }
    /// Signalled when the command has exited and the threads watching the daemon should stop.
    private let stopping = DispatchSemaphore(value: 0)
    private let isStopping = Atomic(false)

    private init(
        client: LifecycleClient, context: CommandContext, app: String, taskId: Int,
        registration: Registration?
    ) {
        self.client = client
        self.context = context
        self.app = app
        self.taskId = taskId
        self.registration = registration
    }

    /// Registers `app` in background (or joins it, when `joining` and it is already registered) and begins the
    /// task `taskName`. A registration of its own asks the daemon for `budget` as its background time, so the
    /// daemon warns before it ends and terminates the app `task-expired` if CMD outlives it.
    static func begin(
        app: String, joining: Bool, taskName: String, budget: Duration?, client: LifecycleClient,
        context: CommandContext
    ) throws(CommandFailure) -> LeasedCommand {
        var registration: Registration?
        do {
            // ExitsOnSuspend: once CMD is done and the task ended, the daemon lets bgtask exit instead of stopping
            // it before it closes its registration.
            registration = try client.register(
                name: app, exitsOnSuspend: true, state: .background, backgroundTime: budget)
        } catch {
            guard joining, case .lifecycle(.appExists) = error else { throw failure(error) }
        }
        let taskId: Int
        do {
            taskId = try client.beginBackgroundTask(app: app, name: taskName)
        } catch {
            registration?.close()
            throw failure(error)
        }
        let shown = Formatting.printable(app)
        if let registration {
            context.progress(
                "registered app \(shown); task \(taskId) began with "
                    + "\(Formatting.remaining(registration.app.backgroundTimeRemaining)) of background time")
        } else {
            context.progress("joined app \(shown); task \(taskId) began")
        }
        return LeasedCommand(client: client, context: context, app: app, taskId: taskId, registration: registration)
    }

    /// Runs `command` until it exits, forwarding the warning as `signal` (for a joined app, also when `budget`
    /// runs out: the daemon enforces it for a registration of bgtask's own), then ends the lease. Returns the
    /// command's status, or 128+N when a signal N killed it.
    func run(_ command: [String], signal: Signal, budget: Duration?) throws(CommandFailure) -> ExitCode {
        let supervised: SupervisedCommand
        do {
            supervised = try SupervisedCommand(spawning: command)
        } catch {
            end()
            throw CommandFailure(
                "cannot run \(quoted(command.first ?? "", limit: nil)): \(error)",
                exitCode: ExitCode(rawValue: error.exitStatus))
        }
        let target = "\(quoted(command[0], limit: nil)) (pid \(supervised.pid))"
        let watcherDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [self] in
            if let registration {
                forwardEvents(of: registration, to: supervised, target: target, signal: signal)
            } else {
                watchRemainingTime(of: supervised, target: target, signal: signal)
            }
            watcherDone.signal()
        }
        let status: Int32
        let killer: Signal?
        do {
            if registration == nil, let budget, try !supervised.waitForExit(timeout: budget) {
                let limit = Formatting.duration(seconds: budget.seconds)
                warn(supervised, target: target, signal: signal, because: "the budget of \(limit) is used up")
            }
            (status, killer) = try supervised.finishWithCause()
        } catch {
            end()
            throw CommandFailure("lost track of \(target): \(error)")
        }
        // Cut short: bgtask was asked to stop (its stop request may come after CMD died of the same one, as
        // `systemctl stop` signals the unit's processes one by one), or a signal killed CMD.
        if let cause = supervised.stopRequest ?? killer, registration != nil {
            context.progress(
                "\(target) was cut short by \(cause.name): closing the registration, so task \(taskId) ends with it "
                    + "(app-ended)")
            end(isDone: false)
        } else {
            end()
        }
        watcherDone.wait()
        return ExitCode(rawValue: status)
    }

    /// Ends the lease. When CMD is done (`isDone`), the task is ended (`ended`), and for a registration of
    /// bgtask's own the registration is closed after it: that registration has ExitsOnSuspend, so the daemon,
    /// seeing the app in background without a lease, does not stop bgtask on its way out but sends it
    /// `willTerminate`, which bgtask no longer forwards (CMD is done). When bgtask was stopped before CMD was done,
    /// its registration is closed with the task open, which ends it `app-ended`: the work was cut short.
    private func end(isDone: Bool = true) {
        isStopping.store(true, ordering: .sequentiallyConsistent)
        stopping.signal()
        if !isDone, let registration {
            registration.close()
            return
        }
        do {
            try client.endBackgroundTask(app: app, taskId: taskId)
        } catch {
            context.progress(
                "could not end task \(taskId) of app \(Formatting.printable(app)): \(failure(error).message)")
        }
        registration?.close()
    }

    /// Sends `signal` to the command, once per notice, saying why; `target` names the command in the progress
    /// line.
    private func warn(
        _ command: SupervisedCommand, target: String, signal: Signal, notice: Notice = .expiration,
        because reason: String
    ) {
        guard sent.withLock({ $0.insert(notice).inserted }) else { return }
        // To the command's whole group: a shell defers its traps while its foreground child runs.
        if command.send(signal) {
            context.progress("\(reason): sent \(signal.name) to \(target)")
        } else {
            context.progress("\(reason), but sending \(signal.name) failed: errno \(errno)")
        }
    }

    /// Reads the registration's events until it ends: acknowledges what needs it, forwards the warning.
    private func forwardEvents(
        of registration: Registration, to command: SupervisedCommand, target: String, signal: Signal
    ) {
        while true {
            let event: EventInfo?
            do {
                event = try registration.nextEvent()
            } catch {
                if !isStopping.load(ordering: .sequentiallyConsistent) {
                    context.progress(
                        "lost the connection to bgtaskd (\(error)); the command keeps running "
                            + "without a background task")
                }
                return
            }
            guard let event else {
                if !isStopping.load(ordering: .sequentiallyConsistent) {
                    context.progress("bgtaskd ended the registration; the command keeps running without a task")
                }
                return
            }
            switch event.kind {
            case .backgroundTaskExpiring:
                warn(command, target: target, signal: signal, because: "background time is running out")
            case .willTerminate:
                // After CMD exited, the daemon ending the app is bgtask's own way out.
                guard !isStopping.load(ordering: .sequentiallyConsistent) else { continue }
                warn(
                    command, target: target, signal: signal, notice: .termination,
                    because: "bgtaskd is terminating app \(Formatting.printable(app))")
            case .didEnterBackground, .notification:
                do {
                    try client.acknowledge(app: app, eventId: event.id)
                } catch {
                    context.progress("could not acknowledge \(event.kind.rawValue): \(failure(error).message)")
                }
            case .willResignActive, .didBecomeActive, .willEnterForeground, .memoryWarning, .runScheduledTask:
                break
            }
        }
    }

    /// For a joined app: reads its remaining time, again once a second while it is in the foreground or just
    /// before the warning is due, and sends the warning `warningLeadSeconds` before the time runs out.
    private func watchRemainingTime(of command: SupervisedCommand, target: String, signal: Signal) {
        while !isStopping.load(ordering: .sequentiallyConsistent) {
            let remaining: Double?
            do {
                remaining = try client.backgroundTimeRemaining(app: app)
            } catch {
                context.progress(
                    "cannot read the background time of app \(Formatting.printable(app)) "
                        + "(\(failure(error).message)); the warning will not be forwarded")
                return
            }
            if let remaining, remaining <= LeasedCommand.warningLeadSeconds {
                warn(command, target: target, signal: signal, because: "background time is running out")
                return
            }
            let pause = remaining.map { min($0 - LeasedCommand.warningLeadSeconds, 60) } ?? 1
            if stopping.wait(timeout: .now() + pause) == .success { return }
        }
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
