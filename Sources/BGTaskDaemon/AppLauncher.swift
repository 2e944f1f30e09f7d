// The launches of managed apps in flight: each prepared and cloned on a thread of its own, its exec awaited on the
// loop through the handshake pipe, bounded in number and in time, and every child no longer wanted killed, reaped and
// its cgroups removed.

import BGTaskCore
import BGTaskSystem
import Glibc

/// A launch request with the number its launch goes by: one job of the launcher's thread.
struct LaunchJob: Sendable {
    let serial: Int
    let request: LaunchRequest
}

/// Launches managed apps without ever waiting on the loop.
///
/// Everything of a launch that may block (the PATH search, the user database, the home directory, the output file,
/// the clone) runs on the launcher's thread (`LaunchRequest.prepare`); the loop then watches the child's handshake
/// pipe and learns, without waiting, whether it exec'd. Each launch ends once, told to `onOutcome`: its child
/// exec'd (from then on the manager's), or why it failed. A launch whose child has not exec'd within its deadline
/// (`LaunchTimeoutSec`) fails, and its child is killed.
///
/// At most `capacity` launches and children being ended are held at once: a caller cannot make the daemon hold
/// unbounded work, and a child that hangs before exec holds its place until its deadline. Children no longer wanted
/// (a failed exec, a deadline passed, a launch the manager cannot accept) are killed, reaped once their pidfd turns
/// readable, and their cgroups removed (`removeCgroups`).
final class AppLauncher {
    /// How a launch ended, as the manager hears it.
    enum Outcome {
        /// The child exec'd the program: the manager tracks it from now on, or hands it back to `end(_:cgroups:)`.
        case executed(StartedLaunch)
        /// Nothing was started, or what was is being ended; why, for people.
        case failed(reason: String)
    }

    /// One launch in flight.
    final class Launch {
        /// Its number, unique while the daemon runs.
        let serial: Int
        let request: LaunchRequest
        /// The `Launch` call, answered when the launch ends (its connection holds the calls after it until then).
        let call: IncomingCall
        /// How long the child has to exec (`LaunchTimeoutSec`), and when that is up.
        let timeout: Duration
        let deadline: MonotonicInstant
        fileprivate var phase = Phase.preparing
        /// Whether `onOutcome` heard how it ended: its name is free again, and a child still to come is ended.
        fileprivate(set) var isDecided = false

        fileprivate init(
            serial: Int, request: LaunchRequest, call: IncomingCall, timeout: Duration, now: MonotonicInstant
        ) {
            self.serial = serial
            self.request = request
            self.call = call
            self.timeout = timeout
            deadline = now + timeout
        }
    }

    fileprivate enum Phase {
        /// Queued for, or running on, the launcher's thread: there is no child yet.
        case preparing
        /// Cloned: the handshake pipe is watched until the child execs or fails.
        case starting(StartedLaunch, IOSource)
    }

    /// A child no longer wanted: killed, and reaped once its pidfd turns readable.
    private struct Ending {
        let child: SpawnedProcess
        let cgroups: AppCgroups?
        let source: IOSource
    }

    /// The most launches and children being ended held at once.
    let capacity: Int
    /// Told once per launch how it ended.
    var onOutcome: (Launch, Outcome) -> Void = { _, _ in }
    /// Removes an ended child's cgroups, now or once what is left in them has exited.
    var removeCgroups: (AppCgroups) -> Void = { _ in }

    private let loop: EventLoop
    private let clock: ManagerClock
    private let logger: Logger
    private let gate = LaunchGate()
    private var worker: BackgroundWorker<LaunchJob, LaunchPreparation>?
    private var workerSource: IOSource?
    private var deadlineTimer: ManagerTimer?
    private var launches: [Int: Launch] = [:]
    /// The undecided launch of each name: a second `Launch` of it is refused meanwhile.
    private var reservedNames: [String: Int] = [:]
    /// Children being ended, by pid (unique among the daemon's unreaped children).
    private var endings: [pid_t: Ending] = [:]
    private var nextSerial = 1
    private var isStopped = false

    /// Starts the launcher's thread and watches its outcomes on `loop`.
    init(capacity: Int, loop: EventLoop, clock: ManagerClock, logger: Logger, procFS: ProcFS) throws(Errno) {
        self.capacity = capacity
        self.loop = loop
        self.clock = clock
        self.logger = logger
        let gate = self.gate
        let worker = try BackgroundWorker<LaunchJob, LaunchPreparation>(name: "bgtaskd-launch", capacity: capacity) {
            $0.request.prepare(serial: $0.serial, gate: gate, procFS: procFS)
        }
        self.worker = worker
        do {
            workerSource = try loop.addIO(fd: worker.outcomesReady, events: .readable, name: "launch-worker") {
                [unowned self] _, _ in
                self.preparationsFinished()
            }
            deadlineTimer = try clock.makeTimer(name: "launch-deadline", accuracy: .milliseconds(10)) {
                [unowned self] in
                self.deadlinesReached()
            }
        } catch {
            workerSource?.cancel()
            worker.stop()
            throw error
        }
    }

