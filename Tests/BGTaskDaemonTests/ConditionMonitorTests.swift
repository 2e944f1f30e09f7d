// The condition monitor alone, beside a fake of its host, on real sources: a power_supply tree the test writes
// (followed through inotify), and UPower, NetworkManager and logind stand-ins on a private D-Bus bus that flip their
// properties, leave the bus and come back. Reaction latencies (from just before the test makes a change to the
// monitor reporting it) are printed, not asserted.

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskDaemon

/// The monitor's neighbour, faked: a loop the test turns, a log in a file, and every report kept.
private final class FakeConditionHost: ConditionMonitorHost {
    let logger: Logger
    let loop: EventLoop
    private(set) var reports: [Conditions] = []
    private let directory: ScratchDirectory
    private let logPath: String

    init() throws {
        directory = try ScratchDirectory(prefix: "condition-monitor")
        logPath = directory.path + "/log"
        logger = Logger(
            destination: .stream, threshold: .debug,
            stream: try FileDescriptor.open(logPath, .writeOnly, options: [.create, .append]))
        loop = try EventLoop()
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    func conditionsChanged(_ conditions: Conditions) { reports.append(conditions) }

    /// Turns the loop until `holds` is true of the monitor, at most `timeout`; how long it took since `since` (a
    /// `MonotonicClock` reading taken before the change was made), or since the call.
    @discardableResult
    func turn(
        since: Int64? = nil, until what: String, timeout: Duration = .seconds(20), _ holds: () -> Bool,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Duration {
        let start = since ?? MonotonicClock.now()
        let deadline = start + timeout.nanosecondCount
        while !holds() {
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else {
                Issue.record("not within \(timeout): \(what)\nlog:\n\(log)", sourceLocation: sourceLocation)
                throw HarnessError("timed out: \(what)")
            }
            try loop.runIteration(timeout: .nanoseconds(min(remaining, 100_000_000)))
        }
        return .nanoseconds(MonotonicClock.now() - start)
    }
}

private func milliseconds(_ duration: Duration) -> String {
    String(format: "%.1f ms", Double(duration.nanosecondCount) / 1e6)
}

@Suite("Condition monitor")
struct ConditionMonitorTests {
    /// Settings pointing the power_supply source at `tree`.
    private func settings(_ tree: FakePowerSupplies) -> DaemonConfiguration.Conditions {
        var settings = DaemonConfiguration.Conditions()
        settings.powerSupplyPath = tree.path
        return settings
    }

    @Test("power_supply: an adapter going on and offline, a battery draining, supplies going, all seen through inotify")
    func powerSupplyTree() throws {
        let tree = try FakePowerSupplies()
        try tree.set("AC", ["type": "Mains", "online": "0"])
        try tree.set("BAT0", ["type": "Battery", "capacity": "50", "status": "Discharging"])
        let host = try FakeConditionHost()
        let monitor = ConditionMonitor(host: host, settings: settings(tree), usesSystemBus: false)
        monitor.start()
        #expect(monitor.conditions.externalPower == false)
        #expect(monitor.conditions.batteryNotLow == true)
        #expect(monitor.sourceNames["power"] == "power_supply")
        #expect(monitor.power.mechanism == .inotify)

        var changedAt = MonotonicClock.now()
        try tree.set("AC", ["online": "1"])
        let plugged = try host.turn(since: changedAt, until: "on external power") {
            monitor.conditions.externalPower == true
        }
        changedAt = MonotonicClock.now()
        try tree.set("AC", ["online": "0"])
        let unplugged = try host.turn(since: changedAt, until: "on battery") {
            monitor.conditions.externalPower == false
        }
        changedAt = MonotonicClock.now()
        try tree.set("BAT0", ["capacity": "12"])
        let low = try host.turn(since: changedAt, until: "battery low") { monitor.conditions.batteryNotLow == false }
        try tree.set("BAT0", ["capacity": "40", "capacity_level": "Critical"])
        try tree.set("BAT0", ["capacity_level": "Normal"])
        try host.turn(until: "battery no longer low") { monitor.conditions.batteryNotLow == true }
        // A new adapter appearing online is seen: the directory is watched, then the new supply.
        changedAt = MonotonicClock.now()
        try tree.set("USB-C", ["type": "USB_C", "online": "1"])
        let appeared = try host.turn(since: changedAt, until: "the new adapter seen") {
            monitor.conditions.externalPower == true
        }
        try tree.remove("USB-C")
        try host.turn(until: "the adapter gone") { monitor.conditions.externalPower == false }
        // No supply at all: a machine on mains.
        try tree.remove("AC")
        try tree.remove("BAT0")
        try host.turn(until: "no supplies: on mains") {
            monitor.conditions.externalPower == true && monitor.conditions.batteryNotLow == true
        }
        #expect(host.log.contains("condition ac: does not hold → holds"), "\(host.log)")
        #expect(monitor.conditions.unmeteredNetwork == nil && monitor.conditions.idle == nil)
        print(
            "power_supply reaction (inotify): plugged \(milliseconds(plugged)), unplugged \(milliseconds(unplugged)), "
                + "battery low \(milliseconds(low)), new adapter \(milliseconds(appeared))")
        monitor.stop()
    }

    @Test("power_supply: a tree without supplies is a machine on mains; a missing directory is no source")
    func emptyAndMissingTrees() throws {
        let tree = try FakePowerSupplies()
        let host = try FakeConditionHost()
        let monitor = ConditionMonitor(host: host, settings: settings(tree), usesSystemBus: false)
        monitor.start()
        #expect(monitor.conditions.externalPower == true && monitor.conditions.batteryNotLow == true)
        #expect(monitor.sources["power"]?.contains("no supplies: on mains") == true, "\(monitor.sources)")
        monitor.stop()

        var missing = DaemonConfiguration.Conditions()
        missing.powerSupplyPath = tree.path + "/absent"
        let other = ConditionMonitor(host: host, settings: missing, usesSystemBus: false)
        other.start()
        #expect(other.conditions.externalPower == nil && other.conditions.batteryNotLow == nil)
        #expect(other.sourceNames["power"] == "none")
        other.stop()
    }

    @Test(
        "the kernel's own power_supply class is followed through its uevents",
        .requires(.root(for: "the kernel's uevent socket")))
    func sysfsUsesUevents() throws {
        let host = try FakeConditionHost()
        let monitor = ConditionMonitor(host: host, settings: DaemonConfiguration.Conditions(), usesSystemBus: false)
        monitor.start()
        defer { monitor.stop() }
        #expect(monitor.power.supplyClass.path == "/sys/class/power_supply")
        #expect(monitor.power.supplyClass.isSysfs)
        #expect(monitor.power.mechanism == .uevents, "\(monitor.power.mechanism)")
        // Whatever this host has, the class was read: power has a source and a value.
        #expect(monitor.sourceNames["power"] == "power_supply", "\(monitor.sources)")
        #expect(monitor.conditions.externalPower != nil && monitor.conditions.batteryNotLow != nil)
    }

    @Test(
        "D-Bus: UPower, NetworkManager and logind followed through their properties, leaving and coming back",
        .requires(.conditionServices))
    func busServices() throws {
        let bus = try PrivateBus()
        let services = try ConditionServices(address: bus.address)
        // The kernel's tree says "on battery", UPower (once there) "on mains": the source in use shows.
        let tree = try FakePowerSupplies()
        try tree.set("AC", ["type": "Mains", "online": "0"])
        try services.run("start upower")
        try services.run("start logind")
        let host = try FakeConditionHost()
        let monitor = ConditionMonitor(host: host, settings: settings(tree), systemBusAddress: bus.address)
        monitor.start()
        try host.turn(until: "UPower and logind read") {
            monitor.sourceNames["power"] == "upower" && monitor.sourceNames["idle"] == "logind"
                && monitor.sourceNames["unmetered"] == "none"
                && monitor.log(host, contains: "conditions: power: upower")
        }
        #expect(monitor.conditions.externalPower == true)
        #expect(monitor.conditions.batteryNotLow == true)
        #expect(monitor.conditions.idle == false)
        #expect(monitor.conditions.unmeteredNetwork == nil)
        #expect(monitor.sources["unmetered"]?.contains("NetworkManager not on the system bus") == true)

        var changedAt = MonotonicClock.now()
        try services.run("set upower OnBattery true")
        let onBattery = try host.turn(since: changedAt, until: "UPower on battery") {
            monitor.conditions.externalPower == false
        }
        changedAt = MonotonicClock.now()
        try services.run("set display WarningLevel 3")
        let low = try host.turn(since: changedAt, until: "UPower battery low") {
            monitor.conditions.batteryNotLow == false
        }
        try services.run("set display WarningLevel 1")
        try host.turn(until: "UPower battery fine") { monitor.conditions.batteryNotLow == true }
        changedAt = MonotonicClock.now()
        try services.run("set logind IdleHint true")
        let idle = try host.turn(since: changedAt, until: "logind idle") { monitor.conditions.idle == true }
        // A property announced as invalidated, without its value, is read again.
        try services.run("invalidate logind IdleHint false")
        try host.turn(until: "logind busy again (invalidated)") { monitor.conditions.idle == false }

        // NetworkManager comes: unmetered has a source, and follows Metered with the network (not online in a test
        // process's namespace unless the host is: the value is network && not metered).
        try services.run("start networkmanager")
        try host.turn(until: "NetworkManager read") { monitor.sourceNames["unmetered"] == "networkmanager" }
        let network = try #require(monitor.conditions.network as Bool?)
        #expect(monitor.conditions.unmeteredNetwork == network)
        try services.run("set networkmanager Metered 1")
        try host.turn(until: "metered") { monitor.conditions.unmeteredNetwork == false }
        try services.run("set networkmanager Metered 4")
        try host.turn(until: "guessed unmetered") { monitor.conditions.unmeteredNetwork == network }

        // UPower leaves: power falls back to power_supply (which says offline); it comes back and takes over.
        changedAt = MonotonicClock.now()
        try services.run("stop upower")
        let fellBack = try host.turn(since: changedAt, until: "fallen back to power_supply") {
            monitor.sourceNames["power"] == "power_supply" && monitor.conditions.externalPower == false
        }
        try tree.set("AC", ["online": "1"])
        try host.turn(until: "power_supply followed after the fallback") { monitor.conditions.externalPower == true }
        try services.run("start upower")
        try services.run("set upower OnBattery true")
        try host.turn(until: "UPower back") {
            monitor.sourceNames["power"] == "upower" && monitor.conditions.externalPower == false
        }
        #expect(host.log.contains("conditions: power now from power_supply (was upower)"), "\(host.log)")
        #expect(host.log.contains("conditions: power now from upower (was power_supply)"), "\(host.log)")

        // logind and NetworkManager leave: their conditions lose their source.
        try services.run("stop logind")
        try services.run("stop networkmanager")
        try host.turn(until: "logind and NetworkManager gone") {
            monitor.conditions.idle == nil && monitor.conditions.unmeteredNetwork == nil
        }
        #expect(host.log.contains("condition idle: does not hold → no source"), "\(host.log)")
        print(
            "D-Bus reaction: OnBattery \(milliseconds(onBattery)), WarningLevel \(milliseconds(low)), "
                + "IdleHint \(milliseconds(idle)), UPower gone to power_supply \(milliseconds(fellBack))")
        monitor.stop()
    }

    @Test(
        "the system bus going away: its conditions lose their source, power falls back to power_supply",
        .requires(.conditionServices))
    func busGoingAway() throws {
        let bus = try PrivateBus()
        let services = try ConditionServices(address: bus.address)
        try services.run("start upower")
        try services.run("start logind")
        let tree = try FakePowerSupplies()
        try tree.set("AC", ["type": "Mains", "online": "0"])
        let host = try FakeConditionHost()
        let monitor = ConditionMonitor(host: host, settings: settings(tree), systemBusAddress: bus.address)
        monitor.start()
        defer { monitor.stop() }
        try host.turn(until: "UPower and logind read") {
            monitor.sourceNames["power"] == "upower" && monitor.conditions.idle == false
                && monitor.conditions.externalPower == true
        }
        bus.stop()
        try host.turn(until: "the bus's conditions gone") {
            monitor.conditions.idle == nil && monitor.sourceNames["power"] == "power_supply"
                && monitor.conditions.externalPower == false
                && monitor.sources["idle"]?.contains("connection was lost") == true
        }
        #expect(host.log.contains("the system bus connection was lost"), "\(host.log)")
    }

    @Test("no system bus: the D-Bus conditions have no source and the kernel's still serve")
    func noSystemBus() throws {
        let tree = try FakePowerSupplies()
        let scratch = try ScratchDirectory(prefix: "no-bus")
        let host = try FakeConditionHost()
        let monitor = ConditionMonitor(
            host: host, settings: settings(tree), systemBusAddress: "unix:path=\(scratch.path)/absent")
        monitor.start()
        #expect(monitor.conditions.externalPower == true)
        #expect(monitor.conditions.idle == nil && monitor.conditions.unmeteredNetwork == nil)
        #expect(monitor.sourceNames["idle"] == "none" && monitor.sourceNames["unmetered"] == "none")
        #expect(monitor.sources["idle"]?.contains("no system bus") == true, "\(monitor.sources)")
        #expect(host.log.contains("conditions: power: power_supply"), "\(host.log)")
        monitor.stop()
    }
}

extension ConditionMonitor {
    /// Whether the host's log holds `text` (for a wait on the settled report).
    fileprivate func log(_ host: FakeConditionHost, contains text: String) -> Bool { host.log.contains(text) }
}
