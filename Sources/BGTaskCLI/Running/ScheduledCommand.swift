// The waiting half of `bgtask run --when`: a scheduled request submitted, the wait for its task, the command run as
// that task, and the task's end carried to the command.
import BGTaskArguments
import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSupervision
import Dispatch
import Foundation
import Glibc
import Synchronization

/// A command run once as a scheduled task: bgtask registers an app in the foreground (the daemon never stops a
/// foreground app, so bgtask stays responsive while it waits), submits a request requiring the conditions, and runs
/// the command when the daemon sends `runScheduledTask`. The daemon's expiration warning (a condition lost, or the
/// task's time running out) becomes the chosen signal, and SIGKILL once the task has ended; the command's exit
/// completes the task. The request is cancelled on every way out, so it never runs without bgtask.
final class ScheduledCommand: Sendable {
    /// How long after the warning the daemon ends the task: `ExpirationWarningSec`'s default (the interface does not
    /// report the configured value), as for `LeasedCommand`.
    static let graceSeconds = LeasedCommand.warningLeadSeconds

    private let client: LifecycleClient
    private let context: CommandContext
    private let app: String
    private let identifier: String
    private let registration: Registration
    private let stops: StopRequestWatch

    /// Where the run stands, as the event thread and the main thread see it.
    private enum Phase: Sendable {
        /// Waiting for the daemon to start the request's task.
        case waiting
        /// The daemon started task `taskId`; the command is not running yet. `isWarned`: its warning came already.
        case started(taskId: Int, isWarned: Bool)
        /// The command runs as task `taskId`.
        case running(taskId: Int, command: SupervisedCommand)
        /// The command is done, or bgtask gave up: events no longer matter.
        case finished
    }
    private let phase = Mutex<Phase>(.waiting)
    /// Signalled when the main thread should look again: the task started, a stop request, the registration ended.
    private let woken = DispatchSemaphore(value: 0)

    private init(
        client: LifecycleClient, context: CommandContext, app: String, identifier: String,
        registration: Registration, stops: StopRequestWatch
    ) {
        self.client = client
        self.context = context
        self.app = app
        self.identifier = identifier
        self.registration = registration
        self.stops = stops
    }

    /// Catches stop requests, registers `app` in the foreground, and submits the request `identifier` of `kind`
    /// requiring `conditions`; a refusal (such as a condition this host has no source for) closes the registration.
    static func submit(
        app: String, identifier: String, kind: ScheduledTaskKind, conditions: [Constraint], client: LifecycleClient,
        context: CommandContext
    ) throws(CommandFailure) -> ScheduledCommand {
        let stops: StopRequestWatch
        do {
            stops = try StopRequestWatch()
        } catch {
            throw CommandFailure("cannot watch for signals while waiting: \(error)")
        }
        let registration: Registration
        do {
            registration = try client.register(name: app, exitsOnSuspend: false, state: .active)
        } catch {
            throw failure(error)
        }
        let request: RequestInfo
        do {
            request = try client.submitRequest(
                app: app, identifier: identifier, kind: kind, earliestBegin: nil, requires: conditions)
        } catch {
            registration.close()
            throw failure(error)
        }
        let waitingOn = (request.waitingOn ?? []).map(\.rawValue)
        context.progress(
            "registered app \(Formatting.printable(app)); request \(Formatting.printable(identifier)) "
                + (waitingOn.isEmpty ? "is due" : "waits for \(waitingOn.joined(separator: ", "))"))
        return ScheduledCommand(
            client: client, context: context, app: app, identifier: identifier, registration: registration,
            stops: stops)
    }

    /// Waits for the task, runs `command` as it, and returns the command's status (128+N when signal N killed it);
    /// 128+N without running it when bgtask was asked to stop by signal N while it waited.
    func run(_ command: [String], signal: Signal) throws(CommandFailure) -> ExitCode {
        let eventsDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread { [self] in
            readEvents(signal: signal)
            eventsDone.signal()
        }
        Thread.detachNewThread { [self] in
            if stops.wait() != nil { woken.signal() }
        }
        defer {
            // Done with events before the registration closes, so its end is not reported as a loss.
            phase.withLock { $0 = .finished }
            stops.release()
            registration.close()
            eventsDone.wait()
        }
        woken.wait()
        let started: (taskId: Int, isWarned: Bool)? = phase.withLock {
            guard case .started(let taskId, let isWarned) = $0 else {
                $0 = .finished
                return nil
            }
            return (taskId, isWarned)
        }
        if let stop = stops.stopRequest {
            if let started { complete(started.taskId, success: false) }
            cancelRequest()
            context.progress("asked to stop by \(stop.name) before \(quoted(command[0], limit: nil)) ran")
            return ExitCode(rawValue: 128 + stop.rawValue)
        }
        guard let started else {
            cancelRequest()
            throw CommandFailure("bgtaskd ended app \(Formatting.printable(app)) before its task began")
        }
        let supervised: SupervisedCommand
        do {
            supervised = try SupervisedCommand(spawning: command)
        } catch {
            phase.withLock { $0 = .finished }
            complete(started.taskId, success: false)
            cancelRequest()
            throw CommandFailure(
                "cannot run \(quoted(command.first ?? "", limit: nil)): \(error)",
                exitCode: ExitCode(rawValue: error.exitStatus))
        }
        let target = "\(quoted(command[0], limit: nil)) (pid \(supervised.pid))"
        context.progress("the conditions hold: task \(started.taskId) began; running \(target)")
        // A warning may have come since the task began: read and replaced at once, so none falls in between.
        let isWarned = phase.withLock { phase -> Bool in
            defer { phase = .running(taskId: started.taskId, command: supervised) }
            if case .started(_, let isWarned) = phase { return isWarned }
            return started.isWarned
        }
        if isWarned { expire(supervised, signal: signal) }
        let status: Int32
        do {
            status = try supervised.finish()
        } catch {
            phase.withLock { $0 = .finished }
            cancelRequest()
            throw CommandFailure("lost track of \(target): \(error)")
        }
        phase.withLock { $0 = .finished }
        complete(started.taskId, success: status == 0)
        cancelRequest()
        return ExitCode(rawValue: status)
    }

