// Managed apps started by the service manager as transient units of their own (`app-bgtask-NAME-RANDOM.service` in
// `app.slice`, as desktop environments name their apps): nothing of the daemon's sandbox, cgroup or restarts
// reaches them, and they are frozen (through the manager where it can: `UnitFreezer`), measured and killed through
// their unit and its cgroup.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// Starts managed apps with `StartTransientUnit` and follows them through the service manager's signals, every call
/// answered on the loop.
///
/// A launch: the unit is created and started (`Type=exec`, so its start job ends once the program has exec'd); its
/// `JobRemoved` says how the start went; the unit's `MainPID` and `ControlGroup` say which process is the app and
/// which cgroup holds it, checked against `/proc` through a pidfd opened first. From then on the app's unit is
/// watched (`PropertiesChanged`, `UnitWatch`) for how its program ends (`ExecMainCode`, `ExecMainStatus`), which the
/// manager reports when the app's pidfd says it exited, and for its stop. A self-registered app's process is looked
/// up in the manager's units (`GetUnitByPID`) and its unit watched the same way, for its stop and its watchdog. A
/// launch whose program has not started within `LaunchTimeoutSec` fails, and its unit is killed; so is a unit the
/// manager does not take on. The daemon's restart or stop leaves the units of the apps it took on running (the next
/// daemon adopts them); only units still starting are killed.
final class UnitSupervisor: AppSupervisor {
    /// How long the manager's report of how an app's program ended may lag behind its pidfd's.
    static let exitReportWait: Duration = .seconds(2)
    /// The most `JobRemoved`s of unknown jobs remembered (a job's end may come before the answer that names it).
    static let unclaimedJobsMax = 256

    /// The most launches held at once.
    let capacity: Int
    var onOutcome: (LaunchAttempt, LaunchOutcome) -> Void = { _, _ in }
    var onExemption: (Int, SuspensionExemption) -> Void {
        get { watch.onExemption }
        set { watch.onExemption = newValue }
    }
    /// Never called: a unit's launch holds its place exactly until its outcome.
    var onRoomFreed: () -> Void = {}

    private let manager: UnitManagerClient
    /// Which manager: for the report ("systemd 252 through the manager's socket ...").
    private let managerDescription: String
    /// Whether it is the system instance (apps then run as the caller's user, `User=`).
    private let isSystemInstance: Bool
    /// The manager's major version (systemd 252 → 252), for properties that came later.
    private let managerVersion: Int
    private let clock: ManagerClock
    private let logger: Logger
    private let procFS: ProcFS
    private let hierarchies: CgroupHierarchies
    /// A cgroup2 cgroup below the root (the daemon's own), to learn what the kernel's cgroups have.
    private let probeCgroup: CgroupDirectory?
    private var jobSubscription: UnitSignalSubscription?
    /// How the apps' units are frozen, thawed and killed.
    let freezer: UnitFreezer

    /// One launch in flight.
    private final class Held {
        let attempt: LaunchAttempt
        let unit: String
        /// The start job, once the manager answered with it.
        var job: BusObjectPath?

        init(_ attempt: LaunchAttempt, unit: String) {
            self.attempt = attempt
            self.unit = unit
        }
    }

    private var launches: [Int: Held] = [:]
    private var reservedNames: [String: Int] = [:]
    /// Launches by their start job.
    private var launchOfJob: [BusObjectPath: Int] = [:]
    /// `JobRemoved`s of jobs no launch knows yet, in arrival order.
    private var unclaimedJobs: [(job: BusObjectPath, result: JobResult)] = []
    /// The units apps run in, watched for how launched apps' programs end, for stops and for watchdogs.
    private let watch: UnitWatch
    /// Self-registered processes (by serial) whose unit is being looked up.
    private var lookups: Set<Int> = []
    private var timer: ManagerTimer?
    private var nextSerial = 1
    private var isStopped = false

