// A service manager the test plays: the daemon's calls to it recorded and left waiting until the test answers them,
// its signals sent when the test says.

import BGTaskPOSIX
import BGTaskSystem
import Glibc
import Testing

@testable import BGTaskDaemon

/// A `UnitManagerClient` with nothing behind it: each call is recorded (`calls`) and waits until the test answers it
/// (`answerStart`, `answerProperties`, `answerFreeze`, ...), and the manager's signals (`JobRemoved`,
/// `PropertiesChanged`) reach the daemon when the test sends them. A call the test never answers is a manager that
/// never answers. Like sd-bus's, every completion runs on the daemon's loop: the tests step the manager on their own
/// thread and answer in between.
final class FakeUnitManager: UnitManagerClient {
    /// A call the daemon made.
    enum Call: Hashable, CustomStringConvertible {
        case startTransientUnit(String)
        case unitProperties(String)
        case unitName(pid_t)
        case unitState(String)
        case killUnit(String, Signal)
        case freezeUnit(String)
        case thawUnit(String)

        var description: String {
            switch self {
            case .startTransientUnit(let unit): "StartTransientUnit(\(unit))"
            case .unitProperties(let unit): "GetAll(\(unit))"
            case .unitName(let pid): "GetUnitByPID(\(pid))"
            case .unitState(let unit): "ActiveState(\(unit))"
            case .killUnit(let unit, let signal): "KillUnit(\(unit), \(signal.name))"
            case .freezeUnit(let unit): "FreezeUnit(\(unit))"
            case .thawUnit(let unit): "ThawUnit(\(unit))"
            }
        }
    }

    private final class Subscription: UnitSignalSubscription {
        let onCancel: () -> Void
        init(_ onCancel: @escaping () -> Void) { self.onCancel = onCancel }
        func cancel() { onCancel() }
    }

    typealias Completion<Value> = (Result<Value, ServiceManagerError>) -> Void

    /// Every call, in order.
    private(set) var calls: [Call] = []
    /// The properties of each `StartTransientUnit`, by unit.
    private(set) var properties: [String: [UnitProperty]] = [:]
    /// The units `StartTransientUnit` was asked for, in order.
    private(set) var startedUnits: [String] = []
    private var starts: [String: Completion<BusObjectPath>] = [:]
    private var propertyReads: [String: [Completion<UnitProperties>]] = [:]
    private var unitNameReads: [pid_t: [Completion<String>]] = [:]
    private var unitStateReads: [String: [Completion<UnitStateReading>]] = [:]
    private var kills: [(unit: String, completion: Completion<Void>)] = []
    private var freezes: [String: [Completion<Void>]] = [:]
    private var thaws: [String: [Completion<Void>]] = [:]
    private var jobWatchers: [Int: (JobRemovedSignal) -> Void] = [:]
    private var propertyWatchers: [Int: (unit: String, handler: (PropertiesChangedSignal) -> Void)] = [:]
    private var nextWatcher = 0
    private var nextJob: UInt32 = 1
    /// What the manager does while the daemon settles (stopping): by default it answers every pending kill.
    var whileSettling: (FakeUnitManager) -> Void = { $0.answerKills() }
    /// How often the daemon settled, and whether its condition held at the end of the last time.
    private(set) var settleCount = 0
    private(set) var lastSettleHeld: Bool?
    private(set) var closeCount = 0

    /// The endpoint a manager under test is started with.
    func endpoint(version: Int = 252, isSystemInstance: Bool = false) -> UnitManagerEndpoint {
        UnitManagerEndpoint(
            client: self, description: "a fake systemd \(version)", version: version,
            isSystemInstance: isSystemInstance)
    }

    /// The calls of one kind to `unit`.
    func count(_ call: Call) -> Int { calls.filter { $0 == call }.count }

    // MARK: The daemon's side

    func startTransientUnit(
        _ name: String, properties: [UnitProperty], completion: @escaping Completion<BusObjectPath>
    ) {
        calls.append(.startTransientUnit(name))
        startedUnits.append(name)
        self.properties[name] = properties
        starts[name] = completion
    }

    func unitProperties(
        of name: String, interface: UnitInterface, completion: @escaping Completion<UnitProperties>
    ) {
        calls.append(.unitProperties(name))
        propertyReads[name, default: []].append(completion)
    }

    func unitName(ofProcess pid: pid_t, completion: @escaping Completion<String>) {
        calls.append(.unitName(pid))
        unitNameReads[pid, default: []].append(completion)
    }

    func unitState(of name: String, completion: @escaping Completion<UnitStateReading>) {
        calls.append(.unitState(name))
        unitStateReads[name, default: []].append(completion)
    }

    func killUnit(_ name: String, signal: Signal, completion: @escaping Completion<Void>) {
        calls.append(.killUnit(name, signal))
        kills.append((name, completion))
    }

    func freezeUnit(_ name: String, completion: @escaping Completion<Void>) {
        calls.append(.freezeUnit(name))
        freezes[name, default: []].append(completion)
    }

    func thawUnit(_ name: String, completion: @escaping Completion<Void>) {
        calls.append(.thawUnit(name))
        thaws[name, default: []].append(completion)
    }

    func watchJobs(_ handler: @escaping (JobRemovedSignal) -> Void) throws(ServiceManagerError)
        -> UnitSignalSubscription
    {
        let key = nextWatcher
        nextWatcher += 1
        jobWatchers[key] = handler
        return Subscription { [weak self] in self?.jobWatchers[key] = nil }
    }

