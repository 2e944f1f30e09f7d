// Restarting the daemon loses nothing: the state file carries leases, budgets, deadlines and suspensions over to
// the next manager, which adopts only the processes that are still the ones that registered.

import BGTaskBenchmarks
import BGTaskCore
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskDaemon

@Suite("Restarts on a manual clock")
struct ManagerRestartTests {
    let policy = AppPolicy()

    /// Sends `app` to the background and acknowledges `didEnterBackground`.
    private func background(_ app: ManagerHarness.App, in harness: ManagerHarness) throws {
        #expect(try harness.call("SetState", ["app": .string(app.name), "state": "background"]).errorName == nil)
        let didEnter = try #require(try harness.events(of: app).first { $0.kind == "didEnterBackground" })
        try harness.acknowledge(app, didEnter.id)
    }

    /// Registers `name`, sends it to the background and waits until the manager has stopped its process.
    private func suspended(_ name: String, in harness: ManagerHarness) throws -> ManagerHarness.App {
        let app = try harness.register(name)
        try background(app, in: harness)
        try harness.step(until: "\(name) to be stopped") { harness.processState(app) == .stopped }
        return app
    }

    private func remaining(_ name: String, in harness: ManagerHarness) throws -> Double {
        let reply = try harness.call("BackgroundTimeRemaining", ["app": .string(name)])
        return try #require(reply.parameters["seconds"]?.doubleValue, "\(reply)")
    }

