// The host conditions scheduled work waits on: the constraints a request can ask for, and what the host's
// sources say about each now (docs/ARCHITECTURE.md).

/// A condition a scheduled request can require before it runs, by its name on the wire and on the command line.
public enum Constraint: String, CaseIterable, Codable, Sendable, Comparable {
    /// On external power: an AC adapter or another supply is online (UPower's `OnBattery` false).
    case externalPower = "ac"
    /// The battery is not low, or there is no battery.
    case batteryNotLow = "battery"
    /// Online: a default route through an interface that is up.
    case network
    /// Online through a connection that is not metered (NetworkManager's `Metered`).
    case unmeteredNetwork = "unmetered"
    /// The user is idle (logind's `IdleHint`).
    case idle

    public static func < (lhs: Constraint, rhs: Constraint) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// What the host's sources say now, one value per condition: nil where this host has no source for it (a
/// request asking for that condition is refused at submit instead of waiting forever).
public struct Conditions: Sendable, Equatable, Codable {
    public var externalPower: Bool?
    public var batteryNotLow: Bool?
    public var network: Bool?
    public var unmeteredNetwork: Bool?
    public var idle: Bool?

    public init(
        externalPower: Bool? = nil, batteryNotLow: Bool? = nil, network: Bool? = nil,
        unmeteredNetwork: Bool? = nil, idle: Bool? = nil
    ) {
        self.externalPower = externalPower
        self.batteryNotLow = batteryNotLow
        self.network = network
        self.unmeteredNetwork = unmeteredNetwork
        self.idle = idle
    }

    /// The value for one constraint: true when it holds, false when it does not, nil without a source.
    public subscript(constraint: Constraint) -> Bool? {
        get {
            switch constraint {
            case .externalPower: externalPower
            case .batteryNotLow: batteryNotLow
            case .network: network
            case .unmeteredNetwork: unmeteredNetwork
            case .idle: idle
            }
        }
        set {
            switch constraint {
            case .externalPower: externalPower = newValue
            case .batteryNotLow: batteryNotLow = newValue
            case .network: network = newValue
            case .unmeteredNetwork: unmeteredNetwork = newValue
            case .idle: idle = newValue
            }
        }
    }

    /// Whether every one of `constraints` holds now (a constraint without a source does not hold).
    public func satisfy(_ constraints: some Sequence<Constraint>) -> Bool {
        constraints.allSatisfy { self[$0] == true }
    }

    /// Those of `constraints` this host has no source for, in the enum's order.
    public func missingSources(for constraints: some Sequence<Constraint>) -> [Constraint] {
        Set(constraints).filter { self[$0] == nil }.sorted()
    }
}