    /// Follows the manager behind `manager` (described by `description`, of `version`); `isSystemInstance` for the
    /// system manager.
    init(
        capacity: Int, manager: UnitManagerClient, description: String, version: Int, isSystemInstance: Bool,
        clock: ManagerClock, logger: Logger, procFS: ProcFS, hierarchies: CgroupHierarchies,
        probeCgroup: CgroupDirectory?
    ) throws(ServiceManagerError) {
        self.capacity = capacity
        self.manager = manager
        managerDescription = description
        managerVersion = version
        self.isSystemInstance = isSystemInstance
        self.clock = clock
        self.logger = logger
        self.procFS = procFS
        self.hierarchies = hierarchies
        self.probeCgroup = probeCgroup
        watch = UnitWatch(manager: manager, logger: logger)
        do {
            freezer = try UnitFreezer(manager: manager, managerVersion: version, clock: clock, logger: logger)
        } catch {
            throw .system(error)
        }
        jobSubscription = try manager.watchJobs { [unowned self] signal in self.jobRemoved(signal) }
        do {
            timer = try clock.makeTimer(name: "unit-supervisor", accuracy: .milliseconds(10)) { [unowned self] in
                self.deadlinesReached()
            }
        } catch {
            jobSubscription?.cancel()
            throw .system(error)
        }
        watch.onDeadlinesChanged = { [unowned self] in self.armTimer() }
    }

    // MARK: Report

    var report: [String: String] {
        ["launch": "systemd (\(managerDescription))", "cgroupRoot": "none", "memoryCgroupRoot": "none"]
    }

    var managedBackends: ManagedBackends {
        guard let unified = hierarchies.unified else { return ManagedBackends() }
        // The manager's FreezeUnit until it refuses for good, then the unit's cgroup.freeze; cgroup.kill (or SIGKILL
        // to each process), then the manager's KillUnit where the cgroup cannot be written.
        var backends = ManagedBackends(
            freeze: freezer.triesManager ? "unit" : "cgroup2", memory: nil, kill: "cgroup2+unit")
        // The root cgroup has no cgroup.kill: a cgroup below it (the daemon's own) says whether the kernel has one.
        if probeCgroup?.has("cgroup.kill") == true { backends.kill = "cgroup.kill+unit" }
        if let controllers = try? CgroupDirectory(path: unified).read("cgroup.controllers"),
            controllers.contains("memory")
        {
            backends.memory = "cgroup2"
        }
        return backends
    }

    /// Units have no root of the daemon's to watch as a whole.
    var appsPressureFile: String? { nil }
    var appsMemoryRoot: CgroupDirectory? { nil }

    // MARK: Launching

    func isLaunching(_ name: String) -> Bool {
        reservedNames[name] != nil
    }

    /// The manager's signals come on the loop in order; a registration is judged after them.
    func catchUp(with name: String) {}

    var hasRoom: Bool { !isStopped && launches.count < capacity }

    func submit(_ request: LaunchRequest, for origin: LaunchOrigin, timeout: Duration) -> Bool {
        guard hasRoom else { return false }
        let serial = nextSerial
        nextSerial += 1
        let unit = AppUnit.name(for: request.name)
        let held = Held(
            LaunchAttempt(serial: serial, request: request, origin: origin, timeout: timeout, now: clock.now),
            unit: unit)
        launches[serial] = held
        reservedNames[request.name] = serial
        armTimer()
        let properties = AppUnit.properties(
            for: request, unit: unit, isSystemInstance: isSystemInstance, managerVersion: managerVersion)
        manager.startTransientUnit(unit, properties: properties) { [weak self] result in
            self?.startAnswered(serial, unit: unit, result)
        }
        return true
    }

    private func startAnswered(_ serial: Int, unit: String, _ result: Result<BusObjectPath, ServiceManagerError>) {
        guard let held = launches[serial] else {
            // Decided already (its deadline passed, or the daemon stops): the unit, if made, is not wanted.
            if case .success = result { kill(unit, because: "its launch ended before it started") }
            return
        }
        switch result {
        case .failure(let error):
            finish(held, .failed(reason: "the service manager did not start \(unit): \(error)"))
        case .success(let job):
            held.job = job
            launchOfJob[job] = serial
            if let index = unclaimedJobs.firstIndex(where: { $0.job == job }) {
                let removed = unclaimedJobs.remove(at: index)
                startJobEnded(held, removed.result)
            }
        }
    }