    func watchProperties(of name: String, _ handler: @escaping (PropertiesChangedSignal) -> Void)
        throws(ServiceManagerError) -> UnitSignalSubscription
    {
        let key = nextWatcher
        nextWatcher += 1
        propertyWatchers[key] = (name, handler)
        return Subscription { [weak self] in self?.propertyWatchers[key] = nil }
    }

    func settle(timeout: Duration, until condition: () -> Bool) {
        settleCount += 1
        whileSettling(self)
        lastSettleHeld = condition()
    }

    func close() {
        closeCount += 1
    }

    // MARK: The test's side

    /// Answers the `StartTransientUnit` of `unit`.
    func answerStart(_ unit: String, _ result: Result<BusObjectPath, ServiceManagerError>) {
        guard let completion = starts.removeValue(forKey: unit) else {
            Issue.record("no StartTransientUnit(\(unit)) is waiting")
            return
        }
        completion(result)
    }

    /// Answers the `StartTransientUnit` of `unit` with a new job; returns the job.
    @discardableResult
    func acceptStart(_ unit: String) -> BusObjectPath {
        let job = BusObjectPath("/org/freedesktop/systemd1/job/\(nextJob)")
        nextJob += 1
        answerStart(unit, .success(job))
        return job
    }

    /// Sends `JobRemoved` for `job` of `unit`.
    func removeJob(_ job: BusObjectPath, unit: String, result: JobResult) {
        let id = UInt32(job.rawValue.split(separator: "/").last.flatMap { UInt32($0) } ?? 0)
        for handler in jobWatchers.values { handler(JobRemovedSignal(id: id, job: job, unit: unit, result: result)) }
    }

    /// Answers the oldest properties read of `unit`.
    func answerProperties(_ unit: String, _ result: Result<UnitProperties, ServiceManagerError>) {
        Self.takeOldest(from: &propertyReads, unit, "GetAll(\(unit))")?(result)
    }

    /// Answers the oldest `GetUnitByPID` of `pid`.
    func answerUnitName(_ pid: pid_t, _ result: Result<String, ServiceManagerError>) {
        Self.takeOldest(from: &unitNameReads, pid, "GetUnitByPID(\(pid))")?(result)
    }

    /// Answers the oldest state read of `unit`.
    func answerUnitState(_ unit: String, _ result: Result<UnitStateReading, ServiceManagerError>) {
        Self.takeOldest(from: &unitStateReads, unit, "a state read of \(unit)")?(result)
    }

    /// Whether a state read of `unit` waits for its answer.
    func isStateReadPending(_ unit: String) -> Bool { !(unitStateReads[unit] ?? []).isEmpty }

    /// Sends `PropertiesChanged` of `unit`'s `org.freedesktop.systemd1.Unit` interface with its new `ActiveState`.
    func changeActiveState(of unit: String, to state: String) {
        for watcher in propertyWatchers.values where watcher.unit == unit {
            watcher.handler(
                PropertiesChangedSignal(
                    interface: UnitInterface.unit.rawValue, changed: ["ActiveState": .string(state)]))
        }
    }

    /// A running service's properties: its main process and cgroup (relative to the cgroup2 root).
    static func running(mainPID: pid_t, controlGroup: String) -> UnitProperties {
        UnitProperties([
            "MainPID": .uint32(UInt32(bitPattern: mainPID)), "ControlGroup": .string(controlGroup),
            "ExecMainCode": .int32(0), "ExecMainStatus": .int32(0),
        ])
    }

    /// Sends `PropertiesChanged` of `unit`'s `org.freedesktop.systemd1.Service` interface.
    func changeProperties(of unit: String, _ changed: [String: BusValue]) {
        for watcher in propertyWatchers.values where watcher.unit == unit {
            watcher.handler(PropertiesChangedSignal(interface: UnitInterface.service.rawValue, changed: changed))
        }
    }

    /// Whether anything watches `unit`'s properties.
    func isWatched(_ unit: String) -> Bool { propertyWatchers.values.contains { $0.unit == unit } }

    /// Answers every pending `KillUnit` with success.
    func answerKills() {
        let waiting = kills
        kills = []
        for kill in waiting { kill.completion(.success(())) }
    }

    /// Calls waiting for an answer, by kind.
    var pendingFreezes: Int { freezes.values.map(\.count).reduce(0, +) }
    var pendingThaws: Int { thaws.values.map(\.count).reduce(0, +) }
    var pendingKills: Int { kills.count }

    /// Answers the oldest `FreezeUnit` of `unit`.
    func answerFreeze(_ unit: String, _ result: Result<Void, ServiceManagerError>) {
        Self.takeOldest(from: &freezes, unit, "FreezeUnit(\(unit))")?(result)
    }

    /// Answers the oldest `ThawUnit` of `unit`.
    func answerThaw(_ unit: String, _ result: Result<Void, ServiceManagerError>) {
        Self.takeOldest(from: &thaws, unit, "ThawUnit(\(unit))")?(result)
    }

    /// Takes out the oldest call waiting under `key` in `table`, for the caller to answer once the table is no
    /// longer being changed (an answer may make the daemon call again); nil, recorded as an issue naming `what`,
    /// when none waits.
    private static func takeOldest<Key: Hashable, Value>(
        from table: inout [Key: [Completion<Value>]], _ key: Key, _ what: String
    ) -> Completion<Value>? {
        guard var waiting = table[key], !waiting.isEmpty else {
            Issue.record("no \(what) is waiting")
            return nil
        }
        let completion = waiting.removeFirst()
        table[key] = waiting
        return completion
    }

    /// The manager's refusal of something it cannot do on this host.
    static let notSupported = ServiceManagerError.method(.notSupported, message: "Unit freezing is not supported.")
}
