// Knows the host's conditions (external power, battery, network, unmetered network, idle) at every moment, from the
// best source the host has for each, and tells its host when they change.

import BGTaskConfig
import BGTaskCore
import BGTaskSystem

/// The condition sources (docs/ARCHITECTURE.md, Conditions): power and battery from UPower on the system bus, else
/// the kernel's power_supply class; network from rtnetlink; unmetered from NetworkManager's `Metered` (with
/// network); idle from logind's `IdleHint`. Every source is event-driven (uevents or inotify, rtnetlink
/// notifications, D-Bus signals), nothing polls. Services coming onto the bus and leaving it are followed: UPower
/// going hands power back to power_supply, and coming takes it over. Without a system bus the kernel's sources still
/// serve.
///
/// It reaches the daemon only through its host (`ConditionMonitorHost`), held weakly: the manager owns the monitor.
final class ConditionMonitor {
    private weak var host: (any ConditionMonitorHost)?
    private let logger: Logger
    private let loop: EventLoop
    /// Whether the D-Bus sources are used, and the bus to reach them on (nil: the system bus).
    private let isSystemBusUsed: Bool
    private let systemBusAddress: String?
    // The sources. Implicitly unwrapped only because each one's closure captures the monitor (weakly), which Swift
    // allows once every stored property has a value: each is set in init and never nil afterwards.
    private(set) var power: PowerSupplyWatch!
    private(set) var network: RouteWatch!
    private var bus: SystemBus?
    /// Why there is no system bus, when there is none.
    private(set) var busFailure: String?
    private var upower: BusServiceWatch!
    private var networkManager: BusServiceWatch!
    private var logind: BusServiceWatch!

    /// The conditions as last reported to the host.
    private(set) var conditions = Conditions()
    /// The source serving each, as last reported (`sources`), to log a switch once.
    private var lastSources: [String: String] = [:]
    /// Whether the first report (every source settled) has been logged and given to the host.
    private var hasLoggedSettled = false
    /// Whether `start()` has read every source once: changes the sources report while starting are part of that
    /// first reading, not changes to log.
    private var isStarted = false

    static let upowerName = "org.freedesktop.UPower"
    static let upowerPath: BusObjectPath = "/org/freedesktop/UPower"
    static let displayDevicePath: BusObjectPath = "/org/freedesktop/UPower/devices/DisplayDevice"
    static let networkManagerName = "org.freedesktop.NetworkManager"
    static let networkManagerPath: BusObjectPath = "/org/freedesktop/NetworkManager"
    static let logindName = "org.freedesktop.login1"
    static let logindPath: BusObjectPath = "/org/freedesktop/login1"
    /// UPower's `WarningLevel` from which the battery is low: `Low` (3), `Critical` (4), `Action` (5).
    static let lowWarningLevel: UInt32 = 3

    /// A monitor for `host` with `settings`. The D-Bus sources are looked for on the system bus, or on the bus at
    /// `systemBusAddress` (a test's private bus); `usesSystemBus: false` leaves them out.
    init(
        host: any ConditionMonitorHost, settings: DaemonConfiguration.Conditions, usesSystemBus: Bool = true,
        systemBusAddress: String? = nil
    ) {
        self.host = host
        logger = host.logger
        loop = host.loop
        isSystemBusUsed = usesSystemBus
        self.systemBusAddress = systemBusAddress
        power = PowerSupplyWatch(
            path: settings.powerSupplyPath ?? PowerSupplyClass.systemPath, lowPercent: settings.batteryLowPercent,
            logger: logger, loop: loop
        ) { [weak self] in self?.sourcesChanged() }
        network = RouteWatch(logger: logger, loop: loop) { [weak self] in self?.sourcesChanged() }
        let changed: () -> Void = { [weak self] in self?.sourcesChanged() }
        upower = BusServiceWatch(
            name: Self.upowerName,
            objects: [
                .init(path: Self.upowerPath, interface: "org.freedesktop.UPower", properties: ["OnBattery"]),
                .init(
                    path: Self.displayDevicePath, interface: "org.freedesktop.UPower.Device",
                    properties: ["IsPresent", "WarningLevel"]),
            ], logger: logger, changed: changed)
        networkManager = BusServiceWatch(
            name: Self.networkManagerName,
            objects: [
                .init(
                    path: Self.networkManagerPath, interface: "org.freedesktop.NetworkManager", properties: ["Metered"])
            ],
            logger: logger, changed: changed)
        logind = BusServiceWatch(
            name: Self.logindName,
            objects: [
                .init(path: Self.logindPath, interface: "org.freedesktop.login1.Manager", properties: ["IdleHint"])
            ],
            logger: logger, changed: changed)
    }

