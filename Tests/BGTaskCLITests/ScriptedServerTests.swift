// The real bgtask executable against a scripted io.bgtask.Lifecycle server: each subcommand's calls, output,
// `--json` and errors, and `bgtask run`'s lease, warning forwarding, budget, joining and exit statuses.
import BGTaskArguments
import BGTaskCLI
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Testing

/// Apps the scripted server knows.
let serverApps = [
    AppInfo(name: "org.a", state: .active, pid: 10, uid: 1000, managed: false),
    AppInfo(
        name: "org.b", state: .suspended, pid: 11, uid: 1000, managed: true, backgroundTimeRemaining: 30,
        memoryBytes: 1_048_576),
    AppInfo(name: "org.gone", state: .terminated, pid: 12, uid: 1000, managed: false, exitReason: .taskExpired),
]

/// History the scripted server knows.
let serverHistory = [
    HistoryEntry(time: 1_714_564_800, app: "org.b", kind: .stateChanged, state: .suspended),
    HistoryEntry(time: 1_714_564_801, app: "org.gone", kind: .terminated, reason: .taskExpired),
]

/// Runs `body` with a scripted server configured by `configure`, stopping it afterwards.
func withServer<T>(_ configure: (inout ScriptedServer.State) -> Void = { _ in }, _ body: (ScriptedServer) throws -> T)
    throws -> T
{
    let server = try ScriptedServer { state in
        state.apps = serverApps
        state.history = serverHistory
        configure(&state)
    }
    defer {
        do { try server.stop() } catch { Issue.record("stopping the scripted server: \(error)") }
    }
    return try body(server)
}

/// The human output of the in-process renderer, as the binary must print it (times in the binary's zone: UTC,
/// since the child's environment sets no TZ and the test machine's zone is not assumed).
let utc = TimeZone(identifier: "UTC") ?? .current

