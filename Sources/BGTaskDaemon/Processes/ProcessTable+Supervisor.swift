// The supervisor of managed apps the process table starts them through: the service manager that runs the daemon
// where one answers, else the daemon's own launcher.

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import Glibc

extension ProcessTable {
    /// The most launches held at once (from the call to the program's exec, and children being ended): a few, since
    /// a healthy launch takes milliseconds; more at once means starts are hanging, and each holds a child. Launches
    /// past it wait for a slot (`LaunchSlots`), which goes to the waiting user with the fewest starting.
    static let launchesInFlightMax = 4

    /// Makes the supervisor of managed apps (`AppSupervisor`): the service manager that runs the daemon starts them
    /// as units of their own where one answers (`unitManager`), unless `CgroupRoot=` asks for the daemon's own
    /// cgroups; else the daemon forks them itself, into cgroups under `CgroupRoot=`, or into none.
    func makeSupervisor(
        memory: DaemonConfiguration.Memory, unitManager: UnitManagerChoice?
    ) throws(StartupError) -> AppSupervisor {
        if let unitManager, memory.cgroupRoot == nil, let units = startUnitSupervisor(unitManager) {
            return units
        }
        let roots = LaunchCgroupRoots.resolve(memory, hierarchies: cgroupHierarchies)
        for note in roots.notes { logger.warning("managed apps: \(note)") }
        if let absence = roots.absence {
            logger.info("managed apps run without cgroups (SIGSTOP and PSS): \(absence)")
        }
        do {
            let fork = try ForkSupervisor(
                capacity: Self.launchesInFlightMax, roots: roots, loop: loop, clock: clock, logger: logger,
                procFS: procFS)
            fork.onExemption = { [weak self] serial, exemption in self?.exempt(serial, exemption) }
            return fork
        } catch {
            throw StartupError(description: "cannot start the launcher thread: \(error)")
        }
    }

    /// The supervisor learned that the apps of the tracked process `serial` must never be suspended: the policy
    /// hears it for each of them (and wakes those suspended).
    private func exempt(_ serial: Int, _ exemption: SuspensionExemption) {
        // A unit leaves `active` also when its program exits by itself: an exit already seen is the pidfd's to
        // report, not a reason to record.
        guard let process = processes[serial], (try? process.pidFD.hasExited) == false else { return }
        for app in process.apps.sorted() { host?.suspensionExempted(app, because: exemption) }
    }

    /// Follows the service manager `choice` names (probed, or given) with a `UnitSupervisor`; nil, logged, when
    /// none answers or it cannot be followed.
    private func startUnitSupervisor(_ choice: UnitManagerChoice) -> UnitSupervisor? {
        let endpoint: UnitManagerEndpoint
        switch choice {
        case .given(let given): endpoint = given
        case .probe(let scope):
            guard let found = probeUnitManager(scope) else { return nil }
            endpoint = found
        }
        do {
            let units = try UnitSupervisor(
                capacity: Self.launchesInFlightMax, manager: endpoint.client, description: endpoint.description,
                version: endpoint.version, isSystemInstance: endpoint.isSystemInstance, clock: clock, logger: logger,
                procFS: procFS, hierarchies: cgroupHierarchies, probeCgroup: daemonCgroup)
            units.onExemption = { [weak self] serial, exemption in self?.exempt(serial, exemption) }
            logger.info("managed apps are launched as units: \(endpoint.description)")
            return units
        } catch {
            endpoint.client.close()
            logger.warning("managed apps: cannot follow the service manager: \(error); forking them instead")
            return nil
        }
    }

    /// Finds the service manager of `scope` (each place it may listen at, tried in turn, bounded) and connects to
    /// it; nil, logged, when none answers. Runs at start, before anything is served: the loop is turned here until
    /// the probe is over.
    private func probeUnitManager(_ scope: ServiceManagerScope) -> UnitManagerEndpoint? {
        var found: (connection: ServiceManagerConnection?, probe: ServiceManagerProbe)?
        ServiceManagerConnection.probe(scope, loop: loop, timeout: .seconds(5)) { found = ($0, $1) }
        while found == nil {
            do {
                try loop.runIteration(timeout: .seconds(1))
            } catch {
                logger.warning("managed apps: cannot look for the service manager: \(error); forking them instead")
                return nil
            }
        }
        guard let found, let connection = found.connection else {
            logger.warning("managed apps: \(found?.probe.description ?? "no service manager"); forking them instead")
            return nil
        }
        connection.onDisconnect = { [weak self] in
            self?.logger.error(
                "the service manager closed the connection: apps cannot be launched, nor their ends read, until "
                    + "bgtaskd restarts")
        }
        connection.subscribe { [weak self] result in
            if case .failure(let error) = result {
                self?.logger.warning("the service manager refused Subscribe: \(error)")
            }
        }
        return UnitManagerEndpoint(
            client: connection, description: found.probe.description,
            version: Int((found.probe.version ?? "").prefix { $0.isNumber }) ?? 0, isSystemInstance: scope == .system)
    }

    /// The uids of the users pinned app names belong to (`User=` in `apps.d`, by name or number); nil for a user
    /// that cannot be resolved, which pins the name to nobody.
    static func pinnedUsers(_ appUsers: [String: String], logger: Logger) -> [String: uid_t?] {
        var pinnedUsers: [String: uid_t?] = [:]
        for (app, user) in appUsers {
            if let uid = uid_t(user) {
                pinnedUsers[app] = .some(uid)
                continue
            }
            do {
                let uid = try UserDatabase.userID(named: user)
                if uid == nil {
                    logger.error("apps.d/\(app).conf: User=\(user): no such user; nobody may register \(app)")
                }
                pinnedUsers[app] = .some(uid)
            } catch {
                logger.error(
                    "apps.d/\(app).conf: User=\(user): cannot look it up (\(error)); nobody may register \(app)")
                pinnedUsers[app] = .some(nil)
            }
        }
        return pinnedUsers
    }
}
