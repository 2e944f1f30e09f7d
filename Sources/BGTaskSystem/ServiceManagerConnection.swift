// A connection to a systemd service manager over sd-bus, driven by the daemon's sd-event loop: asynchronous method
// calls, signal subscriptions, and one report when the manager goes away.
import BGTaskPOSIX
import BGTaskVocabulary
import CSystemd
import Glibc

/// Which service manager to reach.
public enum ServiceManagerScope: Hashable, Sendable {
    /// The system instance (PID 1): its private socket `/run/systemd/private`, else the system bus.
    case system
    /// A user's instance, found in that user's runtime directory (`$XDG_RUNTIME_DIR`): `DIR/systemd/private`, else
    /// the user's bus `DIR/bus`.
    case user(runtimeDirectory: String)
}

/// A socket a service manager can be reached through, and whether it is the manager's own or a bus.
public struct ServiceManagerEndpoint: Hashable, Sendable, CustomStringConvertible {
    /// How the socket leads to the manager.
    public enum Kind: Hashable, Sendable {
        /// The manager's private socket: a direct connection to the manager itself, no bus between. No `Hello`, no
        /// names; the manager sends every signal on it whether or not the client subscribed.
        case direct
        /// A message bus where the manager owns `org.freedesktop.systemd1` (the system bus, a user's bus): the
        /// connection says `Hello`, and signals are matched on the manager's name.
        case bus
    }

    /// How the socket leads to the manager.
    public var kind: Kind
    /// The socket's path.
    public var socketPath: String

    /// A socket of `kind` at `socketPath`.
    public init(kind: Kind, socketPath: String) {
        self.kind = kind
        self.socketPath = socketPath
    }

    /// The places to try for `scope`, in order: the manager's private socket first (no bus daemon needed, and the
    /// one `systemctl` itself prefers as root), then the bus.
    public static func candidates(for scope: ServiceManagerScope) -> [ServiceManagerEndpoint] {
        switch scope {
        case .system:
            [
                ServiceManagerEndpoint(kind: .direct, socketPath: "/run/systemd/private"),
                ServiceManagerEndpoint(kind: .bus, socketPath: "/run/dbus/system_bus_socket"),
            ]
        case .user(let runtimeDirectory):
            [
                ServiceManagerEndpoint(kind: .direct, socketPath: runtimeDirectory + "/systemd/private"),
                ServiceManagerEndpoint(kind: .bus, socketPath: runtimeDirectory + "/bus"),
            ]
        }
    }

    /// The sd-bus address, `unix:path=…`, with the bytes D-Bus addresses reserve written `%XX`.
    public var address: String {
        var escaped = ""
        for byte in socketPath.utf8 {
            let isPlain =
                (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
                || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
                || "-_/.\\*".utf8.contains(byte)
            if isPlain {
                escaped.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let digits = Array("0123456789abcdef".unicodeScalars)
                escaped += "%"
                escaped.unicodeScalars.append(digits[Int(byte >> 4)])
                escaped.unicodeScalars.append(digits[Int(byte & 0x0f)])
            }
        }
        return "unix:path=" + escaped
    }

    /// "the manager's socket PATH" or "the bus at PATH", for logs.
    public var description: String {
        switch kind {
        case .direct: "the manager's socket \(socketPath)"
        case .bus: "the bus at \(socketPath)"
        }
    }
}

/// A connection to a systemd service manager (`sd_bus`), attached to an `EventLoop` so that nothing blocks it.
///
/// Every call is asynchronous: it queues a message and returns; its completion runs later on the loop, exactly once,
/// with the typed reply or a `ServiceManagerError`, also when the call could not even be sent (then on the next
/// iteration). Only `close()` cancels completions: those still waiting then run with `.disconnected` on the next
/// iteration. Signals reach the closures of their `BusSignalSubscription`s on the loop. When the manager goes away,
/// calls waiting for an answer complete with `.disconnected`, then `onDisconnect` runs once.
///
/// Single-threaded, like the loop: create it, call it and close it on the loop's thread.
public final class ServiceManagerConnection {
    /// Where it is connected.
    public let endpoint: ServiceManagerEndpoint

    /// The loop that drives it (kept alive by it: the bus holds the loop's `sd_event` anyway).
    let loop: EventLoop

    /// The bus (one reference); nil once closed.
    private var bus: OpaquePointer?

    /// The match on sd-bus's local `Disconnected` signal (one reference); nil once closed.
    private var disconnectionSlot: OpaquePointer?

    /// Calls sent and not answered yet, so `close()` can complete them.
    var pendingCalls: [ObjectIdentifier: PendingCall] = [:]