    /// Reads the registration's events until it ends: the task's start wakes the main thread, its warning reaches
    /// the command, and what needs an acknowledgement gets one.
    private func readEvents(signal: Signal) {
        while true {
            let event: EventInfo?
            do {
                event = try registration.nextEvent()
            } catch {
                if !isFinished {
                    context.progress("lost the connection to bgtaskd (\(error))")
                }
                woken.signal()
                return
            }
            guard let event else {
                if !isFinished { context.progress("bgtaskd ended the registration") }
                woken.signal()
                return
            }
            switch event.kind {
            case .runScheduledTask:
                guard event.name == identifier, let taskId = event.taskIds?.first else { continue }
                let isFirst = phase.withLock {
                    guard case .waiting = $0 else { return false }
                    $0 = .started(taskId: taskId, isWarned: false)
                    return true
                }
                if isFirst { woken.signal() }
            case .backgroundTaskExpiring, .willTerminate:
                // `willTerminate` (a controller's Terminate) is about every task of the app.
                func isAbout(_ taskId: Int) -> Bool {
                    event.kind == .willTerminate || event.taskIds?.contains(taskId) == true
                }
                let running: SupervisedCommand? = phase.withLock {
                    switch $0 {
                    case .started(let taskId, _) where isAbout(taskId):
                        $0 = .started(taskId: taskId, isWarned: true)
                        return nil
                    case .running(let taskId, let command) where isAbout(taskId):
                        return command
                    default:
                        return nil
                    }
                }
                if let running { expire(running, signal: signal) }
                // Terminated while it waits (a controller's Terminate): bgtask gives up before the daemon's kill.
                if event.kind == .willTerminate, isWaiting { woken.signal() }
            case .didEnterBackground, .notification:
                do {
                    try client.acknowledge(app: app, eventId: event.id)
                } catch {
                    context.progress("could not acknowledge \(event.kind.rawValue): \(failure(error).message)")
                }
            case .willResignActive, .didBecomeActive, .willEnterForeground, .memoryWarning:
                break
            }
        }
    }

    /// The task must end: `signal` to the command's group now, and SIGKILL to the command if it still runs when the
    /// daemon ends the task (`graceSeconds` later). Once per run.
    private func expire(_ command: SupervisedCommand, signal: Signal) {
        guard !hasExpired.exchange(true, ordering: .sequentiallyConsistent) else { return }
        if command.send(signal) {
            context.progress("the task must end (a condition stopped holding, or its time is up): sent \(signal.name)")
        }
        Thread.detachNewThread { [self] in
            do {
                guard try !command.waitForExit(timeout: .seconds(Self.graceSeconds)) else { return }
                // To the command alone: bgtask shares its group, and SIGKILL cannot be ignored. The command is an
                // unreaped child until `finish()`, so its pidfd names it.
                try command.process.pidFD.sendSignal(.kill)
                context.progress("the task ended with the command still running: sent SIGKILL")
            } catch {
                context.progress("could not end the command when the task ended: \(error)")
            }
        }
    }
    private let hasExpired = Atomic(false)

    /// Whether the task has not begun yet.
    private var isWaiting: Bool {
        phase.withLock {
            if case .waiting = $0 { return true }
            return false
        }
    }

    /// Whether the main thread is done with events.
    private var isFinished: Bool {
        phase.withLock {
            if case .finished = $0 { return true }
            return false
        }
    }

    /// `SetTaskCompleted`; a task the daemon already ended (expired, constraints-lost) is not an error.
    private func complete(_ taskId: Int, success: Bool) {
        do {
            try client.setTaskCompleted(app: app, taskId: taskId, success: success)
        } catch {
            if case .lifecycle(.noSuchTask) = error { return }
            context.progress("could not complete task \(taskId): \(failure(error).message)")
        }
    }

    /// Cancels the request, which a lost condition or a failed run leaves pending: bgtask runs the command once.
    private func cancelRequest() {
        do {
            try client.cancelRequest(app: app, identifier: identifier)
        } catch {
            if case .lifecycle(.noSuchRequest) = error { return }
            context.progress("could not cancel request \(Formatting.printable(identifier)): \(failure(error).message)")
        }
    }
}
