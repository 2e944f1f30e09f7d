// Human-friendly renderings of durations, byte counts, wall-clock times and tables.
import BGTaskArguments
import Foundation

/// Formatters for the human output of bgtask; `--json` output never goes through these.
public enum Formatting {
    /// A duration as people read it: `850ms`, `4.2s`, `42s`, `4m 12s`, `2h 5m`, `3d 4h`.
    ///
    /// At most two units, the larger first, a zero second unit left out (`10m`). Times are rounded down, so a
    /// remaining time is never shown as more than there is. Negative values show as `0s`.
    public static func duration(seconds: Double) -> String {
        guard seconds.isFinite, seconds > 0 else { return "0s" }
        if seconds < 1 {
            let milliseconds = Int(seconds * 1_000)
            return milliseconds == 0 ? "0s" : "\(milliseconds)ms"
        }
        if seconds < 10 {
            let tenths = Int(seconds * 10)
            return tenths % 10 == 0 ? "\(tenths / 10)s" : "\(tenths / 10).\(tenths % 10)s"
        }
        // Beyond Int's range only for durations of billions of years; clamp rather than trap.
        let whole = seconds >= Double(Int.max) ? Int.max : Int(seconds)
        let units: [(name: String, seconds: Int)] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)]
        guard let index = units.firstIndex(where: { whole >= $0.seconds }) else { return "0s" }
        let first = units[index]
        var text = "\(whole / first.seconds)\(first.name)"
        if index + 1 < units.count {
            let second = units[index + 1]
            let rest = (whole % first.seconds) / second.seconds
            if rest > 0 { text += " \(rest)\(second.name)" }
        }
        return text
    }

    /// A short time in milliseconds with two decimals below 10 ms, one below 100 ms, none above: `0.42ms`,
    /// `12.5ms`, `250ms`.
    public static func milliseconds(_ milliseconds: Double) -> String {
        guard milliseconds.isFinite, milliseconds > 0 else { return "0ms" }
        let digits = milliseconds < 10 ? 2 : milliseconds < 100 ? 1 : 0
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = Int((milliseconds * scale).rounded())
        guard digits > 0 else { return "\(scaled)ms" }
        let whole = scaled / Int(scale)
        let fraction = String(scaled % Int(scale))
        return "\(whole).\(String(repeating: "0", count: digits - fraction.count))\(fraction)ms"
    }

    /// A remaining background time: a duration, or `unlimited` for nil (the app is in the foreground).
    public static func remaining(_ seconds: Double?) -> String {
        seconds.map { duration(seconds: $0) } ?? "unlimited"
    }

    /// A byte count with a binary unit: `512 B`, `1.5 KiB`, `12.3 MiB`, `2.0 GiB`; `-` for nil (not measured).
    public static func bytes(_ bytes: Int?) -> String {
        guard let bytes else { return "-" }
        guard bytes >= 1_024 else { return "\(bytes) B" }
        let units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
        var value = Double(bytes) / 1_024
        var index = 0
        // Moves up a unit while the value would print as 1024.0 or more.
        while value >= 1_023.95 && index + 1 < units.count {
            value /= 1_024
            index += 1
        }
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10) \(units[index])"
    }

    /// A wall-clock time given in seconds since the Unix epoch: `2024-05-01 12:00:03` in `timeZone`.
    public static func wallClock(_ secondsSinceEpoch: Double, timeZone: TimeZone) -> String {
        let formatter = DateFormatter()
        // The POSIX locale keeps the Gregorian calendar and ASCII digits whatever the user's locale is.
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = timeZone
        formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
        return formatter.string(from: Date(timeIntervalSince1970: secondsSinceEpoch))
    }

    /// Rows under a header, columns left-aligned and separated by two spaces, no trailing spaces.
    public static func table(header: [String], rows: [[String]]) -> String {
        let all = [header] + rows
        let columns = all.map(\.count).max() ?? 0
        var widths = [Int](repeating: 0, count: columns)
        for row in all {
            for (column, cell) in row.enumerated() { widths[column] = max(widths[column], cell.count) }
        }
        return all.map { row in
            row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell.padding(toLength: widths[column])
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }

    /// `text` with control characters escaped, for names that came from other processes and are printed on one
    /// line (an app may register a name holding a newline or a terminal escape sequence).
    public static func printable(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) {
                result += "\\u{" + String(scalar.value, radix: 16) + "}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
