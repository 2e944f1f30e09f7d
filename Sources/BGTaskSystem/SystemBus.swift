// A connection to the D-Bus system bus on the daemon's sd-event loop, for the services the host conditions come from
// (UPower, NetworkManager, logind): properties read asynchronously, signals matched by rule, the end of the
// connection reported once.
import BGTaskPOSIX
import CSystemd
import Glibc

/// The system bus (`sd_bus_open_system`: `$DBUS_SYSTEM_BUS_ADDRESS`, else `/run/dbus/system_bus_socket`), attached
/// to an `EventLoop` so that nothing blocks it.
///
/// Every call is asynchronous: its completion runs later on the loop exactly once, with the reply read or the error,
/// also when the call could not be sent (then on the next iteration). Matches deliver their signals on the loop until
/// cancelled. When the bus goes away, waiting calls complete with `.disconnected` and `onDisconnect` runs once.
/// Single-threaded, like the loop.
public final class SystemBus {
    /// The loop that drives it.
    let loop: EventLoop
    /// The bus (one reference); nil once closed.
    private var bus: OpaquePointer?
    /// The match on sd-bus's local `Disconnected` signal.
    private var disconnectionSlot: OpaquePointer?
    /// Live matches, so `close()` can cancel them.
    private var matches: [ObjectIdentifier: BusMatch] = [:]
    /// Calls waiting for their answer, so `close()` can complete them.
    private var pendingCalls: [ObjectIdentifier: BusCall] = [:]
    private var hasReportedDisconnection = false

    /// Runs once on the loop when the bus closes from the other side (not for `close()`).
    public var onDisconnect: (() -> Void)?

    /// How long a property read waits: the services answer in milliseconds; one that does not within 5 s is hung,
    /// and its condition then waits for its next signal rather than for it.
    public static let callTimeout: Duration = .seconds(5)

    /// Where the system bus is, as sd-bus looks for it: for the log.
    public static var addressDescription: String {
        getenv("DBUS_SYSTEM_BUS_ADDRESS").map { String(cString: $0) } ?? "unix:path=/run/dbus/system_bus_socket"
    }

    /// Connects to the system bus, or to the bus at `address` (a D-Bus address such as `unix:path=/run/x`: a test's
    /// private bus), and attaches the connection to `loop`. A missing socket (`ENOENT`), or nobody listening
    /// (`ECONNREFUSED`), fails here; authentication and `Hello` go on in the loop.
    public init(loop: EventLoop, address: String? = nil) throws(ServiceManagerError) {
        self.loop = loop
        var created: OpaquePointer?
        if let address {
            try busCall("sd_bus_new") { sd_bus_new(&created) }
        } else {
            try busCall("sd_bus_open_system") { sd_bus_open_system(&created) }
        }
        guard let bus = created else { throw .system(Errno(rawValue: ENOMEM, operation: "sd_bus_open_system")) }
        do {
            if let address {
                try busCall("sd_bus_set_address(\(address))") { sd_bus_set_address(bus, address) }
                try busCall("sd_bus_set_bus_client") { sd_bus_set_bus_client(bus, 1) }
                try busCall("sd_bus_start(\(address))") { sd_bus_start(bus) }
            }
            _ = sd_bus_set_description(bus, "conditions")
            try busCall("sd_bus_set_exit_on_disconnect") { sd_bus_set_exit_on_disconnect(bus, 0) }
            try busCall("sd_bus_set_close_on_exit") { sd_bus_set_close_on_exit(bus, 0) }
            try busCall("sd_bus_attach_event") { sd_bus_attach_event(bus, loop.event, Int32(SD_EVENT_PRIORITY_NORMAL)) }
        } catch {
            sd_bus_close_unref(bus)
            throw error
        }
        self.bus = bus
        var slot: OpaquePointer?
        let result = sd_bus_match_signal(
            bus, &slot, nil, "/org/freedesktop/DBus/Local", "org.freedesktop.DBus.Local", "Disconnected",
            systemBusDisconnected, Unmanaged.passUnretained(self).toOpaque())
        guard result >= 0 else {
            close()
            throw .system(Errno(rawValue: -result, operation: "sd_bus_match_signal(Disconnected)"))
        }
        disconnectionSlot = slot
    }

    deinit { close() }

    /// Whether the connection is open.
    public var isConnected: Bool {
        guard let bus else { return false }
        return sd_bus_is_open(bus) > 0
    }