    private func jobRemoved(_ signal: JobRemovedSignal) {
        if let serial = launchOfJob.removeValue(forKey: signal.job), let held = launches[serial] {
            startJobEnded(held, signal.result)
            return
        }
        guard AppUnit.isAppUnitName(signal.unit), launches.values.contains(where: { $0.unit == signal.unit }) else {
            return
        }
        // The end of a job whose path the manager's answer has not named yet.
        unclaimedJobs.append((signal.job, signal.result))
        if unclaimedJobs.count > Self.unclaimedJobsMax { unclaimedJobs.removeFirst() }
    }

    private func startJobEnded(_ held: Held, _ result: JobResult) {
        guard result == .done else {
            finish(
                held,
                .failed(reason: "the service manager could not start \(held.unit): its start job ended \(result)"))
            return
        }
        let serial = held.attempt.serial
        manager.unitProperties(of: held.unit, interface: .service) { [weak self] result in
            self?.startedUnitRead(serial, result)
        }
    }

    /// The started unit's properties: which process is the app (its `MainPID`, opened as a pidfd, then checked to
    /// be in the unit's `ControlGroup`), and the cgroup it is frozen and killed through.
    private func startedUnitRead(_ serial: Int, _ result: Result<UnitProperties, ServiceManagerError>) {
        guard let held = launches[serial] else { return }
        let unit = held.unit
        let properties: UnitProperties
        switch result {
        case .failure(let error):
            finish(held, .failed(reason: "cannot read \(unit)'s properties: \(error)"))
            return
        case .success(let read):
            properties = read
        }
        guard let pid = properties.mainPID, pid > 0 else {
            let code = properties.execMainCode.map { ", exit code \($0) status \(properties.execMainStatus ?? 0)" }
            finish(held, .failed(reason: "\(unit) has no main process (it ended as it started\(code ?? ""))"))
            return
        }
        let pidFD: PidFD
        do {
            pidFD = try PidFD.open(pid: pid)
        } catch {
            finish(held, .failed(reason: "cannot open pid \(pid) of \(unit): \(error)"))
            return
        }
        // The pidfd pins the process: checked after opening it, its stat and cgroup are its own.
        guard let stat = try? procFS.stat(pid), let unified = hierarchies.unified,
            let controlGroup = properties.controlGroup,
            let cgroup = try? hierarchies.cgroups(of: pid, procFS: procFS).unified,
            cgroup.path == unified + controlGroup, (try? pidFD.hasExited) == false
        else {
            try? pidFD.close()
            finish(held, .failed(reason: "pid \(pid) is not in \(unit)'s cgroup (it ended, or the unit is not its)"))
            return
        }
        watch.follow(unit, followsExit: true)
        let started = StartedApp(
            pidFD: pidFD, startTime: stat.startTime,
            cgroups: AppCgroups(control: cgroup, isUnified: true, memory: nil), child: nil, unit: unit,
            executable: held.attempt.request.argv.first ?? "")
        finish(held, .started(started))
    }

    /// Decides a launch once: told to the manager; a failed one's unit is killed.
    private func finish(_ held: Held, _ outcome: LaunchOutcome) {
        let launch = held.attempt
        launches[launch.serial] = nil
        if let job = held.job { launchOfJob[job] = nil }
        guard !launch.isDecided else { return }
        launch.isDecided = true
        if reservedNames[launch.request.name] == launch.serial { reservedNames[launch.request.name] = nil }
        if case .failed = outcome { kill(held.unit, because: "its launch failed") }
        armTimer()
        onOutcome(launch, outcome)
    }

    /// `KillUnit(unit, all, SIGKILL)`; a unit already gone is no error.
    private func kill(_ unit: String, because reason: String) {
        manager.killUnit(unit, signal: .kill) { [weak self] result in
            if case .failure(let error) = result, error.busErrorName?.rawValue != "org.freedesktop.systemd1.NoSuchUnit"
            {
                self?.logger.error("cannot kill \(unit) (\(reason)): \(error)")
            }
        }
    }

    // MARK: Deadlines

    private func deadlinesReached() {
        let current = clock.now
        for held in launches.values.sorted(by: { $0.attempt.serial < $1.attempt.serial })
        where held.attempt.deadline <= current {
            finish(
                held,
                .failed(reason: "\(held.unit) did not start within \(held.attempt.timeout) (LaunchTimeoutSec)"))
        }
        watch.expire(at: current, waited: Self.exitReportWait)
        armTimer()
    }

