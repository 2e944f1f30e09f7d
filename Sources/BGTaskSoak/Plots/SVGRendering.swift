// A figure written as SVG 1.1 by hand (no dependencies): time in minutes across, the value up, the warm-ups shaded,
// restarts and faults as thin vertical lines, the series, their lines of best fit and the median of each minute.

extension Figure {
    /// The most points drawn per series: a few thousand keep an hour's file small (about 25 bytes a point) and are
    /// more than the plot's 860 pixels across can show; the thinning keeps each bucket's highest and lowest value.
    public static let maximumPointsPerSeries = 2_000

    /// The figure as an SVG 1.1 document.
    public func svg(maximumPointsPerSeries: Int = Figure.maximumPointsPerSeries) -> String {
        let summary = self.summary
        let drawn = series.map { $0.downsampled(toAtMost: maximumPointsPerSeries) }
        let legend = legendItems(summary: summary)
        let legendRows = SVGLayout.rows(of: legend)
        let top = 62 + 18 * Double(legendRows.count)
        let height = top + SVGLayout.plotHeight + 58
        let scale = valueScale()
        let frame = PlotFrame(
            left: SVGLayout.left, right: SVGLayout.width - SVGLayout.rightMargin, top: top,
            bottom: top + SVGLayout.plotHeight,
            timeMaximum: max(duration, series.compactMap { $0.segments.last?.last?.time }.max() ?? 0, 1),
            valueLow: scale.low, valueHigh: scale.high)
        var svg = SVGWriter()
        svg.open(
            "svg",
            [
                ("xmlns", "http://www.w3.org/2000/svg"), ("version", "1.1"), ("width", number(SVGLayout.width)),
                ("height", number(height)), ("viewBox", "0 0 \(number(SVGLayout.width)) \(number(height))"),
                ("font-family", "DejaVu Sans, Helvetica, Arial, sans-serif"),
            ])
        svg.element("title", text: title)
        svg.element("desc", text: caption)
        svg.element(
            "rect", [("width", number(SVGLayout.width)), ("height", number(height)), ("fill", "#ffffff")])
        drawShading(&svg, frame)
        drawGrid(&svg, frame, step: scale.step)
        drawMarkers(&svg, frame)
        drawSeries(&svg, frame, drawn)
        drawFits(&svg, frame, summary)
        drawTrend(&svg, frame, summary)
        drawAxes(&svg, frame, step: scale.step)
        svg.element(
            "text",
            [
                ("class", "title"), ("x", number(SVGLayout.width / 2)), ("y", "22"), ("text-anchor", "middle"),
                ("font-size", "16"), ("font-weight", "bold"),
            ], text: title)
        svg.element(
            "text",
            [
                ("class", "subtitle"), ("x", number(SVGLayout.width / 2)), ("y", "42"), ("text-anchor", "middle"),
                ("font-size", "12"), ("fill", "#333333"),
            ], text: subtitle(summary, clipped: scale.clipped))
        drawLegend(&svg, legendRows)
        svg.close("svg")
        return svg.text
    }

    /// The y axis: from zero (or the lowest value, if below) to the highest value, or with `clipsOutliers` to one
    /// and a half times the 99th percentile when the highest is over three times that; on whole tick steps.
    private func valueScale() -> (low: Double, high: Double, step: Double, clipped: (count: Int, highest: Double)?) {
        let values = series.flatMap { $0.points.map(\.value) }
        let highest = values.max() ?? 1
        var low = min(0, values.min() ?? 0)
        var high = highest
        if clipsOutliers, values.count >= 20, let p99 = quantile(values, 0.99), p99 > 0, highest > 3 * p99 {
            high = p99 * 1.5
        }
        if high <= low { high = low + 1 }
        let step = AxisTicks.step(for: (high - low) / 5)
        low = (low / step).rounded(.down) * step
        high = max((high / step).rounded(.up) * step, low + step)
        let above = values.filter { $0 > high }.count
        return (low, high, step, above > 0 ? (above, highest) : nil)
    }

