// The host conditions scheduled work waits on: what the host's sources say now about each constraint a request can
// ask for (`Constraint`, a word of the shared vocabulary; docs/ARCHITECTURE.md).

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
