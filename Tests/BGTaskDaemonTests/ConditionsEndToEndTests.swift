// The real daemon's conditions as GetStatus reports them, from real sources: the daemon in a network namespace the
// test makes (`unshare --net`, gone with the daemon), its default route added and removed from outside; a
// power_supply tree the test writes; and the system bus named by DBUS_SYSTEM_BUS_ADDRESS, a private bus with the
// UPower and logind stand-ins. Reaction latencies (from just before the change to GetStatus showing it) are
// printed, not asserted.

import BGTaskJSON
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// Reads GetStatus until `holds` is true of its `conditions` and `backends`, at most `timeout`; the time since
/// `since` (a `MonotonicClock` reading taken before the change).
@discardableResult
private func waitForStatus(
    _ daemon: DaemonHarness, _ what: String, since: Int64 = MonotonicClock.now(), timeout: Duration = .seconds(20),
    _ holds: (_ conditions: [String: JSONValue], _ backends: [String: JSONValue]) -> Bool,
    sourceLocation: SourceLocation = #_sourceLocation
) throws -> Duration {
    let client = try daemon.connect()
    defer { client.close() }
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    var last: [String: JSONValue] = [:]
    while MonotonicClock.now() < deadline {
        last = try client.lifecycle("GetStatus").parameters
        if holds(last["conditions"]?.objectValue ?? [:], last["backends"]?.objectValue ?? [:]) {
            return .nanoseconds(MonotonicClock.now() - since)
        }
        // Between two asks, a pause far under the second the daemon has to react in.
        usleep(5_000)
    }
    Issue.record(
        "not within \(timeout): \(what); last status \(last)\nlog:\n\(daemon.log)", sourceLocation: sourceLocation)
    throw HarnessError("timed out: \(what)")
}

private func milliseconds(_ duration: Duration) -> String {
    String(format: "%.1f ms", Double(duration.nanosecondCount) / 1e6)
}

@Suite(
    "Conditions end to end",
    .requires(.root(for: "a network namespace of the test's own"), .programs("unshare", "nsenter", "ip")))
struct ConditionsEndToEndTests {
    @Test("network and power: IPv4 and IPv6 default routes coming and going, the interface down, an adapter plugged")
    func networkAndPower() throws {
        let tree = try FakePowerSupplies()
        try tree.set("AC", ["type": "Mains", "online": "0"])
        let scratch = try ScratchDirectory(prefix: "conditions-e2e")
        let daemon = try DaemonHarness(
            configuration: DaemonHarness.fastPolicy + "\n[Conditions]\nPowerSupplyPath=\(tree.path)\n",
            // No system bus: the D-Bus conditions have no source, whatever the host runs.
            environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"],
            launchPrefix: ["unshare", "--net"])
        try waitForStatus(daemon, "started offline, on battery, no D-Bus sources") { conditions, backends in
            conditions["network"] == .bool(false) && conditions["ac"] == .bool(false)
                && conditions["battery"] == .bool(true) && conditions["idle"] == .null
                && conditions["unmetered"] == .null && backends["network"] == "rtnetlink"
                && backends["power"] == "power_supply" && backends["idle"] == "none"
        }
        #expect(daemon.log.contains("no system bus at unix:path=\(scratch.path)/no-bus"), "\(daemon.log)")

        try runInNetworkNamespace(of: daemon.pid, ["link", "set", "lo", "up"])
        var changedAt = MonotonicClock.now()
        try runInNetworkNamespace(of: daemon.pid, ["route", "add", "default", "dev", "lo"])
        let online = try waitForStatus(daemon, "online", since: changedAt) { conditions, _ in
            conditions["network"] == .bool(true)
        }
        changedAt = MonotonicClock.now()
        try runInNetworkNamespace(of: daemon.pid, ["route", "del", "default"])
        let offline = try waitForStatus(daemon, "offline", since: changedAt) { conditions, _ in
            conditions["network"] == .bool(false)
        }
        // IPv6's default route counts the same.
        changedAt = MonotonicClock.now()
        try runInNetworkNamespace(of: daemon.pid, ["-6", "route", "add", "default", "dev", "lo"])
        let onlineIPv6 = try waitForStatus(daemon, "online through IPv6", since: changedAt) { conditions, _ in
            conditions["network"] == .bool(true)
        }
        try runInNetworkNamespace(of: daemon.pid, ["-6", "route", "del", "default"])
        try waitForStatus(daemon, "offline without the IPv6 route") { conditions, _ in
            conditions["network"] == .bool(false)
        }
        // A default route through an interface that goes down is no way out.
        try runInNetworkNamespace(of: daemon.pid, ["route", "add", "default", "dev", "lo"])
        try waitForStatus(daemon, "online again") { conditions, _ in conditions["network"] == .bool(true) }
        changedAt = MonotonicClock.now()
        try runInNetworkNamespace(of: daemon.pid, ["link", "set", "lo", "down"])
        let linkDown = try waitForStatus(daemon, "offline with the interface down", since: changedAt) {
            conditions, _ in conditions["network"] == .bool(false)
        }

        changedAt = MonotonicClock.now()
        try tree.set("AC", ["online": "1"])
        let plugged = try waitForStatus(daemon, "plugged in", since: changedAt) { conditions, _ in
            conditions["ac"] == .bool(true)
        }
        #expect(daemon.log.contains("condition network: does not hold → holds"), "\(daemon.log)")
        #expect(daemon.log.contains("condition ac: does not hold → holds"), "\(daemon.log)")
        print(
            "daemon reaction: default route added \(milliseconds(online)), removed \(milliseconds(offline)), "
                + "IPv6 default route added \(milliseconds(onlineIPv6)), "
                + "interface down \(milliseconds(linkDown)), adapter plugged \(milliseconds(plugged))")
        #expect(try daemon.stop() == .exited(0))
    }