    /// The calls sent through this connection whose objects still exist: answered ones go once sd-bus frees their
    /// slots. For tests that check nothing is kept per call.
    var liveCallObjectCount = 0

    /// Live signal subscriptions, so `close()` can cancel them (each holds a reference to the bus).
    private var subscriptions: [ObjectIdentifier: BusSignalSubscription] = [:]

    /// Whether `onDisconnect` has run.
    private var hasReportedDisconnection = false

    /// Runs once, on the loop, when the connection closes from the other side (the manager exited or restarted, the
    /// socket broke), after the calls still waiting have completed with `.disconnected`. Not run for `close()`.
    public var onDisconnect: (() -> Void)?

    /// Runs on the loop for a signal a subscription could not read, or a match the bus refused: what a log shows.
    /// The signal is dropped; the subscription stays.
    public var onSignalError: ((ServiceManagerError) -> Void)?

    /// How long a call waits for its answer unless told otherwise: sd-bus's own default (25 s), long enough for a
    /// manager busy with a large transaction.
    public static let defaultCallTimeout: Duration = .seconds(25)

    /// The bus name systemd's manager owns, the destination of every call (ignored on a direct connection).
    static let managerName = "org.freedesktop.systemd1"

    /// Connects to `endpoint` and attaches the connection to `loop` (`sd_bus_new`, `sd_bus_set_address`,
    /// `sd_bus_set_bus_client` for a bus, `sd_bus_start`, `sd_bus_attach_event`).
    ///
    /// Connecting a Unix socket does not block: a missing socket (`ENOENT`), a refused one (`ECONNREFUSED`,
    /// nobody listens) or a forbidden one (`EACCES`) fail here; authentication and `Hello` go on in the loop, and a
    /// peer that is no service manager shows in the answer to the first call (`ServiceManagerProbe` makes that
    /// call).
    public init(endpoint: ServiceManagerEndpoint, loop: EventLoop) throws(ServiceManagerError) {
        self.endpoint = endpoint
        self.loop = loop
        var created: OpaquePointer?
        try busCall("sd_bus_new") { sd_bus_new(&created) }
        guard let bus = created else { throw .system(Errno(rawValue: ENOMEM, operation: "sd_bus_new")) }
        do {
            let address = endpoint.address
            try busCall("sd_bus_set_address(\(address))") { sd_bus_set_address(bus, address) }
            if endpoint.kind == .bus {
                try busCall("sd_bus_set_bus_client") { sd_bus_set_bus_client(bus, 1) }
            }
            // Descriptions show in sd-bus's debug logs (SYSTEMD_LOG_LEVEL=debug); failure only loses that.
            _ = sd_bus_set_description(bus, "service-manager")
            // The daemon decides what a lost manager means, not sd-bus (which would exit the loop).
            try busCall("sd_bus_set_exit_on_disconnect") { sd_bus_set_exit_on_disconnect(bus, 0) }
            // Nor does the loop's exit flush the queue: sd_bus_flush waits without a bound for a manager that reads
            // nothing. `close()` (or deinit) drops what was not sent.
            try busCall("sd_bus_set_close_on_exit") { sd_bus_set_close_on_exit(bus, 0) }
            try busCall("sd_bus_start(\(endpoint.socketPath))") { sd_bus_start(bus) }
            try busCall("sd_bus_attach_event") { sd_bus_attach_event(bus, loop.event, Int32(SD_EVENT_PRIORITY_NORMAL)) }
        } catch {
            sd_bus_close_unref(bus)
            throw error
        }
        self.bus = bus
        // sd-bus reports the end of the connection as a local signal; matched locally, never sent to a bus. The
        // slot's userdata is this object, unretained: `close()` (at the latest in deinit) frees the slot first.
        var slot: OpaquePointer?
        let result = sd_bus_match_signal(
            bus, &slot, nil, "/org/freedesktop/DBus/Local", "org.freedesktop.DBus.Local", "Disconnected",
            disconnectionTrampoline, Unmanaged.passUnretained(self).toOpaque())
        guard result >= 0 else {
            close()
            throw .system(Errno(rawValue: -result, operation: "sd_bus_match_signal(Disconnected)"))
        }
        disconnectionSlot = slot
    }

    deinit { close() }

    /// Whether the connection is open (`sd_bus_is_open`): false once closed from either side.
    public var isConnected: Bool {
        guard let bus else { return false }
        return sd_bus_is_open(bus) > 0
    }

    /// The connection's socket (`sd_bus_get_fd`), while open: for tests that check it is closed.
    var socketDescriptor: Int32? {
        guard let bus else { return nil }
        let descriptor = sd_bus_get_fd(bus)
        return descriptor >= 0 ? descriptor : nil
    }

