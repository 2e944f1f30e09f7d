// Managed apps forked by the daemon itself, for a daemon no service manager runs: each launch prepared and cloned
// on a thread of its own into cgroups under `CgroupRoot=` (or none), its exec awaited on the loop through the
// handshake pipe, bounded in number and in time; every child no longer wanted killed, reaped and its cgroups
// removed, and the cgroups of every app that ended removed once empty.

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// A launch request with the number its launch goes by: one job of the launcher's thread.
struct LaunchJob: Sendable {
    let serial: Int
    let request: LaunchRequest
}

/// Launches managed apps by forking them, without ever waiting on the loop.
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
/// readable, and their cgroups removed.
final class ForkSupervisor: AppSupervisor {
    /// One launch in flight and how far it got.
    private final class Held {
        let attempt: LaunchAttempt
        var phase = Phase.preparing

        init(_ attempt: LaunchAttempt) { self.attempt = attempt }
    }

    private enum Phase {
        /// Queued for, or running on, the launcher's thread: there is no child yet.
        case preparing
        /// Cloned: the handshake pipe is watched until the child execs or fails.
        case starting(StartedLaunch, IOSource)
    }

    /// The most launches and children being ended held at once.
    let capacity: Int
    /// Told once per launch how it ended.
    var onOutcome: (LaunchAttempt, LaunchOutcome) -> Void = { _, _ in }
    /// No service manager runs the apps: nothing forbids suspending them.
    var onExemption: (Int, SuspensionExemption) -> Void = { _, _ in }
    /// Told when a place frees with no outcome: a child being ended was reaped, or a launch decided at its deadline
    /// came back from the launcher's thread.
    var onRoomFreed: () -> Void = {}
    /// Where apps' cgroups are made (`CgroupRoot=`, `MemoryCgroupRoot=`).
    let roots: LaunchCgroupRoots

    private let loop: EventLoop
    private let clock: ManagerClock
    private let logger: Logger
    private let gate = LaunchGate()
    private var worker: BackgroundWorker<LaunchJob, LaunchPreparation>?
    private var workerSource: IOSource?
    private var deadlineTimer: ManagerTimer?
    private var launches: [Int: Held] = [:]
    /// Ended apps' cgroups, removed once empty.
    private let cgroupRemovals: CgroupRemovals
    /// The undecided launch of each name: a second `Launch` of it is refused meanwhile.
    private var reservedNames: [String: Int] = [:]
    /// Children no longer wanted, being ended.
    private let endings: UnwantedChildren
    private var nextSerial = 1
    private var isStopped = false

