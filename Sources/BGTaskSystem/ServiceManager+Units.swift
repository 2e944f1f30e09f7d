// The typed calls and signals of systemd's `org.freedesktop.systemd1.Manager` the daemon needs to run apps as
// transient units: start, find, read, signal, stop, freeze and thaw them, and hear when their jobs and units end.
import BGTaskPOSIX
import Glibc

/// How the manager queues a job for a unit (`mode` of `StartTransientUnit`, `StopUnit`).
public struct JobMode: RawRepresentable, Hashable, Sendable {
    /// The mode's name on the wire.
    public var rawValue: String

    /// Wraps a mode name.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// `fail`: refuse the job if it conflicts with a job already queued.
    public static let fail = JobMode(rawValue: "fail")
    /// `replace`: replace conflicting queued jobs.
    public static let replace = JobMode(rawValue: "replace")
}

/// How a job ended (`result` of `JobRemoved`).
public struct JobResult: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The result's name on the wire.
    public var rawValue: String

    /// Wraps a result name.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The name itself.
    public var description: String { rawValue }

    /// `done`: the job succeeded (a start job: the unit is up, for `Type=exec` once the program was executed).
    public static let done = JobResult(rawValue: "done")
    /// `canceled`: another job replaced it, or it was cancelled.
    public static let canceled = JobResult(rawValue: "canceled")
    /// `timeout`: it did not finish within the unit's timeout.
    public static let timeout = JobResult(rawValue: "timeout")
    /// `failed`: the unit failed (a start job: the program could not be started, or exited early).
    public static let failed = JobResult(rawValue: "failed")
    /// `dependency`: a unit it required failed.
    public static let dependency = JobResult(rawValue: "dependency")
    /// `skipped`: nothing to do (a stop of a unit already stopping).
    public static let skipped = JobResult(rawValue: "skipped")
}

/// Which processes of a unit `KillUnit` signals.
public enum KillTarget: String, Hashable, Sendable {
    /// The main process only.
    case main
    /// The control process (of `ExecStop=` and friends) only.
    case control
    /// Every process in the unit's cgroup.
    case all
}

/// A D-Bus interface of a unit object, for reading its properties.
public struct UnitInterface: RawRepresentable, Hashable, Sendable {
    /// The interface's name.
    public var rawValue: String

    /// Wraps an interface name.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// `org.freedesktop.systemd1.Unit`: what every unit has (`ActiveState`, `SubState`, `Id`).
    public static let unit = UnitInterface(rawValue: "org.freedesktop.systemd1.Unit")
    /// `org.freedesktop.systemd1.Service`: a service's (`MainPID`, `ControlGroup`, `Result`, `ExecMain…`).
    public static let service = UnitInterface(rawValue: "org.freedesktop.systemd1.Service")
    /// `org.freedesktop.systemd1.Scope`: a scope's (`ControlGroup`, `Result`).
    public static let scope = UnitInterface(rawValue: "org.freedesktop.systemd1.Scope")
}

/// A command line of `ExecStart=` and its kin, as `StartTransientUnit` takes it: `(sasb)` for `ExecStart`, `(sasas)`
/// for `ExecStartEx` (systemd 243 and later), whose flags say what the prefixes of a unit file say.
public struct ExecCommand: Hashable, Sendable {
    /// The program's absolute path.
    public var path: String
    /// The whole argument vector, `argv[0]` first.
    public var arguments: [String]
    /// Whether a failure of the command is ignored (the `-` prefix in a unit file).
    public var ignoresFailure: Bool
    /// Whether the manager expands `$NAME` and `${NAME}` in the arguments from the unit's environment, as it does for
    /// a unit file's command unless the `:` prefix says not to (`%` specifiers it never expands in a command sent
    /// over the bus). False: the program gets `arguments` exactly.
    public var expandsEnvironment: Bool

    /// Runs `path` with `arguments` (`argv[0]` first; empty: the path alone).
    public init(path: String, arguments: [String] = [], ignoresFailure: Bool = false, expandsEnvironment: Bool = true) {
        self.path = path
        self.arguments = arguments.isEmpty ? [path] : arguments
        self.ignoresFailure = ignoresFailure
        self.expandsEnvironment = expandsEnvironment
    }

    /// The command as a `(sasb)` structure, for `ExecStart`, which takes no flags: a command that must not be
    /// expanded has every `$` of its arguments written `$$`, which the manager's expansion turns back into one `$`,
    /// so the program gets its arguments exactly all the same.
    public var busValue: BusValue {
        let words = expandsEnvironment ? arguments : arguments.map(Self.escapingEnvironment)
        return .structure([.string(path), .strings(words), .boolean(ignoresFailure)])
    }