    /// How many calls wait for their answer.
    public var pendingCallCount: Int { pendingCalls.count }

    /// How many signal subscriptions are live.
    public var subscriptionCount: Int { subscriptions.count }

    /// Closes the connection without waiting: cancels every subscription, closes the socket, and completes the
    /// calls still waiting with `.disconnected` on the next iteration of the loop (at once if the loop has
    /// finished). `onDisconnect` does not run. Safe to call twice, and from a completion or a signal handler.
    public func close() {
        guard let bus else { return }
        self.bus = nil
        for subscription in Array(subscriptions.values) { subscription.cancel() }
        disconnectionSlot = sd_bus_slot_unref(disconnectionSlot)
        let orphans = Array(pendingCalls.values)
        pendingCalls = [:]
        // Frees the bus unless a dispatch in progress holds it; either way the floating slots of the waiting calls
        // go with it, and their destroy callbacks give back the calls' retains (the orphans keep them alive here).
        sd_bus_close_unref(bus)
        for call in orphans { call.finishLater(.failure(.disconnected), on: loop) }
    }

    /// Calls `member` of `interface` on the object `path` of the manager, with `arguments`, and passes the reply to
    /// `read` and its result to `completion`, on the loop. An error reply completes with `.method(name, message:)`;
    /// no answer within `timeout`, with `.method(.noReply, …)`; a connection lost before the answer, with
    /// `.disconnected`; a reply `read` cannot read, with the error it throws.
    public func callMethod<Value>(
        path: BusObjectPath, interface: String, member: String, arguments: [BusValue] = [],
        timeout: Duration = ServiceManagerConnection.defaultCallTimeout,
        read: @escaping (inout BusMessageReader) throws(ServiceManagerError) -> Value,
        completion: @escaping (Result<Value, ServiceManagerError>) -> Void
    ) {
        let call = PendingCall { outcome in
            switch outcome {
            case .failure(let error):
                completion(.failure(error))
            case .success(let message):
                let result: Result<Value, ServiceManagerError>
                if let error = Self.error(of: message) {
                    result = .failure(error)
                } else {
                    var reader = BusMessageReader(message: message)
                    do throws(ServiceManagerError) {
                        result = .success(try read(&reader))
                    } catch {
                        result = .failure(error)
                    }
                }
                completion(result)
            }
        }
        do throws(ServiceManagerError) {
            try send(call, path: path, interface: interface, member: member, arguments: arguments, timeout: timeout)
        } catch {
            call.finishLater(.failure(error), on: loop)
        }
    }

    /// Builds the call's message and queues it (`sd_bus_call_async`), its slot floating: the bus owns it, frees it
    /// after the reply (or with the bus), and its destroy callback gives back the retain `call` gets here.
    private func send(
        _ call: PendingCall, path: BusObjectPath, interface: String, member: String, arguments: [BusValue],
        timeout: Duration
    ) throws(ServiceManagerError) {
        guard let bus, sd_bus_is_open(bus) > 0 else { throw .disconnected }
        guard path.isValid else { throw .malformed("not an object path: \(path.rawValue.debugDescription)") }
        var created: OpaquePointer?
        try busCall("sd_bus_message_new_method_call(\(interface).\(member))") {
            sd_bus_message_new_method_call(bus, &created, Self.managerName, path.rawValue, interface, member)
        }
        guard let message = created else { throw .system(Errno(rawValue: ENOMEM, operation: "new method call")) }
        defer { sd_bus_message_unref(message) }
        try appendBusValues(arguments, to: message)
        var slot: OpaquePointer?
        let microseconds = UInt64(max(1, timeout.nanosecondCount / 1000))
        let userdata = Unmanaged.passUnretained(call).toOpaque()
        do {
            try busCall("sd_bus_call_async(\(interface).\(member))") {
                sd_bus_call_async(bus, &slot, message, replyTrampoline, userdata, microseconds)
            }
        } catch .system(let errno) where errno.rawValue == ENOTCONN {
            throw .disconnected
        }
        guard let slot else { throw .system(Errno(rawValue: ENOMEM, operation: "sd_bus_call_async(\(member))")) }
        _ = Unmanaged.passRetained(call)
        guard sd_bus_slot_set_destroy_callback(slot, releaseTrampoline) >= 0 else {
            // Cannot happen for a live slot; if it did, dropping the slot cancels the call, and the retain is
            // given back here.
            sd_bus_slot_unref(slot)
            Unmanaged.passUnretained(call).release()
            throw .system(Errno(rawValue: EINVAL, operation: "sd_bus_slot_set_destroy_callback"))
        }
        _ = sd_bus_slot_set_floating(slot, 1)
        sd_bus_slot_unref(slot)
        call.identity = ObjectIdentifier(call)
        call.connection = self
        liveCallObjectCount += 1
        pendingCalls[ObjectIdentifier(call)] = call
        // A call queued by the loop's idle work comes after sd-bus prepared its sources for the coming sleep (the
        // descriptor's events, the reply timeout): the loop must prepare again before it sleeps.
        loop.sourcesChanged = true
    }

