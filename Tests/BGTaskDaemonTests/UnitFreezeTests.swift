// Units frozen, thawed and killed through a service manager the test plays: FreezeUnit where it freezes, the unit's
// cgroup where it refuses (remembered), and never a unit left frozen or an app reported frozen another way than it
// is.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@testable import BGTaskDaemon

/// Whether `cgroup`'s `cgroup.events` says frozen, waiting (at most 5 s) for it to say `frozen`.
private func becomes(_ cgroup: ScratchCgroup, frozen: Bool) throws -> Bool {
    try cgroup.cgroup.waitUntil(frozen: frozen, timeout: .seconds(5))
}

/// Whether `cgroup` is frozen now.
private func isFrozen(_ cgroup: ScratchCgroup) throws -> Bool {
    try cgroup.cgroup.events()["frozen"] == 1
}

extension ManagerHarness {
    /// `GetStatus`'s freeze backend chain.
    func freezeBackends() throws -> String? {
        try call("GetStatus").parameters["backends"]?.objectValue?["freeze"]?.stringValue
    }

    /// Moves `app` to the foreground (`active`).
    func activate(_ app: App) throws {
        let moved = try call("SetState", ["app": .string(app.name), "state": "active"])
        guard moved.errorName == nil else { throw HarnessError("SetState \(app.name) active: \(moved)") }
    }

    /// Moves the clock past one confirmation read of pending freezes (`cgroup.events`).
    func confirmFreezes() throws {
        try advance(by: ProcessTable.freezeConfirmationInterval)
    }

    /// Once `launched` is on its way to suspension: the fake manager freezes its unit as systemd's `FreezeUnit` does
    /// (its cgroup frozen, then the answer), and the daemon confirms the freeze.
    func freezeByManager(_ launched: LaunchedUnitApp, through fake: FakeUnitManager) throws {
        try step(until: "FreezeUnit") { fake.count(.freezeUnit(launched.unit)) == 1 }
        try launched.cgroup.cgroup.requestFreeze(true)
        fake.answerFreeze(launched.unit, .success(()))
        try confirmFreezes()
    }

    /// Once `launched` is on its way to suspension: the fake manager refuses `FreezeUnit` (`NotSupported`, as
    /// systemd 252 on a hybrid host) and the daemon freezes the unit's cgroup itself; true when it shows frozen.
    func freezeRefusedByManager(_ launched: LaunchedUnitApp, through fake: FakeUnitManager) throws -> Bool {
        try step(until: "FreezeUnit") { fake.count(.freezeUnit(launched.unit)) == 1 }
        fake.answerFreeze(launched.unit, .failure(FakeUnitManager.notSupported))
        try settle()
        return try launched.cgroup.cgroup.waitUntil(frozen: true, timeout: .seconds(5))
    }
}