    @Test("an app in background keeps its task id and does not get its time back; it re-attaches from its process")
    func leaseSurvives() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let mail = try harness.register("mail")
            let begun = try harness.call("BeginBackgroundTask", ["app": "mail", "name": "upload"])
            #expect(begun.parameters["taskId"] == 1)
            try background(mail, in: harness)
            try harness.advance(by: .seconds(100))
            let before = try remaining("mail", in: harness)
            try harness.restart(after: .seconds(5))
            #expect(harness.log.contains("restored 1 registrations (1 live, 1 tasks)"), "\(harness.log)")
            let app = try harness.app("mail")
            #expect(app["state"] == "background")
            #expect(app["tasks"]?.arrayValue?.count == 1)
            let after = try remaining("mail", in: harness)
            #expect(after <= before - 5, "remaining time went from \(before) s to \(after) s across the restart")
            // The app registers again from the same process: it re-attaches, leases and all.
            let (again, reply) = try harness.reattach(mail)
            #expect(reply.errorName == nil, "\(reply)")
            #expect(reply.parameters["app"]?.objectValue?["tasks"]?.arrayValue?.count == 1)
            #expect(try harness.call("EndBackgroundTask", ["app": "mail", "taskId": 1]).errorName == nil)
            // With no lease left it is suspended, through its new stream's process as before.
            try harness.step(until: "mail to be stopped") { harness.processState(again) == .stopped }
            // Task ids go on from where they were.
            #expect(try harness.call("SetState", ["app": "mail", "state": "active"]).errorName == nil)
            #expect(try harness.call("BeginBackgroundTask", ["app": "mail"]).parameters["taskId"] == 2)
        }
    }

    @Test("events sent to an app that has not re-attached after a restart are held, and follow its Register reply")
    func eventsWaitForReattach() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let mail = try harness.register("mail")
            #expect(try harness.call("BeginBackgroundTask", ["app": "mail"]).errorName == nil)
            try background(mail, in: harness)
            try harness.restart(after: .seconds(1))
            // Its warning falls due before it registers again: the restored registration has no stream yet.
            try harness.advance(by: policy.backgroundTime - policy.expirationWarning)
            #expect(harness.log.contains("mail's background time is nearly used up"), "\(harness.log)")
            let (again, reply) = try harness.reattach(mail)
            #expect(reply.errorName == nil, "\(reply)")
            // The held warning, once: the core tells a re-attaching app its warned tasks again, and the manager
            // leaves that out when it held the same.
            let held = try harness.events(of: again)
            #expect(held.map(\.kind) == ["backgroundTaskExpiring"], "\(held)")
            // A second re-attach (its stream broke, say) is told the warning again, which it may have lost: a new
            // event, not the held one twice.
            let (third, _) = try harness.reattach(again)
            let retold = try harness.events(of: third)
            #expect(retold.map(\.kind) == ["backgroundTaskExpiring"], "\(retold)")
            #expect(retold.map(\.id) != held.map(\.id), "\(retold) \(held)")
        }
    }

    @Test("a suspended app is continued when the daemon stops and suspended again when it is back")
    func suspensionSurvives() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let game = try suspended("game", in: harness)
            var stateWhileDown: ProcessState?
            try harness.restart(after: .seconds(2)) { stateWhileDown = harness.processState(game) }
            #expect(stateWhileDown != .stopped, "the app stayed stopped while no daemon ran")
            try harness.step(until: "game to be stopped again") { harness.processState(game) == .stopped }
            #expect(try harness.app("game")["state"] == "suspended")
            #expect(try harness.call("SetState", ["app": "game", "state": "active"]).errorName == nil)
            try harness.step(until: "game to be continued") { harness.processState(game) != .stopped }
        }
    }

    @Test("an app whose process died while the daemon was down ends exited; the others are adopted")
    func deadWhileDown() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let doomed = try harness.register("doomed")
            // Kept: dropping it would close its stream, and with it the registration.
            let survivorApp = try harness.register("survivor")
            try harness.restart(after: .seconds(1)) {
                try doomed.standIn.process.sendSignal(.kill)
                _ = try doomed.standIn.process.waitForExit(timeout: .seconds(10))
            }
            let app = try harness.app("doomed")
            #expect(app["state"] == "terminated")
            #expect(app["exitReason"] == "exited")
            let survivor = try harness.app("survivor")
            #expect(survivor["state"] == "active", "\(survivor)")
            #expect(survivor["pid"] == .number(Double(survivorApp.pid)))
            #expect(harness.log.contains("1 processes adopted, 1 gone meanwhile"), "\(harness.log)")
            // The name is free for a new process.
            _ = try harness.register("doomed")
        }
    }

    @Test("deadlines that passed while the daemon was down are acted on as soon as it is back, in order")
    func deadlinesPassedWhileDown() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let sync = try harness.register("sync")
            #expect(try harness.call("BeginBackgroundTask", ["app": "sync"]).errorName == nil)
            try background(sync, in: harness)
            // Down for longer than the whole background time: the warning and the expiry both passed.
            try harness.restart(after: policy.backgroundTime + .seconds(1))
            let app = try harness.app("sync")
            #expect(app["state"] == "terminated")
            #expect(app["exitReason"] == "task-expired")
            let log = harness.log
            let warned = try #require(log.range(of: "sync's background time is nearly used up"))
            let expired = try #require(log.range(of: "sync kept task 1"))
            #expect(warned.lowerBound < expired.lowerBound)
        }
    }

    @Test("a saved pid that names another process now is not adopted: the app ends, the process is left alone")
    func reusedPID() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let app = try suspended("app", in: harness)
            try harness.restart(after: .seconds(1)) {
                // The pid now names a process that started later (the fake /proc says so), stopped by its own
                // owner; the state file says the old daemon had stopped the pid.
                try app.standIn.process.sendSignal(.stop)
                // A SIGSTOP takes effect when its target next runs, which on a busy machine can be after the new
                // manager has settled: until the stand-in shows `T`, reading `R` below would prove nothing.
                let stopped = try waitForProcessState(app.pid, timeout: .seconds(30)) { $0 == .stopped }
                #expect(stopped == .stopped, "the stand-in did not stop within 30 s of its SIGSTOP")
                try harness.tree.addProcess(pid: app.pid, group: app.standIn.wrapper.pid, startTime: 99)
                try editState(at: harness.statePath) { state in
                    var processes = state["processes"] as? [[String: Any]] ?? []
                    processes[0]["isStopped"] = true
                    state["processes"] = processes
                }
            }
            #expect(try harness.app("app")["exitReason"] == "exited")
            try harness.advance(by: .seconds(10))
            #expect(harness.processState(app) == .stopped, "the daemon continued a process that is not its app's")
            #expect(!harness.log.contains("continued"), "\(harness.log)")
            try app.standIn.process.sendSignal(.continue)
        }
    }

    @Test("a saved process whose uid /proc does not confirm is not adopted: the app ends, the process is left alone")
    func doctoredUID() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let app = try suspended("app", in: harness)
            try harness.restart(after: .seconds(1)) {
                // As a crash leaves it, stopped; the state now says it is another user's.
                try app.standIn.process.sendSignal(.stop)
                #expect(try waitForProcessState(app.pid, timeout: .seconds(30)) { $0 == .stopped } == .stopped)
                try editState(at: harness.statePath) { state in
                    var processes = state["processes"] as? [[String: Any]] ?? []
                    processes[0]["uid"] = 65_534
                    processes[0]["isStopped"] = true
                    state["processes"] = processes
                }
            }
            #expect(harness.log.contains("which /proc does not confirm: not adopting it"), "\(harness.log)")
            #expect(try harness.app("app")["exitReason"] == "exited")
            try harness.advance(by: .seconds(10))
            #expect(harness.processState(app) == .stopped, "the daemon acted on a process it did not adopt")
            try app.standIn.process.sendSignal(.continue)
        }
    }

    @Test(
        "a state naming a cgroup or process group that is not the app's: nothing is thawed, continued or killed there",
        .requires(.cgroup(.unified)))
    func doctoredStopTargets() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            // Someone else's frozen cgroup, and someone else's stopped process group: the state will name them.
            let scratch = try ScratchCgroup(.unified)
            defer { scratch.close() }
            let frozen = try ChildProcess(["sleep", "120"])
            defer { frozen.terminate() }
            try scratch.move(frozen.pid)
            try scratch.cgroup.requestFreeze(true)
            #expect(try scratch.cgroup.waitUntil(frozen: true, timeout: .seconds(30)))
            let leader = try ChildProcess(["sleep", "120"], flags: [.newProcessGroup])
            defer { leader.terminate() }
            try leader.process.pidFD.sendSignal(.stop)
            #expect(try waitForProcessState(leader.pid, timeout: .seconds(30)) { $0 == .stopped } == .stopped)

            let doctorings: [(String, [String: Any])] = [
                ("mail", ["frozenCgroup": scratch.cgroup.path]), ("game", ["stoppedGroup": leader.pid]),
            ]
            var apps: [ManagerHarness.App] = []
            defer { withExtendedLifetime(apps) {} }
            for (name, doctored) in doctorings {
                // Kept: dropping it would close its stream, and with it the registration.
                let app = try suspended(name, in: harness)
                apps.append(app)
                try harness.restart(after: .seconds(1)) {
                    // As a crash leaves it (no final stop continued it): /proc shows it stopped.
                    try harness.tree.addProcess(
                        pid: app.pid, group: app.standIn.wrapper.pid, startTime: 1, state: "T", command: name)
                    try editState(at: harness.statePath) { state in
                        var processes = state["processes"] as? [[String: Any]] ?? []
                        for index in processes.indices {
                            processes[index]["isStopped"] = true
                            for (key, value) in doctored { processes[index][key] = value }
                        }
                        state["processes"] = processes
                    }
                }
                #expect(harness.log.contains("nothing is"), "\(harness.log)")
                // Resumed, then terminated: neither reaches what the state named.
                let resumed = try harness.call("SetState", ["app": .string(name), "state": "active"])
                #expect(resumed.errorName == nil, "\(resumed) \(harness.log)")
                #expect(try harness.call("Terminate", ["app": .string(name)]).errorName == nil)
                try harness.advance(by: policy.willTerminateGrace + .seconds(1))
                try harness.step(until: "\(name) to be gone") { try harness.app(name)["state"] == "terminated" }
                #expect(try scratch.cgroup.isFrozen(), "the daemon thawed a cgroup the state named")
                #expect(try !frozen.process.pidFD.hasExited, "the daemon killed a process in a cgroup the state named")
                #expect(try !leader.process.pidFD.hasExited, "the daemon killed a process group the state named")
                #expect(try ProcFS().stat(leader.pid).state == .stopped, "the daemon continued a group the state named")
            }
        }
    }

    @Test(
        "a state file that cannot be used is set aside and logged, and the daemon starts empty",
        arguments: ["truncated", "garbage", "another version", "another boot", "contradictory"])
    func unusableState(_ flaw: String) async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let app = try harness.register("app")
            #expect(try harness.call("BeginBackgroundTask", ["app": "app"]).errorName == nil)
            try harness.restart(after: .seconds(1)) {
                let data = try Data(contentsOf: URL(fileURLWithPath: harness.statePath))
                switch flaw {
                case "truncated":
                    try data.prefix(data.count / 2).write(to: URL(fileURLWithPath: harness.statePath))
                case "garbage":
                    try Data("\u{1}not json".utf8).write(to: URL(fileURLWithPath: harness.statePath))
                case "another version":
                    try editState(at: harness.statePath) { $0["version"] = 99 }
                case "another boot":
                    try editState(at: harness.statePath) { $0["bootID"] = "00000000-0000-0000-0000-000000000000" }
                default:
                    try editState(at: harness.statePath) { state in
                        var lifecycle = state["lifecycle"] as? [String: Any] ?? [:]
                        lifecycle["nextTaskID"] = 1
                        state["lifecycle"] = lifecycle
                    }
                }
            }
            #expect(harness.log.contains("not restoring \(harness.statePath)"), "\(harness.log)")
            #expect(FileManager.default.fileExists(atPath: harness.statePath + ".bad"))
            #expect(try harness.call("GetApp", ["app": "app"]).errorName == "io.bgtask.Lifecycle.NoSuchApp")
            // A fresh registration works, and the new state saves.
            _ = try harness.reattach(app)
            try harness.step(until: "the new state to be saved") { harness.savedText.contains("\"app\"") }
        }
    }

    @Test("the history survives restarts from a file of its own; a torn line and entries past the state are skipped")
    func historySurvives() async throws {
        try await offThePool {
            let harness = try ManagerHarness(configuration: "[Limits]\nHistorySize=4\n")
            defer { harness.close() }
            var apps: [ManagerHarness.App] = []
            for index in 0..<6 { apps.append(try harness.register("app\(index)")) }
            func registered() throws -> [String] {
                let entries = try #require(harness.call("History").parameters["entries"]?.arrayValue)
                return entries.compactMap { $0.objectValue?["app"]?.stringValue }
            }
            // The newest HistorySize entries.
            #expect(try registered() == ["app2", "app3", "app4", "app5"])
            let historyPath = harness.directory.path + "/state.history.jsonl"
            try harness.restart(after: .seconds(1))
            #expect(try registered() == ["app2", "app3", "app4", "app5"], "\(harness.log)")
            // A line torn by a crash, and an entry the saved state does not cover (written, then the crash came
            // before the state): neither comes back.
            try harness.restart(after: .seconds(1)) {
                let lines = try String(contentsOfFile: historyPath, encoding: .utf8).split(separator: "\n")
                let last = try #require(lines.last)
                let unsaved = last.replacingOccurrences(of: "\"serial\":", with: "\"serial\":1000")
                    .replacingOccurrences(
                        of: "app5", with: "ghost")
                let torn = String(last.prefix(last.count / 2))
                try (lines.joined(separator: "\n") + "\n" + torn + "\n" + unsaved + "\n").write(
                    toFile: historyPath, atomically: true, encoding: .utf8)
            }
            #expect(try registered() == ["app2", "app3", "app4", "app5"], "\(harness.log)")
            #expect(harness.log.contains("skipped 1 unreadable lines"), "\(harness.log)")
            // New entries go on after the restored ones, and the next restart keeps them in order.
            apps.append(try harness.register("app6"))
            try harness.restart(after: .seconds(1))
            #expect(try registered() == ["app3", "app4", "app5", "app6"], "\(harness.log)")
        }
    }

    @Test("the state file holds the state as it is, though the writer re-encodes only the apps that changed")
    func encoderKeepsUnchangedApps() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            var apps: [ManagerHarness.App] = []
            for name in ["a", "b", "c"] { apps.append(try harness.register(name)) }
            let store = try #require(harness.manager.persistence.store)
            func matches(_ step: String) throws {
                try harness.settle()
                let state = try #require(harness.manager.persistence.currentState(journal: 1))
                // The writer's encoder, cache and all, against a plain encoding of the same state.
                let cached = try JSONSerialization.jsonObject(with: Data(store.encoder.encode(state))) as? NSDictionary
                let plain = try JSONSerialization.jsonObject(with: JSONEncoder().encode(state)) as? NSDictionary
                #expect(cached != nil && cached == plain, "after \(step)")
            }
            try matches("registering")
            #expect(try harness.call("BeginBackgroundTask", ["app": "b", "name": "sync"]).errorName == nil)
            try matches("a task of b")
            try background(apps[2], in: harness)
            try matches("c in background")
            #expect(try harness.call("Terminate", ["app": "a"]).errorName == nil)
            try matches("terminating a")
            apps.append(try harness.register("d"))
            try matches("d registering")
        }
    }

    @Test("--release-stopped continues what the state file says the daemon stopped, and records it")
    func releaseStopped() async throws {
        try await offThePool {
            let harness = try ManagerHarness()
            defer { harness.close() }
            let app = try suspended("app", in: harness)
            // As after a kill -9: the last saved state says the process is stopped, and it still is.
            try harness.step(until: "the stop to be saved") { harness.savedText.contains("\"isStopped\":true") }
            // The snapshot and its journals, copied as they are: the stop is in a journal's record.
            let copy = harness.directory.path + "/crashed.json"
            try FileManager.default.copyItem(atPath: harness.statePath, toPath: copy)
            var journals = 0
            for name in try FileManager.default.contentsOfDirectory(atPath: harness.directory.path)
            where name.hasPrefix("state.journal.") {
                journals += 1
                try FileManager.default.copyItem(
                    atPath: harness.directory.path + "/" + name,
                    toPath: harness.directory.path + "/crashed" + name.dropFirst("state".count))
            }
            #expect(journals > 0)
            let status = StoppedRelease.run(
                statePath: copy, logger: Logger(destination: .stream, threshold: .debug, stream: .standardError),
                procFS: harness.tree.procFS, now: harness.manager.now)
            #expect(status == 0)
            try harness.step(until: "app to be continued") { harness.processState(app) != .stopped }
            let saved = try String(contentsOfFile: copy, encoding: .utf8)
            #expect(
                saved.contains("\"apps\":[") && !saved.contains("\"isStopped\":true"), "the release was not recorded")
            let left = try FileManager.default.contentsOfDirectory(atPath: harness.directory.path)
            #expect(
                !left.contains { $0.hasPrefix("crashed.journal.") }, "the journals replayed into it are left: \(left)")
        }
    }
}

/// Rewrites the state file at `path` through `change`, as a JSON object.
func editState(at path: String, _ change: (inout [String: Any]) -> Void) throws {
    let url = URL(fileURLWithPath: path)
    var object = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
    change(&object)
    try JSONSerialization.data(withJSONObject: object).write(to: url)
}