    /// The error an error reply carries, `.disconnected` for sd-bus's own "no reply" of a connection that closed
    /// while the call waited; nil for a method return.
    static func error(of message: OpaquePointer) -> ServiceManagerError? {
        guard let error = sd_bus_message_get_error(message), let namePointer = error.pointee.name else { return nil }
        let name = BusErrorName(rawValue: String(cString: namePointer))
        let text = error.pointee.message.map { String(cString: $0) } ?? ""
        if name == .noReply, let bus = sd_bus_message_get_bus(message), sd_bus_is_open(bus) <= 0 {
            return .disconnected
        }
        return .method(name, message: text)
    }

    /// Calls `handler` on the loop with each signal `member` of `interface` from the manager, from the object
    /// `path` (any object: nil), until the subscription is cancelled or the connection closed.
    ///
    /// On a bus the match names the manager as sender and is installed on the bus asynchronously (a refusal goes
    /// to `onSignalError`); on a direct connection there is no sender to match, and the match is local. A signal
    /// `handler` cannot read (it throws) goes to `onSignalError`.
    public func subscribe(
        path: BusObjectPath?, interface: String, member: String,
        handler: @escaping (inout BusMessageReader) throws(ServiceManagerError) -> Void
    ) throws(ServiceManagerError) -> BusSignalSubscription {
        guard let bus, sd_bus_is_open(bus) > 0 else { throw .disconnected }
        if let path, !path.isValid {
            throw .malformed("not an object path: \(path.rawValue.debugDescription)")
        }
        let subscription = BusSignalSubscription(connection: self, member: member, handler: handler)
        let sender = endpoint.kind == .bus ? Self.managerName : nil
        var slot: OpaquePointer?
        let userdata = Unmanaged.passUnretained(subscription).toOpaque()
        try busCall("sd_bus_match_signal_async(\(interface).\(member))") {
            sd_bus_match_signal_async(
                bus, &slot, sender, path?.rawValue, interface, member, signalTrampoline, matchInstalledTrampoline,
                userdata)
        }
        guard let slot else { throw .system(Errno(rawValue: ENOMEM, operation: "sd_bus_match_signal_async")) }
        _ = Unmanaged.passRetained(subscription)
        guard sd_bus_slot_set_destroy_callback(slot, releaseTrampoline) >= 0 else {
            sd_bus_slot_unref(slot)
            Unmanaged.passUnretained(subscription).release()
            throw .system(Errno(rawValue: EINVAL, operation: "sd_bus_slot_set_destroy_callback"))
        }
        subscription.slot = slot
        subscriptions[ObjectIdentifier(subscription)] = subscription
        loop.sourcesChanged = true
        return subscription
    }

    /// Forgets a cancelled subscription.
    fileprivate func remove(_ subscription: BusSignalSubscription) {
        subscriptions[ObjectIdentifier(subscription)] = nil
    }

    /// sd-bus's `Disconnected`: the calls waiting have just been completed; report once.
    fileprivate func connectionEnded() {
        guard !hasReportedDisconnection else { return }
        hasReportedDisconnection = true
        onDisconnect?()
    }
}

// ServiceManagerConnection is single-threaded, like its loop; this makes the compiler reject passing it across threads.
@available(*, unavailable)
extension ServiceManagerConnection: Sendable {}

/// A call waiting for its answer: what to do with the reply, run at most once.
final class PendingCall {
    /// Reads the reply (or takes the error) and runs the caller's completion; nil once it has run.
    private var body: ((Result<OpaquePointer, ServiceManagerError>) -> Void)?
    /// The connection that sent it, to forget it once answered.
    weak var connection: ServiceManagerConnection?
    /// Its key in the connection's table of waiting calls.
    var identity: ObjectIdentifier?

    init(_ body: @escaping (Result<OpaquePointer, ServiceManagerError>) -> Void) { self.body = body }

    deinit {
        if identity != nil { connection?.liveCallObjectCount -= 1 }
    }