    private func subtitle(_ summary: FigureSummary, clipped: (count: Int, highest: Double)?) -> String {
        let overall = summary.overall
        guard let median = overall.median, let p99 = overall.p99, let maximum = overall.maximum else {
            return "no values were measured"
        }
        var text =
            "all \(overall.count): median \(readable(median)), p99 \(readable(p99)), max \(readable(maximum)) \(unit)"
        // One series per daemon process: a restarted daemon starts from its restored state, so the medians of all
        // of them together move at each restart; the drift that counts is a process's own, after its warm-up.
        let fitted = summary.series.filter { $0.fit != nil }
        func span(_ series: SeriesSummary) -> Double {
            series.judgedSpan.map { $0.upperBound - $0.lowerBound } ?? 0
        }
        if seriesLegend != nil, let longest = fitted.max(by: { span($0) < span($1) }), let fit = longest.fit {
            text +=
                "; after its warm-up the longest-lived process (\(readable(span(longest) / 60)) min) drifts "
                + "\(signed(fit.slopePerHour)) \(unit)/h"
        } else if seriesLegend != nil {
            text += "; no process lived a minute past its warm-up: no drift"
        } else if let trend = summary.trend {
            text += "; after the warm-up the median per minute drifts \(signed(trend.slopePerHour)) \(unit)/h"
        } else {
            text += "; under two minutes after the warm-up: no trend"
        }
        if let clipped {
            text += "; \(clipped.count) above the top drawn at the edge (max \(readable(clipped.highest)))"
        }
        return text
    }

    private func drawShading(_ svg: inout SVGWriter, _ frame: PlotFrame) {
        svg.open("g", [("class", "shading")])
        for span in shaded {
            let left = frame.x(span.range.lowerBound)
            let right = frame.x(span.range.upperBound)
            guard right > left else { continue }
            let fill = span.kind == .warmUp ? "#9e9e9e" : "#6f8fb0"
            svg.open(
                "rect",
                [
                    ("class", "shade \(span.kind.rawValue)"), ("x", number(left)), ("y", number(frame.top)),
                    ("width", number(right - left)), ("height", number(frame.bottom - frame.top)), ("fill", fill),
                    ("fill-opacity", "0.22"),
                ])
            svg.element(
                "title",
                text: "\(span.kind.rawValue) \(minutes(span.range.lowerBound)) to \(minutes(span.range.upperBound))")
            svg.close("rect")
        }
        svg.close("g")
    }

    private func drawGrid(_ svg: inout SVGWriter, _ frame: PlotFrame, step: Double) {
        svg.open("g", [("class", "grid"), ("stroke", "#e4e4e4"), ("stroke-width", "1")])
        for value in AxisTicks.values(from: frame.valueLow, to: frame.valueHigh, step: step) {
            let y = frame.y(value)
            svg.element(
                "line", [("x1", number(frame.left)), ("y1", number(y)), ("x2", number(frame.right)), ("y2", number(y))])
        }
        svg.close("g")
    }

    private func drawMarkers(_ svg: inout SVGWriter, _ frame: PlotFrame) {
        svg.open("g", [("class", "markers")])
        for marker in markers.sorted(by: { $0.time < $1.time }) {
            let x = frame.x(marker.time)
            let style: [(String, String)] =
                switch marker.kind {
                case .restart: [("stroke", "#d62728"), ("stroke-opacity", "0.75")]
                case .fault: [("stroke", "#555555"), ("stroke-opacity", "0.6"), ("stroke-dasharray", "3 3")]
                case .pressure: [("stroke", "#ff7f0e"), ("stroke-opacity", "0.8"), ("stroke-dasharray", "6 2")]
                }
            svg.open(
                "line",
                [
                    ("class", "marker \(marker.kind.rawValue)"), ("x1", number(x)), ("y1", number(frame.top)),
                    ("x2", number(x)), ("y2", number(frame.bottom)), ("stroke-width", "1"),
                ] + style)
            svg.element("title", text: "\(marker.label) at \(minutes(marker.time))")
            svg.close("line")
        }
        svg.close("g")
    }