    /// The command as a `(sasas)` structure, for `ExecStartEx`: its flags in systemd's words (`ignore-failure`,
    /// `no-env-expand`).
    public var extendedBusValue: BusValue {
        var flags: [String] = []
        if ignoresFailure { flags.append("ignore-failure") }
        if !expandsEnvironment { flags.append("no-env-expand") }
        return .structure([.string(path), .strings(arguments), .strings(flags)])
    }

    /// `word` with every `$` doubled: what the manager's environment expansion reads back as `word` itself.
    public static func escapingEnvironment(_ word: String) -> String {
        guard word.utf8.contains(UInt8(ascii: "$")) else { return word }
        var escaped = String.UnicodeScalarView()
        for scalar in word.unicodeScalars {
            escaped.append(scalar)
            if scalar == "$" { escaped.append(scalar) }
        }
        return String(escaped)
    }
}

/// A property of a transient unit, as `StartTransientUnit` takes it (`(sv)`): the unit-file setting's name and its
/// value, of the type systemd's D-Bus interface gives that setting.
public struct UnitProperty: Hashable, Sendable {
    /// The setting's name, e.g. `Description`.
    public var name: String
    /// Its value.
    public var value: BusValue

    /// A setting `name` with `value`.
    public init(_ name: String, _ value: BusValue) {
        self.name = name
        self.value = value
    }

    /// The property as a `(sv)` structure.
    public var busValue: BusValue { .structure([.string(name), .variant(value)]) }

    /// `Description=`.
    public static func description(_ text: String) -> UnitProperty { UnitProperty("Description", .string(text)) }
    /// `ExecStart=`: the commands a service runs (`a(sasb)`; those that must not be expanded escaped, see
    /// `ExecCommand.busValue`).
    public static func execStart(_ commands: [ExecCommand]) -> UnitProperty {
        UnitProperty("ExecStart", .array(element: "(sasb)", commands.map(\.busValue)))
    }
    /// `ExecStartEx=`: the commands a service runs with their flags (`a(sasas)`; systemd 243 and later).
    public static func execStartEx(_ commands: [ExecCommand]) -> UnitProperty {
        UnitProperty("ExecStartEx", .array(element: "(sasas)", commands.map(\.extendedBusValue)))
    }
    /// The first systemd whose `StartTransientUnit` takes `ExecStartEx` (and with it `no-env-expand`).
    public static let execStartExVersion = 243
    /// `Environment=`: `NAME=value` assignments.
    public static func environment(_ assignments: [String]) -> UnitProperty {
        UnitProperty("Environment", .strings(assignments))
    }
    /// `SyslogIdentifier=`: the name the unit's output is logged under.
    public static func syslogIdentifier(_ name: String) -> UnitProperty {
        UnitProperty("SyslogIdentifier", .string(name))
    }
    /// `CollectMode=` (`inactive`, `inactive-or-failed`): when the manager unloads the stopped unit.
    public static func collectMode(_ mode: String) -> UnitProperty { UnitProperty("CollectMode", .string(mode)) }
    /// `Type=` of a service (`simple`, `exec`, `notify`, …).
    public static func serviceType(_ type: String) -> UnitProperty { UnitProperty("Type", .string(type)) }
    /// `Slice=`: the slice the unit's cgroup goes in, e.g. `app.slice`.
    public static func slice(_ name: String) -> UnitProperty { UnitProperty("Slice", .string(name)) }
    /// `User=`: the user the service runs as (system manager only).
    public static func user(_ name: String) -> UnitProperty { UnitProperty("User", .string(name)) }
    /// `OOMScoreAdjust=`.
    public static func oomScoreAdjust(_ value: Int32) -> UnitProperty { UnitProperty("OOMScoreAdjust", .int32(value)) }
    /// `PIDs=` of a scope: the processes moved into it when it starts (`au`).
    public static func processes(_ pids: [pid_t]) -> UnitProperty {
        UnitProperty("PIDs", .array(element: "u", pids.map { .uint32(UInt32(bitPattern: $0)) }))
    }
}

/// The properties of a unit as `Properties.GetAll` gave them, with typed accessors for the ones the daemon reads.
/// Properties of types `BusMessageReader.readValue()` leaves out are absent.
public struct UnitProperties: Hashable, Sendable {
    /// Every property read, by name.
    public var values: [String: BusValue]

    /// Properties from their values.
    public init(_ values: [String: BusValue]) { self.values = values }