    /// Starts the launcher's thread and watches its outcomes on `loop`; apps' cgroups go under `roots`.
    init(
        capacity: Int, roots: LaunchCgroupRoots, loop: EventLoop, clock: ManagerClock, logger: Logger, procFS: ProcFS
    ) throws(Errno) {
        self.capacity = capacity
        self.roots = roots
        self.loop = loop
        self.clock = clock
        self.logger = logger
        cgroupRemovals = CgroupRemovals(clock: clock, logger: logger)
        endings = UnwantedChildren(loop: loop, logger: logger, cgroupRemovals: cgroupRemovals)
        let gate = self.gate
        let worker = try BackgroundWorker<LaunchJob, LaunchPreparation>(name: "bgtaskd-launch", capacity: capacity) {
            $0.request.prepare(serial: $0.serial, roots: roots, gate: gate, procFS: procFS)
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
        endings.onReaped = { [unowned self] in self.onRoomFreed() }
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

    var hasRoom: Bool { !isStopped && heldCount < capacity && worker != nil }

    /// Starts launching `request` for `origin`, its child to exec within `timeout`; false (nothing started) when
    /// `capacity` launches and endings are held, or the launcher has stopped.
    func submit(_ request: LaunchRequest, for origin: LaunchOrigin, timeout: Duration) -> Bool {
        guard hasRoom, let worker else { return false }
        let serial = nextSerial
        guard worker.submit(LaunchJob(serial: serial, request: request)) else { return false }
        nextSerial += 1
        launches[serial] = Held(
            LaunchAttempt(serial: serial, request: request, origin: origin, timeout: timeout, now: clock.now))
        reservedNames[request.name] = serial
        armDeadlineTimer()
        return true
    }

    // MARK: Following a launch

    private func preparationsFinished() {
        guard let worker, !isStopped else { return }
        // A launch decided at its deadline while on the thread holds its place until it comes back here: when it
        // comes back with nothing started, its place frees with no outcome.
        var isRoomFreed = false
        defer { if isRoomFreed { onRoomFreed() } }
        for preparation in worker.takeOutcomes() {
            let serial = preparation.serial
            for warning in preparation.warnings {
                logger.warning(warning, launches[serial].map { [.app($0.attempt.request.name)] } ?? [])
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
                if launch.attempt.isDecided { isRoomFreed = true }
                decide(launch, .failed(reason: reason))
            case .started(let started):
                gate.claim(serial)
                guard !launch.attempt.isDecided else {
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
            decide(
                launch,
                .started(
                    StartedApp(
                        pidFD: started.child.pidFD, startTime: started.startTime, cgroups: started.cgroups,
                        child: started.child, unit: nil, executable: started.executable)))
        }
    }

    private func decide(_ held: Held, _ outcome: LaunchOutcome) {
        let launch = held.attempt
        guard !launch.isDecided else { return }
        launch.isDecided = true
        if reservedNames[launch.request.name] == launch.serial { reservedNames[launch.request.name] = nil }
        armDeadlineTimer()
        onOutcome(launch, outcome)
    }

    // MARK: Deadlines

    private func deadlinesReached() {
        let current = clock.now
        let due = launches.values.filter { !$0.attempt.isDecided && $0.attempt.deadline <= current }
            .sorted { $0.attempt.serial < $1.attempt.serial }
        for launch in due {
            switch launch.phase {
            case .preparing:
                // Still on the launcher's thread (a slow user database or home directory): it fails now, and what the
                // thread starts for it later is ended. It holds its place until then.
                decide(launch, .failed(reason: "not started within \(launch.attempt.timeout) (LaunchTimeoutSec)"))
            case .starting(let started, let source):
                source.cancel()
                started.handshake.close()
                launches[launch.attempt.serial] = nil
                end(started.child, cgroups: started.cgroups)
                decide(
                    launch,
                    .failed(
                        reason:
                            "\(started.executable) did not start within \(launch.attempt.timeout) (LaunchTimeoutSec)"))
            }
        }
        armDeadlineTimer()
    }

    private func armDeadlineTimer() {
        do {
            try deadlineTimer?.schedule(
                at: launches.values.lazy.filter({ !$0.attempt.isDecided }).map(\.attempt.deadline).min())
        } catch {
            // Without it a child hung before exec keeps its place until the daemon stops; the bound still holds.
            logger.error("cannot schedule the deadline of launches: \(error)")
        }
    }

    // MARK: Ending children

    func end(_ started: StartedApp) {
        guard let child = started.child else {
            // Every app this supervisor starts is its child: cannot happen; what can be done is done.
            try? started.pidFD.sendSignal(.kill)
            if let cgroups = started.cgroups { discard(cgroups) }
            return
        }
        end(child, cgroups: started.cgroups)
    }

    /// Kills a child no longer wanted and whatever is in its cgroups (`UnwantedChildren`).
    private func end(_ child: SpawnedProcess, cgroups: AppCgroups?) {
        endings.end(child, cgroups: cgroups)
    }

    // MARK: What it made

    var report: [String: String] {
        [
            "launch": "fork", "cgroupRoot": roots.control?.path ?? "none",
            "memoryCgroupRoot": roots.memory?.path ?? "none",
        ]
    }

    var managedBackends: ManagedBackends {
        var backends = ManagedBackends()
        if let control = roots.control {
            backends.freeze = roots.freezeBackend
            backends.kill = control.has("cgroup.kill") ? "cgroup.kill" : roots.isUnified ? "cgroup2" : "cgroup1"
            if roots.isUnified, control.has("memory.current") { backends.memory = "cgroup2" }
        }
        if backends.memory == nil, roots.memory != nil { backends.memory = "cgroup1" }
        return backends
    }

    var appsPressureFile: String? {
        guard let control = roots.control, roots.isUnified, control.has("memory.pressure") else { return nil }
        return control.path + "/memory.pressure"
    }

    var appsMemoryRoot: CgroupDirectory? { roots.memory }

    /// Only cgroups it would have made: `app-*` children of its roots.
    func trusts(_ cgroups: AppCgroups, of saved: SavedProcess) -> Bool {
        roots.made(cgroups)
    }

    /// Nothing to take on but the app's cgroups, which the manager keeps on the process (an app forked before a
    /// restart is no child of this daemon).
    func adopted(_ process: TrackedProcess) {}

    /// Without a service manager there is no unit to find.
    func registered(_ process: TrackedProcess) {}

    func released(_ process: TrackedProcess) {}

    /// A child's exit status is there to reap the moment its pidfd turns readable.
    func awaitExit(of process: TrackedProcess, then: @escaping () -> Void) -> Bool { false }

    /// Reaps the child (the daemon is its parent) for its exit status, and removes its cgroups (killing what is left
    /// in them: it is the app's).
    func ended(_ process: TrackedProcess) -> ProcessExit? {
        var exit: ProcessExit?
        if let child = process.child {
            process.child = nil
            switch try? child.exitStatusIfExited() {
            case .exited(let status)?: exit = .status(status)
            case .signaled(let signal)?: exit = .signal(signal.rawValue)
            case nil: break
            }
        }
        if let cgroups = process.cgroups {
            process.cgroups = nil
            discard(cgroups)
        }
        return exit
    }

    /// Kills what is left in `cgroups` and removes them, now or once they are empty (`CgroupRemovals`).
    func discard(_ cgroups: AppCgroups) {
        cgroupRemovals.discard(cgroups)
    }

    // MARK: Stopping

    /// The daemon is stopping: no child is cloned from now on, and every child not handed to the manager is killed
    /// and reaped (waiting at most `timeout` for each), its cgroups removed. Calls not answered stay so: their
    /// connections are closing.
    func stop() {
        stop(timeout: .seconds(2))
    }

    private func stop(timeout: Duration) {
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
        children += endings.takeAll()
        launches = [:]
        reservedNames = [:]
        for (child, cgroups) in children {
            try? child.pidFD.sendSignal(.kill)
            cgroups?.killAll()
        }
        for (child, cgroups) in children {
            UnwantedChildren.reap(child, cgroups: cgroups, within: timeout, logger: logger)
        }
        // A job stuck in a lookup is left behind (the process is exiting); the gate keeps it from cloning.
        worker?.stop(timeout: .seconds(1))
        worker = nil
    }
}