    /// Closes the connection: cancels every match, completes the waiting calls with `.disconnected` on the next
    /// iteration. `onDisconnect` does not run. Safe to call twice.
    public func close() {
        guard let bus else { return }
        self.bus = nil
        for match in Array(matches.values) { match.cancel() }
        disconnectionSlot = sd_bus_slot_unref(disconnectionSlot)
        let orphans = Array(pendingCalls.values)
        pendingCalls = [:]
        sd_bus_close_unref(bus)
        for call in orphans { call.finishLater(.failure(.disconnected), on: loop) }
    }

    /// Calls `member` of `interface` on `path` of `destination` and hands the reply read by `read` to
    /// `completion`, on the loop.
    public func call<Value>(
        destination: String, path: BusObjectPath, interface: String, member: String, arguments: [BusValue] = [],
        read: @escaping (inout BusMessageReader) throws(ServiceManagerError) -> Value,
        completion: @escaping (Result<Value, ServiceManagerError>) -> Void
    ) {
        let call = BusCall { outcome in
            switch outcome {
            case .failure(let error):
                completion(.failure(error))
            case .success(let message):
                if let error = ServiceManagerConnection.error(of: message) {
                    completion(.failure(error))
                    return
                }
                var reader = BusMessageReader(message: message)
                do throws(ServiceManagerError) {
                    completion(.success(try read(&reader)))
                } catch {
                    completion(.failure(error))
                }
            }
        }
        do throws(ServiceManagerError) {
            try send(call, destination: destination, path: path, interface: interface, member: member, arguments)
        } catch {
            call.finishLater(.failure(error), on: loop)
        }
    }

    /// Reads every property of `interface` on `path` of `destination` (`org.freedesktop.DBus.Properties.GetAll`).
    public func allProperties(
        destination: String, path: BusObjectPath, interface: String,
        completion: @escaping (Result<[String: BusValue], ServiceManagerError>) -> Void
    ) {
        call(
            destination: destination, path: path, interface: "org.freedesktop.DBus.Properties", member: "GetAll",
            arguments: [.string(interface)],
            read: { (reader) throws(ServiceManagerError) in try reader.readProperties() }, completion: completion)
    }

    private func send(
        _ call: BusCall, destination: String, path: BusObjectPath, interface: String, member: String,
        _ arguments: [BusValue]
    ) throws(ServiceManagerError) {
        guard let bus, sd_bus_is_open(bus) > 0 else { throw .disconnected }
        guard path.isValid else { throw .malformed("not an object path: \(path.rawValue.debugDescription)") }
        var created: OpaquePointer?
        try busCall("sd_bus_message_new_method_call(\(interface).\(member))") {
            sd_bus_message_new_method_call(bus, &created, destination, path.rawValue, interface, member)
        }
        guard let message = created else { throw .system(Errno(rawValue: ENOMEM, operation: "new method call")) }
        defer { sd_bus_message_unref(message) }
        try appendBusValues(arguments, to: message)
        var slot: OpaquePointer?
        let microseconds = UInt64(Self.callTimeout.nanosecondCount / 1000)
        try busCall("sd_bus_call_async(\(interface).\(member))") {
            sd_bus_call_async(
                bus, &slot, message, systemBusReply, Unmanaged.passUnretained(call).toOpaque(), microseconds)
        }
        guard let slot else { throw .system(Errno(rawValue: ENOMEM, operation: "sd_bus_call_async(\(member))")) }
        // The slot floats (the bus frees it after the reply, or with the bus); its destroy callback gives back this
        // retain.
        _ = Unmanaged.passRetained(call)
        _ = sd_bus_slot_set_destroy_callback(slot, systemBusRelease)
        _ = sd_bus_slot_set_floating(slot, 1)
        sd_bus_slot_unref(slot)
        call.bus = self
        pendingCalls[ObjectIdentifier(call)] = call
        loop.sourcesChanged = true
    }

    /// Calls `handler` on the loop with each message matching `rule` (D-Bus match syntax, e.g.
    /// `type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.freedesktop.UPower'`),
    /// until the match is cancelled. The bus installs the rule asynchronously; a refusal goes to `onError`, as does a
    /// signal `handler` cannot read.
    public func addMatch(
        _ rule: String, onError: @escaping (ServiceManagerError) -> Void,
        handler: @escaping (inout BusMessageReader) throws(ServiceManagerError) -> Void
    ) throws(ServiceManagerError) -> BusMatch {
        guard let bus, sd_bus_is_open(bus) > 0 else { throw .disconnected }
        let match = BusMatch(bus: self, rule: rule, onError: onError, handler: handler)
        var slot: OpaquePointer?
        try busCall("sd_bus_add_match_async(\(rule))") {
            sd_bus_add_match_async(
                bus, &slot, rule, systemBusSignal, systemBusMatchInstalled, Unmanaged.passUnretained(match).toOpaque())
        }
        guard let slot else { throw .system(Errno(rawValue: ENOMEM, operation: "sd_bus_add_match_async")) }
        _ = Unmanaged.passRetained(match)
        _ = sd_bus_slot_set_destroy_callback(slot, systemBusRelease)
        match.slot = slot
        matches[ObjectIdentifier(match)] = match
        loop.sourcesChanged = true
        return match
    }

