// A small deterministic random number generator, so a randomized test or a soak's schedule can be replayed from
// its seed.

/// SplitMix64: fast, statistically sound for test inputs and schedules, and fully determined by its seed. The same
/// seed gives the same sequence on every run and machine; what the kernel and the daemon do in between is not
/// replayed, only asked for again in the same order.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Creates a generator that always produces the same sequence for the same `seed`.
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

    /// A seed for a child generator (an app's own, in a soak), drawn from this one's sequence.
    public mutating func childSeed() -> UInt64 { next() }
}
