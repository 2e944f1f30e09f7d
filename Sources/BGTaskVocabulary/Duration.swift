// Durations as the daemon counts them: whole nanoseconds for clocks and timers, seconds for the wire.

extension Duration {
    /// The duration in whole nanoseconds, saturating at the bounds of `Int64` (about 292 years).
    public var nanosecondCount: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds > 0 ? .max : .min }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow2 { return seconds > 0 ? .max : .min }
        return sum
    }

    /// The duration in seconds as a floating-point number, for display and the wire format.
    public var secondsValue: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