    /// Each series in a group that carries its colour (so that each of up to a few thousand dots is only its
    /// position: an hour's figure stays a few hundred kilobytes at most).
    private func drawSeries(_ svg: inout SVGWriter, _ frame: PlotFrame, _ drawn: [PlotSeries]) {
        for (index, series) in drawn.enumerated() {
            let colour = SVGLayout.colour(index)
            svg.open(
                "g",
                [
                    ("class", "series"), ("id", "series-\(index + 1)"), ("fill", colour), ("fill-opacity", "0.75"),
                    ("stroke", series.style == .points ? "none" : colour), ("stroke-width", "1.2"),
                    ("stroke-linejoin", "round"),
                ])
            svg.element("title", text: series.name)
            let radius = series.style == .points ? "2" : "1.5"
            for segment in series.segments {
                if series.style == .points || segment.count == 1 {
                    for point in segment {
                        svg.element(
                            "circle",
                            [("cx", number(frame.x(point.time))), ("cy", number(frame.y(point.value))), ("r", radius)])
                    }
                } else {
                    let points = segment.map { "\(number(frame.x($0.time))),\(number(frame.y($0.value)))" }
                    svg.element("polyline", [("points", points.joined(separator: " ")), ("fill", "none")])
                }
            }
            svg.close("g")
        }
    }

    private func drawFits(_ svg: inout SVGWriter, _ frame: PlotFrame, _ summary: FigureSummary) {
        svg.open("g", [("class", "fits")])
        for (index, result) in summary.series.enumerated() {
            guard let fit = result.fit, let span = result.judgedSpan else { continue }
            svg.open(
                "line",
                [
                    ("class", "fit"), ("x1", number(frame.x(span.lowerBound))),
                    ("y1", number(frame.y(fit.value(at: span.lowerBound)))), ("x2", number(frame.x(span.upperBound))),
                    ("y2", number(frame.y(fit.value(at: span.upperBound)))), ("stroke", SVGLayout.colour(index)),
                    ("stroke-width", "2.2"), ("stroke-dasharray", "8 4"),
                ])
            svg.element(
                "title", text: "\(result.name): best fit after the warm-up, \(signed(fit.slopePerHour)) \(unit)/h")
            svg.close("line")
        }
        svg.close("g")
    }

    /// The median of each minute as steps a minute wide, broken where a minute has no judged point.
    private func drawTrend(_ svg: inout SVGWriter, _ frame: PlotFrame, _ summary: FigureSummary) {
        svg.open("g", [("class", "trend")])
        var run: [String] = []
        var previousMinute: Int?
        func flush() {
            if !run.isEmpty {
                svg.element(
                    "polyline",
                    [
                        ("class", "median-per-minute"), ("points", run.joined(separator: " ")), ("fill", "none"),
                        ("stroke", "#111111"), ("stroke-opacity", "0.6"), ("stroke-width", "2.5"),
                    ])
            }
            run = []
        }
        for point in summary.medianPerMinute {
            let minute = Int((point.time / 60).rounded(.down))
            if let previousMinute, previousMinute + 1 != minute { flush() }
            let start = Double(minute) * 60
            let end = min(start + 60, frame.timeMaximum)
            let y = number(frame.y(point.value))
            run += ["\(number(frame.x(start))),\(y)", "\(number(frame.x(end))),\(y)"]
            previousMinute = minute
        }
        flush()
        svg.close("g")
    }