    /// The property `name`, if it was read.
    public subscript(name: String) -> BusValue? { values[name] }

    /// `MainPID` (Service): the main process; nil when absent or 0 (none).
    public var mainPID: pid_t? { pid("MainPID") }
    /// `ControlGroup` (Service, Scope): the unit's cgroup, relative to the hierarchy's root; nil when absent or
    /// empty (no cgroup: the unit is not running).
    public var controlGroup: String? { values["ControlGroup"]?.stringValue.flatMap { $0.isEmpty ? nil : $0 } }
    /// `ActiveState` (Unit): `active`, `activating`, `deactivating`, `inactive`, `failed`, ….
    public var activeState: String? { values["ActiveState"]?.stringValue }
    /// `SubState` (Unit): the unit type's own state, e.g. `running`, `dead`, `failed`.
    public var subState: String? { values["SubState"]?.stringValue }
    /// `Result` (Service, Scope): `success`, `signal`, `exit-code`, `timeout`, ….
    public var result: String? { values["Result"]?.stringValue }
    /// `ExecMainCode` (Service): how the main process ended, as `waitid` says: 1 exited (`CLD_EXITED`), 2 killed by
    /// a signal (`CLD_KILLED`), 3 dumped core (`CLD_DUMPED`); 0 while it runs.
    public var execMainCode: Int32? { values["ExecMainCode"]?.int32Value }
    /// `ExecMainStatus` (Service): the exit status, or the signal number when killed.
    public var execMainStatus: Int32? { values["ExecMainStatus"]?.int32Value }
    /// `Id` (Unit): the unit's name, as `GetUnitByPID`'s path does not spell it.
    public var id: String? { values["Id"]?.stringValue }
    /// `ExecMainPID` (Service): the main process, also after it ended; nil when absent or 0.
    public var execMainPID: pid_t? { pid("ExecMainPID") }

    private func pid(_ name: String) -> pid_t? {
        guard let value = values[name]?.uint32Value, value != 0 else { return nil }
        return pid_t(bitPattern: value)
    }
}

/// `JobRemoved(u id, o job, s unit, s result)`: a job of the manager finished.
public struct JobRemovedSignal: Hashable, Sendable {
    /// The job's number.
    public var id: UInt32
    /// The job's object path (what `StartTransientUnit` and `StopUnit` returned).
    public var job: BusObjectPath
    /// The unit's name.
    public var unit: String
    /// How it ended.
    public var result: JobResult

    /// A signal as the manager sends it (the connection reads them; a fake manager makes them).
    public init(id: UInt32, job: BusObjectPath, unit: String, result: JobResult) {
        self.id = id
        self.job = job
        self.unit = unit
        self.result = result
    }
}

/// `UnitRemoved(s unit, o path)`: the manager unloaded a unit (a transient one after it stopped, by its
/// `CollectMode=`).
public struct UnitRemovedSignal: Hashable, Sendable {
    /// The unit's name.
    public var unit: String
    /// The unit's object path.
    public var path: BusObjectPath
}

/// `PropertiesChanged(s interface, a{sv} changed, as invalidated)` of one object.
public struct PropertiesChangedSignal: Hashable, Sendable {
    /// The interface whose properties changed.
    public var interface: String
    /// The changed properties with their new values (those of types the reader gives back).
    public var changed: [String: BusValue]
    /// Properties that changed without their values being sent.
    public var invalidated: [String]

    /// A signal as the manager sends it (the connection reads them; a fake manager makes them).
    public init(interface: String, changed: [String: BusValue], invalidated: [String] = []) {
        self.interface = interface
        self.changed = changed
        self.invalidated = invalidated
    }
}