    private func armTimer() {
        do {
            try timer?.schedule(at: (launches.values.map(\.attempt.deadline) + watch.deadlines).min())
        } catch {
            logger.error("cannot schedule the deadlines of launches: \(error)")
        }
    }

    // MARK: Apps taken on

    /// An app of a unit (launched now, or adopted after a restart, maybe frozen) is frozen and killed through the
    /// unit, and watched for how its program ends and for the unit's stop. A self-registered app adopted after a
    /// restart is looked up as a new registration is.
    func adopted(_ process: TrackedProcess) {
        guard let unit = process.unit else { return registered(process) }
        if let cgroup = process.cgroups?.control {
            process.unitFreezer = freezer
            freezer.adopt(unit, cgroup: cgroup, isFrozen: process.frozenCgroup == cgroup)
        }
        watch.follow(unit, followsExit: true)
        watch.attach(process: process.serial, to: unit)
    }

    /// Finds the unit a self-registered app's process runs in (a desktop launcher's scope, a user service, a
    /// session) and watches it for its stop and its watchdog. A process in no unit of this manager is left alone.
    func registered(_ process: TrackedProcess) {
        guard !isStopped, process.unit == nil, lookups.insert(process.serial).inserted else { return }
        let serial = process.serial
        manager.unitName(ofProcess: process.pid) { [weak self, weak process] result in
            guard let self, self.lookups.remove(serial) != nil, let process, !self.isStopped else { return }
            switch result {
            case .success(let unit):
                // Alive after the answer: the pid the manager looked up was this process's.
                guard (try? process.pidFD.hasExited) == false else { return }
                self.watch.attach(process: serial, to: unit)
            case .failure(let error) where error.busErrorName == .noUnitForPID:
                break
            case .failure(let error):
                self.logger.info("cannot find the unit of pid \(process.pid): \(error)")
            }
        }
    }

    func released(_ process: TrackedProcess) {
        lookups.remove(process.serial)
        watch.detach(process: process.serial)
    }

    func awaitExit(of process: TrackedProcess, then: @escaping () -> Void) -> Bool {
        guard let unit = process.unit, watch.awaitExit(of: unit, until: clock.now + Self.exitReportWait, then: then)
        else { return false }
        armTimer()
        return true
    }

    func ended(_ process: TrackedProcess) -> ProcessExit? {
        released(process)
        guard let unit = process.unit else { return nil }
        // The unit is the manager's: it ends with its program, and the manager collects it and its cgroup.
        process.cgroups = nil
        freezer.forget(unit)
        return watch.forget(unit)
    }

    func end(_ started: StartedApp) {
        try? started.pidFD.close()
        guard let unit = started.unit else { return }
        watch.forget(unit)
        freezer.forget(unit)
        kill(unit, because: "bgtaskd does not take it on")
    }

    /// Only an app unit's cgroup (as this supervisor names units) that the process is in right now, as the live
    /// check learns it from the manager and `/proc`.
    func trusts(_ cgroups: AppCgroups, of saved: SavedProcess) -> Bool {
        guard let unit = saved.unit, AppUnit.isAppUnitName(unit), cgroups.memory == nil, let control = cgroups.control,
            let unified = hierarchies.unified, control.path.hasPrefix(unified + "/"),
            control.path.hasSuffix("/" + unit)
        else { return false }
        return (try? hierarchies.cgroups(of: saved.pid, procFS: procFS).unified?.path) == control.path
    }

    /// The manager collects an ended unit and its cgroup: nothing is left to remove.
    func discard(_ cgroups: AppCgroups) {}

    func stop() {
        guard !isStopped else { return }
        isStopped = true
        timer?.disarm()
        // Units still starting are not the next daemon's to adopt: killed, and the answers waited for (briefly).
        var pending = 0
        for held in launches.values {
            pending += 1
            manager.killUnit(held.unit, signal: .kill) { _ in pending -= 1 }
        }
        launches = [:]
        reservedNames = [:]
        launchOfJob = [:]
        if pending > 0 { manager.settle(timeout: .seconds(2)) { pending == 0 } }
        // Nothing the manager froze stays frozen once the connection closes.
        freezer.stop { condition in manager.settle(timeout: .seconds(2), until: condition) }
        jobSubscription?.cancel()
        lookups = []
        watch.stop()
        manager.close()
    }
}
