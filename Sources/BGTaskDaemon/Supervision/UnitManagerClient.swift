// What the unit supervisor asks of the service manager, as a protocol: the connection to systemd answers it, and
// tests answer it with a fake manager.

import BGTaskPOSIX
import BGTaskSystem

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