extension ServiceManagerConnection {
    /// The manager's object.
    static let managerPath: BusObjectPath = "/org/freedesktop/systemd1"
    /// The manager's interface.
    static let managerInterface = "org.freedesktop.systemd1.Manager"
    /// The standard properties interface.
    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    /// The object path of the unit `name` (`/org/freedesktop/systemd1/unit/` and the name with every byte but
    /// letters, and digits after the first, written `_xx`, as systemd's `bus_label_escape` does): known before the
    /// unit exists, so a subscription to its `PropertiesChanged` can precede its start.
    public static func unitPath(for name: String) -> BusObjectPath {
        let digits = Array("0123456789abcdef".unicodeScalars)
        var label = ""
        for (index, byte) in name.utf8.enumerated() {
            let isLetter =
                (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            let isDigit = byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
            if isLetter || (isDigit && index > 0) {
                label.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                label += "_"
                label.unicodeScalars.append(digits[Int(byte >> 4)])
                label.unicodeScalars.append(digits[Int(byte & 0x0f)])
            }
        }
        return BusObjectPath("/org/freedesktop/systemd1/unit/" + (label.isEmpty ? "_" : label))
    }

    /// Calls a method of the manager's own object.
    private func callManager<Value>(
        _ member: String, _ arguments: [BusValue], timeout: Duration,
        read: @escaping (inout BusMessageReader) throws(ServiceManagerError) -> Value,
        completion: @escaping (Result<Value, ServiceManagerError>) -> Void
    ) {
        callMethod(
            path: Self.managerPath, interface: Self.managerInterface, member: member, arguments: arguments,
            timeout: timeout, read: read, completion: completion)
    }

    /// `Subscribe()`: asks the manager for its unit and job signals. On a bus it sends them only to subscribers; on
    /// a direct connection it sends them anyway, and the call just succeeds.
    public func subscribe(
        timeout: Duration = defaultCallTimeout, completion: @escaping (Result<Void, ServiceManagerError>) -> Void
    ) {
        callManager("Subscribe", [], timeout: timeout, read: readNothing, completion: completion)
    }

    /// `StartTransientUnit(name, mode, properties, [])`: creates the unit `name` from `properties` and queues its
    /// start; completes with the start job's path, whose `JobRemoved` says how the start went. A unit of that name
    /// already loaded fails with `.unitExists`.
    public func startTransientUnit(
        _ name: String, mode: JobMode = .fail, properties: [UnitProperty], timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<BusObjectPath, ServiceManagerError>) -> Void
    ) {
        let arguments: [BusValue] = [
            .string(name), .string(mode.rawValue), .array(element: "(sv)", properties.map(\.busValue)),
            .array(element: "(sa(sv))", []),
        ]
        callManager(
            "StartTransientUnit", arguments, timeout: timeout, read: readObjectPath,
            completion: completion)
    }

