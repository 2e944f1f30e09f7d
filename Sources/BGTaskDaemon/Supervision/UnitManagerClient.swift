// What the unit supervisor asks of the service manager, as a protocol: the connection to systemd answers it, and
// tests answer it with a fake manager.

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
