// Varlink errors: the generic wire form, and typed forms for the errors of both interfaces bgtaskd serves.
import BGTaskJSON

/// A Varlink error reply: a fully qualified error name and its parameters.
///
/// Servers build one with the static constructors (one per error of `io.bgtask.Lifecycle` and of
/// `org.varlink.service`) and encode it with `VarlinkCodec.encodeError(_:)`. Clients receive one from
/// `VarlinkCodec.decodeReply(_:from:)` and turn it into a `LifecycleError` or `VarlinkServiceError` to switch on.
public struct VarlinkError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The fully qualified error name, such as `io.bgtask.Lifecycle.NoSuchApp`.
    public var name: String

    /// The error's parameters, by name, as the interface declares them.
    public var parameters: [String: JSONValue]

    /// An error with any name and parameters; prefer the typed constructors for the interfaces bgtaskd serves.
    public init(name: String, parameters: [String: JSONValue] = [:]) {
        self.name = name
        self.parameters = parameters
    }

    /// The error in IDL-like form, parameters sorted by name: `io.bgtask.Lifecycle.NoSuchApp(app: "x")`.
    public var description: String {
        let rendered = parameters.keys.sorted().map { key in "\(key): \(render(parameters[key] ?? .null))" }
        return "\(name)(\(rendered.joined(separator: ", ")))"
    }
}

/// A compact rendering of a JSON value for messages; strings are quoted.
private func render(_ value: JSONValue) -> String {
    switch value {
    case .null: return "null"
    case .bool(let flag): return String(flag)
    case .number(let number): return Int64(exactly: number).map(String.init) ?? String(number)
    case .string(let string): return "\"\(string)\""
    case .array(let elements): return "[" + elements.map(render).joined(separator: ", ") + "]"
    case .object(let members):
        return "{" + members.keys.sorted().map { "\($0): \(render(members[$0] ?? .null))" }.joined(separator: ", ")
            + "}"
    }
}

// `LifecycleErrorName`, the error names `io.bgtask.Lifecycle` declares, is generated from the interface file.
extension LifecycleErrorName {
    /// The fully qualified name, `io.bgtask.Lifecycle.<Name>`.
    public var qualifiedName: String { LifecycleInterface.name + "." + rawValue }
}

/// An error of `io.bgtask.Lifecycle` with its typed parameters; see the `.varlink` file for when each is used.
public enum LifecycleError: Error, Hashable, Sendable {
    /// No live or remembered app has this name.
    case noSuchApp(app: String)
    /// A live app already has this name.
    case appExists(app: String)
    /// The app has no open task with this id: never begun, already ended, or another app's.
    case noSuchTask(app: String, taskId: Int)
    /// The app is in background with its background time used up, so no lease can begin.
    case backgroundTimeExhausted(app: String)
    /// The caller's credentials do not allow this call about this app.
    case permissionDenied
    /// The call does not fit the app's current state, which `state` names.
    case invalidState(app: String, state: AppState)
    /// The configured limit named by its key (`TasksPerAppMax`, ...) was reached; `max` is its value.
    case limitExceeded(limit: String, max: Int)
    /// The app was never sent an event with this id.
    case noSuchEvent(app: String, eventId: Int)
    /// The message was not a well-formed Varlink call (not UTF-8, not JSON, not an object, no method...);
    /// `reason` says which. The connection stays open.
    case invalidMessage(reason: String)
    /// `Launch` could not start the app; `reason` says what failed (the program was not found, its cgroup could not
    /// be made, exec failed, ...).
    case launchFailed(app: String, reason: String)
    /// The app holds no scheduled request with this identifier.
    case noSuchRequest(app: String, identifier: String)
    /// The host has no source for these conditions, which a request required: it would wait forever.
    case conditionUnavailable(conditions: [Constraint])

