// The soak's one source of randomness: every choice of a run's schedule comes from a generator seeded once.

/// SplitMix64, fully determined by its seed: the same seed gives the same schedule (which app, which operation,
/// which fault, when) in every run. What the kernel and the daemon do in between is not replayed, only asked for
/// again in the same order.
public struct SoakRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator whose sequence is fixed by `seed`.
    public init(seed: UInt64) {
        state = seed
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = state
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }

    /// True with probability `percent`/100.
    public mutating func chance(_ percent: Int) -> Bool {
        Int.random(in: 0..<100, using: &self) < percent
    }

    /// A seed for a child (an app's own generator), derived from this one's sequence.
    public mutating func childSeed() -> UInt64 { next() }
}