    deinit { stop() }

    /// Arms every source and reads the kernel's at once; the bus's answers follow on the loop.
    func start() {
        power.start()
        network.start()
        if isSystemBusUsed {
            do {
                let bus = try SystemBus(loop: loop, address: systemBusAddress)
                bus.onDisconnect = { [weak self] in self?.busLost() }
                self.bus = bus
                for service in [upower, networkManager, logind] { service?.start(on: bus) }
            } catch {
                busLost(reason: "no system bus at \(systemBusAddress ?? SystemBus.addressDescription): \(error)")
            }
        } else {
            busLost(reason: "the system bus is not used")
        }
        update(isStart: true)
        isStarted = true
    }

    /// Stops every source.
    func stop() {
        power?.stop()
        network?.stop()
        bus?.close()
        bus = nil
    }

    private func busLost(reason: String? = nil) {
        if let reason {
            busFailure = reason
        } else {
            busFailure = "the system bus connection was lost"
            logger.warning("conditions: the system bus connection was lost; D-Bus sources are gone")
        }
        bus?.close()
        bus = nil
        for service in [upower, networkManager, logind] { service?.busLost() }
    }

    private func sourcesChanged() {
        guard isStarted else { return }
        update(isStart: false)
    }

    // MARK: Combining

    /// Whether UPower is there with both its objects read.
    private var isUPowerServing: Bool {
        upower.isReady && upower.property("OnBattery", of: Self.upowerPath)?.booleanValue != nil
    }

    /// The conditions the sources say now.
    private func evaluate() -> Conditions {
        var result = Conditions()
        if isUPowerServing {
            let onBattery = upower.property("OnBattery", of: Self.upowerPath)?.booleanValue ?? false
            result.externalPower = !onBattery
            let isPresent = upower.property("IsPresent", of: Self.displayDevicePath)?.booleanValue ?? false
            let level = upower.property("WarningLevel", of: Self.displayDevicePath)?.uint32Value ?? 0
            result.batteryNotLow = !onBattery || !isPresent || level < Self.lowWarningLevel
        } else if let reading = power.reading {
            result.externalPower = reading.isOnExternalPower
            result.batteryNotLow = reading.isBatteryNotLow
        }
        if let reachability = network.reachability { result.network = reachability.isOnline }
        if networkManager.isReady,
            let metered = networkManager.property("Metered", of: Self.networkManagerPath)?
                .uint32Value
        {
            // NMMetered: 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no.
            result.unmeteredNetwork = (result.network ?? false) && metered != 1 && metered != 3
        }
        if logind.isReady, let idle = logind.property("IdleHint", of: Self.logindPath)?.booleanValue {
            result.idle = idle
        }
        return result
    }

