// The real bgtask executable's `launch` against a scripted io.bgtask.Lifecycle server: the call it sends, what it
// prints, each refusal as one line, and command lines refused before any call.
import BGTaskArguments
import BGTaskCLI
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// A refusal of `Launch` and the one line bgtask prints for it.
struct LaunchRefusalRow: Sendable, CustomTestStringConvertible {
    var error: VarlinkError
    var message: String

    var testDescription: String { error.name }
}

let launchRefusalRows: [LaunchRefusalRow] = [
    LaunchRefusalRow(
        error: .appExists(app: "org.new"),
        message: "an app named \"org.new\" is already registered; 'bgtask status org.new' shows it, "
            + "'bgtask terminate org.new' ends it"),
    LaunchRefusalRow(
        error: .permissionDenied(),
        message: "bgtaskd refused io.bgtask.Lifecycle.Launch: permission denied (app calls are accepted from the "
            + "app's own user and root; controller calls from root, the app's own user, and the ControllerGroup)"),
    // A daemon from before Launch was built answers every call of it this way.
    LaunchRefusalRow(
        error: .methodNotImplemented(method: "io.bgtask.Lifecycle.Launch"),
        message: "bgtaskd does not implement io.bgtask.Lifecycle.Launch: this bgtaskd cannot launch apps; upgrade "
            + "it to use 'bgtask launch'"),
    LaunchRefusalRow(
        error: .methodNotFound(method: "io.bgtask.Lifecycle.Launch"),
        message: "bgtaskd has no method io.bgtask.Lifecycle.Launch (is it an older version?): this bgtaskd cannot "
            + "launch apps; upgrade it to use 'bgtask launch'"),
    LaunchRefusalRow(
        error: .invalidParameter(parameter: "argv"),
        message: "bgtaskd rejected the parameter \"argv\": the daemon cannot start CMD (a CMD without a slash is "
            + "looked up in the daemon's PATH)"),
    LaunchRefusalRow(
        error: .invalidParameter(parameter: "name"),
        message: "bgtaskd rejected the parameter \"name\": NAME must be 1 to 255 bytes, without control characters"),
    LaunchRefusalRow(
        error: .limitExceeded(limit: "AppsPerUserMax", max: 64), message: "limit AppsPerUserMax=64 reached"),
]

@Suite struct LaunchCommandTests {
    @Test func sendsTheNameAndCommandAndPrintsTheLaunchedApp() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary(
                    ["launch", "org.new", "--", "mail-app", "--name", "org.new", "a b"], against: server)
                #expect(run.status == .exited(0))
                #expect(
                    run.output == "org.new: notRunning, pid 4242, cgroup /sys/fs/cgroup/bgtaskd.slice/launched.scope\n")
                #expect(run.errors.isEmpty)
                // Without --exits-on-suspend the field is left out, so the daemon's ExitsOnSuspend applies.
                #expect(
                    server.waitForCall("Launch")?.parameters
                        == ["name": "org.new", "argv": ["mail-app", "--name", "org.new", "a b"]])
                // The launched app is one the daemon now knows, its cgroup shown by status.
                let status = try runBinary(["status", "org.new"], against: server)
                #expect(status.output.contains("  state:      notRunning\n"))
                #expect(status.output.contains("  cgroup:     /sys/fs/cgroup/bgtaskd.slice/launched.scope\n"))
                #expect(status.output.contains("  memory:     - (cgroup2)\n"))
            }
        }
    }

    @Test func exitsOnSuspendIsSentAsTrueAndJSONIsTheReply() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary(
                    ["launch", "--exits-on-suspend", "org.sync", "--json", "--", "/usr/bin/sync-agent", "--once"],
                    against: server)
                #expect(run.status == .exited(0))
                #expect(
                    server.waitForCall("Launch")?.parameters
                        == ["name": "org.sync", "argv": ["/usr/bin/sync-agent", "--once"], "exitsOnSuspend": true])
                let reply = try JSONDecoder().decode(LaunchReply.self, from: Data(run.output.utf8))
                #expect(reply.app.name == "org.sync" && reply.app.state == .notRunning && reply.app.managed)
                #expect(reply.app.cgroup == "/sys/fs/cgroup/bgtaskd.slice/launched.scope")
                #expect(run.output.filter { $0 == "\n" }.count == 1)
            }
        }
    }

    @Test func anAppWithoutACgroupIsPrintedWithoutOne() async throws {
        try await offThePool {
            try withServer({ $0.launchCgroup = nil }) { server throws in
                let run = try runBinary(["launch", "org.new", "--", "true"], against: server)
                #expect(run.status == .exited(0))
                #expect(run.output == "org.new: notRunning, pid 4242\n")
            }
        }
    }

    /// The name of a live app is refused by the daemon: one line, exit 1, and the app left as it was.
    @Test func aLiveAppsNameIsRefused() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary(["launch", "org.a", "--", "true"], against: server)
                #expect(run.status == .exited(1))
                #expect(run.output.isEmpty)
                #expect(
                    run.errors == "bgtask launch: error: an app named \"org.a\" is already registered; "
                        + "'bgtask status org.a' shows it, 'bgtask terminate org.a' ends it\n")
            }
        }
    }

    @Test(arguments: launchRefusalRows) func refusalIsOneLineAndExitOne(_ row: LaunchRefusalRow) async throws {
        try await offThePool {
            try withServer({ $0.errors["Launch"] = row.error }) { server throws in
                let run = try runBinary(["launch", "org.new", "--", "true"], against: server)
                #expect(run.status == .exited(1))
                #expect(run.output.isEmpty)
                #expect(run.errors == "bgtask launch: error: \(row.message)\n")
            }
        }
    }

    /// A command line without NAME or CMD is refused before any call: the usage, and exit 64.
    @Test(arguments: [["launch"], ["launch", "org.new"], ["launch", "org.new", "--"], ["launch", "--", "app"]])
    func incompleteCommandLineIsAUsageError(_ words: [String]) async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary(words, against: server)
                #expect(run.status == .exited(ExitCode.usage.rawValue))
                #expect(run.output.isEmpty)
                #expect(run.errors.hasPrefix("bgtask launch: error: missing "))
                #expect(run.errors.contains("\nUSAGE: bgtask launch NAME "))
                #expect(server.calls.isEmpty)
            }
        }
    }
}
