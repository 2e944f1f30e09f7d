// A series of values over the run, as a figure draws it: points in time order, broken where nothing was measured,
// and thinned for drawing without losing its spikes.

/// One value at one moment: seconds since the run began on the harness's clock, and the value in its figure's unit.
public struct PlotPoint: Hashable, Sendable {
    /// Seconds since the run began.
    public var time: Double
    /// The value, in the unit of the figure it is drawn in.
    public var value: Double

    /// A point.
    public init(time: Double, value: Double) {
        self.time = time
        self.value = value
    }
}

/// How a series is drawn.
public enum PlotStyle: String, Hashable, Sendable {
    /// Consecutive points joined by a line, one line per segment.
    case line
    /// Each point a dot: values with no meaning between them (one per warning).
    case points
}

/// A named series: its points in time order, in segments drawn apart (a gap between two segments is a stretch with
/// no value, such as GetStatus calls failing while the daemon restarts, never a stretch of zeros).
public struct PlotSeries: Hashable, Sendable {
    /// What the series is, for the legend and the JSON report ("daemon pid 1234").
    public var name: String
    /// How it is drawn.
    public var style: PlotStyle
    /// The stretches with values, each in time order, the stretches in time order too.
    public var segments: [[PlotPoint]]

    /// A series of `segments`; empty segments are dropped.
    public init(name: String, style: PlotStyle, segments: [[PlotPoint]]) {
        self.name = name
        self.style = style
        self.segments = segments.filter { !$0.isEmpty }
    }

    /// A series of `points` (sorted here by time), a new segment starting wherever two consecutive points are more
    /// than `maximumStep` seconds apart (nil: one segment).
    public init(name: String, style: PlotStyle, points: [PlotPoint], maximumStep: Double? = nil) {
        var segments: [[PlotPoint]] = []
        var current: [PlotPoint] = []
        for point in points.sorted(by: { $0.time < $1.time }) {
            if let last = current.last, let maximumStep, point.time - last.time > maximumStep {
                segments.append(current)
                current = []
            }
            current.append(point)
        }
        segments.append(current)
        self.init(name: name, style: style, segments: segments)
    }

    /// Every point, in time order.
    public var points: [PlotPoint] { segments.flatMap { $0 } }

    /// How many points it has.
    public var count: Int { segments.reduce(0) { $0 + $1.count } }

    /// The series with at most `maximumCount` points: past that, the span from its first point to its last is cut
    /// into equal buckets and each segment keeps, per bucket, its lowest and its highest point (in their time
    /// order), so that a spike a single sample long is still drawn; dots (`points`) keep the bucket's median too,
    /// so that the bulk between the extremes still shows. The bucket count leaves room for segments sharing a
    /// bucket; if many short segments still exceed the bound, every n-th point is kept.
    public func downsampled(toAtMost maximumCount: Int) -> PlotSeries {
        let limit = max(2, maximumCount)
        guard count > limit, let first = segments.first?.first?.time, let last = segments.last?.last?.time else {
            return self
        }
        let perBucket = style == .points ? 3 : 2
        // Each segment adds at most `perBucket` points for a bucket it shares with the segment before it.
        let bucketCount = max(1, (limit - perBucket * (segments.count - 1)) / perBucket)
        let width = max(last - first, .leastNonzeroMagnitude) / Double(bucketCount)
        func bucket(_ point: PlotPoint) -> Int { min(bucketCount - 1, Int((point.time - first) / width)) }
        var thinned: [[PlotPoint]] = []
        for segment in segments {
            var kept: [PlotPoint] = []
            var start = segment.startIndex
            while start < segment.endIndex {
                let index = bucket(segment[start])
                var end = start
                var lowest = start
                var highest = start
                while end < segment.endIndex, bucket(segment[end]) == index {
                    if segment[end].value < segment[lowest].value { lowest = end }
                    if segment[end].value > segment[highest].value { highest = end }
                    end += 1
                }
                var positions: Set = [lowest, highest]
                if perBucket == 3 {
                    let byValue = (start..<end).sorted { segment[$0].value < segment[$1].value }
                    positions.insert(byValue[byValue.count / 2])
                }
                for position in positions.sorted() { kept.append(segment[position]) }
                start = end
            }
            thinned.append(kept)
        }
        var result = PlotSeries(name: name, style: style, segments: thinned)
        if result.count > limit {
            // Many segments of a point or two: keep every n-th point, counted across segments.
            let stride = (result.count + limit - 1) / limit
            var offset = 0
            result.segments = result.segments.map { segment in
                defer { offset += segment.count }
                return segment.indices.filter { (offset + $0) % stride == 0 }.map { segment[$0] }
            }.filter { !$0.isEmpty }
        }
        return result
    }
}
