// The kernel's power_supply class (/sys/class/power_supply, or a tree a test makes): each supply's attributes read,
// and what they say about external power and the battery.
import BGTaskPOSIX
import CPOSIX
import Glibc

/// One supply of the power_supply class: the attributes the conditions read, as the kernel prints them (trimmed);
/// nil for a file the supply does not have or that could not be read.
public struct PowerSupply: Hashable, Sendable {
    /// The directory's name, e.g. `AC`, `BAT0`, `ucsi-source-psy-USBC000:001`.
    public var name: String
    /// `type`: `Mains`, `Battery`, `USB`, `USB_C`, `UPS`, `Wireless`…
    public var type: String?
    /// `online`: 1 when an adapter supplies power.
    public var online: Int?
    /// `capacity`: a battery's charge, 0 to 100.
    public var capacity: Int?
    /// `capacity_level`: `Unknown`, `Critical`, `Low`, `Normal`, `High`, `Full`.
    public var capacityLevel: String?
    /// `status`: a battery's `Charging`, `Discharging`, `Not charging`, `Full`, `Unknown`.
    public var status: String?
    /// `scope`: `System` (or absent) powers the machine; `Device` powers a peripheral (a mouse's battery).
    public var scope: String?

    public init(
        name: String, type: String? = nil, online: Int? = nil, capacity: Int? = nil, capacityLevel: String? = nil,
        status: String? = nil, scope: String? = nil
    ) {
        self.name = name
        self.type = type
        self.online = online
        self.capacity = capacity
        self.capacityLevel = capacityLevel
        self.status = status
        self.scope = scope
    }

    /// Whether it powers the machine itself rather than a peripheral.
    public var isSystemSupply: Bool { scope != "Device" }

    /// An adapter: mains, or any USB kind (`USB`, `USB_C`, `USB_PD`, `USB_DCP`…), as systemd's `on_ac_power` counts.
    public var isAdapter: Bool {
        guard let type else { return false }
        return type == "Mains" || type.hasPrefix("USB")
    }

    /// A battery of the machine.
    public var isSystemBattery: Bool { type == "Battery" && isSystemSupply }
}

/// The supplies of a power_supply directory at one moment, and what they say.
public struct PowerSupplySnapshot: Hashable, Sendable {
    public var supplies: [PowerSupply]

    public init(supplies: [PowerSupply]) { self.supplies = supplies }

    /// On external power: an adapter is online; else, with adapters all offline, no; with no adapter, yes unless a
    /// system battery is discharging; with no supply at all, yes (a machine without adapter and battery runs on
    /// mains, as systemd's `ConditionACPower=` assumes).
    public var isOnExternalPower: Bool {
        let adapters = supplies.filter { $0.isAdapter && $0.isSystemSupply }
        if adapters.contains(where: { $0.online == 1 }) { return true }
        if !adapters.isEmpty { return false }
        return !supplies.contains { $0.isSystemBattery && $0.status == "Discharging" }
    }

    /// The battery is not low: on external power, or no system battery, or every system battery above
    /// `lowPercent` (where it says its capacity) and not at `capacity_level` `Low` or `Critical`.
    public func isBatteryNotLow(lowPercent: Int) -> Bool {
        if isOnExternalPower { return true }
        return supplies.filter(\.isSystemBattery).allSatisfy { battery in
            if let capacity = battery.capacity, capacity <= lowPercent { return false }
            return battery.capacityLevel != "Low" && battery.capacityLevel != "Critical"
        }
    }

    /// What the supplies say, for the log: `no supplies: on mains`, or each supply with its state, e.g.
    /// `AC online, BAT0 42% Discharging`.
    public var summary: String {
        guard !supplies.isEmpty else { return "no supplies: on mains" }
        return supplies.map { supply in
            var words = [supply.name]
            if supply.isAdapter { words.append(supply.online == 1 ? "online" : "offline") }
            if let capacity = supply.capacity { words.append("\(capacity)%") }
            if let level = supply.capacityLevel, supply.capacity == nil { words.append(level) }
            if let status = supply.status { words.append(status) }
            if !supply.isSystemSupply { words.append("(device)") }
            return words.joined(separator: " ")
        }.joined(separator: ", ")
    }
}

/// The power_supply class directory: `/sys/class/power_supply`, or a tree of the same shape a test makes.
public struct PowerSupplyClass: Sendable {
    /// The kernel's own.
    public static let systemPath = "/sys/class/power_supply"
    /// The most supplies read: far above any machine's handful; past it the rest are left out (and `read` says so).
    public static let supplyLimit = 64
    /// The longest attribute file read: the kernel prints each in one short line.
    static let attributeSizeLimit = 256
    /// `SYSFS_MAGIC`.
    static let sysfsMagic = 0x6265_6572

    /// The directory.
    public var path: String

    public init(path: String = PowerSupplyClass.systemPath) { self.path = path }

    /// Whether the directory is on sysfs, where the kernel's uevents announce changes (elsewhere, inotify does:
    /// sysfs files never report a change of their value to inotify).
    public var isSysfs: Bool {
        bgtask_filesystem_type(path) == Self.sysfsMagic
    }

    /// The supply directories' names, sorted; at most `supplyLimit`.
    public func supplyNames() throws(Errno) -> (names: [String], isCut: Bool) {
        let names = try ProcFS(root: path).listDirectory("").filter { !$0.hasPrefix(".") }
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        return (Array(names.prefix(Self.supplyLimit)), names.count > Self.supplyLimit)
    }

    /// Reads every supply. A missing directory throws; a supply that vanishes meanwhile, or an attribute that cannot
    /// be read, is left out.
    public func read() throws(Errno) -> (snapshot: PowerSupplySnapshot, isCut: Bool) {
        let (names, isCut) = try supplyNames()
        var supplies: [PowerSupply] = []
        for name in names {
            let directory = path + "/" + name
            var information = stat()
            guard stat(directory, &information) == 0, information.st_mode & S_IFMT == S_IFDIR else { continue }
            func attribute(_ file: String) -> String? {
                let file = directory + "/" + file
                guard let text = try? FileDescriptor.readText(atPath: file, limit: Self.attributeSizeLimit) else {
                    return nil
                }
                let trimmed = text.trimmingWhitespace()
                return trimmed.isEmpty ? nil : trimmed
            }
            supplies.append(
                PowerSupply(
                    name: name, type: attribute("type"), online: attribute("online").flatMap { Int($0) },
                    capacity: attribute("capacity").flatMap { Int($0) }.map { min(max($0, 0), 100) },
                    capacityLevel: attribute("capacity_level"), status: attribute("status"), scope: attribute("scope")))
        }
        return (PowerSupplySnapshot(supplies: supplies), isCut)
    }
}

extension String {
    /// Without leading and trailing spaces, tabs and newlines.
    fileprivate func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