    /// Whether a launch of `name` is in flight and undecided.
    func isLaunching(_ name: String) -> Bool {
        reservedNames[name] != nil
    }

    /// Brings the launch of `name` up to date with what has happened, before a registration of `name` is judged: a
    /// launched program may connect and register before the loop has read its exec from the handshake, and must
    /// then find itself launched rather than a stranger holding its name.
    func catchUp(with name: String) {
        guard let serial = reservedNames[name] else { return }
        if case .preparing? = launches[serial]?.phase { preparationsFinished() }
        handshakeReady(serial)
    }

    /// Launches and children being ended: what counts against `capacity`.
    var heldCount: Int { launches.count + endings.count }

    /// Starts launching `request` for `call`, its child to exec within `timeout`; false (nothing started) when
    /// `capacity` launches and endings are held, or the launcher has stopped.
    func submit(_ request: LaunchRequest, for call: IncomingCall, timeout: Duration) -> Bool {
        guard !isStopped, heldCount < capacity, let worker else { return false }
        let serial = nextSerial
        guard worker.submit(LaunchJob(serial: serial, request: request)) else { return false }
        nextSerial += 1
        launches[serial] = Launch(serial: serial, request: request, call: call, timeout: timeout, now: clock.now)
        reservedNames[request.name] = serial
        armDeadlineTimer()
        return true
    }

    // MARK: Following a launch

    private func preparationsFinished() {
        guard let worker, !isStopped else { return }
        for preparation in worker.takeOutcomes() {
            let serial = preparation.serial
            for warning in preparation.warnings {
                logger.warning(warning, launches[serial].map { [.app($0.request.name)] } ?? [])
            }
            guard let launch = launches[serial] else {
                // Cannot happen (a launch is held until its preparation is back); a child is ended all the same.
                if case .started(let started) = preparation.result {
                    gate.claim(serial)
                    started.handshake.close()
                    end(started.child, cgroups: started.cgroups)
                }
                continue
            }
            switch preparation.result {
            case .refused(let reason):
                launches[serial] = nil
                decide(launch, .failed(reason: reason))
            case .started(let started):
                gate.claim(serial)
                guard !launch.isDecided else {
                    // Its deadline passed while the thread was at it: what it started is not wanted.
                    launches[serial] = nil
                    started.handshake.close()
                    end(started.child, cgroups: started.cgroups)
                    continue
                }
                do {
                    let source = try loop.addIO(fd: started.handshake.pipe, events: .readable, name: "launch-exec") {
                        [unowned self] _, _ in
                        self.handshakeReady(serial)
                    }
                    launch.phase = .starting(started, source)
                } catch {
                    launches[serial] = nil
                    started.handshake.close()
                    end(started.child, cgroups: started.cgroups)
                    decide(launch, .failed(reason: "cannot watch its start: \(error)"))
                }
            }
        }
    }

    /// The handshake pipe of launch `serial` is readable: the child exec'd, or failed before it.
    private func handshakeReady(_ serial: Int) {
        guard let launch = launches[serial], case .starting(let started, let source) = launch.phase else { return }
        let outcome = started.handshake.outcome()
        if outcome == .pending { return }
        source.cancel()
        started.handshake.close()
        launches[serial] = nil
        if case .failed(let error) = outcome {
            // It exits by itself; killed all the same, since it may be held where it stands (a frozen cgroup).
            end(started.child, cgroups: started.cgroups)
            decide(launch, .failed(reason: "\(error)"))
        } else {
            decide(launch, .executed(started))
        }
    }

    private func decide(_ launch: Launch, _ outcome: Outcome) {
        guard !launch.isDecided else { return }
        launch.isDecided = true
        if reservedNames[launch.request.name] == launch.serial { reservedNames[launch.request.name] = nil }
        armDeadlineTimer()
        onOutcome(launch, outcome)
    }

    // MARK: Deadlines