    private func drawAxes(_ svg: inout SVGWriter, _ frame: PlotFrame, step: Double) {
        svg.open("g", [("class", "axes"), ("stroke", "#333333"), ("stroke-width", "1")])
        svg.element(
            "line",
            [
                ("x1", number(frame.left)), ("y1", number(frame.bottom)), ("x2", number(frame.right)),
                ("y2", number(frame.bottom)),
            ])
        svg.element(
            "line",
            [
                ("x1", number(frame.left)), ("y1", number(frame.top)), ("x2", number(frame.left)),
                ("y2", number(frame.bottom)),
            ])
        svg.close("g")
        svg.open("g", [("class", "y-ticks"), ("font-size", "11"), ("text-anchor", "end"), ("fill", "#333333")])
        for value in AxisTicks.values(from: frame.valueLow, to: frame.valueHigh, step: step) {
            let y = frame.y(value)
            svg.element(
                "line",
                [
                    ("x1", number(frame.left - 5)), ("y1", number(y)), ("x2", number(frame.left)), ("y2", number(y)),
                    ("stroke", "#333333"),
                ])
            svg.element(
                "text", [("class", "tick"), ("x", number(frame.left - 8)), ("y", number(y + 4))],
                text: AxisTicks.label(value, step: step))
        }
        svg.close("g")
        let minuteStep = AxisTicks.step(for: frame.timeMaximum / 60 / 8)
        svg.open("g", [("class", "x-ticks"), ("font-size", "11"), ("text-anchor", "middle"), ("fill", "#333333")])
        for minute in AxisTicks.values(from: 0, to: frame.timeMaximum / 60, step: minuteStep) {
            let x = frame.x(minute * 60)
            svg.element(
                "line",
                [
                    ("x1", number(x)), ("y1", number(frame.bottom)), ("x2", number(x)),
                    ("y2", number(frame.bottom + 5)),
                    ("stroke", "#333333"),
                ])
            svg.element(
                "text", [("class", "tick"), ("x", number(x)), ("y", number(frame.bottom + 18))],
                text: AxisTicks.label(minute, step: minuteStep))
        }
        svg.close("g")
        svg.element(
            "text",
            [
                ("class", "axis-label"), ("x", number((frame.left + frame.right) / 2)),
                ("y", number(frame.bottom + 40)),
                ("text-anchor", "middle"), ("font-size", "12"),
            ],
            text: "minutes since the start")
        let middle = (frame.top + frame.bottom) / 2
        svg.element(
            "text",
            [
                ("class", "axis-label"), ("x", "18"), ("y", number(middle)), ("text-anchor", "middle"),
                ("font-size", "12"), ("transform", "rotate(-90 18 \(number(middle)))"),
            ],
            text: "\(quantity) (\(unit))")
    }

    /// What the legend shows: the series (named, or in one entry when there are many), then the fits, the medians
    /// per minute, the shading and the markers the figure has.
    private func legendItems(summary: FigureSummary) -> [LegendItem] {
        var items: [LegendItem] = []
        if let seriesLegend {
            items.append(LegendItem(swatch: .line(SVGLayout.colour(0), dashed: false), text: seriesLegend))
        } else {
            for (index, series) in series.enumerated() {
                let colour = SVGLayout.colour(index)
                items.append(
                    LegendItem(
                        swatch: series.style == .points ? .dot(colour) : .line(colour, dashed: false),
                        text: series.name))
            }
        }
        if summary.series.contains(where: { $0.fit != nil }) {
            items.append(LegendItem(swatch: .line(SVGLayout.colour(0), dashed: true), text: "best fit after warm-up"))
        }
        if !summary.medianPerMinute.isEmpty {
            items.append(LegendItem(swatch: .thick("#111111"), text: "median per minute after warm-up"))
        }
        if shaded.contains(where: { $0.kind == .warmUp }) {
            items.append(LegendItem(swatch: .box("#9e9e9e"), text: "warm-up"))
        }
        if shaded.contains(where: { $0.kind == .windDown }) {
            items.append(LegendItem(swatch: .box("#6f8fb0"), text: "wind-down"))
        }
        let kinds: [(PlotMarker.Kind, String, String)] = [
            (.restart, "#d62728", "daemon restart"), (.fault, "#555555", "other fault"),
            (.pressure, "#ff7f0e", "memory pressure"),
        ]
        for (kind, colour, text) in kinds where markers.contains(where: { $0.kind == kind }) {
            items.append(LegendItem(swatch: .marker(colour), text: text))
        }
        return items
    }