@Suite("Units frozen through a fake service manager", .requires(.cgroup(.unified)))
struct UnitFreezeTests {
    @Test("where the manager freezes units, FreezeUnit and ThawUnit do it, and the daemon writes no cgroup file")
    func freezeUnitSupported() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint(version: 256))
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.frozen", through: fake)
            let unit = launched.unit
            #expect(try harness.freezeBackends() == "unit+cgroup2+sigstop")
            try harness.sendToBackground(launched.app)
            try harness.step(until: "FreezeUnit") { fake.count(.freezeUnit(unit)) == 1 }
            try harness.confirmFreezes()
            #expect(try !isFrozen(launched.cgroup), "the daemon froze the cgroup itself while FreezeUnit was out")
            // The manager freezes the unit's cgroup, as systemd does, and then answers.
            try launched.cgroup.cgroup.requestFreeze(true)
            #expect(try becomes(launched.cgroup, frozen: true))
            fake.answerFreeze(unit, .success(()))
            try harness.confirmFreezes()
            let suspended = try harness.app("org.example.frozen")
            #expect(suspended["state"] == "suspended" && suspended["suspendedWith"] == "unit", "\(suspended)")
            #expect(harness.processState(launched.app) != .stopped, "stopped with SIGSTOP as well")
            #expect(harness.log.contains("froze pid \(launched.app.pid) through"), "\(harness.log)")

            try harness.activate(launched.app)
            try harness.step(until: "ThawUnit") { fake.count(.thawUnit(unit)) == 1 }
            #expect(try isFrozen(launched.cgroup), "the daemon thawed the cgroup itself while ThawUnit was out")
            try launched.cgroup.cgroup.requestFreeze(false)
            fake.answerThaw(unit, .success(()))
            try harness.advance(by: UnitFreezer.thawTimeout)
            #expect(!harness.log.contains("did not thaw"), "\(harness.log)")
            #expect(try harness.app("org.example.frozen")["suspendedWith"] == "unit", "the last suspension's way")
            #expect(fake.count(.freezeUnit(unit)) == 1 && fake.count(.thawUnit(unit)) == 1, "\(fake.calls)")
        }
    }

    @Test("where the manager answers NotSupported, the unit's cgroup.freeze is the way, and the refusal remembered")
    func freezeUnitNotSupported() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.hybrid", through: fake)
            let unit = launched.unit
            try harness.sendToBackground(launched.app)
            #expect(
                try harness.freezeRefusedByManager(launched, through: fake),
                "not frozen through the cgroup after NotSupported")
            try harness.confirmFreezes()
            let suspended = try harness.app("org.example.hybrid")
            #expect(suspended["suspendedWith"] == "cgroup2", "\(suspended)")
            #expect(harness.processState(launched.app) != .stopped)
            #expect(try harness.freezeBackends() == "cgroup2+sigstop")

            // Thawed through the file it was frozen through; the manager is not asked.
            try harness.activate(launched.app)
            #expect(try becomes(launched.cgroup, frozen: false), "the cgroup stayed frozen in the foreground")
            #expect(fake.count(.thawUnit(unit)) == 0, "\(fake.calls)")

            // The next suspension goes to the cgroup at once.
            try harness.sendToBackground(launched.app)
            try harness.step(until: "the cgroup to be frozen again") { try isFrozen(launched.cgroup) }
            #expect(fake.count(.freezeUnit(unit)) == 1, "asked the manager again after NotSupported: \(fake.calls)")
        }
    }

    @Test("a ThawUnit left unanswered: the daemon thaws the unit's cgroup itself after UnitFreezer.thawTimeout")
    func thawNeverSkipped() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint(version: 256))
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.stuck", through: fake)
            let unit = launched.unit
            try harness.sendToBackground(launched.app)
            try harness.freezeByManager(launched, through: fake)
            #expect(try harness.app("org.example.stuck")["state"] == "suspended")

            try harness.activate(launched.app)
            try harness.step(until: "ThawUnit") { fake.count(.thawUnit(unit)) == 1 }
            try harness.advance(by: UnitFreezer.thawTimeout - .nanoseconds(1))
            #expect(try isFrozen(launched.cgroup), "thawed before the manager's time was up")
            try harness.advance(by: .nanoseconds(1))
            #expect(try becomes(launched.cgroup, frozen: false), "an app that must run stayed frozen")
            #expect(harness.log.contains("did not thaw \(unit) within"), "\(harness.log)")
        }
    }

    @Test("a FreezeUnit answered too late: SIGSTOP stands in, and the manager's freeze is undone once it answers")
    func lateFreezeUndone() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint(version: 256))
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.late", through: fake)
            let unit = launched.unit
            try harness.sendToBackground(launched.app)
            try harness.step(until: "FreezeUnit") { fake.count(.freezeUnit(unit)) == 1 }
            try harness.advance(by: ProcessTable.freezeConfirmationTimeout + ProcessTable.freezeConfirmationInterval)
            try harness.step(until: "SIGSTOP once the freeze did not come") {
                harness.processState(launched.app) == .stopped
            }
            #expect(try harness.app("org.example.late")["suspendedWith"] == "process")

            // The manager froze the unit after all: it is thawed again, the SIGSTOP alone holds the app.
            try launched.cgroup.cgroup.requestFreeze(true)
            fake.answerFreeze(unit, .success(()))
            try harness.step(until: "ThawUnit after the late freeze") { fake.count(.thawUnit(unit)) == 1 }
            try launched.cgroup.cgroup.requestFreeze(false)
            fake.answerThaw(unit, .success(()))
            try harness.settle()

            try harness.activate(launched.app)
            try harness.step(until: "the app to run") { harness.processState(launched.app) != .stopped }
            #expect(try !isFrozen(launched.cgroup))
        }
    }

    @Test("a daemon that stops thaws what the manager froze, through the cgroup if the manager does not answer")
    func stopThaws() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint(version: 256))
            let launched = try harness.launchUnitApp("org.example.left", through: fake)
            let unit = launched.unit
            try harness.sendToBackground(launched.app)
            try harness.freezeByManager(launched, through: fake)
            #expect(try harness.app("org.example.left")["suspendedWith"] == "unit")
            fake.whileSettling = { _ in }
            harness.close()
            #expect(fake.count(.thawUnit(unit)) == 1, "\(fake.calls)")
            #expect(fake.lastSettleHeld == false)
            #expect(try !isFrozen(launched.cgroup), "the daemon stopped and left the unit frozen")
        }
    }

    @Test("Terminate kills the unit's cgroup with cgroup.kill; the manager is not asked")
    func killedThroughTheCgroup() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.ended", through: fake)
            #expect(try harness.call("Terminate", ["app": "org.example.ended"]).errorName == nil)
            try harness.advance(by: .seconds(5))
            #expect(try launched.app.standIn.process.waitForExit(timeout: .seconds(10)), "not killed")
            // How the unit's program ended, as the manager reports it.
            fake.changeProperties(
                of: launched.unit, ["ExecMainCode": .int32(Int32(CLD_KILLED)), "ExecMainStatus": .int32(SIGKILL)])
            try harness.step(until: "the app's stream to close") { try harness.isStreamClosed(launched.app) }
            let ended = try harness.app("org.example.ended")
            #expect(ended["exitReason"] == "controller" && ended["exitSignal"] == "SIGKILL", "\(ended)")
            #expect(fake.count(.killUnit(launched.unit, .kill)) == 0, "\(fake.calls)")
        }
    }
}