@Suite struct ControllerCommandTests {
    @Test func statusShowsTheDaemon() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary(["status"], against: server)
                #expect(run.status == .exited(0))
                // The daemon, then the memory of each app it lists (ListApps), heaviest first.
                let apps = try JSONDecoder().decode(
                    ListAppsReply.self, from: Data(try runBinary(["apps", "--json"], against: server).output.utf8)
                ).apps
                #expect(run.output == Rendering.status(sampleStatus, apps: apps))
                #expect(run.errors.isEmpty)
                let json = try runBinary(["status", "--json"], against: server)
                #expect(try JSONDecoder().decode(GetStatusReply.self, from: Data(json.output.utf8)) == sampleStatus)
            }
        }
    }

    @Test func statusShowsOneApp() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary(["status", "org.b"], against: server)
                #expect(run.status == .exited(0))
                #expect(run.output == Rendering.app(serverApps[1]))
                #expect(server.waitForCall("GetApp")?.parameters == ["app": "org.b"])
                let json = try runBinary(["status", "org.b", "--json"], against: server)
                #expect(try JSONDecoder().decode(GetAppReply.self, from: Data(json.output.utf8)).app == serverApps[1])
            }
        }
    }

    @Test func unknownAppIsOneLineAndExitOne() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary(["status", "org.nope"], against: server)
                #expect(run.status == .exited(1))
                #expect(run.output.isEmpty)
                #expect(
                    run.errors == "bgtask status: error: no app named \"org.nope\"; 'bgtask apps --all' lists the "
                        + "apps the daemon knows\n")
            }
        }
    }

    @Test func appsListsLiveAppsUnlessAskedForAll() async throws {
        try await offThePool {
            try withServer { server throws in
                #expect(
                    try runBinary(["apps"], against: server).output == Rendering.appTable(Array(serverApps.prefix(2))))
                #expect(try runBinary(["apps", "--all"], against: server).output == Rendering.appTable(serverApps))
                let terminated = try runBinary(["apps", "--state", "terminated", "--json"], against: server)
                #expect(
                    try JSONDecoder().decode(ListAppsReply.self, from: Data(terminated.output.utf8)).apps
                        == [serverApps[2]])
            }
        }
    }

    @Test func beginPrintsTheTaskIdAndEndEndsIt() async throws {
        try await offThePool {
            try withServer { server throws in
                let begin = try runBinary(["begin", "org.a", "flush"], against: server)
                #expect(begin.status == .exited(0))
                #expect(begin.output == "1\n")
                #expect(server.waitForCall("BeginBackgroundTask")?.parameters == ["app": "org.a", "name": "flush"])
                let json = try runBinary(["begin", "org.a", "flush", "--json"], against: server)
                #expect(json.output == "{\"taskId\":2}\n")
                let end = try runBinary(["end", "org.a", "2"], against: server)
                #expect(end.status == .exited(0) && end.output.isEmpty && end.errors.isEmpty)
                #expect(server.waitForCall("EndBackgroundTask")?.parameters == ["app": "org.a", "taskId": 2])
            }
        }
    }

    @Test func endOfUnknownTaskFailsWithAHint() async throws {
        try await offThePool {
            try withServer({ $0.errors["EndBackgroundTask"] = .noSuchTask(app: "org.a", taskId: 9) }) { server throws in
                let run = try runBinary(["end", "org.a", "9"], against: server)
                #expect(run.status == .exited(1))
                #expect(
                    run.errors == "bgtask end: error: app \"org.a\" has no open task 9; 'bgtask status org.a' lists "
                        + "its open tasks\n")
            }
        }
    }

    @Test func remainingPrintsTimeOrUnlimited() async throws {
        try await offThePool {
            try withServer({ $0.remainingSeconds = 252.5 }) { server throws in
                #expect(try runBinary(["remaining", "org.a"], against: server).output == "4m 12s\n")
                #expect(
                    try runBinary(["remaining", "org.a", "--json"], against: server).output == "{\"seconds\":252.5}\n")
                server.update { $0.remainingSeconds = nil }
                #expect(try runBinary(["remaining", "org.a"], against: server).output == "unlimited\n")
                #expect(
                    try runBinary(["remaining", "org.a", "--json"], against: server).output == "{\"seconds\":null}\n")
            }
        }
    }

    @Test(arguments: [("foreground", "active"), ("background", "background"), ("deactivate", "inactive")])
    func stateCommandsCallSetState(_ command: String, _ state: String) async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary([command, "org.a"], against: server)
                #expect(run.status == .exited(0))
                #expect(run.output == "org.a: \(state)\n")
                #expect(server.waitForCall("SetState")?.parameters == ["app": "org.a", "state": .string(state)])
                let json = try runBinary([command, "org.a", "--json"], against: server)
                #expect(
                    try JSONDecoder().decode(SetStateReply.self, from: Data(json.output.utf8)).app.state.rawValue
                        == state)
            }
        }
    }

    @Test func refusedCallSaysWhoMayMakeIt() async throws {
        try await offThePool {
            try withServer({ $0.errors["SetState"] = .permissionDenied() }) { server throws in
                let run = try runBinary(["background", "org.a"], against: server)
                #expect(run.status == .exited(1))
                #expect(
                    run.errors.hasPrefix(
                        "bgtask background: error: bgtaskd refused io.bgtask.Lifecycle.SetState: "
                            + "permission denied"))
                #expect(run.errors.filter { $0 == "\n" }.count == 1)
            }
        }
    }

    @Test func terminateAndPostSendTheirParameters() async throws {
        try await offThePool {
            try withServer { server throws in
                let terminate = try runBinary(["terminate", "org.a"], against: server)
                #expect(terminate.status == .exited(0) && terminate.output.isEmpty)
                #expect(server.waitForCall("Terminate")?.parameters == ["app": "org.a"])
                let post = try runBinary(
                    ["post", "sync", "--payload", #"{"n": [1, "x"]}"#, "--behavior", "hold", "--app", "org.b"],
                    against: server)
                #expect(post.output == "delivered to 2 apps, queued for 1\n")
                #expect(
                    server.waitForCall("Post")?.parameters
                        == ["name": "sync", "payload": ["n": [1, "x"]], "behavior": "hold", "app": "org.b"])
                let all = try runBinary(["post", "sync", "--json"], against: server)
                #expect(all.output == "{\"delivered\":2,\"queued\":1}\n")
                #expect(server.waitForCall("Post", count: 2)?.parameters == ["name": "sync"])
            }
        }
    }

    @Test func historyAsksForTheLimitAndPrintsATable() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try runBinary(["history", "-n", "1"], against: server)
                #expect(run.output == Rendering.historyTable([serverHistory[1]], timeZone: utc))
                #expect(server.waitForCall("History")?.parameters == ["limit": 1])
                let json = try runBinary(["history", "--json"], against: server)
                #expect(
                    try JSONDecoder().decode(HistoryReply.self, from: Data(json.output.utf8)).entries == serverHistory)
            }
        }
    }

    @Test func watchPrintsOneLinePerEntryUntilTheStreamEnds() async throws {
        try await offThePool {
            try withServer({ $0.watchEnds = true }) { server throws in
                let run = try runBinary(["watch"], against: server)
                #expect(run.status == .exited(0))
                #expect(run.output == serverHistory.map { Rendering.historyLine($0, timeZone: utc) }.joined())
                let json = try runBinary(["watch", "--json"], against: server)
                let lines = json.output.split(separator: "\n")
                #expect(
                    try lines.map { try JSONDecoder().decode(WatchReply.self, from: Data($0.utf8)).entry }
                        == serverHistory)
            }
        }
    }

    @Test func watchFollowsUntilInterrupted() async throws {
        try await offThePool {
            try withServer { server throws in
                let watch = try BGTaskProcess(["watch"], environment: ["BGTASK_SOCKET": server.socketPath])
                try watch.waitForOutput(containing: "terminated")
                try watch.send(.interrupt)
                let run = try watch.finish()
                #expect(run.status == .signaled(.interrupt))
            }
        }
    }
}