    private func drawLegend(_ svg: inout SVGWriter, _ rows: [[(item: LegendItem, x: Double)]]) {
        svg.open("g", [("class", "legend"), ("font-size", "12"), ("fill", "#333333")])
        for (row, items) in rows.enumerated() {
            let y = 62 + 18 * Double(row)
            for (item, x) in items {
                switch item.swatch {
                case .line(let colour, let dashed):
                    var attributes = [
                        ("x1", number(x)), ("y1", number(y - 4)), ("x2", number(x + 22)), ("y2", number(y - 4)),
                        ("stroke", colour), ("stroke-width", dashed ? "2.2" : "1.5"),
                    ]
                    if dashed { attributes.append(("stroke-dasharray", "8 4")) }
                    svg.element("line", attributes)
                case .thick(let colour):
                    svg.element(
                        "line",
                        [
                            ("x1", number(x)), ("y1", number(y - 4)), ("x2", number(x + 22)), ("y2", number(y - 4)),
                            ("stroke", colour), ("stroke-opacity", "0.6"), ("stroke-width", "2.5"),
                        ])
                case .dot(let colour):
                    svg.element(
                        "circle", [("cx", number(x + 11)), ("cy", number(y - 4)), ("r", "3"), ("fill", colour)])
                case .box(let colour):
                    svg.element(
                        "rect",
                        [
                            ("x", number(x)), ("y", number(y - 10)), ("width", "22"), ("height", "12"),
                            ("fill", colour),
                            ("fill-opacity", "0.35"),
                        ])
                case .marker(let colour):
                    svg.element(
                        "line",
                        [
                            ("x1", number(x + 11)), ("y1", number(y - 11)), ("x2", number(x + 11)),
                            ("y2", number(y + 2)),
                            ("stroke", colour), ("stroke-width", "1.5"),
                        ])
                }
                svg.element(
                    "text", [("class", "legend-text"), ("x", number(x + 28)), ("y", number(y))], text: item.text)
            }
        }
        svg.close("g")
    }

    /// A value for people: three significant digits or so, no exponent.
    private func readable(_ value: Double) -> String {
        let magnitude = abs(value)
        let digits = magnitude >= 100 ? 0 : magnitude >= 10 ? 1 : magnitude >= 1 ? 2 : 3
        return fixed(value, digits: digits)
    }

    private func signed(_ value: Double) -> String { (value >= 0 ? "+" : "") + readable(value) }

    private func minutes(_ seconds: Double) -> String { "\(fixed(seconds / 60, digits: 2)) min" }
}

/// Where the plot lies in the picture, and how times and values map onto it.
struct PlotFrame {
    let left: Double
    let right: Double
    let top: Double
    let bottom: Double
    /// The x axis spans 0 to this many seconds.
    let timeMaximum: Double
    /// The y axis spans these values; values beyond are drawn at its edge.
    let valueLow: Double
    let valueHigh: Double

    /// The x coordinate of `time` (seconds), within the plot.
    func x(_ time: Double) -> Double { left + (right - left) * min(1, max(0, time / timeMaximum)) }

    /// The y coordinate of `value`, within the plot.
    func y(_ value: Double) -> Double {
        bottom - (bottom - top) * min(1, max(0, (value - valueLow) / (valueHigh - valueLow)))
    }
}

/// The picture's fixed measures and colours.
enum SVGLayout {
    static let width = 960.0
    static let left = 78.0
    static let rightMargin = 24.0
    static let plotHeight = 320.0

