// What the unit supervisor asks of the service manager, as a protocol: the connection to systemd answers it, and
// tests answer it with a fake manager.

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// A subscription to a service manager's signals, cancelled when no longer wanted.
protocol UnitSignalSubscription: AnyObject {
    func cancel()
}

extension BusSignalSubscription: UnitSignalSubscription {}

/// The service manager calls and signals `UnitSupervisor` uses; every call completes on the loop, never blocking it.
protocol UnitManagerClient: AnyObject {
    /// `StartTransientUnit(name, "fail", properties, [])`: completes with the start job's path.
    func startTransientUnit(
        _ name: String, properties: [UnitProperty],
        completion: @escaping (Result<BusObjectPath, ServiceManagerError>) -> Void)
    /// The unit's properties of `interface` (`GetAll` on its object).
    func unitProperties(
        of name: String, interface: UnitInterface,
        completion: @escaping (Result<UnitProperties, ServiceManagerError>) -> Void)
    /// The name of the unit whose cgroup holds `pid` (`GetUnitByPID`, then the unit's `Id`); fails with
    /// `.noUnitForPID` when no unit of the manager holds it.
    func unitName(ofProcess pid: pid_t, completion: @escaping (Result<String, ServiceManagerError>) -> Void)
    /// Whether the unit `name` still runs (`ActiveState`), and for a service its watchdog (`WatchdogUSec`).
    func unitState(of name: String, completion: @escaping (Result<UnitStateReading, ServiceManagerError>) -> Void)
    /// `KillUnit(name, "all", signal)`.
    func killUnit(_ name: String, signal: Signal, completion: @escaping (Result<Void, ServiceManagerError>) -> Void)
    /// `FreezeUnit(name)`: completes once the unit's cgroup is frozen, or with the manager's refusal
    /// (`NotSupported` where it cannot freeze units).
    func freezeUnit(_ name: String, completion: @escaping (Result<Void, ServiceManagerError>) -> Void)
    /// `ThawUnit(name)`.
    func thawUnit(_ name: String, completion: @escaping (Result<Void, ServiceManagerError>) -> Void)
    /// Each `JobRemoved` of the manager.
    func watchJobs(_ handler: @escaping (JobRemovedSignal) -> Void) throws(ServiceManagerError)
        -> UnitSignalSubscription
    /// Each `PropertiesChanged` of the unit `name`'s object.
    func watchProperties(of name: String, _ handler: @escaping (PropertiesChangedSignal) -> Void)
        throws(ServiceManagerError) -> UnitSignalSubscription
    /// Turns the loop (at most `timeout`) until `condition` holds, for a daemon that is stopping and must see calls
    /// it makes then answered; never from a handler of the loop.
    func settle(timeout: Duration, until condition: () -> Bool)
    /// Closes the connection.
    func close()
}

/// What the daemon reads of a unit an app runs in: whether the manager is stopping it, and its watchdog.
struct UnitStateReading: Hashable {
    /// `ActiveState` (Unit): `active`, `activating`, `reloading`, `deactivating`, `inactive`, `failed`, ….
    var activeState: String
    /// `WatchdogUSec` (Service) when it is set; nil when 0, or for a unit that is no service.
    var watchdog: Duration?

    /// Whether `activeState` says the manager is stopping the unit or has stopped it: its processes get (or got)
    /// SIGTERM, and must be able to run. `activating` is not: a `Type=notify` service registers before its
    /// `READY=1`.
    static func isStopping(_ activeState: String) -> Bool {
        activeState == "deactivating" || activeState == "inactive" || activeState == "failed"
    }
}

/// A service manager to launch managed apps through, connected: its client, and what `UnitSupervisor` needs to know
/// of it.
struct UnitManagerEndpoint {
    let client: UnitManagerClient
    /// Which manager, for the report ("systemd 252 through /run/user/1000/systemd/private").
    let description: String
    /// Its major version (systemd 252 → 252), for properties and methods that came later.
    let version: Int
    /// Whether it is the system instance (apps then run as the caller's user, `User=`).
    let isSystemInstance: Bool
}

