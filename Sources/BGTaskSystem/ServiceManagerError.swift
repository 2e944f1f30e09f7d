// How a call to the service manager over sd-bus fails: locally (an errno), by the manager's answer (a D-Bus error
// name and message), or because the connection is gone.
import BGTaskPOSIX

/// The name of a D-Bus error (`sd_bus_error.name`), such as `org.freedesktop.systemd1.NoSuchUnit`: what a caller
/// switches on. The well-known ones are constants.
public struct BusErrorName: RawRepresentable, Hashable, Sendable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    /// The name as the peer sent it.
    public var rawValue: String

    /// Wraps an error name.
    public init(rawValue: String) { self.rawValue = rawValue }

    /// Wraps a literal error name.
    public init(stringLiteral value: String) { self.rawValue = value }

    /// The name itself.
    public var description: String { rawValue }

    /// `org.freedesktop.systemd1.NoSuchUnit`: no unit of that name is loaded (`GetUnit`, `KillUnit`, `FreezeUnit`).
    public static let noSuchUnit: BusErrorName = "org.freedesktop.systemd1.NoSuchUnit"
    /// `org.freedesktop.systemd1.NoUnitForPID`: the process is in no unit (`GetUnitByPID`).
    public static let noUnitForPID: BusErrorName = "org.freedesktop.systemd1.NoUnitForPID"
    /// `org.freedesktop.systemd1.UnitExists`: a unit of that name is already loaded (`StartTransientUnit`).
    public static let unitExists: BusErrorName = "org.freedesktop.systemd1.UnitExists"
    /// `org.freedesktop.systemd1.UnitInactive`: the unit is not running (`FreezeUnit` of a stopped unit, or of a
    /// unit type that cannot be frozen).
    public static let unitInactive: BusErrorName = "org.freedesktop.systemd1.UnitInactive"
    /// `org.freedesktop.DBus.Error.NotSupported`: the manager cannot do it on this host (`FreezeUnit` where the
    /// cgroup hierarchy is not pure cgroup2).
    public static let notSupported: BusErrorName = "org.freedesktop.DBus.Error.NotSupported"
    /// `org.freedesktop.DBus.Error.NoReply`: no answer in time (sd-bus's own error for a call that timed out).
    public static let noReply: BusErrorName = "org.freedesktop.DBus.Error.NoReply"
    /// `org.freedesktop.DBus.Error.UnknownMethod`: the peer has no such method (an older manager, or not systemd).
    public static let unknownMethod: BusErrorName = "org.freedesktop.DBus.Error.UnknownMethod"
    /// `org.freedesktop.DBus.Error.UnknownObject`: the peer has no object at that path.
    public static let unknownObject: BusErrorName = "org.freedesktop.DBus.Error.UnknownObject"
    /// `org.freedesktop.DBus.Error.UnknownInterface`: the object has no such interface.
    public static let unknownInterface: BusErrorName = "org.freedesktop.DBus.Error.UnknownInterface"
    /// `org.freedesktop.DBus.Error.UnknownProperty`: the interface has no such property.
    public static let unknownProperty: BusErrorName = "org.freedesktop.DBus.Error.UnknownProperty"
    /// `org.freedesktop.DBus.Error.ServiceUnknown`: no peer on the bus owns the destination name (no systemd there).
    public static let serviceUnknown: BusErrorName = "org.freedesktop.DBus.Error.ServiceUnknown"
    /// `org.freedesktop.DBus.Error.AccessDenied`: the caller may not do this.
    public static let accessDenied: BusErrorName = "org.freedesktop.DBus.Error.AccessDenied"
    /// `org.freedesktop.DBus.Error.InvalidArgs`: the arguments were refused (a bad unit name or property).
    public static let invalidArguments: BusErrorName = "org.freedesktop.DBus.Error.InvalidArgs"
}

/// Why a call to the service manager failed. Every call reports exactly one of these, or its value.
public enum ServiceManagerError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A libsystemd call failed here (it returned a negative errno): opening the connection, building or sending
    /// the message. The `Errno` names the call.
    case system(Errno)
    /// The peer answered with a D-Bus error: its name (what to switch on) and its human-readable message.
    case method(BusErrorName, message: String)
    /// The connection is closed, or closed before the answer came: the manager went away, or `close()` was called.
    /// Nothing more arrives on it.
    case disconnected
    /// A message was not what this client expects (a reply of another signature), or an argument cannot be put in
    /// a message (an array element of the wrong type, a NUL byte in a string); says which.
    case malformed(String)
    /// A bounded blocking wait (`waitFor`, `runLoop`: tests and tools) ran out before the answer came.
    case timedOut(Duration)

    /// The D-Bus error name of a `.method` error, else nil.
    public var busErrorName: BusErrorName? {
        if case .method(let name, _) = self { name } else { nil }
    }

    /// One line for a log: `org.freedesktop.systemd1.NoSuchUnit: Unit x.service not loaded.`, and so on.
    public var description: String {
        switch self {
        case .system(let errno): errno.description
        case .method(let name, let message): message.isEmpty ? name.rawValue : "\(name.rawValue): \(message)"
        case .disconnected: "the connection to the service manager is closed"
        case .malformed(let what): "unexpected message: \(what)"
        case .timedOut(let duration): "no answer from the service manager within \(duration)"
        }
    }
}
