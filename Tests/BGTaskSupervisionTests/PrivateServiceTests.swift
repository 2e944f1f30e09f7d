// PrivateService with stand-in services: ready on READY=1, or a clear reason why not, and nothing left running.

import BGTaskPOSIX
import BGTaskSupervision
import BGTaskTestSupport
import Foundation
import Testing

@Suite("Private services")
struct PrivateServiceTests {
    /// A service that says READY=1 on NOTIFY_SOCKET after `delay` seconds, then waits for SIGTERM.
    static func readyService(after delay: Double = 0) -> [String] {
        [
            "python3", "-c",
            """
            import os, signal, socket, sys, time
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            time.sleep(\(delay))
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.sendto(b"STATUS=starting\\nREADY=1", os.environ["NOTIFY_SOCKET"])
            time.sleep(120)
            """,
        ]
    }

    private func start(
        _ arguments: [String], in directory: ScratchDirectory, readyTimeout: Duration = .seconds(30),
        check: () throws -> Void = {}
    ) throws(PrivateServiceError) -> PrivateService {
        try PrivateService.start(
            arguments, lifetime: .seconds(120), environment: ["PATH=/usr/local/bin:/usr/bin:/bin"],
            notifyPath: directory.path + "/notify", logPath: directory.path + "/log", readyTimeout: readyTimeout,
            check: check)
    }

    /// The error `body` fails with; nil (recorded as an issue, the service stopped) when it starts.
    private func failure(_ body: () throws(PrivateServiceError) -> PrivateService) -> PrivateServiceError? {
        do {
            let service = try body()
            _ = service.stop(timeout: .seconds(10))
            Issue.record("the service became ready")
            return nil
        } catch {
            return error
        }
    }

    @Test("ready once READY=1 arrives; the pid is the service's, under timeout; stop ends both")
    func ready() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "private-service")
            let service = try start(Self.readyService(after: 0.2), in: directory)
            #expect(try ProcFS().stat(service.pid).parentPID == service.wrapper.pid)
            #expect(try !service.service.hasExited)
            let status = service.stop(timeout: .seconds(10))
            #expect(
                status == .exited(0), "timeout(1) reports the service's own exit status: \(String(describing: status))")
        }
    }

    @Test("a service that exits first, or never says READY=1, is a failure that says so, with nothing left behind")
    func failures() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "private-service")
            let exited = failure { () throws(PrivateServiceError) in
                try start(["sh", "-c", "echo broken >&2; exit 3"], in: directory)
            }
            guard case .exitedBeforeReady(let status) = exited else {
                Issue.record("an exited service: \(String(describing: exited))")
                return
            }
            #expect(status == .exited(3))
            #expect(try String(contentsOfFile: directory.path + "/log", encoding: .utf8) == "broken\n")
            let silent = failure { () throws(PrivateServiceError) in
                try start(["sleep", "60"], in: directory, readyTimeout: .seconds(1))
            }
            guard case .notReady = silent else {
                Issue.record("a silent service: \(String(describing: silent))")
                return
            }
            struct Stop: Error {}
            let interrupted = failure { () throws(PrivateServiceError) in
                try start(["sleep", "60"], in: directory, check: { throw Stop() })
            }
            guard case .interrupted(let cause) = interrupted, cause is Stop else {
                Issue.record("an interrupted wait: \(String(describing: interrupted))")
                return
            }
            let missing = failure { () throws(PrivateServiceError) in try start(["/nonexistent/service"], in: directory)
            }
            guard case .exitedBeforeReady(let missingStatus) = missing else {
                Issue.record("a missing program: \(String(describing: missing))")
                return
            }
            #expect(missingStatus == .exited(127), "timeout(1) reports a missing program as 127")
        }
    }
}