    /// Series colours (the Tableau palette without its red, grey and orange, which mark restarts, faults and memory
    /// pressure), repeated when there are more series.
    static let palette = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]

    static func colour(_ index: Int) -> String { palette[index % palette.count] }

    /// The legend's items laid out in rows across the picture, each with its x coordinate.
    static func rows(of items: [LegendItem]) -> [[(item: LegendItem, x: Double)]] {
        var rows: [[(item: LegendItem, x: Double)]] = []
        var row: [(item: LegendItem, x: Double)] = []
        var x = left
        for item in items {
            // About 6.6 pixels per character at 12 pixels, after a 22-pixel swatch and a gap.
            let width = 28 + 6.6 * Double(item.text.count) + 18
            if !row.isEmpty, x + width > Self.width - rightMargin {
                rows.append(row)
                row = []
                x = left
            }
            row.append((item, x))
            x += width
        }
        if !row.isEmpty { rows.append(row) }
        return rows
    }
}

/// One entry of a legend.
struct LegendItem {
    enum Swatch {
        case line(String, dashed: Bool)
        case thick(String)
        case dot(String)
        case box(String)
        case marker(String)
    }

    var swatch: Swatch
    var text: String
}

/// Tick positions and labels on whole, readable steps.
enum AxisTicks {
    /// The step of 1, 2 or 5 times a power of ten nearest above `rough`.
    static func step(for rough: Double) -> Double {
        guard rough > 0, rough.isFinite else { return 1 }
        var magnitude = 1.0
        while magnitude * 10 <= rough { magnitude *= 10 }
        while magnitude > rough { magnitude /= 10 }
        let fraction = rough / magnitude
        return (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * magnitude
    }

    /// The multiples of `step` from `low` to `high`.
    static func values(from low: Double, to high: Double, step: Double) -> [Double] {
        guard step > 0, high >= low else { return [] }
        let first = (low / step).rounded(.up)
        let last = (high / step + 1e-9).rounded(.down)
        guard last >= first, last - first < 1_000 else { return [] }
        return (0...Int(last - first)).map { (first + Double($0)) * step }
    }

    /// `value` with as many decimals as `step` needs.
    static func label(_ value: Double, step: Double) -> String {
        var digits = 0
        var scaled = step
        while digits < 6, abs(scaled - scaled.rounded()) > 1e-9 * max(1, abs(scaled)) {
            scaled *= 10
            digits += 1
        }
        return fixed(value, digits: digits)
    }
}

/// A coordinate with one decimal (a tenth of a pixel is finer than any screen shows).
func number(_ value: Double) -> String {
    let text = fixed(value, digits: 1)
    return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
}

/// Writes XML elements with escaped attributes and text.
struct SVGWriter {
    private(set) var text = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"

    /// Opens `name` with `attributes`; `close` ends it.
    mutating func open(_ name: String, _ attributes: [(String, String)] = []) {
        text += "<\(name)\(Self.attributes(attributes))>\n"
    }

    /// Ends the element `name`.
    mutating func close(_ name: String) { text += "</\(name)>\n" }

    /// A whole element: empty, or holding `text`.
    mutating func element(_ name: String, _ attributes: [(String, String)] = [], text content: String? = nil) {
        if let content {
            text += "<\(name)\(Self.attributes(attributes))>\(Self.escaped(content))</\(name)>\n"
        } else {
            text += "<\(name)\(Self.attributes(attributes))/>\n"
        }
    }

    private static func attributes(_ attributes: [(String, String)]) -> String {
        attributes.map { " \($0.0)=\"\(escaped($0.1))\"" }.joined()
    }

    /// `text` with the characters XML gives a meaning to written as references, and the control characters XML 1.0
    /// does not allow left out.
    static func escaped(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&apos;"
            case "\t", "\n", "\r": result.unicodeScalars.append(scalar)
            default:
                if scalar.value >= 0x20 && scalar.value != 0xFFFE && scalar.value != 0xFFFF {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result
    }
}
