// Every way a call to bgtaskd can fail, typed, with a description a person can act on.
@_exported import BGTaskJSON
import BGTaskPOSIX
@_exported import BGTaskProtocol
import Glibc

// `@_exported`: the client's API speaks the interface's own types (`AppInfo`, `EventInfo`, `JSONValue`,
// `LifecycleError`...), so `import BGTaskClient` alone must be enough to use it.

/// Why a call to bgtaskd failed.
public enum ClientError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Nothing accepts connections at the socket path: the file is missing (`ENOENT`) or stale (`ECONNREFUSED`).
    case daemonNotRunning(socketPath: String, Errno)
    /// Access was refused: with `method` nil, the socket itself (`EACCES`/`EPERM` on connect); otherwise the
    /// daemon refused that call for the caller's credentials (`PermissionDenied` of either interface).
    case permissionDenied(socketPath: String, method: String?)
    /// A per-user socket was asked for but `XDG_RUNTIME_DIR` is unset or not an absolute path.
    case runtimeDirectoryUnset
    /// One of the typed errors of `io.bgtask.Lifecycle` other than `PermissionDenied`.
    case lifecycle(LifecycleError)
    /// One of the standard errors of `org.varlink.service` other than `PermissionDenied`.
    case service(VarlinkServiceError)
    /// Any other error reply, or a known error name whose parameters do not fit its declaration.
    case remote(VarlinkError)
    /// The daemon broke the Varlink protocol: unframed, invalid or oversized message, or a reply of the wrong
    /// shape. The connection is closed.
    case protocolViolation(String)
    /// No reply came within the timeout. A timed-out call closes its connection, since its late reply would be
    /// taken for the next call's; a timed-out read of a stream leaves the stream usable.
    case timedOut
    /// The connection is closed: the daemon went away (restart, crash), or it was closed on this side.
    case disconnected
    /// The connection is in the middle of a streaming call; other calls need their own connection.
    case connectionBusy
    /// The call could not be encoded, such as a payload holding a NaN or infinite number.
    case invalidRequest(String)
    /// A system call on the connection failed in a way not covered above.
    case io(Errno)

    public var description: String {
        switch self {
        case .daemonNotRunning(let path, _):
            return "bgtaskd is not running at \(path): start it with `systemctl start bgtaskd` "
                + "(or `systemctl --user start bgtaskd`), or run `bgtaskd --socket \(path)`"
        case .permissionDenied(let path, nil):
            return "cannot connect to bgtaskd at \(path): permission denied"
        case .permissionDenied(_, let method?):
            return "bgtaskd refused \(method): permission denied (app calls are accepted from the app's own user "
                + "and root; controller calls from root, the app's own user, and the ControllerGroup)"
        case .runtimeDirectoryUnset:
            return "the per-user bgtaskd socket lives in $XDG_RUNTIME_DIR, which is not set to an absolute path "
                + "(it is set in a login session); give the socket path with --socket or "
                + DaemonSocket.environmentVariable
        case .lifecycle(let error):
            return ClientError.describe(error)
        case .service(let error):
            return ClientError.describe(error)
        case .remote(let error):
            return "bgtaskd answered with an error: \(error)"
        case .protocolViolation(let detail):
            return "bgtaskd broke the Varlink protocol: \(detail)"
        case .timedOut:
            return "bgtaskd did not answer in time"
        case .disconnected:
            return "the connection to bgtaskd is closed"
        case .connectionBusy:
            return "the connection is busy with a streaming call"
        case .invalidRequest(let detail):
            return "the call cannot be sent: \(detail)"
        case .io(let errno):
            return "talking to bgtaskd failed: \(errno)"
        }
    }

    private static func describe(_ error: LifecycleError) -> String {
        switch error {
        case .noSuchApp(let app): "no app named \(app.debugDescription)"
        case .appExists(let app): "an app named \(app.debugDescription) is already registered"
        case .noSuchTask(let app, let taskId): "app \(app.debugDescription) has no open task \(taskId)"
        case .backgroundTimeExhausted(let app): "app \(app.debugDescription) has no background time left"
        case .permissionDenied: "permission denied"
        case .invalidState(let app, let state):
            "app \(app.debugDescription) cannot do that in its current state, \(state.rawValue)"
        case .limitExceeded(let limit, let max): "limit \(limit)=\(max) reached"
        case .noSuchEvent(let app, let eventId): "app \(app.debugDescription) was never sent event \(eventId)"
        case .invalidMessage(let reason): "the daemon could not read the message: \(reason)"
        case .launchFailed(let app, let reason): "cannot launch \(app.debugDescription): \(reason)"
        case .noSuchRequest(let app, let identifier):
            "app \(app.debugDescription) has no scheduled request \(identifier.debugDescription)"
        case .conditionUnavailable(let conditions):
            "this host has no source for "
                + conditions.map(\.rawValue).joined(separator: ", ")
                + " (bgtask status lists the sources found), so the request would never run"
        }
    }

    private static func describe(_ error: VarlinkServiceError) -> String {
        switch error {
        case .interfaceNotFound(let interface): "bgtaskd does not serve the interface \(interface)"
        case .methodNotFound(let method): "bgtaskd has no method \(method) (is it an older version?)"
        case .methodNotImplemented(let method): "bgtaskd does not implement \(method)"
        case .invalidParameter(let parameter): "bgtaskd rejected the parameter \(parameter.debugDescription)"
        case .permissionDenied: "permission denied"
        case .expectedMore: "the method must be called with more: true"
        }
    }

    /// The error for a failed `connect(2)` to `path`.
    static func connecting(to path: String, _ errno: Errno) -> ClientError {
        switch errno {
        case .noSuchFileOrDirectory, .connectionRefused: .daemonNotRunning(socketPath: path, errno)
        case .permissionDenied, .notPermitted: .permissionDenied(socketPath: path, method: nil)
        default: .io(errno)
        }
    }

    /// The error for an error reply to a call of `method` on the socket at `path`.
    static func reply(_ error: VarlinkError, method: String, socketPath path: String) -> ClientError {
        if let lifecycle = LifecycleError(error) {
            if lifecycle == .permissionDenied { return .permissionDenied(socketPath: path, method: method) }
            return .lifecycle(lifecycle)
        }
        if let service = VarlinkServiceError(error) {
            if service == .permissionDenied { return .permissionDenied(socketPath: path, method: method) }
            return .service(service)
        }
        return .remote(error)
    }

    /// The error for a failed read or write on an established connection.
    static func transfer(_ errno: Errno) -> ClientError {
        switch errno {
        case .brokenPipe, .connectionReset, .notConnected: .disconnected
        default: .io(errno)
        }
    }

    /// Whether the failure is about reaching the daemon rather than an answer from it: the call may never have
    /// been processed, and the same call can succeed once the daemon is back.
    public var isTransportFailure: Bool {
        switch self {
        case .daemonNotRunning, .timedOut, .disconnected, .io, .protocolViolation: true
        default: false
        }
    }
}