    /// The source serving each condition with what it says, by the name `GetStatus`'s `backends` gives it: `power`
    /// (external power and battery), `network`, `unmetered`, `idle`.
    var sources: [String: String] {
        var sources: [String: String] = [:]
        let path = power.supplyClass.path
        if isUPowerServing {
            sources["power"] = "upower"
        } else if let reading = power.reading {
            sources["power"] = "power_supply (\(path), \(power.mechanism): \(reading.summary))"
        } else {
            sources["power"] = "none (\(path): \(power.readFailure ?? "unreadable"))"
        }
        if let reachability = network.reachability {
            let interfaces = reachability.defaultRouteInterfaces
            sources["network"] =
                "rtnetlink ("
                + (interfaces.isEmpty
                    ? "no default route through an interface that is up"
                    : "default route through interface \(interfaces.map(String.init).joined(separator: ", "))") + ")"
        } else {
            sources["network"] = "none (\(network.failure ?? "rtnetlink has not answered"))"
        }
        sources["unmetered"] = busSource(networkManager, serving: "networkmanager", name: "NetworkManager")
        sources["idle"] = busSource(logind, serving: "logind", name: "logind")
        return sources
    }

    /// The name of the source serving each condition, as `GetStatus`'s `backends` and the startup log give it:
    /// `power` is `upower`, `power_supply` or `none`; `network` is `rtnetlink` or `none`; `unmetered` is
    /// `networkmanager` or `none`; `idle` is `logind` or `none`.
    var sourceNames: [String: String] { sources.mapValues(Self.sourceName) }

    private func busSource(_ service: BusServiceWatch, serving: String, name: String) -> String {
        if let busFailure { return "none (\(busFailure))" }
        switch service.presence {
        case .asking: return "none (asking the system bus for \(name))"
        case .absent: return "none (\(name) not on the system bus)"
        case .present: return service.isReady ? serving : "none (\(name) has not answered)"
        }
    }

    /// One line for the log: each source and the value it gives.
    var report: String {
        let sources = self.sources
        func value(_ value: Bool?) -> String { value.map { $0 ? "yes" : "no" } ?? "-" }
        return [
            "power: \(sources["power"] ?? "") ac=\(value(conditions.externalPower)) "
                + "battery=\(value(conditions.batteryNotLow))",
            "network: \(sources["network"] ?? "") network=\(value(conditions.network))",
            "unmetered: \(sources["unmetered"] ?? "") unmetered=\(value(conditions.unmeteredNetwork))",
            "idle: \(sources["idle"] ?? "") idle=\(value(conditions.idle))",
        ].joined(separator: "; ")
    }

    /// Whether every source has given its first answer (the bus's services their presence and properties). Until
    /// then the host hears nothing: a half-read set of conditions would make a running task's condition look lost.
    var isSettled: Bool {
        busFailure != nil || [upower, networkManager, logind].allSatisfy { $0?.hasAnswered ?? true }
    }

    private func update(isStart: Bool) {
        let previous = conditions
        conditions = evaluate()
        let sources = sourceNames
        // Until every source has answered once, the answers are the first reading, logged whole when it is done.
        if !isStart && hasLoggedSettled {
            for key in sources.keys.sorted() where lastSources[key] != sources[key] {
                let was = lastSources[key] ?? "none"
                logger.notice("conditions: \(key) now from \(sources[key] ?? "none") (was \(was))")
            }
            for constraint in Constraint.allCases where previous[constraint] != conditions[constraint] {
                logger.notice(
                    "condition \(constraint.rawValue): \(Self.describe(previous[constraint])) → "
                        + "\(Self.describe(conditions[constraint]))")
            }
        }
        lastSources = sources
        if !hasLoggedSettled && isSettled {
            hasLoggedSettled = true
            logger.notice("conditions: \(report)")
            host?.conditionsChanged(conditions)
        } else if hasLoggedSettled && previous != conditions {
            host?.conditionsChanged(conditions)
        }
    }

    /// The source's name alone (`power_supply`, `upower`, `none`…), without what it says.
    private static func sourceName(_ description: String) -> String {
        String(description.prefix { $0 != " " })
    }

    private static func describe(_ value: Bool?) -> String {
        value.map { $0 ? "holds" : "does not hold" } ?? "no source"
    }
}

extension BusValue {
    /// The value of a `.boolean`, else nil.
    fileprivate var booleanValue: Bool? {
        if case .boolean(let value) = self { value } else { nil }
    }
}