    /// The error's name within the interface.
    public var errorName: LifecycleErrorName {
        switch self {
        case .noSuchApp: .noSuchApp
        case .appExists: .appExists
        case .noSuchTask: .noSuchTask
        case .backgroundTimeExhausted: .backgroundTimeExhausted
        case .permissionDenied: .permissionDenied
        case .invalidState: .invalidState
        case .limitExceeded: .limitExceeded
        case .noSuchEvent: .noSuchEvent
        case .invalidMessage: .invalidMessage
        case .launchFailed: .launchFailed
        case .noSuchRequest: .noSuchRequest
        case .conditionUnavailable: .conditionUnavailable
        }
    }

    /// The parameters as the interface declares them.
    public var parameters: [String: JSONValue] {
        switch self {
        case .noSuchApp(let app), .appExists(let app), .backgroundTimeExhausted(let app):
            return ["app": .string(app)]
        case .noSuchTask(let app, let taskId):
            return ["app": .string(app), "taskId": .number(Double(taskId))]
        case .permissionDenied:
            return [:]
        case .invalidState(let app, let state):
            return ["app": .string(app), "state": .string(state.rawValue)]
        case .limitExceeded(let limit, let max):
            return ["limit": .string(limit), "max": .number(Double(max))]
        case .noSuchEvent(let app, let eventId):
            return ["app": .string(app), "eventId": .number(Double(eventId))]
        case .invalidMessage(let reason):
            return ["reason": .string(reason)]
        case .launchFailed(let app, let reason):
            return ["app": .string(app), "reason": .string(reason)]
        case .noSuchRequest(let app, let identifier):
            return ["app": .string(app), "identifier": .string(identifier)]
        case .conditionUnavailable(let conditions):
            return ["conditions": .array(conditions.map { .string($0.rawValue) })]
        }
    }

    /// Reads a received error; nil when it is not an `io.bgtask.Lifecycle` error or its parameters do not fit.
    public init?(_ error: VarlinkError) {
        let prefix = LifecycleInterface.name + "."
        guard error.name.hasPrefix(prefix),
            let name = LifecycleErrorName(rawValue: String(error.name.dropFirst(prefix.count)))
        else { return nil }
        let parameters = error.parameters
        switch name {
        case .noSuchApp:
            guard let app = parameters["app"]?.stringValue else { return nil }
            self = .noSuchApp(app: app)
        case .appExists:
            guard let app = parameters["app"]?.stringValue else { return nil }
            self = .appExists(app: app)
        case .noSuchTask:
            guard let app = parameters["app"]?.stringValue, let taskId = parameters["taskId"]?.intValue else {
                return nil
            }
            self = .noSuchTask(app: app, taskId: taskId)
        case .backgroundTimeExhausted:
            guard let app = parameters["app"]?.stringValue else { return nil }
            self = .backgroundTimeExhausted(app: app)
        case .permissionDenied:
            self = .permissionDenied
        case .invalidState:
            guard let app = parameters["app"]?.stringValue,
                let state = parameters["state"]?.stringValue.flatMap(AppState.init(rawValue:))
            else { return nil }
            self = .invalidState(app: app, state: state)
        case .limitExceeded:
            guard let limit = parameters["limit"]?.stringValue, let max = parameters["max"]?.intValue else {
                return nil
            }
            self = .limitExceeded(limit: limit, max: max)
        case .noSuchEvent:
            guard let app = parameters["app"]?.stringValue, let eventId = parameters["eventId"]?.intValue else {
                return nil
            }
            self = .noSuchEvent(app: app, eventId: eventId)
        case .invalidMessage:
            guard let reason = parameters["reason"]?.stringValue else { return nil }
            self = .invalidMessage(reason: reason)
        case .launchFailed:
            guard let app = parameters["app"]?.stringValue, let reason = parameters["reason"]?.stringValue else {
                return nil
            }
            self = .launchFailed(app: app, reason: reason)
        case .noSuchRequest:
            guard let app = parameters["app"]?.stringValue, let identifier = parameters["identifier"]?.stringValue
            else { return nil }
            self = .noSuchRequest(app: app, identifier: identifier)
        case .conditionUnavailable:
            guard let words = parameters["conditions"]?.arrayValue else { return nil }
            var conditions: [Constraint] = []
            for word in words {
                guard let condition = word.stringValue.flatMap(Constraint.init(rawValue:)) else { return nil }
                conditions.append(condition)
            }
            self = .conditionUnavailable(conditions: conditions)
        }
    }
}

