// Apps in units the service manager stops, or watches with a watchdog, through a manager the test plays
// (FakeUnitManager): a frozen app is thawed the moment its unit stops, and an app whose unit has a watchdog is
// never suspended, each with the reason in GetApp and the audit trail.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@testable import BGTaskDaemon

extension ManagerHarness {
    /// The kinds and triggers of `History()` for `name`, oldest first.
    func historyEntries(of name: String) throws -> [(kind: String, trigger: String?)] {
        let reply = try call("History")
        return (reply.parameters["entries"]?.arrayValue ?? []).compactMap { value in
            guard let entry = value.objectValue, entry["app"]?.stringValue == name,
                let kind = entry["kind"]?.stringValue
            else { return nil }
            return (kind, entry["trigger"]?.stringValue)
        }
    }
}

@Suite("Apps whose units stop or have a watchdog, through a fake service manager", .requires(.cgroup(.unified)))
struct UnitStopTests {
    @Test(
        "a launched app frozen through its unit's cgroup is thawed as soon as the unit leaves active, never again frozen"
    )
    func frozenUnitThawedOnStop() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.stopped", through: fake)
            let unit = launched.unit
            // The unit runs (the state read after the subscription).
            try harness.step(until: "the unit's state read") { fake.isStateReadPending(unit) }
            fake.answerUnitState(unit, .success(UnitStateReading(activeState: "active")))
            try harness.sendToBackground(launched.app)
            #expect(try harness.freezeRefusedByManager(launched, through: fake))
            try harness.confirmFreezes()
            #expect(try harness.app("org.example.stopped")["state"] == "suspended")

            // `systemctl stop`: the manager sends SIGTERM and reports the unit deactivating.
            fake.changeActiveState(of: unit, to: "deactivating")
            try harness.settle()
            #expect(
                try launched.cgroup.cgroup.waitUntil(frozen: false, timeout: .seconds(5)),
                "the unit's cgroup stayed frozen while its manager stops it")
            let app = try harness.app("org.example.stopped")
            #expect(app["state"] == "background", "\(app)")
            #expect(app["suspensionExemption"] == .string("its unit \(unit) is stopping"), "\(app)")
            #expect(
                try harness.historyEntries(of: "org.example.stopped").contains {
                    $0.kind == "suspensionExempted" && $0.trigger == "its unit \(unit) is stopping"
                })
            #expect(harness.log.contains("org.example.stopped is not suspended from now on"), "\(harness.log)")

            // Foreground and back: it stays in background, running, while the stop goes on.
            try harness.activate(launched.app)
            try harness.sendToBackground(launched.app)
            try harness.advance(by: .seconds(30))
            try harness.confirmFreezes()
            #expect(try harness.app("org.example.stopped")["state"] == "background")
            #expect(try !(launched.cgroup.cgroup.events()["frozen"] == 1), "frozen again while its unit stops")
            #expect(fake.count(.freezeUnit(unit)) == 1, "\(fake.calls)")
        }
    }

    @Test("where FreezeUnit froze the unit, its stop has the daemon ask ThawUnit as well (the manager thaws it too)")
    func managerFrozenUnitThawedOnStop() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint(version: 256))
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.managed", through: fake)
            let unit = launched.unit
            try harness.sendToBackground(launched.app)
            try harness.freezeByManager(launched, through: fake)
            #expect(try harness.app("org.example.managed")["suspendedWith"] == "unit")
            fake.changeActiveState(of: unit, to: "deactivating")
            try harness.step(until: "ThawUnit") { fake.count(.thawUnit(unit)) == 1 }
            try launched.cgroup.cgroup.requestFreeze(false)
            fake.answerThaw(unit, .success(()))
            try harness.settle()
            #expect(try harness.app("org.example.managed")["state"] == "background")
        }
    }

    @Test("a unit found stopping when first read (its stop began before the subscription) thaws its app too")
    func stopBeforeSubscription() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let launched = try harness.launchUnitApp("org.example.early", through: fake, state: "background")
            let unit = launched.unit
            guard let entered = try harness.events(of: launched.app).first(where: { $0.kind == "didEnterBackground" })
            else { throw HarnessError("no didEnterBackground") }
            try harness.acknowledge(launched.app, entered.id)
            #expect(try harness.freezeRefusedByManager(launched, through: fake))
            fake.answerUnitState(unit, .success(UnitStateReading(activeState: "deactivating")))
            try harness.settle()
            #expect(try launched.cgroup.cgroup.waitUntil(frozen: false, timeout: .seconds(5)))
            #expect(try harness.app("org.example.early")["state"] == "background")
        }
    }

    @Test("a self-registered app in a service with a watchdog is found by its pid and never suspended")
    func watchdogServiceNeverSuspended() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let app = try harness.register("org.example.pinger")
            try harness.step(until: "GetUnitByPID") { fake.count(.unitName(app.pid)) == 1 }
            fake.answerUnitName(app.pid, .success("pinger.service"))
            try harness.step(until: "the unit's state read") { fake.isStateReadPending("pinger.service") }
            #expect(fake.isWatched("pinger.service"))
            fake.answerUnitState(
                "pinger.service", .success(UnitStateReading(activeState: "active", watchdog: .seconds(5))))
            try harness.settle()
            let exempt = try harness.app("org.example.pinger")
            let reason =
                "its unit pinger.service has a watchdog (WatchdogSec=5s), which a suspended process cannot ping"
            #expect(exempt["suspensionExemption"] == .string(reason), "\(exempt)")
            try harness.sendToBackground(app)
            try harness.advance(by: .seconds(60))
            #expect(try harness.app("org.example.pinger")["state"] == "background")
            #expect(harness.processState(app) != .stopped, "stopped with SIGSTOP")
            #expect(try harness.historyEntries(of: "org.example.pinger").contains { $0.trigger == reason })

            // Its stop later still reaches it; once its process is gone, its unit is no longer watched.
            fake.changeActiveState(of: "pinger.service", to: "deactivating")
            try harness.settle()
            #expect(
                try harness.app("org.example.pinger")["suspensionExemption"]
                    == .string("its unit pinger.service is stopping"))
            try app.standIn.process.sendSignal(.kill)
            try harness.step(until: "the app's exit") { try harness.app("org.example.pinger")["state"] == "terminated" }
            #expect(!fake.isWatched("pinger.service"), "the unit of an ended app is still watched")
        }
    }

    @Test("a self-registered app in no unit of the manager, or in one without a watchdog, is suspended as before")
    func noUnitNoExemption() async throws {
        try await offThePool {
            let fake = FakeUnitManager()
            let harness = try ManagerHarness(unitManager: fake.endpoint())
            defer { harness.close() }
            let loose = try harness.register("org.example.loose")
            let scoped = try harness.register("org.example.scoped")
            try harness.step(until: "GetUnitByPID") {
                fake.count(.unitName(loose.pid)) == 1 && fake.count(.unitName(scoped.pid)) == 1
            }
            fake.answerUnitName(
                loose.pid,
                .failure(.method(.noUnitForPID, message: "PID \(loose.pid) does not belong to any unit")))
            fake.answerUnitName(scoped.pid, .success("app-term-1.scope"))
            try harness.step(until: "the unit's state read") { fake.isStateReadPending("app-term-1.scope") }
            fake.answerUnitState("app-term-1.scope", .success(UnitStateReading(activeState: "active")))
            for app in [loose, scoped] {
                try harness.sendToBackground(app)
                try harness.step(until: "\(app.name) suspended") { harness.processState(app) == .stopped }
                #expect(try harness.app(app.name)["suspensionExemption"] == .null)
            }
        }
    }
}