    /// `GetUnit(name)`: the object path of the loaded unit `name`; `.noSuchUnit` when none is loaded.
    public func getUnit(
        _ name: String, timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<BusObjectPath, ServiceManagerError>) -> Void
    ) {
        callManager(
            "GetUnit", [.string(name)], timeout: timeout, read: readObjectPath,
            completion: completion)
    }

    /// `GetUnitByPID(pid)`: the object path of the unit whose cgroup holds `pid` (a self-registered app's
    /// `app-*.scope`, say); `.noUnitForPID` when none does.
    public func getUnitByPID(
        _ pid: pid_t, timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<BusObjectPath, ServiceManagerError>) -> Void
    ) {
        callManager(
            "GetUnitByPID", [.uint32(UInt32(bitPattern: pid))], timeout: timeout,
            read: readObjectPath, completion: completion)
    }

    /// `Properties.GetAll(interface)` of the unit at `path`: its properties of that interface.
    public func unitProperties(
        at path: BusObjectPath, interface: UnitInterface, timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<UnitProperties, ServiceManagerError>) -> Void
    ) {
        callMethod(
            path: path, interface: Self.propertiesInterface, member: "GetAll",
            arguments: [.string(interface.rawValue)], timeout: timeout,
            read: { (reader: inout BusMessageReader) throws(ServiceManagerError) in
                UnitProperties(try reader.readProperties())
            }, completion: completion)
    }

    /// `Properties.Get(interface, name)` of the unit at `path`: one property's value (nil when of a type
    /// `BusMessageReader.readValue()` leaves out).
    public func unitProperty(
        at path: BusObjectPath, interface: UnitInterface, name: String, timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<BusValue?, ServiceManagerError>) -> Void
    ) {
        callMethod(
            path: path, interface: Self.propertiesInterface, member: "Get",
            arguments: [.string(interface.rawValue), .string(name)], timeout: timeout,
            read: { (reader: inout BusMessageReader) throws(ServiceManagerError) in try reader.readVariant() },
            completion: completion)
    }

    /// `KillUnit(name, whom, signal)`: sends `signal` to the unit's processes (`whom`); `.noSuchUnit` when the unit
    /// is not loaded.
    public func killUnit(
        _ name: String, whom: KillTarget = .all, signal: Signal, timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<Void, ServiceManagerError>) -> Void
    ) {
        callManager(
            "KillUnit", [.string(name), .string(whom.rawValue), .int32(signal.rawValue)], timeout: timeout,
            read: readNothing, completion: completion)
    }

    /// `StopUnit(name, mode)`: queues the unit's stop; completes with the stop job's path.
    public func stopUnit(
        _ name: String, mode: JobMode = .replace, timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<BusObjectPath, ServiceManagerError>) -> Void
    ) {
        callManager(
            "StopUnit", [.string(name), .string(mode.rawValue)], timeout: timeout,
            read: readObjectPath, completion: completion)
    }

    /// `FreezeUnit(name)` (systemd 246): freezes the unit's cgroup and completes once it is frozen. Refused where
    /// the manager cannot freeze: `.notSupported` on a host whose cgroup hierarchy is not pure cgroup2 (then freeze
    /// through the cgroup's own files), `.unknownMethod` before systemd 246, `.unitInactive` for a stopped unit.
    public func freezeUnit(
        _ name: String, timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<Void, ServiceManagerError>) -> Void
    ) {
        callManager(
            "FreezeUnit", [.string(name)], timeout: timeout, read: readNothing,
            completion: completion)
    }

    /// `ThawUnit(name)` (systemd 246): thaws a unit `freezeUnit` froze; refused as `freezeUnit` is.
    public func thawUnit(
        _ name: String, timeout: Duration = defaultCallTimeout,
        completion: @escaping (Result<Void, ServiceManagerError>) -> Void
    ) {
        callManager(
            "ThawUnit", [.string(name)], timeout: timeout, read: readNothing,
            completion: completion)
    }

    /// The manager's `Version` property, e.g. `252.39-1~deb12u1`: what it is, and proof that it is systemd.
    public func managerVersion(
        timeout: Duration = defaultCallTimeout, completion: @escaping (Result<String, ServiceManagerError>) -> Void
    ) {
        callMethod(
            path: Self.managerPath, interface: Self.propertiesInterface, member: "Get",
            arguments: [.string(Self.managerInterface), .string("Version")], timeout: timeout,
            read: { (reader: inout BusMessageReader) throws(ServiceManagerError) in
                guard let version = try reader.readVariant()?.stringValue else {
                    throw .malformed("Version is not a string")
                }
                return version
            }, completion: completion)
    }

    /// Calls `handler` with each `JobRemoved` of the manager (after `subscribe`, on a bus).
    public func onJobRemoved(_ handler: @escaping (JobRemovedSignal) -> Void) throws(ServiceManagerError)
        -> BusSignalSubscription
    {
        try subscribe(path: Self.managerPath, interface: Self.managerInterface, member: "JobRemoved") {
            (reader: inout BusMessageReader) throws(ServiceManagerError) in
            let id = try reader.readUInt32()
            let job = try reader.readObjectPath()
            let unit = try reader.readString()
            let result = JobResult(rawValue: try reader.readString())
            handler(JobRemovedSignal(id: id, job: job, unit: unit, result: result))
        }
    }

    /// Calls `handler` with each `UnitRemoved` of the manager (after `subscribe`, on a bus).
    public func onUnitRemoved(_ handler: @escaping (UnitRemovedSignal) -> Void) throws(ServiceManagerError)
        -> BusSignalSubscription
    {
        try subscribe(path: Self.managerPath, interface: Self.managerInterface, member: "UnitRemoved") {
            (reader: inout BusMessageReader) throws(ServiceManagerError) in
            let unit = try reader.readString()
            let path = try reader.readObjectPath()
            handler(UnitRemovedSignal(unit: unit, path: path))
        }
    }

    /// Calls `handler` with each `PropertiesChanged` of the object at `path` (a unit's: `unitPath(for:)`), for every
    /// interface of it.
    public func onPropertiesChanged(
        of path: BusObjectPath, _ handler: @escaping (PropertiesChangedSignal) -> Void
    ) throws(ServiceManagerError) -> BusSignalSubscription {
        try subscribe(path: path, interface: Self.propertiesInterface, member: "PropertiesChanged") {
            (reader: inout BusMessageReader) throws(ServiceManagerError) in
            let interface = try reader.readString()
            let changed = try reader.readProperties()
            let invalidated = try reader.readStringArray()
            handler(PropertiesChangedSignal(interface: interface, changed: changed, invalidated: invalidated))
        }
    }
}

/// Reads a reply of one object path (a job's, a unit's).
private func readObjectPath(_ reader: inout BusMessageReader) throws(ServiceManagerError) -> BusObjectPath {
    try reader.readObjectPath()
}

/// Reads a reply with no arguments (arguments there would be ignored).
private func readNothing(_ reader: inout BusMessageReader) throws(ServiceManagerError) {}