/// Where the daemon's manager finds the service manager to launch managed apps through.
enum UnitManagerChoice {
    /// The instance of that scope, probed at start (the daemon).
    case probe(ServiceManagerScope)
    /// One already connected (a test's fake manager).
    case given(UnitManagerEndpoint)
}

extension ServiceManagerConnection: UnitManagerClient {
    func startTransientUnit(
        _ name: String, properties: [UnitProperty],
        completion: @escaping (Result<BusObjectPath, ServiceManagerError>) -> Void
    ) {
        startTransientUnit(name, mode: .fail, properties: properties, completion: completion)
    }

    func unitProperties(
        of name: String, interface: UnitInterface,
        completion: @escaping (Result<UnitProperties, ServiceManagerError>) -> Void
    ) {
        unitProperties(at: Self.unitPath(for: name), interface: interface, completion: completion)
    }

    func killUnit(_ name: String, signal: Signal, completion: @escaping (Result<Void, ServiceManagerError>) -> Void) {
        killUnit(name, whom: .all, signal: signal, completion: completion)
    }

    func unitName(ofProcess pid: pid_t, completion: @escaping (Result<String, ServiceManagerError>) -> Void) {
        getUnitByPID(pid) { [weak self] result in
            switch result {
            case .failure(let error):
                completion(.failure(error))
            case .success(let path):
                guard let self else { return completion(.failure(.disconnected)) }
                self.unitProperty(at: path, interface: .unit, name: "Id") { result in
                    completion(
                        result.flatMap { value in
                            guard let name = value?.stringValue, !name.isEmpty else {
                                return .failure(.malformed("the Id of \(path) is not a string"))
                            }
                            return .success(name)
                        })
                }
            }
        }
    }

    func unitState(
        of name: String, completion: @escaping (Result<UnitStateReading, ServiceManagerError>) -> Void
    ) {
        let path = Self.unitPath(for: name)
        unitProperty(at: path, interface: .unit, name: "ActiveState") { [weak self] result in
            let activeState: String
            switch result {
            case .failure(let error): return completion(.failure(error))
            case .success(let value):
                guard let state = value?.stringValue else {
                    return completion(.failure(.malformed("the ActiveState of \(name) is not a string")))
                }
                activeState = state
            }
            guard name.hasSuffix(".service"), let self else {
                return completion(.success(UnitStateReading(activeState: activeState)))
            }
            self.unitProperty(at: path, interface: .service, name: "WatchdogUSec") { result in
                completion(
                    result.map { value in
                        let microseconds = value?.uint64Value ?? 0
                        // UINT64_MAX is systemd's "infinity": no watchdog.
                        let watchdog: Duration? =
                            microseconds == 0 || microseconds == .max
                            ? nil : .microseconds(Int64(clamping: microseconds))
                        return UnitStateReading(activeState: activeState, watchdog: watchdog)
                    })
            }
        }
    }

    func freezeUnit(_ name: String, completion: @escaping (Result<Void, ServiceManagerError>) -> Void) {
        freezeUnit(name, timeout: Self.defaultCallTimeout, completion: completion)
    }

    func thawUnit(_ name: String, completion: @escaping (Result<Void, ServiceManagerError>) -> Void) {
        thawUnit(name, timeout: Self.defaultCallTimeout, completion: completion)
    }

    func watchJobs(_ handler: @escaping (JobRemovedSignal) -> Void) throws(ServiceManagerError)
        -> UnitSignalSubscription
    {
        try onJobRemoved(handler)
    }

    func watchProperties(of name: String, _ handler: @escaping (PropertiesChangedSignal) -> Void)
        throws(ServiceManagerError) -> UnitSignalSubscription
    {
        try onPropertiesChanged(of: Self.unitPath(for: name), handler)
    }

    func settle(timeout: Duration, until condition: () -> Bool) {
        _ = try? runLoop(timeout: timeout, until: condition)
    }
}