@Suite("UnitFreezer's kill")
struct UnitFreezerKillTests {
    @Test("a unit cgroup that cannot be written is killed through KillUnit and the main process's pidfd")
    func killUnitWhereTheCgroupIsReadOnly() async throws {
        try await offThePool {
            let loop = try EventLoop()
            let clock = ManagerClock(mode: .manual(start: .seconds(1)), loop: loop)
            let fake = FakeUnitManager()
            let freezer = try UnitFreezer(
                manager: fake, managerVersion: 252, clock: clock,
                logger: Logger(destination: .stream, threshold: .error))
            // A cgroup whose cgroup.kill cannot be written (a directory): as under ProtectControlGroups=yes.
            let directory = try ScratchDirectory(prefix: "unit-kill")
            defer { directory.remove() }
            try FileManager.default.createDirectory(
                atPath: directory.path + "/cgroup.kill", withIntermediateDirectories: false)
            let child = try ChildProcess(["/bin/sleep", "30"])
            defer { child.terminate() }
            let pidFD = try PidFD.open(pid: child.pid)
            defer { try? pidFD.close() }
            let unit = "app-bgtask-org.example.x-00000001.service"
            try freezer.kill(unit, cgroup: CgroupDirectory(path: directory.path), mainProcess: pidFD)
            #expect(fake.count(.killUnit(unit, .kill)) == 1, "\(fake.calls)")
            let status = try child.waitForExit(timeout: .seconds(10))
            #expect(status == .signaled(.kill), "\(status)")
        }
    }
}
