// Managed apps launched as units of a service manager the test plays (FakeUnitManager), on the manual clock: what
// the daemon asks the manager for, how it judges the answers, and how it ends what it no longer wants.

import BGTaskBenchmarks
import BGTaskJSON
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@testable import BGTaskDaemon

/// A `Launch` on a connection of its own, and the unit the fake manager was asked to start for it.
struct UnitLaunch {
    let client: RawVarlinkClient
    let unit: String
}

/// A launched app whose unit the fake manager "runs": its main process a stand-in moved into a cgroup of the test's.
struct LaunchedUnitApp {
    let app: ManagerHarness.App
    let unit: String
    let cgroup: ScratchCgroup
    /// The unit's cgroup as the manager names it (`ControlGroup`: relative to the cgroup2 root).
    let controlGroup: String
}

extension ManagerHarness {
    /// Sends `Launch(name, argv)` on a connection of its own and steps until the fake manager is asked to start a
    /// unit for it.
    func beginLaunch(_ name: String, through fake: FakeUnitManager, argv: [String] = ["/bin/sleep", "60"]) throws
        -> UnitLaunch
    {
        let client = try RawVarlinkClient(path: socketPath)
        let before = fake.startedUnits.count
        try client.send(
            "io.bgtask.Lifecycle.Launch", ["name": .string(name), "argv": .array(argv.map { .string($0) })])
        try step(until: "StartTransientUnit for \(name)") { fake.startedUnits.count > before }
        return UnitLaunch(client: client, unit: fake.startedUnits[before])
    }

    /// The reply to `launch`'s call, stepping until it comes.
    func reply(to launch: UnitLaunch) throws -> [String: JSONValue] {
        guard let reply = try reply(on: launch.client, to: "Launch") else {
            throw HarnessError("the manager closed the Launch connection")
        }
        return reply
    }

    /// `cgroup` as the service manager names a unit's (`ControlGroup`): its path below the cgroup2 root.
    static func controlGroup(of cgroup: ScratchCgroup) throws -> String {
        guard let root = CgroupHierarchies.probe().unified, cgroup.cgroup.path.hasPrefix(root + "/") else {
            throw HarnessError("\(cgroup.cgroup.path) is not below the cgroup2 root")
        }
        return String(cgroup.cgroup.path.dropFirst(root.count))
    }

    /// Launches `name` as a unit of `fake` all the way: the start accepted, its job done, its main process a
    /// stand-in in a cgroup2 cgroup of the test's, and the app registered (`state`) from it.
    func launchUnitApp(
        _ name: String, through fake: FakeUnitManager, pssMiB: Int64 = 10, state: String = "active"
    ) throws -> LaunchedUnitApp {
        let cgroup = try ScratchCgroup(.unified)
        let controlGroup = try Self.controlGroup(of: cgroup)
        let standIn = try startStandIn(name, pssMiB: pssMiB)
        try cgroup.move(standIn.process.pid)
        try tree.setUnifiedCgroup(pid: standIn.process.pid, path: controlGroup)
        let launch = try beginLaunch(name, through: fake)
        let job = fake.acceptStart(launch.unit)
        try settle()
        fake.removeJob(job, unit: launch.unit, result: .done)
        try step(until: "the unit's properties read") { fake.count(.unitProperties(launch.unit)) == 1 }
        fake.answerProperties(
            launch.unit, .success(FakeUnitManager.running(mainPID: standIn.process.pid, controlGroup: controlGroup)))
        let reply = try reply(to: launch)
        guard reply.errorName == nil else { throw HarnessError("Launch \(name) failed: \(reply)\n\(log)") }
        let app = try register(standIn, as: name, state: state)
        return LaunchedUnitApp(app: app, unit: launch.unit, cgroup: cgroup, controlGroup: controlGroup)
    }

    /// Moves `app` to background and acknowledges `didEnterBackground`: with no lease it is suspended at once.
    func sendToBackground(_ app: App) throws {
        let moved = try call("SetState", ["app": .string(app.name), "state": "background"])
        guard moved.errorName == nil else { throw HarnessError("SetState \(app.name) background: \(moved)") }
        guard let entered = try events(of: app).first(where: { $0.kind == "didEnterBackground" }) else {
            throw HarnessError("\(app.name) got no didEnterBackground")
        }
        try acknowledge(app, entered.id)
    }
}

