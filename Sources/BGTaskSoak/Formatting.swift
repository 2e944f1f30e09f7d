// Numbers written for people without Foundation: fixed decimals, seconds and bytes.

import BGTaskProtocol

/// `value` with exactly `digits` decimals, rounded half away from zero ("12.35" for 12.345 and 2).
func fixed(_ value: Double, digits: Int) -> String {
    guard value.isFinite else { return "\(value)" }
    var scale = 1.0
    for _ in 0..<max(0, digits) { scale *= 10 }
    let scaled = (abs(value) * scale).rounded()
    // Beyond 2^63 the decimals are noise anyway: fall back to the standard description.
    guard scaled < 9.2e18 else { return "\(value)" }
    let whole = Int64(scaled)
    let units = Int64(scale)
    let sign = value < 0 && whole != 0 ? "-" : ""
    guard digits > 0 else { return sign + String(whole) }
    let fraction = String(whole % units)
    return sign + String(whole / units) + "." + String(repeating: "0", count: digits - fraction.count) + fraction
}

/// A time on the harness's clock, "t=12.345s".
func moment(_ time: Duration) -> String { "t=\(fixed(time.secondsValue, digits: 3))s" }

/// A span in seconds, "1.500s".
func seconds(_ span: Duration) -> String { "\(fixed(span.secondsValue, digits: 3))s" }

/// Bytes with MiB beside them, "104857600 bytes (100.0 MiB)".
func bytes(_ count: Int) -> String { "\(count) bytes (\(fixed(Double(count) / 1_048_576, digits: 1)) MiB)" }

/// A fraction as a signed percentage, "+30.0%".
func percentage(_ fraction: Double) -> String { (fraction >= 0 ? "+" : "") + fixed(fraction * 100, digits: 1) + "%" }