    fileprivate func forget(_ match: BusMatch) { matches[ObjectIdentifier(match)] = nil }

    fileprivate func forget(_ call: BusCall) { pendingCalls[ObjectIdentifier(call)] = nil }

    fileprivate func connectionEnded() {
        guard !hasReportedDisconnection else { return }
        hasReportedDisconnection = true
        onDisconnect?()
    }
}

@available(*, unavailable)
extension SystemBus: Sendable {}

/// A call waiting for its answer.
final class BusCall {
    private var body: ((Result<OpaquePointer, ServiceManagerError>) -> Void)?
    fileprivate weak var bus: SystemBus?

    init(_ body: @escaping (Result<OpaquePointer, ServiceManagerError>) -> Void) { self.body = body }

    /// Runs the completion once.
    func finish(_ outcome: Result<OpaquePointer, ServiceManagerError>) {
        bus?.forget(self)
        guard let body else { return }
        self.body = nil
        body(outcome)
    }

    /// Runs the completion on the next iteration of `loop`, or now when the loop takes no more sources.
    func finishLater(_ outcome: Result<OpaquePointer, ServiceManagerError>, on loop: EventLoop) {
        do {
            try loop.addDefer(name: "system-bus-call") { self.finish(outcome) }
        } catch {
            finish(outcome)
        }
    }
}

/// A match of signals on the system bus; `cancel()` ends it.
public final class BusMatch {
    fileprivate var slot: OpaquePointer?
    private weak var bus: SystemBus?
    /// The rule, for logs.
    public let rule: String
    private let onError: (ServiceManagerError) -> Void
    private let handler: (inout BusMessageReader) throws(ServiceManagerError) -> Void

    fileprivate init(
        bus: SystemBus, rule: String, onError: @escaping (ServiceManagerError) -> Void,
        handler: @escaping (inout BusMessageReader) throws(ServiceManagerError) -> Void
    ) {
        self.bus = bus
        self.rule = rule
        self.onError = onError
        self.handler = handler
    }

    /// Whether it was cancelled (or its bus closed).
    public var isCancelled: Bool { slot == nil }

    /// Ends the match: its handler never runs again. Safe to call twice and from its own handler.
    public func cancel() {
        guard let slot else { return }
        self.slot = nil
        sd_bus_slot_unref(slot)
        bus?.forget(self)
    }

    fileprivate func deliver(_ message: OpaquePointer) {
        guard !isCancelled else { return }
        bus?.loop.dispatchingSourceName = "system-bus"
        var reader = BusMessageReader(message: message)
        do throws(ServiceManagerError) {
            try handler(&reader)
        } catch {
            onError(.malformed("\(rule): \(error)"))
        }
    }

    fileprivate func installed(_ message: OpaquePointer) {
        guard let error = ServiceManagerConnection.error(of: message) else { return }
        onError(error)
    }
}

// The C callbacks: non-capturing closures, the Swift object as userdata, kept alive by the retain the slot's destroy
// callback gives back (or, for the disconnection match, by the bus that frees the slot before it goes).

private let systemBusReply: sd_bus_message_handler_t = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    let call = Unmanaged<BusCall>.fromOpaque(userdata).takeUnretainedValue()
    withExtendedLifetime(call) { call.finish(.success(message)) }
    return 1
}

private let systemBusSignal: sd_bus_message_handler_t = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    let match = Unmanaged<BusMatch>.fromOpaque(userdata).takeUnretainedValue()
    withExtendedLifetime(match) { match.deliver(message) }
    return 0
}

private let systemBusMatchInstalled: sd_bus_message_handler_t = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    let match = Unmanaged<BusMatch>.fromOpaque(userdata).takeUnretainedValue()
    withExtendedLifetime(match) { match.installed(message) }
    return 1
}

private let systemBusDisconnected: sd_bus_message_handler_t = { _, userdata, _ in
    guard let userdata else { return 0 }
    let bus = Unmanaged<SystemBus>.fromOpaque(userdata).takeUnretainedValue()
    withExtendedLifetime(bus) { bus.connectionEnded() }
    return 0
}

private let systemBusRelease: sd_bus_destroy_t = { userdata in
    guard let userdata else { return }
    Unmanaged<AnyObject>.fromOpaque(userdata).release()
}