/// The `LaunchFailed` reason of a Launch reply; nil for any other reply.
private func launchFailure(_ reply: [String: JSONValue]) -> String? {
    guard reply.errorName == "io.bgtask.Lifecycle.LaunchFailed" else { return nil }
    return reply.parameters["reason"]?.stringValue
}

@Suite("Launching units through a fake service manager")
struct UnitLaunchTests {
    /// Settings of the daemon's own sandbox that must never reach an app's unit.
    static let sandboxProperties = [
        "NoNewPrivileges", "PrivateNetwork", "UMask", "SystemCallFilter", "SystemCallArchitectures",
        "RestrictNamespaces", "RestrictAddressFamilies", "MemoryDenyWriteExecute", "CapabilityBoundingSet",
        "AmbientCapabilities", "ProtectSystem", "ProtectHome", "PrivateTmp", "ProtectControlGroups",
        "ProtectKernelTunables", "LockPersonality", "RestrictRealtime", "Delegate",
    ]

    @Test("StartTransientUnit asks for app-bgtask-NAME-*.service in app.slice with the app's own settings only")
    func transientUnitProperties() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let launch = try harness.beginLaunch("org.example.mail", through: fake)
            let pattern = /app-bgtask-org\.example\.mail-[0-9a-f]{8}\.service/
            #expect(launch.unit.wholeMatch(of: pattern) != nil, "\(launch.unit)")
            let sent = try #require(fake.properties[launch.unit])
            let byName = Dictionary(sent.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
            #expect(sent.count == byName.count, "a property sent twice: \(sent.map(\.name))")
            #expect(byName["Type"] == .string("exec"))
            #expect(byName["Slice"] == .string("app.slice"))
            #expect(byName["CollectMode"] == .string("inactive-or-failed"))
            #expect(byName["SyslogIdentifier"] == .string("org.example.mail"))
            #expect(byName["StandardOutput"] == .string("journal"))
            #expect(byName["OOMScoreAdjust"] == .int32(0), "not the app's default, 0")
            let environment = byName["Environment"]?.stringArrayValue ?? []
            #expect(environment.contains("BGTASK_SOCKET=" + harness.socketPath), "\(environment)")
            #expect(environment.contains("BGTASK_APP_NAME=org.example.mail"), "\(environment)")
            #expect(byName["User"] == nil, "User= on a user instance")
            for property in Self.sandboxProperties {
                #expect(byName[property] == nil, "the daemon's \(property) reached the app's unit")
            }
            // systemd 243 and later: ExecStartEx, which the manager does not expand (no-env-expand).
            #expect(byName["ExecStart"] == nil)
            guard case .array(let element, let commands)? = byName["ExecStartEx"],
                case .structure(let command)? = commands.first
            else {
                Issue.record("no ExecStartEx: \(String(describing: byName["ExecStartEx"]))")
                return
            }
            #expect(element == "(sasas)")
            #expect(command.first == .string("/bin/sleep"))
            #expect(command.dropFirst().first?.stringArrayValue == ["/bin/sleep", "60"])
            #expect(command.dropFirst(2).first?.stringArrayValue == ["no-env-expand"])
        }
    }

    @Test(
        "a manager before systemd 243 gets ExecStart with every $ doubled, which its expansion reads back as the words given"
    )
    func argumentsEscapedForAnOldManager() async throws {
        try await offThePool {
            let argv = ["/bin/echo", "$HOME", "${X}", "a$$b", "%n", "back\\slash", "5$"]
            for (version, expected) in [
                (242, ["/bin/echo", "$$HOME", "$${X}", "a$$$$b", "%n", "back\\slash", "5$$"]),
                (243, argv),
            ] {
                let fake = FakeUnitManager()
                let harness = try ManagerHarness(unitManager: fake.endpoint(version: version))
                defer { harness.close() }
                let launch = try harness.beginLaunch("org.example.argv", through: fake, argv: argv)
                let sent = try #require(fake.properties[launch.unit])
                let names = sent.map(\.name)
                #expect(
                    names.contains(version < 243 ? "ExecStart" : "ExecStartEx")
                        && !names.contains(version < 243 ? "ExecStartEx" : "ExecStart"), "\(version): \(names)")
                guard case .array(_, let commands)? = sent.first(where: { $0.name.hasPrefix("ExecStart") })?.value,
                    case .structure(let command)? = commands.first
                else {
                    Issue.record("\(version): no command in \(sent)")
                    continue
                }
                #expect(command.first == .string("/bin/echo"))
                // What the real manager reads back from these as the words given: ServiceManagerTests.
                #expect(command.dropFirst().first?.stringArrayValue == expected, "\(version)")
            }
        }
    }

    @Test("the app's own OOMScoreAdjust= from its apps.d file reaches its unit; others get 0")
    func ownOOMScoreAdjust() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(
                files: [
                    "apps.d/org.example.game.conf": "[Launch]\nOOMScoreAdjust=600\n",
                    "apps.d/org.example.keeper.conf": "[Launch]\nOOMScoreAdjust=-300\n",
                ], unitManager: fake.endpoint())
            defer { harness.close() }
            for (name, expected) in [("org.example.game", 600), ("org.example.keeper", -300), ("org.example.other", 0)]
            {
                let launch = try harness.beginLaunch(name, through: fake)
                let sent = fake.properties[launch.unit]?.filter { $0.name == "OOMScoreAdjust" }.map(\.value)
                #expect(sent == [.int32(Int32(expected))], "\(name): \(String(describing: sent))")
            }
        }
    }

    @Test("on the system instance the unit runs as the user the name is pinned to (User=), as root asked")
    func systemInstanceUser() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(
                files: ["apps.d/org.example.pinned.conf": "[Access]\nUser=65534\n"],
                unitManager: fake.endpoint(isSystemInstance: true))
            defer { harness.close() }
            // The test is root: a launch of a name of its own runs as root, with no User= at all.
            let own = try harness.beginLaunch("org.example.own", through: fake)
            #expect(fake.properties[own.unit]?.contains { $0.name == "User" } == false)
            let pinned = try harness.beginLaunch("org.example.pinned", through: fake)
            #expect(fake.properties[pinned.unit]?.first { $0.name == "User" }?.value == .string("65534"))
        }
    }

    @Test("a start the manager refuses, or whose job fails, is LaunchFailed with the reason, and the unit killed")
    func startFails() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let refused = try harness.beginLaunch("org.example.refused", through: fake)
            fake.answerStart(
                refused.unit, .failure(.method(.unitExists, message: "Unit \(refused.unit) was already loaded.")))
            let refusal = try #require(launchFailure(try harness.reply(to: refused)))
            #expect(refusal.contains("the service manager did not start \(refused.unit)"), "\(refusal)")
            #expect(refusal.contains("already loaded"), "\(refusal)")

            let failing = try harness.beginLaunch("org.example.failing", through: fake)
            let job = fake.acceptStart(failing.unit)
            try harness.settle()
            #expect(try failing.client.poll() == .nothing, "answered before its start job ended")
            fake.removeJob(job, unit: failing.unit, result: .failed)
            let failure = try #require(launchFailure(try harness.reply(to: failing)))
            #expect(failure.contains("its start job ended failed"), "\(failure)")
            #expect(fake.count(.killUnit(failing.unit, .kill)) == 1, "\(fake.calls)")
            // The name is free again.
            _ = try harness.beginLaunch("org.example.failing", through: fake)
        }
    }

    @Test("the job's end may come before the answer naming the job")
    func jobEndsBeforeTheAnswer() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let launch = try harness.beginLaunch("org.example.quick", through: fake)
            let job = BusObjectPath("/org/freedesktop/systemd1/job/77")
            fake.removeJob(job, unit: launch.unit, result: .failed)
            try harness.settle()
            fake.answerStart(launch.unit, .success(job))
            let failure = try #require(launchFailure(try harness.reply(to: launch)))
            #expect(failure.contains("its start job ended failed"), "\(failure)")
        }
    }

    @Test("a manager that never answers: LaunchTimeoutSec fails the launch and kills the unit, a late start too")
    func launchTimeout() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(
                configuration: "[Policy]\nLaunchTimeoutSec=7s\n", unitManager: fake.endpoint())
            defer { harness.close() }
            let launch = try harness.beginLaunch("org.example.slow", through: fake)
            try harness.advance(by: .seconds(7) - .nanoseconds(1))
            #expect(try launch.client.poll() == .nothing, "failed before LaunchTimeoutSec")
            try harness.advance(by: .nanoseconds(1))
            let failure = try #require(launchFailure(try harness.reply(to: launch)))
            #expect(failure.contains("did not start within 7") && failure.contains("LaunchTimeoutSec"), "\(failure)")
            #expect(fake.count(.killUnit(launch.unit, .kill)) == 1, "\(fake.calls)")
            // The manager answers at last: what it started is not wanted.
            fake.acceptStart(launch.unit)
            try harness.settle()
            #expect(fake.count(.killUnit(launch.unit, .kill)) == 2, "\(fake.calls)")
        }
    }

    @Test("stopping with a unit still starting kills it, waits for the answers, and closes the connection")
    func stopWhileStarting() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            let launch = try harness.beginLaunch("org.example.starting", through: fake)
            harness.close()
            #expect(fake.count(.killUnit(launch.unit, .kill)) == 1, "\(fake.calls)")
            #expect(fake.settleCount >= 1 && fake.lastSettleHeld == true)
            #expect(fake.pendingKills == 0)
            #expect(fake.closeCount == 1)
        }
    }
}