/// A shell command line for `run`'s CMD: starts a self-bounded sleep (its output away from the test's pipes), sets
/// a trap for `signal`, says `ready`, and waits; on the signal it prints `got SIGNAL`, stops the sleep and exits
/// with `status`. The sleep starts before `ready`, so the trap always knows what to stop.
func trappingCommand(_ signal: String, exitStatus status: Int) -> [String] {
    [
        "sh", "-c",
        // The signal reaches the whole group, so the sleep may be gone already when the trap kills it.
        "sleep 30 >/dev/null 2>&1 & trap 'echo got \(signal); kill $! 2>/dev/null; exit \(status)' \(signal); "
            + "echo ready; wait",
    ]
}

@Suite struct RunCommandTests {
    @Test func registersInBackgroundAndForwardsTheExpirationWarning() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try BGTaskProcess(
                    ["run", "--"] + trappingCommand("TERM", exitStatus: 3),
                    environment: ["BGTASK_SOCKET": server.socketPath])
                let register = try #require(server.waitForCall("Register"))
                #expect(register.parameters["state"] == "background")
                // ExitsOnSuspend: once its task is ended, bgtask is let go, not stopped on its way out.
                #expect(register.parameters["exitsOnSuspend"] == true)
                let name = try #require(register.parameters["name"]?.stringValue)
                #expect(name == "bgtask-run.sh.\(run.process.pid)")
                #expect(server.waitForCall("BeginBackgroundTask")?.parameters == ["app": .string(name), "name": "sh"])
                try run.waitForOutput(containing: "ready")
                // didEnterBackground is acknowledged; backgroundTaskExpiring becomes SIGTERM for CMD.
                try server.push(EventInfo(id: 1, kind: .didEnterBackground))
                #expect(server.waitForCall("Acknowledge")?.parameters == ["app": .string(name), "eventId": 1])
                try server.push(EventInfo(id: 2, kind: .backgroundTaskExpiring, taskIds: [1]))
                let result = try run.finish()
                #expect(result.status == .exited(3))
                #expect(result.output == "ready\ngot TERM\n")
                let lines = result.errors.split(separator: "\n").map(String.init)
                #expect(lines.count == 2, "\(lines)")
                #expect(lines.first == "bgtask: registered app \(name); task 1 began with 10m of background time")
                #expect(
                    lines.last?.hasPrefix("bgtask: background time is running out: sent SIGTERM to 'sh' (pid ") == true)
                // CMD is done: its task is ended (`ended`), then the registration closed.
                server.waitUntil("the Register stream closed") { $0.closedConnections.contains(register.connection) }
                #expect(server.calls("EndBackgroundTask").map(\.parameters) == [["app": .string(name), "taskId": 1]])
            }
        }
    }

    @Test func stoppedBeforeCommandIsDoneClosesTheRegistrationWithTheTaskOpen() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try BGTaskProcess(
                    ["run", "--"] + trappingCommand("TERM", exitStatus: 0),
                    environment: ["BGTASK_SOCKET": server.socketPath])
                let register = try #require(server.waitForCall("Register"))
                _ = try #require(server.waitForCall("BeginBackgroundTask"))
                try run.waitForOutput(containing: "ready")
                // As systemctl stop does: SIGTERM to bgtask, which forwards it; CMD exits, cut short.
                try run.process.pidFD.sendSignal(.terminate)
                let result = try run.finish()
                #expect(result.output == "ready\ngot TERM\n")
                #expect(
                    result.errors.contains("was cut short by SIGTERM: closing the registration"),
                    "\(result.errors)")
                server.waitUntil("the Register stream closed") { $0.closedConnections.contains(register.connection) }
                // The task ends with the registration (app-ended), not as done.
                #expect(server.calls("EndBackgroundTask").isEmpty)
            }
        }
    }

    @Test func willTerminateIsForwardedToo() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try BGTaskProcess(
                    ["run", "--name", "export", "-s", "USR1", "--"]
                        + trappingCommand("USR1", exitStatus: 0),
                    environment: ["BGTASK_SOCKET": server.socketPath])
                #expect(server.waitForCall("BeginBackgroundTask")?.parameters["name"] == "export")
                try run.waitForOutput(containing: "ready")
                try server.push(EventInfo(id: 1, kind: .willTerminate))
                let result = try run.finish()
                #expect(result.status == .exited(0))
                #expect(result.output.contains("got USR1"))
                #expect(result.errors.contains("bgtask: bgtaskd is terminating app bgtask-run.sh."))
                #expect(result.errors.contains(": sent SIGUSR1 to 'sh' (pid "))
            }
        }
    }

    @Test func budgetIsAskedOfTheDaemonForARegistrationOfItsOwn() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try BGTaskProcess(
                    ["run", "--budget", "1500ms", "--on-expire", "INT", "--"]
                        + trappingCommand("INT", exitStatus: 4),
                    environment: ["BGTASK_SOCKET": server.socketPath])
                #expect(server.waitForCall("Register")?.parameters["backgroundTimeSec"] == .number(1.5))
                try run.waitForOutput(containing: "ready")
                // The daemon enforces the budget: bgtask signals CMD on the daemon's warning, not on a timer of its own.
                try server.push(EventInfo(id: 1, kind: .backgroundTaskExpiring, taskIds: [1]))
                let result = try run.finish()
                #expect(result.status == .exited(4))
                #expect(result.output == "ready\ngot INT\n")
                #expect(!result.errors.contains("is used up"))
            }
        }
    }

    @Test func budgetIsALimitOfItsOwnForAJoinedApp() async throws {
        try await offThePool {
            try withServer({ state in
                state.errors["Register"] = .appExists(app: "org.a")
                state.remainingSeconds = nil
            }) { server throws in
                let run = try BGTaskProcess(
                    ["run", "--app", "org.a", "--budget", "300ms", "--on-expire", "INT", "--"]
                        + trappingCommand("INT", exitStatus: 4),
                    environment: ["BGTASK_SOCKET": server.socketPath])
                let result = try run.finish()
                #expect(result.status == .exited(4))
                #expect(result.output == "ready\ngot INT\n")
                #expect(result.errors.contains("bgtask: the budget of 300ms is used up: sent SIGINT to 'sh' (pid "))
            }
        }
    }

    @Test func joinsARegisteredAppAndWarnsFromItsRemainingTime() async throws {
        try await offThePool {
            try withServer({ state in
                state.errors["Register"] = .appExists(app: "org.a")
                state.remainingSeconds = nil  // In the foreground until the test says otherwise.
            }) { server throws in
                let run = try BGTaskProcess(
                    ["run", "--app", "org.a", "--"] + trappingCommand("TERM", exitStatus: 3),
                    environment: ["BGTASK_SOCKET": server.socketPath])
                #expect(server.waitForCall("BeginBackgroundTask")?.parameters == ["app": "org.a", "name": "sh"])
                try run.waitForOutput(containing: "ready")
                server.waitForCall("BackgroundTimeRemaining")
                // The app goes to background with less than the warning's lead left: bgtask warns at its next reading.
                server.update { $0.remainingSeconds = 3 }
                let result = try run.finish()
                #expect(result.status == .exited(3))
                #expect(result.errors.hasPrefix("bgtask: joined app org.a; task 1 began\n"))
                #expect(result.errors.contains("bgtask: background time is running out: sent SIGTERM to 'sh' (pid "))
                // A joined app's task is ended explicitly: the app is someone else's registration.
                #expect(server.waitForCall("EndBackgroundTask")?.parameters == ["app": "org.a", "taskId": 1])
            }
        }
    }

    @Test func signalsSentToBGTaskReachTheCommand() async throws {
        try await offThePool {
            try withServer { server throws in
                let run = try BGTaskProcess(
                    ["run", "--"] + trappingCommand("TERM", exitStatus: 5),
                    environment: ["BGTASK_SOCKET": server.socketPath])
                try run.waitForOutput(containing: "ready")
                try run.send(.terminate)
                let result = try run.finish()
                // bgtask outlived the signal, passed it on, and reports CMD's own status.
                #expect(result.status == .exited(5))
                #expect(result.output == "ready\ngot TERM\n")
            }
        }
    }

    /// Exit statuses: CMD's own, 128+N for a signal, 127 and 126 when CMD cannot be run.
    @Test func exitsWithTheCommandsStatus() async throws {
        try await offThePool {
            try withServer { server throws in
                let directory = server.directory
                let notExecutable = directory + "/not-executable"
                #expect(FileManager.default.createFile(atPath: notExecutable, contents: Data("true\n".utf8)))
                let rows: [([String], ProcessStatus)] = [
                    (["true"], .exited(0)),
                    (["sh", "-c", "exit 7"], .exited(7)),
                    (["sh", "-c", "kill -KILL $$"], .exited(128 + 9)),
                    (["sh", "-c", "kill -TERM $$"], .exited(128 + 15)),
                    ([directory + "/no-such-command"], .exited(127)),
                    ([notExecutable], .exited(126)),
                ]
                for (command, expected) in rows {
                    let run = try runBinary(["run", "--"] + command, against: server)
                    #expect(run.status == expected, "\(command)")
                    if expected == .exited(127) {
                        #expect(
                            run.errors.hasSuffix(
                                "bgtask run: error: cannot run '\(command[0])': No such file or "
                                    + "directory\n"))
                    }
                    if expected == .exited(126) {
                        #expect(
                            run.errors.hasSuffix("bgtask run: error: cannot run '\(command[0])': Permission denied\n"))
                    }
                }
            }
        }
    }

    @Test func noBackgroundTimeLeftMeansCMDNeverRuns() async throws {
        try await offThePool {
            try withServer({ $0.errors["BeginBackgroundTask"] = .backgroundTimeExhausted(app: "org.a") }) {
                server throws in
                let run = try runBinary(["run", "--app", "org.a", "--", "sh", "-c", "echo ran"], against: server)
                #expect(run.status == .exited(1))
                #expect(run.output.isEmpty)
                #expect(
                    run.errors == "bgtask run: error: app \"org.a\" has no background time left; it gets a fresh "
                        + "budget once it returns to the foreground ('bgtask foreground org.a')\n")
            }
        }
    }
}
