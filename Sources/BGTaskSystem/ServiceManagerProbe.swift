// Finding the service manager at start: each place tried in order, on the loop, and what each gave, for the log.
import BGTaskPOSIX
import BGTaskVocabulary
import Glibc

/// What probing for a service manager found at each place it tried, and which one it chose.
public struct ServiceManagerProbe: Sendable, CustomStringConvertible {
    /// What one place gave.
    public enum Outcome: Hashable, Sendable, CustomStringConvertible {
        /// A service manager answered: its `Version`.
        case connected(version: String)
        /// There is no socket at the path (no such manager or bus here).
        case missing
        /// Something other than a socket is at the path.
        case notASocket
        /// The socket may not be opened by this process (its directory, its mode, or the peer refused the
        /// credentials).
        case permissionDenied(Errno)
        /// Connecting failed otherwise: nobody listens (`ECONNREFUSED`), a full backlog, ….
        case unreachable(ServiceManagerError)
        /// The socket answered, but not as a systemd manager does (no `org.freedesktop.systemd1` on the bus, no
        /// such method, no answer in time, the connection dropped): the error the `Version` call got.
        case notAServiceManager(ServiceManagerError)

        /// A few words for the log.
        public var description: String {
            switch self {
            case .connected(let version): "connected, systemd \(version)"
            case .missing: "no socket"
            case .notASocket: "not a socket"
            case .permissionDenied(let errno): "permission denied (\(errno))"
            case .unreachable(let error): "unreachable (\(error))"
            case .notAServiceManager(let error): "not a service manager (\(error))"
            }
        }
    }

    /// One place tried.
    public struct Attempt: Hashable, Sendable {
        /// Where.
        public var endpoint: ServiceManagerEndpoint
        /// What it gave.
        public var outcome: Outcome
    }

    /// Every place tried, in order; the last is the one chosen when one was.
    public var attempts: [Attempt] = []

    /// The place connected to, nil when none could be.
    public var chosen: ServiceManagerEndpoint? {
        guard let last = attempts.last, case .connected = last.outcome else { return nil }
        return last.endpoint
    }

    /// The manager's version, when one answered.
    public var version: String? {
        guard let last = attempts.last, case .connected(let version) = last.outcome else { return nil }
        return version
    }

    /// One line for the startup log: "systemd 252 through the manager's socket PATH", with the places passed over and
    /// why, or "no service manager: …" with why at each place.
    public var description: String {
        let tried = attempts.map { "\($0.endpoint): \($0.outcome)" }
        guard let chosen, let version else {
            return "no service manager: " + (tried.isEmpty ? "nowhere to look" : tried.joined(separator: "; "))
        }
        let passed = tried.dropLast()
        return "systemd \(version) through \(chosen)"
            + (passed.isEmpty ? "" : " (passed over \(passed.joined(separator: "; ")))")
    }
}

extension ServiceManagerConnection {
    /// Tries each of `ServiceManagerEndpoint.candidates(for: scope)` in order on `loop`: a socket at the path,
    /// connecting, and reading the manager's `Version` within `timeout`. Calls `completion` on the loop with the
    /// first connection whose manager answered (nil when none did) and what every place tried gave.
    public static func probe(
        _ scope: ServiceManagerScope, loop: EventLoop, timeout: Duration = .seconds(5),
        completion: @escaping (ServiceManagerConnection?, ServiceManagerProbe) -> Void
    ) {
        probe(ServiceManagerEndpoint.candidates(for: scope), loop: loop, timeout: timeout, completion: completion)
    }

    /// Tries each of `endpoints` in order; see `probe(_:loop:timeout:completion:)`.
    public static func probe(
        _ endpoints: [ServiceManagerEndpoint], loop: EventLoop, timeout: Duration = .seconds(5),
        completion: @escaping (ServiceManagerConnection?, ServiceManagerProbe) -> Void
    ) {
        var report = ServiceManagerProbe()
        func attempt(_ remaining: ArraySlice<ServiceManagerEndpoint>) {
            guard let endpoint = remaining.first else {
                completion(nil, report)
                return
            }
            let connection: ServiceManagerConnection
            switch open(endpoint, loop: loop) {
            case .failure(let failure):
                report.attempts.append(ServiceManagerProbe.Attempt(endpoint: endpoint, outcome: failure.outcome))
                attempt(remaining.dropFirst())
                return
            case .success(let opened):
                connection = opened
            }
            // sd-bus counts a call's timeout only once the connection is authenticated (before, only its own 90 s
            // for authentication): a peer that accepts and never answers is bounded by this timer instead.
            var hasTimedOut = false
            let deadline = try? loop.addTimer(
                at: MonotonicClock.now() + timeout.nanosecondCount, name: "service-manager-probe"
            ) { timer in
                timer.cancel()
                hasTimedOut = true
                connection.close()
            }
            connection.managerVersion(timeout: timeout) { result in
                deadline?.cancel()
                switch result {
                case .success(let version):
                    report.attempts.append(
                        ServiceManagerProbe.Attempt(endpoint: endpoint, outcome: .connected(version: version)))
                    completion(connection, report)
                case .failure(let error):
                    connection.close()
                    let reason = hasTimedOut ? .timedOut(timeout) : error
                    report.attempts.append(
                        ServiceManagerProbe.Attempt(endpoint: endpoint, outcome: .notAServiceManager(reason)))
                    attempt(remaining.dropFirst())
                }
            }
        }
        attempt(endpoints[...])
    }

    /// Checks that a socket is at the endpoint's path and connects to it; or why not.
    private static func open(_ endpoint: ServiceManagerEndpoint, loop: EventLoop)
        -> Result<ServiceManagerConnection, ProbeFailure>
    {
        var status = stat()
        if stat(endpoint.socketPath, &status) != 0 {
            let failure = Errno(rawValue: errno, operation: "stat(\(endpoint.socketPath))")
            switch failure {
            case .permissionDenied: return .failure(ProbeFailure(.permissionDenied(failure)))
            case .noSuchFileOrDirectory, .notDirectory: return .failure(ProbeFailure(.missing))
            default: return .failure(ProbeFailure(.unreachable(.system(failure))))
            }
        }
        guard status.st_mode & S_IFMT == S_IFSOCK else { return .failure(ProbeFailure(.notASocket)) }
        do throws(ServiceManagerError) {
            return .success(try ServiceManagerConnection(endpoint: endpoint, loop: loop))
        } catch .system(let errno) where errno.rawValue == EACCES || errno.rawValue == EPERM {
            return .failure(ProbeFailure(.permissionDenied(errno)))
        } catch {
            return .failure(ProbeFailure(.unreachable(error)))
        }
    }
}

/// A probe outcome other than `.connected`, as an error for `Result`.
private struct ProbeFailure: Error {
    var outcome: ServiceManagerProbe.Outcome
    init(_ outcome: ServiceManagerProbe.Outcome) { self.outcome = outcome }
}
