// The harness's controller connection: the calls a device shell makes, counted per kind, reconnecting after a
// daemon restart.

import BGTaskClient
import BGTaskPOSIX
import BGTaskProtocol
import Glibc

/// Calls to the daemon as a controller, each counted under its kind as done or refused.
final class Controller {
    private let socketPath: String
    private var client: LifecycleClient?
    /// Per kind: calls answered, and calls refused or failed.
    private(set) var counts: [String: (done: Int, refused: Int)] = [:]
    /// Calls made, answered or not.
    private(set) var callCount = 0
    /// The error of the last call that failed, kept until the next call: what a refusal was.
    private(set) var lastError: ClientError?

    init(socketPath: String) {
        self.socketPath = socketPath
    }

    /// Makes one call counted under `kind`; nil when it failed (a connection failure drops the connection, so the
    /// next call connects again).
    func call<Result>(_ kind: String, _ body: (LifecycleClient) throws(ClientError) -> Result) -> Result? {
        callCount += 1
        lastError = nil
        do {
            let connected: LifecycleClient
            if let client {
                connected = client
            } else {
                connected = try LifecycleClient(socketPath: socketPath, timeout: .seconds(10))
                client = connected
            }
            let result = try body(connected)
            counts[kind, default: (0, 0)].done += 1
            return result
        } catch {
            counts[kind, default: (0, 0)].refused += 1
            lastError = error
            switch error {
            case .lifecycle, .service, .remote, .permissionDenied: break
            default:
                client?.close()
                client = nil
            }
            return nil
        }
    }

    /// Counts something done outside a call (a fault, a spawn).
    func count(_ kind: String, succeeded: Bool = true) {
        if succeeded { counts[kind, default: (0, 0)].done += 1 } else { counts[kind, default: (0, 0)].refused += 1 }
    }

    /// `ListApps`, waiting up to `timeout` for a daemon that is coming back.
    func listApps(within timeout: Duration = .zero) -> [AppInfo]? {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            if let apps = call("ListApps", { client throws(ClientError) in try client.listApps() }) { return apps }
            guard MonotonicClock.now() < deadline else { return nil }
            usleep(100_000)
        }
    }

    func close() {
        client?.close()
        client = nil
    }
}