// `VarlinkServiceErrorName`, the error names `org.varlink.service` declares, is generated from the interface file.
extension VarlinkServiceErrorName {
    /// The fully qualified name, `org.varlink.service.<Name>`.
    public var qualifiedName: String { VarlinkServiceInterface.name + "." + rawValue }
}

/// An error of the standard `org.varlink.service` interface with its typed parameters.
public enum VarlinkServiceError: Error, Hashable, Sendable {
    /// The call named an interface the service does not implement.
    case interfaceNotFound(interface: String)
    /// The interface has no method of this name (the fully qualified method name).
    case methodNotFound(method: String)
    /// The interface declares the method but the service does not implement it.
    case methodNotImplemented(method: String)
    /// The named parameter is missing or has the wrong type or value.
    case invalidParameter(parameter: String)
    /// The caller may not make this call.
    case permissionDenied
    /// The method streams its replies and must be called with `more: true`.
    case expectedMore

    /// The error's name within the interface.
    public var errorName: VarlinkServiceErrorName {
        switch self {
        case .interfaceNotFound: .interfaceNotFound
        case .methodNotFound: .methodNotFound
        case .methodNotImplemented: .methodNotImplemented
        case .invalidParameter: .invalidParameter
        case .permissionDenied: .permissionDenied
        case .expectedMore: .expectedMore
        }
    }

    /// The parameters as the interface declares them.
    public var parameters: [String: JSONValue] {
        switch self {
        case .interfaceNotFound(let interface): ["interface": .string(interface)]
        case .methodNotFound(let method), .methodNotImplemented(let method): ["method": .string(method)]
        case .invalidParameter(let parameter): ["parameter": .string(parameter)]
        case .permissionDenied, .expectedMore: [:]
        }
    }

    /// Reads a received error; nil when it is not an `org.varlink.service` error or its parameters do not fit.
    public init?(_ error: VarlinkError) {
        let prefix = VarlinkServiceInterface.name + "."
        guard error.name.hasPrefix(prefix),
            let name = VarlinkServiceErrorName(rawValue: String(error.name.dropFirst(prefix.count)))
        else { return nil }
        switch name {
        case .interfaceNotFound:
            guard let interface = error.parameters["interface"]?.stringValue else { return nil }
            self = .interfaceNotFound(interface: interface)
        case .methodNotFound:
            guard let method = error.parameters["method"]?.stringValue else { return nil }
            self = .methodNotFound(method: method)
        case .methodNotImplemented:
            guard let method = error.parameters["method"]?.stringValue else { return nil }
            self = .methodNotImplemented(method: method)
        case .invalidParameter:
            guard let parameter = error.parameters["parameter"]?.stringValue else { return nil }
            self = .invalidParameter(parameter: parameter)
        case .permissionDenied:
            self = .permissionDenied
        case .expectedMore:
            self = .expectedMore
        }
    }
}

extension VarlinkError {
    /// The wire form of an `io.bgtask.Lifecycle` error.
    public init(_ error: LifecycleError) {
        self.init(name: error.errorName.qualifiedName, parameters: error.parameters)
    }

    /// The wire form of an `org.varlink.service` error.
    public init(_ error: VarlinkServiceError) {
        self.init(name: error.errorName.qualifiedName, parameters: error.parameters)
    }

    // io.bgtask.Lifecycle

    /// `io.bgtask.Lifecycle.NoSuchApp`: no live or remembered app has this name.
    public static func noSuchApp(app: String) -> VarlinkError { VarlinkError(LifecycleError.noSuchApp(app: app)) }

    /// `io.bgtask.Lifecycle.AppExists`: a live app already has this name.
    public static func appExists(app: String) -> VarlinkError { VarlinkError(LifecycleError.appExists(app: app)) }

