// The figures a person reads drift from: a line of best fit, quantiles and the median of each minute.

/// A least-squares straight line through points: value = intercept + slope × time.
public struct LinearFit: Hashable, Sendable {
    /// Change of the value per second.
    public var slope: Double
    /// The value the line gives at time 0.
    public var intercept: Double

    /// The line of best fit through `points`; nil for fewer than two points or points all at one moment.
    public init?(_ points: [PlotPoint]) {
        guard points.count >= 2 else { return nil }
        let count = Double(points.count)
        let meanTime = points.reduce(0) { $0 + $1.time } / count
        let meanValue = points.reduce(0) { $0 + $1.value } / count
        var covariance = 0.0
        var variance = 0.0
        for point in points {
            covariance += (point.time - meanTime) * (point.value - meanValue)
            variance += (point.time - meanTime) * (point.time - meanTime)
        }
        guard variance > 0 else { return nil }
        slope = covariance / variance
        intercept = meanValue - slope * meanTime
    }

    /// The line's value at `time`.
    public func value(at time: Double) -> Double { intercept + slope * time }

    /// The change of the value per hour: the drift a person compares with the values themselves.
    public var slopePerHour: Double { slope * 3_600 }
}

/// The `q` quantile of `values` (the nearest rank: the value `q` of the way up the sorted values); nil for none.
func quantile(_ values: [Double], _ q: Double) -> Double? {
    guard !values.isEmpty else { return nil }
    let sorted = values.sorted()
    let index = Int((Double(sorted.count - 1) * min(1, max(0, q))).rounded())
    return sorted[index]
}

/// The median of the values of each whole minute of the run that has any, as a point at the minute's middle.
func medianPerMinute(_ points: [PlotPoint]) -> [PlotPoint] {
    var minutes: [Int: [Double]] = [:]
    for point in points { minutes[Int((point.time / 60).rounded(.down)), default: []].append(point.value) }
    return minutes.keys.sorted().compactMap { minute in
        quantile(minutes[minute] ?? [], 0.5).map { PlotPoint(time: Double(minute) * 60 + 30, value: $0) }
    }
}