    /// Runs the completion with `outcome` (a reply message valid during this call, or an error), unless it ran.
    func finish(_ outcome: Result<OpaquePointer, ServiceManagerError>) {
        if let identity { connection?.pendingCalls[identity] = nil }
        guard let body else { return }
        self.body = nil
        body(outcome)
    }

    /// Runs the completion with `error` on the next iteration of `loop`, or now if the loop cannot take a source
    /// any more (it has finished: nothing would ever run it).
    func finishLater(_ outcome: Result<OpaquePointer, ServiceManagerError>, on loop: EventLoop) {
        do {
            try loop.addDefer(name: "service-manager-call") { self.finish(outcome) }
        } catch {
            finish(outcome)
        }
    }
}

/// A subscription to a signal of the manager; `cancel()` ends it. The connection keeps it until then.
public final class BusSignalSubscription {
    /// The match slot (one reference); nil once cancelled.
    fileprivate var slot: OpaquePointer?
    /// The connection it belongs to.
    private weak var connection: ServiceManagerConnection?
    /// The signal's member name, for error reports.
    public let member: String
    /// Reads one signal and hands it on.
    private let handler: (inout BusMessageReader) throws(ServiceManagerError) -> Void

    fileprivate init(
        connection: ServiceManagerConnection, member: String,
        handler: @escaping (inout BusMessageReader) throws(ServiceManagerError) -> Void
    ) {
        self.connection = connection
        self.member = member
        self.handler = handler
    }

    /// Whether `cancel()` has been called, or the connection closed.
    public var isCancelled: Bool { slot == nil }

    /// Ends the subscription: its handler never runs again. Safe to call twice and from its own handler.
    public func cancel() {
        guard let slot else { return }
        self.slot = nil
        sd_bus_slot_unref(slot)
        connection?.remove(self)
    }

    /// Names the dispatch in progress for the loop's statistics.
    fileprivate func markDispatch() {
        connection?.loop.dispatchingSourceName = "service-manager"
    }

    /// Reads a delivered signal.
    fileprivate func deliver(_ message: OpaquePointer) {
        guard !isCancelled else { return }
        var reader = BusMessageReader(message: message)
        do throws(ServiceManagerError) {
            try handler(&reader)
        } catch {
            connection?.onSignalError?(.malformed("signal \(member): \(error)"))
        }
    }

    /// The bus answered the match's `AddMatch` (bus connections only).
    fileprivate func matchInstalled(_ message: OpaquePointer) {
        guard let error = ServiceManagerConnection.error(of: message) else { return }
        connection?.onSignalError?(error)
    }
}

// The C callbacks. Each is a non-capturing closure (swiftc crashes on capturing ones used as C function pointers);
// the userdata is the Swift object, kept alive by the retain given back in `releaseTrampoline`, or (for the
// disconnection match) by the connection that frees the slot before it goes.

/// A reply to a call (or sd-bus's synthesized error for a timeout or a lost connection). Returns 1: handled.
private let replyTrampoline: sd_bus_message_handler_t = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    let call = Unmanaged<PendingCall>.fromOpaque(userdata).takeUnretainedValue()
    call.connection?.loop.dispatchingSourceName = "service-manager"
    withExtendedLifetime(call) { call.finish(.success(message)) }
    return 1
}

/// A signal. Returns 0, so that every other match for the same signal runs too.
private let signalTrampoline: sd_bus_message_handler_t = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    let subscription = Unmanaged<BusSignalSubscription>.fromOpaque(userdata).takeUnretainedValue()
    subscription.markDispatch()
    withExtendedLifetime(subscription) { subscription.deliver(message) }
    return 0
}

/// The bus's answer to a match's `AddMatch`.
private let matchInstalledTrampoline: sd_bus_message_handler_t = { message, userdata, _ in
    guard let message, let userdata else { return 0 }
    let subscription = Unmanaged<BusSignalSubscription>.fromOpaque(userdata).takeUnretainedValue()
    withExtendedLifetime(subscription) { subscription.matchInstalled(message) }
    return 1
}

/// sd-bus's local `Disconnected` signal.
private let disconnectionTrampoline: sd_bus_message_handler_t = { _, userdata, _ in
    guard let userdata else { return 0 }
    let connection = Unmanaged<ServiceManagerConnection>.fromOpaque(userdata).takeUnretainedValue()
    withExtendedLifetime(connection) { connection.connectionEnded() }
    return 0
}

/// Gives back the retain taken when a slot was made, when sd-bus frees the slot.
private let releaseTrampoline: sd_bus_destroy_t = { userdata in
    guard let userdata else { return }
    Unmanaged<AnyObject>.fromOpaque(userdata).release()
}
