// A figure of a soak report: series over the run with the warm-ups shaded and the restarts and faults marked, and
// the summary figures (quantiles, lines of best fit, the median of each minute) that tell drift from noise.

/// A stretch of the run a figure shades, whose points no line of best fit or median per minute counts.
public struct ShadedSpan: Hashable, Sendable {
    /// Why it is shaded.
    public enum Kind: String, Hashable, Sendable {
        /// A daemon process settling in: from the fault that ended the one before (or the start) until the first
        /// `SoakCriteria.warmUpFraction` of its life is over, as `resources-flat` leaves it out.
        case warmUp = "warm-up"
        /// The end of the run: the apps ended, the daemon stopped.
        case windDown = "wind-down"
    }

    /// Why it is shaded.
    public var kind: Kind
    /// From when to when, in seconds since the run began.
    public var range: ClosedRange<Double>

    /// A shaded span.
    public init(kind: Kind, range: ClosedRange<Double>) {
        self.kind = kind
        self.range = range
    }
}

/// A moment marked across a figure by a thin vertical line.
public struct PlotMarker: Hashable, Sendable {
    /// What happened.
    public enum Kind: String, Hashable, Sendable {
        /// The daemon went down (killed, hung until the watchdog, restarted): a new process follows.
        case restart
        /// A fault that leaves the daemon running (a client killed mid-call, a hostile client, a full disk).
        case fault
        /// `AppsMemoryMax` lowered under the apps' total: reclamation follows.
        case pressure
    }

    /// When, in seconds since the run began.
    public var time: Double
    /// What happened.
    public var kind: Kind
    /// What happened, in a few words (the SVG's tooltip).
    public var label: String

    /// A marker.
    public init(time: Double, kind: Kind, label: String) {
        self.time = time
        self.kind = kind
        self.label = label
    }
}

/// One figure of the report: what it shows, its series at full resolution, what is shaded and marked.
public struct Figure: Hashable, Sendable {
    /// The file's suffix and the JSON report's key: `rss` for `PATH-rss.svg`.
    public var name: String
    /// The title drawn above the plot.
    public var title: String
    /// One sentence saying what the figure shows, for the Markdown report.
    public var caption: String
    /// The quantity on the y axis ("resident memory").
    public var quantity: String
    /// Its unit ("MiB").
    public var unit: String
    /// The series, at full resolution (`svg` thins them for drawing).
    public var series: [PlotSeries]
    /// The legend's words for the series when there are many of them (one per daemon process); nil to name each.
    public var seriesLegend: String?
    /// The shaded stretches, whose points the fits and the medians per minute leave out.
    public var shaded: [ShadedSpan]
    /// Restarts, faults and memory-pressure phases.
    public var markers: [PlotMarker]
    /// The run's length in seconds: the x axis spans it (or the last point, if later).
    public var duration: Double
    /// Whether rare values far above the rest (over three times the 99th percentile) are drawn at the top edge, so
    /// that the bulk of the values keeps the height: latencies, whose worst call can be a thousand times the usual.
    public var clipsOutliers: Bool
    /// The fewest seconds a series must span after its warm-up for a line of best fit of its own: a fit over a
    /// few seconds of a process killed soon after says nothing about drift.
    public var fitMinimumSpan: Double
    /// Sentences the Markdown and JSON reports add (what was left out, and why).
    public var notes: [String]

    /// A figure.
    public init(
        name: String, title: String, caption: String, quantity: String, unit: String, series: [PlotSeries],
        seriesLegend: String? = nil, shaded: [ShadedSpan] = [], markers: [PlotMarker] = [], duration: Double,
        clipsOutliers: Bool = false, fitMinimumSpan: Double = 60, notes: [String] = []
    ) {
        self.name = name
        self.title = title
        self.caption = caption
        self.quantity = quantity
        self.unit = unit
        self.series = series
        self.seriesLegend = seriesLegend
        self.shaded = shaded
        self.markers = markers
        self.duration = duration
        self.clipsOutliers = clipsOutliers
        self.fitMinimumSpan = fitMinimumSpan
        self.notes = notes
    }

    /// Whether `time` lies outside every shaded span: the points the fits and medians count.
    public func isJudged(_ time: Double) -> Bool { !shaded.contains { $0.range.contains(time) } }

    /// The summary of the figure: per series and over all of them, the quantiles of every point, and after the
    /// warm-up the line of best fit and the median of each minute.
    public var summary: FigureSummary {
        let perSeries = series.map { summarize($0.name, $0.points, style: $0.style) }
        let all = series.flatMap(\.points)
        let medians = medianPerMinute(all.filter { isJudged($0.time) })
        return FigureSummary(
            series: perSeries, overall: summarize("all", all, style: .line), medianPerMinute: medians,
            trend: medians.count >= 2 ? LinearFit(medians) : nil)
    }

    /// A series' figures. The line of best fit of dots goes through the medians of their minutes: a dot is an
    /// event (a warning), and a rare one a second late would tilt a fit through the dots themselves.
    private func summarize(_ name: String, _ points: [PlotPoint], style: PlotStyle) -> SeriesSummary {
        let values = points.map(\.value)
        let judged = points.filter { isJudged($0.time) }
        // `all` joins the series one after another, so its points are in time order only within each.
        let earliest = judged.lazy.map(\.time).min()
        let latest = judged.lazy.map(\.time).max()
        let span = (latest ?? 0) - (earliest ?? 0)
        let fitted = style == .points ? medianPerMinute(judged) : judged
        return SeriesSummary(
            name: name, count: points.count, median: quantile(values, 0.5), p99: quantile(values, 0.99),
            maximum: values.max(), judgedCount: judged.count,
            fit: judged.count >= 3 && span >= fitMinimumSpan ? LinearFit(fitted) : nil,
            judgedSpan: earliest.flatMap { earliest in latest.map { earliest...$0 } })
    }
}

/// A series' figures.
public struct SeriesSummary: Hashable, Sendable {
    /// The series (or `all`).
    public var name: String
    /// Its points.
    public var count: Int
    /// The median, 99th percentile and maximum of every point; nil without points.
    public var median: Double?
    public var p99: Double?
    public var maximum: Double?
    /// The points outside the shaded spans.
    public var judgedCount: Int
    /// The line of best fit through those (for dots, through their medians per minute), when they span at least the
    /// figure's `fitMinimumSpan`.
    public var fit: LinearFit?
    /// From the first of those to the last.
    public var judgedSpan: ClosedRange<Double>?
}

/// A figure's figures: per series, over all of them, and the trend of the medians per minute after the warm-up.
public struct FigureSummary: Hashable, Sendable {
    /// Per series, in the figure's order.
    public var series: [SeriesSummary]
    /// Every point of every series together.
    public var overall: SeriesSummary
    /// After the warm-up (outside the shaded spans), the median of each minute that has points, every series
    /// together.
    public var medianPerMinute: [PlotPoint]
    /// The line of best fit through those medians: the drift of the run as a whole, nil for fewer than two minutes.
    public var trend: LinearFit?
}