@Suite("Units' processes checked and followed through a fake service manager", .requires(.cgroup(.unified)))
struct UnitProcessTests {
    @Test("a launched unit's main process in the unit's cgroup is taken on: GetApp names the unit and the cgroup")
    func launchedAndRegistered() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.unit", through: fake)
            let app = try harness.app("org.example.unit")
            #expect(app["state"] == "active" && app["managed"] == true, "\(app)")
            #expect(app["unit"]?.stringValue == launched.unit)
            #expect(app["cgroup"]?.stringValue == launched.cgroup.cgroup.path)
            #expect(app["pid"]?.intValue == Int(launched.app.pid))
            #expect(fake.isWatched(launched.unit), "how its program ends is not followed")
        }
    }

    @Test("a MainPID in another cgroup than the unit's, gone, or none: refused, and the unit killed")
    func mainProcessRefused() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let cgroup = try ScratchCgroup(.unified)
            let controlGroup = try ManagerHarness.controlGroup(of: cgroup)
            let standIn = try harness.startStandIn("stranger")
            // Alive, but in the test's cgroup, not the unit's.
            let own = try #require(try CgroupHierarchies.probe().cgroups(of: getpid()).unified)
            let root = try #require(CgroupHierarchies.probe().unified)
            try harness.tree.setUnifiedCgroup(pid: standIn.process.pid, path: String(own.path.dropFirst(root.count)))

            func refusal(_ name: String, _ properties: UnitProperties) throws -> (String, UnitLaunch) {
                let launch = try harness.beginLaunch(name, through: fake)
                let job = fake.acceptStart(launch.unit)
                try harness.settle()
                fake.removeJob(job, unit: launch.unit, result: .done)
                try harness.step(until: "\(name)'s properties read") { fake.count(.unitProperties(launch.unit)) == 1 }
                fake.answerProperties(launch.unit, .success(properties))
                let reason = try #require(launchFailure(try harness.reply(to: launch)), "\(name) was taken on")
                #expect(fake.count(.killUnit(launch.unit, .kill)) == 1, "\(name): \(fake.calls)")
                return (reason, launch)
            }

            let (elsewhere, _) = try refusal(
                "org.example.elsewhere",
                FakeUnitManager.running(mainPID: standIn.process.pid, controlGroup: controlGroup))
            #expect(elsewhere.contains("pid \(standIn.process.pid) is not in"), "\(elsewhere)")
            // The unit's cgroup is the process's, but the manager names another.
            try cgroup.move(standIn.process.pid)
            try harness.tree.setUnifiedCgroup(pid: standIn.process.pid, path: controlGroup)
            let (otherUnit, _) = try refusal(
                "org.example.other",
                FakeUnitManager.running(mainPID: standIn.process.pid, controlGroup: controlGroup + "-not"))
            #expect(otherUnit.contains("is not in"), "\(otherUnit)")

            // A process that exited and was reaped: no pidfd opens on it.
            let gone = try ChildProcess(["/bin/true"])
            _ = try gone.waitForExit(timeout: .seconds(10))
            let (exited, _) = try refusal(
                "org.example.gone", FakeUnitManager.running(mainPID: gone.pid, controlGroup: controlGroup))
            #expect(exited.contains("cannot open pid \(gone.pid)") || exited.contains("is not in"), "\(exited)")

            let (none, _) = try refusal(
                "org.example.none",
                UnitProperties(["MainPID": .uint32(0), "ExecMainCode": .int32(1), "ExecMainStatus": .int32(2)]))
            #expect(none.contains("has no main process") && none.contains("status 2"), "\(none)")
            #expect(try harness.call("GetApp", ["app": "org.example.elsewhere"]).errorName != nil)
        }
    }

    @Test("the unit's ExecMainCode and ExecMainStatus say how the app ended: exited, crashed, or unknown in time")
    func exitFromTheUnit() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }

            // The manager's word first, then the pidfd: exited with status 3.
            let exiting = try harness.launchUnitApp("org.example.exiting", through: fake)
            fake.changeProperties(
                of: exiting.unit, ["ExecMainCode": .int32(Int32(CLD_EXITED)), "ExecMainStatus": .int32(3)])
            try exiting.app.standIn.process.sendSignal(.kill)
            _ = try? exiting.app.standIn.process.waitForExit(timeout: .seconds(10))
            try harness.step(until: "exiting's stream to close") { try harness.isStreamClosed(exiting.app) }
            let exited = try harness.app("org.example.exiting")
            #expect(exited["exitReason"] == "exited" && exited["exitStatus"]?.intValue == 3, "\(exited)")
            #expect(!fake.isWatched(exiting.unit), "still following an ended unit")

            // The pidfd first: the daemon waits for the manager's word, which says killed by SIGSEGV.
            let crashing = try harness.launchUnitApp("org.example.crashing", through: fake)
            try crashing.app.standIn.process.sendSignal(.kill)
            _ = try? crashing.app.standIn.process.waitForExit(timeout: .seconds(10))
            try harness.settle()
            #expect(
                try harness.app("org.example.crashing")["state"] != "terminated", "ended before the manager said how")
            fake.changeProperties(
                of: crashing.unit, ["ExecMainCode": .int32(Int32(CLD_KILLED)), "ExecMainStatus": .int32(SIGSEGV)])
            try harness.settle()
            let crashed = try harness.app("org.example.crashing")
            #expect(crashed["exitReason"] == "crashed" && crashed["exitSignal"] == "SIGSEGV", "\(crashed)")

            // The manager never says: after UnitSupervisor.exitReportWait the app ends all the same.
            let silent = try harness.launchUnitApp("org.example.silent", through: fake)
            try silent.app.standIn.process.sendSignal(.kill)
            _ = try? silent.app.standIn.process.waitForExit(timeout: .seconds(10))
            try harness.settle()
            #expect(try harness.app("org.example.silent")["state"] != "terminated")
            try harness.advance(by: UnitSupervisor.exitReportWait)
            let ended = try harness.app("org.example.silent")
            #expect(ended["state"] == "terminated" && ended["exitStatus"] == .null, "\(ended)")
        }
    }

    @Test("a started unit the daemon does not take on (AppsPerUserMax reached meanwhile) is killed through KillUnit")
    func notTakenOn() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(
                configuration: "[Limits]\nAppsPerUserMax=1\n", unitManager: fake.endpoint())
            defer { harness.close() }
            let cgroup = try ScratchCgroup(.unified)
            let controlGroup = try ManagerHarness.controlGroup(of: cgroup)
            let standIn = try harness.startStandIn("org.example.late")
            try cgroup.move(standIn.process.pid)
            try harness.tree.setUnifiedCgroup(pid: standIn.process.pid, path: controlGroup)
            let launch = try harness.beginLaunch("org.example.late", through: fake)
            let job = fake.acceptStart(launch.unit)
            try harness.settle()
            fake.removeJob(job, unit: launch.unit, result: .done)
            try harness.step(until: "the properties read") { fake.count(.unitProperties(launch.unit)) == 1 }
            // Meanwhile another app of the same user takes the one place.
            _ = try harness.register("org.example.first")
            fake.answerProperties(
                launch.unit, .success(FakeUnitManager.running(mainPID: standIn.process.pid, controlGroup: controlGroup))
            )
            let reply = try harness.reply(to: launch)
            #expect(reply.errorName == "io.bgtask.Lifecycle.LimitExceeded", "\(reply)")
            #expect(fake.count(.killUnit(launch.unit, .kill)) == 1, "\(fake.calls)")
            #expect(!fake.isWatched(launch.unit))
        }
    }
}