    /// `io.bgtask.Lifecycle.NoSuchTask`: the app has no open task with this id.
    public static func noSuchTask(app: String, taskId: Int) -> VarlinkError {
        VarlinkError(LifecycleError.noSuchTask(app: app, taskId: taskId))
    }

    /// `io.bgtask.Lifecycle.BackgroundTimeExhausted`: no background time is left to begin a lease.
    public static func backgroundTimeExhausted(app: String) -> VarlinkError {
        VarlinkError(LifecycleError.backgroundTimeExhausted(app: app))
    }

    /// `io.bgtask.Lifecycle.PermissionDenied`: the caller may not make this call about this app.
    public static func permissionDenied() -> VarlinkError { VarlinkError(LifecycleError.permissionDenied) }

    /// `io.bgtask.Lifecycle.InvalidState`: the call does not fit the app's current state.
    public static func invalidState(app: String, state: AppState) -> VarlinkError {
        VarlinkError(LifecycleError.invalidState(app: app, state: state))
    }

    /// `io.bgtask.Lifecycle.LimitExceeded`: the configured limit `limit` (its key) of value `max` was reached.
    public static func limitExceeded(limit: String, max: Int) -> VarlinkError {
        VarlinkError(LifecycleError.limitExceeded(limit: limit, max: max))
    }

    /// `io.bgtask.Lifecycle.NoSuchEvent`: the app was never sent an event with this id.
    public static func noSuchEvent(app: String, eventId: Int) -> VarlinkError {
        VarlinkError(LifecycleError.noSuchEvent(app: app, eventId: eventId))
    }

    /// `io.bgtask.Lifecycle.LaunchFailed`: `Launch` could not start the app; `reason` says what failed.
    public static func launchFailed(app: String, reason: String) -> VarlinkError {
        VarlinkError(LifecycleError.launchFailed(app: app, reason: reason))
    }

    /// `io.bgtask.Lifecycle.NoSuchRequest`: the app holds no scheduled request with this identifier.
    public static func noSuchRequest(app: String, identifier: String) -> VarlinkError {
        VarlinkError(LifecycleError.noSuchRequest(app: app, identifier: identifier))
    }

    /// `io.bgtask.Lifecycle.ConditionUnavailable`: the host has no source for these conditions.
    public static func conditionUnavailable(conditions: [Constraint]) -> VarlinkError {
        VarlinkError(LifecycleError.conditionUnavailable(conditions: conditions))
    }

    /// `io.bgtask.Lifecycle.InvalidMessage`: the message was not a well-formed Varlink call.
    public static func invalidMessage(reason: String) -> VarlinkError {
        VarlinkError(LifecycleError.invalidMessage(reason: reason))
    }

    // org.varlink.service

    /// `org.varlink.service.InterfaceNotFound`: the service does not implement `interface`.
    public static func interfaceNotFound(interface: String) -> VarlinkError {
        VarlinkError(VarlinkServiceError.interfaceNotFound(interface: interface))
    }

    /// `org.varlink.service.MethodNotFound`: no such method; `method` is the fully qualified name called.
    public static func methodNotFound(method: String) -> VarlinkError {
        VarlinkError(VarlinkServiceError.methodNotFound(method: method))
    }

    /// `org.varlink.service.MethodNotImplemented`: declared by the interface but not implemented.
    public static func methodNotImplemented(method: String) -> VarlinkError {
        VarlinkError(VarlinkServiceError.methodNotImplemented(method: method))
    }

    /// `org.varlink.service.InvalidParameter`: the named parameter is missing or has the wrong type or value.
    public static func invalidParameter(parameter: String) -> VarlinkError {
        VarlinkError(VarlinkServiceError.invalidParameter(parameter: parameter))
    }

    /// `org.varlink.service.PermissionDenied`: the caller may not use the service at all.
    public static func servicePermissionDenied() -> VarlinkError {
        VarlinkError(VarlinkServiceError.permissionDenied)
    }

    /// `org.varlink.service.ExpectedMore`: the method streams and must be called with `more: true`.
    public static func expectedMore() -> VarlinkError { VarlinkError(VarlinkServiceError.expectedMore) }
}
