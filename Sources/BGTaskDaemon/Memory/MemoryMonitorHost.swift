// What the memory monitor needs of the daemon around it, and how the manager provides it.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// The memory monitor's neighbour: the tracked processes it measures and keeps readings on, the apps' names for
/// its log, the inspection worker, and the policy core it reads the reclamation order from and feeds warnings and
/// reclamations to. `Manager` is one; a test's fake is another, so the monitor runs without a whole manager.
///
/// The monitor holds it weakly (the manager owns the monitor): nothing of the monitor outlives its manager.
protocol MemoryMonitorHost: AnyObject {
    /// Where the monitor logs.
    var logger: Logger { get }
    /// The loop the memory triggers are watched on, and whose time dates a sample's age.
    var loop: EventLoop { get }
    /// The time the monitor's decisions carry and its timer runs on.
    var clock: ManagerClock { get }
    /// Where `meminfo` is read before each kill.
    var procFS: ProcFS { get }
    /// Reads the system's memory figures on the loop (a sample without the apps).
    var inspector: ProcessInspector { get }
    /// Whether the daemon is stopping: nothing is sampled then.
    var isStopping: Bool { get }
    /// Whether any process is tracked: without one, nothing is sampled and no timer runs.
    var hasMonitoredProcesses: Bool { get }
    /// Every tracked process, in no particular order.
    var monitoredProcesses: [any MonitoredProcess] { get }
    /// The tracked process with this serial (an `InspectedProcess.key` of a sample), if it is still tracked.
    func monitoredProcess(serial: Int) -> (any MonitoredProcess)?
    /// The process of a registered app, if it is tracked.
    func monitoredProcess(of app: AppID) -> (any MonitoredProcess)?
    /// The app's name, for the log.
    func appName(_ app: AppID) -> String
    /// Hands a job to the inspection worker; false (logged) when it is full.
    func submit(_ job: InspectionJob) -> Bool
    /// The policy core as it stands: reclamation bands, order and policy are read from it.
    var core: Lifecycle { get }
    /// Feeds the core a memory input (a warning, a reclamation) and carries out the actions it returns.
    func feedMemoryInput<Failure: Error>(_ input: (inout Lifecycle) throws(Failure) -> [Action]) throws(Failure)
    /// The cgroup2 file of the managed apps' memory pressure, for a PSI trigger; nil without one.
    var appsPressureFile: String? { get }
    /// The managed apps' v1 memory cgroup, for a usage threshold at `AppsMemoryMax`; nil without one.
    var appsMemoryRoot: CgroupDirectory? { get }
}

/// A tracked process as the memory monitor sees it: who it is, which apps it carries, and its last reading.
protocol MonitoredProcess: AnyObject {
    /// The daemon's key for it (a sample's `InspectedProcess.key`).
    var serial: Int { get }
    var pid: pid_t { get }
    /// Its registrations the policy still tracks.
    var apps: Set<AppID> { get }
    /// The identity the worker's `/proc` reads are checked against.
    var inspected: InspectedProcess { get }
    /// The last memory reading in bytes, kept when a later read fails.
    var memoryBytes: UInt64? { get set }
    /// Whether the latest read failed (`memoryBytes` is then the reading before it).
    var isMemoryReadingStale: Bool { get set }
}

extension TrackedProcess: MonitoredProcess {}

extension Manager: MemoryMonitorHost {
    var hasMonitoredProcesses: Bool { !processes.isEmpty }

    var monitoredProcesses: [any MonitoredProcess] { Array(processes.values) }

    func monitoredProcess(serial: Int) -> (any MonitoredProcess)? { processes[serial] }

    func monitoredProcess(of app: AppID) -> (any MonitoredProcess)? { processOfApp[app] }

    func feedMemoryInput<Failure: Error>(_ input: (inout Lifecycle) throws(Failure) -> [Action]) throws(Failure) {
        perform(try input(&core))
    }

    var appsPressureFile: String? { supervisor?.appsPressureFile }

    var appsMemoryRoot: CgroupDirectory? { supervisor?.appsMemoryRoot }
}
