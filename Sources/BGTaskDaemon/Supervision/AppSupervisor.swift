// How managed apps are started and what of them belongs to whoever started them: one protocol the manager calls,
// with one implementation that forks apps into cgroups of the daemon's own and one that starts them as units of the
// service manager.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// Who a launch is for.
enum LaunchOrigin {
    /// A `Launch` call, answered when the launch ends (its connection holds the calls after it until then).
    case call(IncomingCall)
    /// The policy, for the app's scheduled requests of the launch's user (`.launch(app:owner:)`): the core hears how
    /// it ended.
    case scheduledWork
}

/// One launch being carried out: what was asked, for whom, and its deadline.
final class LaunchAttempt {
    /// Its number, unique while the daemon runs.
    let serial: Int
    let request: LaunchRequest
    let origin: LaunchOrigin
    /// How long the program has to start (`LaunchTimeoutSec`), and when that is up.
    let timeout: Duration
    let deadline: MonotonicInstant
    /// Whether the manager heard how it ended: its name is free again, and what starts for it later is ended.
    var isDecided = false

    init(serial: Int, request: LaunchRequest, origin: LaunchOrigin, timeout: Duration, now: MonotonicInstant) {
        self.serial = serial
        self.request = request
        self.origin = origin
        self.timeout = timeout
        deadline = now + timeout
    }
}

/// A managed app whose program has started: what the manager takes on (or hands back to `AppSupervisor.end(_:)`).
struct StartedApp {
    /// Its process, held by a pidfd opened while it was known to be the app's.
    let pidFD: PidFD
    /// Its start time in clock ticks (`/proc/PID/stat`), which with the pid is its identity.
    let startTime: UInt64
    /// The cgroups it is frozen, measured and killed through; nil: none (signals and PSS).
    let cgroups: AppCgroups?
    /// The daemon's own child (a forked app), to reap when it ends; nil for an app the service manager started.
    let child: SpawnedProcess?
    /// The unit it runs as (an app the service manager started), e.g. `app-bgtask-mail-1a2b3c4d.service`.
    let unit: String?
    /// The program's path as found in PATH.
    let executable: String

    var pid: pid_t { pidFD.pid }
}

/// The backends managed apps get, by capability: names as `GetStatus` reports them (`cgroup2`, `cgroup1`,
/// `cgroup.kill`, ...); nil where they get only the fallbacks every app has.
struct ManagedBackends: Hashable {
    var freeze: String?
    var memory: String?
    var kill: String?
}

/// How a launch ended, as the manager hears it.
enum LaunchOutcome {
    /// The program started: the manager tracks the app from now on, or hands it back to `end(_:)`.
    case started(StartedApp)
    /// Nothing was started, or what was is being ended; why, for people.
    case failed(reason: String)
}

/// Starts managed apps (`Launch`) without ever waiting on the event loop, and owns what it made for them: the
/// daemon's manager calls it and switches on nothing but what it answers.
///
/// Two implementations: `ForkSupervisor` forks each app itself into cgroups under `CgroupRoot=` (or none), for a
/// daemon no service manager runs (the demo, tests, containers); `UnitSupervisor` has the service manager start each
/// app as a transient unit of its own, so that nothing of the daemon (its sandbox, its cgroup, its restarts) reaches
/// the app.
protocol AppSupervisor: AnyObject {
    /// Told once per launch how it ended.
    var onOutcome: (LaunchAttempt, LaunchOutcome) -> Void { get set }
    /// Told, for a tracked process (by serial), that its apps must never be suspended, and why: the service manager
    /// is stopping the unit it runs in, or that unit has a watchdog.
    var onExemption: (Int, SuspensionExemption) -> Void { get set }
    /// Told when room for a launch frees other than as a launch ends (which `onOutcome` tells): a child being ended
    /// is gone, a launch decided earlier let go of its place.
    var onRoomFreed: () -> Void { get set }
    /// Whether a launch submitted now would be taken: fewer than its capacity held (launches, and what it still holds
    /// of those that ended), and not stopped. `LaunchSlots` hands it launches only then.
    var hasRoom: Bool { get }
    /// The launch backend and its roots, for `GetStatus`'s `backends` and the startup log.
    var report: [String: String] { get }
    /// How the apps it starts are frozen, measured and killed (the first link of each backend chain); nil for one
    /// it leaves to the fallbacks (signals, PSS).
    var managedBackends: ManagedBackends { get }
    /// The cgroup2 `memory.pressure` file covering every managed app, if there is one (a trigger may be armed on it).
    var appsPressureFile: String? { get }
    /// The v1 memory cgroup every managed app's memory cgroup is made under, if there is one (a usage threshold at
    /// `AppsMemoryMax` may be armed on it).
    var appsMemoryRoot: CgroupDirectory? { get }

    /// Whether a launch of `name` is in flight and undecided (a second one is refused meanwhile).
    func isLaunching(_ name: String) -> Bool
    /// Brings the launch of `name` up to date before a registration of `name` is judged: its program may register
    /// before the loop has heard that it started.
    func catchUp(with name: String)
    /// Starts launching `request` for `origin`, its program to start within `timeout`; false (nothing started) when
    /// it has no room (`hasRoom`), or the supervisor has stopped.
    func submit(_ request: LaunchRequest, for origin: LaunchOrigin, timeout: Duration) -> Bool
    /// An app that started but that the manager does not take on: it is ended, and what was made for it removed.
    func end(_ started: StartedApp)
    /// Whether `cgroups`, read back from the state file for the process `saved`, are ones this supervisor would
    /// have made or been given for an app: only then does a restarted daemon freeze, measure or kill through them.
    func trusts(_ cgroups: AppCgroups, of saved: SavedProcess) -> Bool
    /// The manager took on `process`: a managed app this supervisor just started, or one a restarted daemon read
    /// back from its state file (started before the restart, maybe left frozen).
    func adopted(_ process: TrackedProcess)
    /// A self-registered app's process is tracked (a new registration): what runs it is found out, where the
    /// supervisor can (the unit of the service manager it runs in).
    func registered(_ process: TrackedProcess)
    /// The table let go of a process that may still run (its registrations ended): nothing is followed for it.
    func released(_ process: TrackedProcess)
    /// The app's process exited, but how (its exit status) comes a little later: runs `then` once it is known, or
    /// once it stopped waiting, and answers true; false when there is nothing to wait for (`ended` may run now).
    func awaitExit(of process: TrackedProcess, then: @escaping () -> Void) -> Bool
    /// A managed app's process ended: how it ended, where the supervisor can know (its exit status); whatever is
    /// left of the app ends with it, and what was made for it is removed.
    func ended(_ process: TrackedProcess) -> ProcessExit?
    /// The cgroups of a managed app that ended while no daemon ran: whatever is left in them ends, and they go.
    func discard(_ cgroups: AppCgroups)
    /// The daemon is stopping: nothing starts any more, and what started but was never taken on is ended.
    func stop()
}