    @Test("a reload that moves PowerSupplyPath= reads the new tree, leaving no descriptor of the old sources open")
    func reloadMovesThePowerSupplyTree() throws {
        let onBattery = try FakePowerSupplies()
        try onBattery.set("AC", ["type": "Mains", "online": "0"])
        let onMains = try FakePowerSupplies()
        try onMains.set("AC", ["type": "Mains", "online": "1"])
        let scratch = try ScratchDirectory(prefix: "conditions-reload")
        let daemon = try DaemonHarness(
            configuration: DaemonHarness.fastPolicy + "\n[Conditions]\nPowerSupplyPath=\(onBattery.path)\n",
            environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(scratch.path)/no-bus"])
        try waitForStatus(daemon, "on battery") { conditions, _ in conditions["ac"] == .bool(false) }
        let descriptors = try daemon.openDescriptorCount()
        try DaemonHarness.fastPolicy.appending("\n[Conditions]\nPowerSupplyPath=\(onMains.path)\n")
            .write(toFile: daemon.configurationPath, atomically: true, encoding: .utf8)
        guard kill(daemon.pid, SIGHUP) == 0 else { throw Errno(rawValue: errno, operation: "kill(SIGHUP)") }
        try waitForStatus(daemon, "on mains after the reload") { conditions, _ in conditions["ac"] == .bool(true) }
        // The sources started again in place of the old ones: no descriptor of theirs is left open.
        #expect(try daemon.waitForDescriptorCount(atMost: descriptors) <= descriptors)
        #expect(try daemon.stop() == .exited(0))
    }

    @Test(
        "the system bus from DBUS_SYSTEM_BUS_ADDRESS: UPower and logind stand-ins followed, UPower leaving",
        .requires(.conditionServices))
    func systemBusFromEnvironment() throws {
        let bus = try PrivateBus()
        let services = try ConditionServices(address: bus.address)
        try services.run("start upower")
        try services.run("start logind")
        let tree = try FakePowerSupplies()
        try tree.set("AC", ["type": "Mains", "online": "1"])
        let daemon = try DaemonHarness(
            configuration: DaemonHarness.fastPolicy + "\n[Conditions]\nPowerSupplyPath=\(tree.path)\n",
            environment: ["DBUS_SYSTEM_BUS_ADDRESS": bus.address], launchPrefix: ["unshare", "--net"])
        try waitForStatus(daemon, "UPower and logind serving") { conditions, backends in
            backends["power"] == "upower" && backends["idle"] == "logind" && backends["unmetered"] == "none"
                && conditions["ac"] == .bool(true) && conditions["idle"] == .bool(false)
        }
        var changedAt = MonotonicClock.now()
        try services.run("set upower OnBattery true")
        let onBattery = try waitForStatus(daemon, "UPower on battery", since: changedAt) { conditions, _ in
            conditions["ac"] == .bool(false)
        }
        changedAt = MonotonicClock.now()
        try services.run("set logind IdleHint true")
        let idle = try waitForStatus(daemon, "idle", since: changedAt) { conditions, _ in
            conditions["idle"] == .bool(true)
        }
        changedAt = MonotonicClock.now()
        try services.run("stop upower")
        let fellBack = try waitForStatus(daemon, "back on power_supply", since: changedAt) { conditions, backends in
            backends["power"] == "power_supply" && conditions["ac"] == .bool(true)
        }
        #expect(daemon.log.contains("conditions: power now from power_supply (was upower)"), "\(daemon.log)")
        print(
            "daemon reaction over D-Bus: OnBattery \(milliseconds(onBattery)), IdleHint \(milliseconds(idle)), "
                + "UPower gone \(milliseconds(fellBack))")
        #expect(try daemon.stop() == .exited(0))
    }
}