    private func deadlinesReached() {
        let current = clock.now
        let due = launches.values.filter { !$0.isDecided && $0.deadline <= current }.sorted { $0.serial < $1.serial }
        for launch in due {
            switch launch.phase {
            case .preparing:
                // Still on the launcher's thread (a slow user database or home directory): it fails now, and what the
                // thread starts for it later is ended. It holds its place until then.
                decide(launch, .failed(reason: "not started within \(launch.timeout) (LaunchTimeoutSec)"))
            case .starting(let started, let source):
                source.cancel()
                started.handshake.close()
                launches[launch.serial] = nil
                end(started.child, cgroups: started.cgroups)
                decide(
                    launch,
                    .failed(reason: "\(started.executable) did not start within \(launch.timeout) (LaunchTimeoutSec)"))
            }
        }
        armDeadlineTimer()
    }

    private func armDeadlineTimer() {
        guard let next = launches.values.lazy.filter({ !$0.isDecided }).map(\.deadline).min() else {
            deadlineTimer?.disarm()
            return
        }
        guard next != deadlineTimer?.deadline else { return }
        do {
            try deadlineTimer?.rearm(at: next)
        } catch {
            // Without it a child hung before exec keeps its place until the daemon stops; the bound still holds.
            logger.error("cannot schedule the deadline of launches: \(error)")
        }
    }

    // MARK: Ending children

    /// Kills a child no longer wanted and whatever is in its cgroups; it is reaped, and the cgroups removed, once its
    /// pidfd turns readable.
    func end(_ child: SpawnedProcess, cgroups: AppCgroups?) {
        do {
            try child.pidFD.sendSignal(.kill)
        } catch {
            // Gone already (it failed before exec and exited): there is only the reaping left.
            if error != .noSuchProcess { logger.error("cannot kill pid \(child.pid) of a launch: \(error)") }
        }
        cgroups?.killAll()
        do {
            let source = try loop.addIO(fd: child.pidFD.fileDescriptor, events: .readable, name: "launch-end") {
                [unowned self] _, _ in
                self.reapEnded(child.pid)
            }
            endings[child.pid] = Ending(child: child, cgroups: cgroups, source: source)
        } catch {
            logger.error("cannot watch pid \(child.pid) of a launch: \(error); waiting for it to exit")
            Self.reap(child, cgroups: cgroups, within: .seconds(1), logger: logger)
        }
    }

    private func reapEnded(_ pid: pid_t) {
        guard let ending = endings[pid] else { return }
        do {
            // Readable means exited, so this reaps it; nil would only be a spurious wake-up.
            guard try ending.child.exitStatusIfExited() != nil else { return }
        } catch {
            logger.error("cannot reap pid \(pid) of a launch: \(error)")
        }
        ending.source.cancel()
        try? ending.child.pidFD.close()
        endings[pid] = nil
        if let cgroups = ending.cgroups { removeCgroups(cgroups) }
    }

    /// Waits (at most `timeout`) for a killed child to exit, reaps it, closes its pidfd and removes its cgroups.
    private static func reap(_ child: SpawnedProcess, cgroups: AppCgroups?, within timeout: Duration, logger: Logger) {
        do {
            if try child.pidFD.waitForExit(timeout: timeout) {
                _ = try child.exitStatusIfExited()
            } else {
                logger.error("pid \(child.pid) of a launch did not exit within \(timeout) of SIGKILL")
            }
        } catch {
            logger.error("cannot reap pid \(child.pid) of a launch: \(error)")
        }
        try? child.pidFD.close()
        if let cgroups, !cgroups.removeEmpty() {
            logger.error("cannot remove \(cgroups.all.map(\.path).joined(separator: ", ")): not empty")
        }
    }

    // MARK: Stopping

    /// The daemon is stopping: no child is cloned from now on, and every child not handed to the manager is killed
    /// and reaped (waiting at most `timeout` for each), its cgroups removed. Calls not answered stay so: their
    /// connections are closing.
    func stop(timeout: Duration = .seconds(2)) {
        guard !isStopped else { return }
        isStopped = true
        deadlineTimer?.disarm()
        workerSource?.cancel()
        // Waits for a clone in progress; children whose news has not reached the loop come back from the gate.
        var children = gate.close().map { started in
            started.handshake.close()
            return (started.child, started.cgroups)
        }
        for launch in launches.values {
            guard case .starting(let started, let source) = launch.phase else { continue }
            source.cancel()
            started.handshake.close()
            children.append((started.child, started.cgroups))
        }
        for ending in endings.values {
            ending.source.cancel()
            children.append((ending.child, ending.cgroups))
        }
        launches = [:]
        reservedNames = [:]
        endings = [:]
        for (child, cgroups) in children {
            try? child.pidFD.sendSignal(.kill)
            cgroups?.killAll()
        }
        for (child, cgroups) in children {
            Self.reap(child, cgroups: cgroups, within: timeout, logger: logger)
        }
        // A job stuck in a lookup is left behind (the process is exiting); the gate keeps it from cloning.
        worker?.stop(timeout: .seconds(1))
        worker = nil
    }
}
