// Table-driven tests of the systemd value parsers and formatters, with hostile rows and a check against systemd.

import BGTaskConfig
import Foundation
import Testing

/// What a row expects from a parser: a value, or a failure for a reason.
enum Expected<Value: Equatable & Sendable>: Sendable {
    case value(Value)
    case failure(SyntaxError.Reason)
}

/// Compares reasons, ignoring the text of `tooLarge` (the maximum is the parser's own rendering).
func sameReason(_ lhs: SyntaxError.Reason, _ rhs: SyntaxError.Reason) -> Bool {
    if case .tooLarge = lhs, case .tooLarge = rhs { return true }
    return lhs == rhs
}

/// Checks one row: the parser's value or error against the row's expectation.
func check<Value: Equatable & Sendable>(
    _ input: String, _ expected: Expected<Value>, kind: SyntaxError.ValueKind,
    _ parse: (String) throws(SyntaxError) -> Value, sourceLocation: Testing.SourceLocation = #_sourceLocation
) {
    do throws(SyntaxError) {
        let value = try parse(input)
        switch expected {
        case .value(let wanted):
            #expect(value == wanted, "\(String(reflecting: input))", sourceLocation: sourceLocation)
        case .failure(let reason):
            Issue.record(
                "\(String(reflecting: input)) parsed as \(value), expected \(reason)", sourceLocation: sourceLocation)
        }
    } catch {
        switch expected {
        case .value(let wanted):
            Issue.record(
                "\(String(reflecting: input)) failed (\(error)), expected \(wanted)", sourceLocation: sourceLocation)
        case .failure(let reason):
            #expect(sameReason(error.reason, reason), "\(error)", sourceLocation: sourceLocation)
            #expect(error.kind == kind, sourceLocation: sourceLocation)
            #expect(error.input == input, sourceLocation: sourceLocation)
            #expect(error.description.hasPrefix("invalid \(kind.rawValue) \(String(reflecting: input)): "))
        }
    }
}

struct TimeSpanRow: Sendable, CustomTestStringConvertible {
    var input: String
    var expected: Expected<Duration>
    /// Whether systemd's own parser accepts the input although this one rejects it on purpose.
    var systemdAcceptsAnyway = false

    var testDescription: String { String(reflecting: input) }

    static func ok(_ input: String, _ duration: Duration) -> TimeSpanRow {
        TimeSpanRow(input: input, expected: .value(duration))
    }

    static func bad(_ input: String, _ reason: SyntaxError.Reason, systemdAccepts: Bool = false) -> TimeSpanRow {
        TimeSpanRow(input: input, expected: .failure(reason), systemdAcceptsAnyway: systemdAccepts)
    }
}

/// 2 weeks, 3 days, 4 h, 5 min, 6 s, 7 ms, 8 us, added up by hand.
let allUnitsSeconds: Int64 = (2 * 7 + 3) * 86_400 + 4 * 3_600 + 5 * 60 + 6
let allUnitsDuration: Duration = .seconds(allUnitsSeconds) + .microseconds(7_008)

/// Time spans, expected values worked out from systemd.time(7).
let timeSpanRows: [TimeSpanRow] = [
    .ok("500ms", .milliseconds(500)),
    .ok("5s", .seconds(5)),
    .ok("10min", .seconds(600)),
    .ok("1h 30min", .seconds(90 * 60)),
    .ok("1h30min", .seconds(90 * 60)),
    .ok("2d", .seconds(2 * 86_400)),
    .ok("1.5s", .milliseconds(1_500)),
    .ok("5", .seconds(5)),
    .ok("1.25", .milliseconds(1_250)),
    .ok("0", .zero),
    .ok("0s", .zero),
    .ok("007s", .seconds(7)),
    .ok("5 s", .seconds(5)),
    .ok("  5s \t", .seconds(5)),
    .ok("1us", .microseconds(1)),
    .ok("3usec", .microseconds(3)),
    .ok("4\u{B5}s", .microseconds(4)),
    .ok("5\u{3BC}s", .microseconds(5)),
    .ok("2msec", .milliseconds(2)),
    .ok("3sec", .seconds(3)),
    .ok("1second", .seconds(1)),
    .ok("3seconds", .seconds(3)),
    .ok("2m", .seconds(120)),
    .ok("1minute", .seconds(60)),
    .ok("2minutes", .seconds(120)),
    .ok("1hr", .seconds(3_600)),
    .ok("1hour", .seconds(3_600)),
    .ok("2hours", .seconds(7_200)),
    .ok("1day", .seconds(86_400)),
    .ok("2days", .seconds(172_800)),
    .ok("1w", .seconds(604_800)),
    .ok("1week", .seconds(604_800)),
    .ok("2weeks", .seconds(1_209_600)),
    .ok("1M", .seconds(2_629_800)),  // 30.44 days
    .ok("1y", .seconds(31_557_600)),  // 365.25 days
    .ok("2w 3d 4h 5min 6s 7ms 8us", allUnitsDuration),
    .ok("1h 1h", .seconds(7_200)),
    .ok("0.5us", .zero),  // below the microsecond resolution, truncated as systemd does
    .ok("1.0000015s", .microseconds(1_000_001)),
    .ok("0.1ms", .microseconds(100)),
    .ok("1.5min", .seconds(90)),
    .ok("292y", .seconds(292 * 31_557_600)),
    // Hostile rows.
    .bad("", .empty),
    .bad(" ", .empty),
    .bad("\t\n", .empty),
    .bad("-5s", .negative),
    .bad("-0", .negative),
    .bad("1h -30min", .negative),
    .bad("5 parsecs", .unknownUnit("parsecs")),
    .bad("1.5.5s", .malformedNumber("1.5.5")),
    .bad("3.", .malformedNumber("3.")),
    .bad("3.s", .malformedNumber("3.")),
    .bad(".5s", .malformedNumber(".5"), systemdAccepts: true),
    .bad("1..5s", .malformedNumber("1..5")),
    .bad("99999999999999999999s", .tooLarge(maximum: "")),
    .bad("18446744073709551615us", .tooLarge(maximum: "")),
    .bad("300y", .tooLarge(maximum: ""), systemdAccepts: true),  // systemd's limit is 2^64 us, ours 2^63 ns
    .bad("5sec5", .missingUnit(after: "5"), systemdAccepts: true),
    .bad("1 2", .missingUnit(after: "1"), systemdAccepts: true),
    .bad("1h 30", .missingUnit(after: "30"), systemdAccepts: true),
    .bad("5 s 5", .missingUnit(after: "5"), systemdAccepts: true),
    .bad("infinity", .infinityNotAllowed),
    .bad("Infinity", .missingNumber(found: "Infinity")),
    .bad("infinity5", .missingNumber(found: "infinity5")),
    .bad("inf", .missingNumber(found: "inf")),
    .bad("NaN", .missingNumber(found: "NaN")),
    .bad("ms", .missingNumber(found: "ms")),
    .bad("+5s", .missingNumber(found: "+5s"), systemdAccepts: true),
    .bad("1e3s", .unknownUnit("e")),
    .bad("0x10s", .unknownUnit("x")),
    .bad("5secs", .unknownUnit("secs")),
    .bad("5S", .unknownUnit("S")),
    .bad("5MIN", .unknownUnit("MIN")),
    .bad("5s,6s", .unknownUnit("s,")),
    .bad("\u{FF15}s", .missingNumber(found: "\u{FF15}s")),  // FULLWIDTH DIGIT FIVE
    .bad("\u{663}s", .missingNumber(found: "\u{663}s")),  // ARABIC-INDIC DIGIT THREE
    .bad("5\u{FF53}", .unknownUnit("\u{FF53}")),  // FULLWIDTH LATIN SMALL LETTER S
    .bad("5s\u{A0}", .unknownUnit("s\u{A0}")),  // a no-break space is not systemd whitespace
    .bad("5s\u{0}", .unknownUnit("s\u{0}")),
]

@Test(arguments: timeSpanRows)
func parsesTimeSpans(_ row: TimeSpanRow) {
    check(row.input, row.expected, kind: .timeSpan, SystemdSyntax.parseTimeSpan)
}

@Test func infinityIsATimeSpanOnlyWhereAllowed() throws {
    #expect(try SystemdSyntax.parseTimeSpanOrInfinity("infinity") == nil)
    #expect(try SystemdSyntax.parseTimeSpanOrInfinity(" infinity ") == nil)
    #expect(try SystemdSyntax.parseTimeSpanOrInfinity("10min") == .seconds(600))
    #expect(throws: SyntaxError.self) { try SystemdSyntax.parseTimeSpanOrInfinity("infinity s") }
}

@Test func timeSpanErrorsSayWhatWasExpected() {
    do {
        _ = try SystemdSyntax.parseTimeSpan("5 parsecs")
        Issue.record("5 parsecs parsed")
    } catch {
        #expect(error.description.hasPrefix(#"invalid time span "5 parsecs": unknown unit "parsecs""#))
        #expect(error.description.contains("min"))
    }
}

/// systemd's answer for `input`: its microseconds (UInt64.max for infinity), or nil when it rejects it.
func systemdTimeSpan(_ input: String) throws -> UInt64? {
    let process = Process()
    let output = Pipe()
    // timeout bounds the child's life even if systemd-analyze hung; it normally exits within milliseconds.
    process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
    process.arguments = ["10", "systemd-analyze", "timespan", "--", input]
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { return nil }
    let text = String(decoding: data, as: UTF8.self)
    for line in text.split(separator: "\n") {
        let parts = line.split(separator: ":", maxSplits: 1)
        if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == "\u{3BC}s" {
            return UInt64(parts[1].trimmingCharacters(in: .whitespaces))
        }
    }
    Issue.record("no microseconds line in systemd-analyze output: \(text)")
    return nil
}

/// Every time span this parser accepts, systemd reads as the same number of microseconds; every one it
/// rejects, systemd rejects too, unless the row says the strictness is deliberate.
@Test(
    .enabled(
        if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"), "systemd-analyze is not installed"
    ),
    arguments: timeSpanRows.filter { !$0.input.unicodeScalars.contains("\u{0}") })
func timeSpansAgreeWithSystemd(_ row: TimeSpanRow) throws {
    let systemd = try systemdTimeSpan(row.input)
    do {
        let ours = try SystemdSyntax.parseTimeSpanOrInfinity(row.input)
        let microseconds = ours.map { UInt64($0.nanosecondCount / 1_000) } ?? UInt64.max
        #expect(systemd == microseconds, "systemd reads \(String(reflecting: row.input)) differently")
    } catch {
        if row.systemdAcceptsAnyway {
            #expect(systemd != nil, "row says systemd accepts \(String(reflecting: row.input)); it does not")
        } else {
            #expect(systemd == nil, "systemd accepts \(String(reflecting: row.input)) but we say: \(error)")
        }
    }
}

let canonicalTimeSpans: [(Duration, String)] = [
    (.seconds(600), "10min"),
    (.seconds(5_400), "1h 30min"),
    (.milliseconds(500), "500ms"),
    (.milliseconds(1_500), "1s 500ms"),
    (.zero, "0"),
    (.microseconds(1), "1us"),
    (.microseconds(90_061_001_000), "1d 1h 1min 1s 1ms"),
    (.seconds(2 * 604_800), "2w"),
    (.nanoseconds(999), "0"),
    (.seconds(-5), "-5s"),
]

@Test(arguments: canonicalTimeSpans)
func formatsTimeSpansCanonically(_ duration: Duration, _ text: String) {
    #expect(SystemdSyntax.formatTimeSpan(duration) == text)
}

@Test func formatsInfinity() {
    #expect(SystemdSyntax.formatTimeSpan(nil) == "infinity")
    #expect(SystemdSyntax.formatSize(nil) == "infinity")
}

/// A small deterministic generator, so property tests cover many values and still fail reproducibly.
struct SplitMix64 {
    var state: UInt64

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value with a random number of significant bits, so small and large values are both common.
    mutating func scaled(below limit: UInt64) -> UInt64 {
        let bits = next() % 64
        return (next() >> (63 - bits)) % limit
    }
}

@Test func timeSpanFormatterRoundTrips() throws {
    var random = SplitMix64(state: 0x7153)
    for _ in 0..<5_000 {
        let microseconds = random.scaled(below: SystemdSyntax.maximumTimeSpanMicroseconds + 1)
        let duration = Duration.microseconds(microseconds)
        let text = SystemdSyntax.formatTimeSpan(duration)
        #expect(try SystemdSyntax.parseTimeSpan(text) == duration, "\(microseconds) us formatted as \(text)")
    }
    for row in timeSpanRows {
        guard case .value(let duration) = row.expected else { continue }
        let text = SystemdSyntax.formatTimeSpan(duration)
        #expect(try SystemdSyntax.parseTimeSpan(text) == duration)
        #expect(SystemdSyntax.formatTimeSpan(try SystemdSyntax.parseTimeSpan(text)) == text)
    }
}

// MARK: Sizes

struct SizeRow: Sendable, CustomTestStringConvertible {
    var input: String
    var expected: Expected<UInt64>
    var testDescription: String { String(reflecting: input) }

    static func ok(_ input: String, _ bytes: UInt64) -> SizeRow { SizeRow(input: input, expected: .value(bytes)) }
    static func bad(_ input: String, _ reason: SyntaxError.Reason) -> SizeRow {
        SizeRow(input: input, expected: .failure(reason))
    }
}

let kibibyte: UInt64 = 1_024

let sizeRows: [SizeRow] = [
    .ok("4096", 4_096),
    .ok("0", 0),
    .ok("1B", 1),
    .ok("64K", 64 * kibibyte),
    .ok("1.5M", 3 * kibibyte * kibibyte / 2),
    .ok("2G", 2 * kibibyte * kibibyte * kibibyte),
    .ok("1T", kibibyte * kibibyte * kibibyte * kibibyte),
    .ok("1P", 1 << 50),
    .ok("1E", 1 << 60),
    .ok("15E", 15 << 60),
    .ok("0.5K", 512),
    .ok("1.1K", 1_126),  // 1126.4, rounded down
    .ok("1G 512M", 3 << 29),
    .ok("1K 1", 1_025),
    .ok("1K 1B", 1_025),
    .ok(" 64 K ", 64 * kibibyte),
    .ok("18446744073709551615", UInt64.max),
    .bad("", .empty),
    .bad("  ", .empty),
    .bad("-1K", .negative),
    .bad("64k", .unknownUnit("k")),
    .bad("64KB", .unknownUnit("KB")),
    .bad("64KiB", .unknownUnit("KiB")),
    .bad("1.5", .fractionNotAllowed),
    .bad("1.5B", .fractionNotAllowed),
    .bad("1M 2G", .unitOrder(component: "2G")),
    .bad("1K 1K", .unitOrder(component: "1K")),
    .bad("5 5", .unitOrder(component: "5")),
    .bad("16E", .tooLarge(maximum: "")),
    .bad("18446744073709551616", .tooLarge(maximum: "")),
    .bad("15E 1024P", .tooLarge(maximum: "")),
    .bad("infinity", .infinityNotAllowed),
    .bad("inf", .missingNumber(found: "inf")),
    .bad("NaN", .missingNumber(found: "NaN")),
    .bad("K", .missingNumber(found: "K")),
    .bad("1e3", .unknownUnit("e")),
    .bad("1..5K", .malformedNumber("1..5")),
    .bad("\u{FF11}K", .missingNumber(found: "\u{FF11}K")),
    .bad("+1K", .missingNumber(found: "+1K")),
]

@Test(arguments: sizeRows)
func parsesSizes(_ row: SizeRow) {
    check(row.input, row.expected, kind: .size, SystemdSyntax.parseSize)
}

@Test func infinityIsASizeOnlyWhereAllowed() throws {
    #expect(try SystemdSyntax.parseSizeOrInfinity("infinity") == nil)
    #expect(try SystemdSyntax.parseSizeOrInfinity("2G") == 2 << 30)
}

@Test(arguments: [
    (UInt64(65_536), "64K"), (1_572_864, "1536K"), (4_097, "4097"), (0, "0"), (1 << 60, "1E"),
    (UInt64.max, "18446744073709551615"), (3 << 30, "3G"),
])
func formatsSizesWithTheLargestExactSuffix(_ bytes: UInt64, _ text: String) {
    #expect(SystemdSyntax.formatSize(bytes) == text)
}

@Test func sizeFormatterRoundTrips() throws {
    var random = SplitMix64(state: 0x5123)
    for _ in 0..<5_000 {
        let bytes = random.scaled(below: UInt64.max)
        #expect(try SystemdSyntax.parseSize(SystemdSyntax.formatSize(bytes)) == bytes)
        let aligned = bytes << (random.next() % 40)
        #expect(try SystemdSyntax.parseSize(SystemdSyntax.formatSize(aligned)) == aligned)
    }
}

// MARK: Booleans, percentages, counts

@Test(
    arguments: [
        ("yes", Expected.value(true)), ("YES", .value(true)), ("Yes", .value(true)), ("y", .value(true)),
        ("true", .value(true)), ("TRUE", .value(true)), ("t", .value(true)), ("on", .value(true)), ("On", .value(true)),
        ("1", .value(true)), (" yes ", .value(true)),
        ("no", .value(false)), ("NO", .value(false)), ("n", .value(false)), ("false", .value(false)),
        ("False", .value(false)), ("f", .value(false)), ("off", .value(false)), ("OFF", .value(false)),
        ("0", .value(false)),
        ("", .failure(.empty)), (" ", .failure(.empty)), ("2", .failure(.notABoolean)), ("-1", .failure(.notABoolean)),
        ("yess", .failure(.notABoolean)), ("oui", .failure(.notABoolean)), ("y e s", .failure(.notABoolean)),
        ("\u{FF59}es", .failure(.notABoolean)), ("01", .failure(.notABoolean)), ("enabled", .failure(.notABoolean)),
    ] as [(String, Expected<Bool>)])
func parsesBooleans(_ input: String, _ expected: Expected<Bool>) {
    check(input, expected, kind: .boolean, SystemdSyntax.parseBoolean)
}

@Test func formatsBooleansAsSystemdDoes() throws {
    #expect(SystemdSyntax.formatBoolean(true) == "yes")
    #expect(SystemdSyntax.formatBoolean(false) == "no")
    for value in [true, false] {
        #expect(try SystemdSyntax.parseBoolean(SystemdSyntax.formatBoolean(value)) == value)
    }
}

@Test(
    arguments: [
        ("10", Expected.value(10)), ("10%", .value(10)), ("0", .value(0)), ("0%", .value(0)), ("100", .value(100)),
        ("100%", .value(100)), (" 5% ", .value(5)), ("007", .value(7)),
        ("", .failure(.empty)), ("%", .failure(.missingNumber(found: "%"))), ("101", .failure(.outOfRange(0...100))),
        ("-5", .failure(.negative)), ("10.5%", .failure(.fractionNotAllowed)), ("10 %", .failure(.unexpected(" %"))),
        ("10%%", .failure(.unexpected("%%"))), ("1e1", .failure(.unexpected("e1"))),
        ("99999999999999999999999", .failure(.outOfRange(0...100))),
        ("\u{FF15}", .failure(.missingNumber(found: "\u{FF15}"))),
        ("ten", .failure(.missingNumber(found: "ten"))), ("+5", .failure(.missingNumber(found: "+5"))),
    ] as [(String, Expected<Int>)])
func parsesPercentages(_ input: String, _ expected: Expected<Int>) {
    check(input, expected, kind: .percentage, SystemdSyntax.parsePercentage)
}

@Test(
    arguments: [
        ("64", 1...Int.max, Expected.value(64)), ("0", 0...Int.max, .value(0)),
        ("9223372036854775807", 0...Int.max, .value(Int.max)),
        ("0", 1...Int.max, .failure(.outOfRange(1...Int.max))),
        ("9223372036854775808", 0...Int.max, .failure(.outOfRange(0...Int.max))),
        ("1K", 0...Int.max, .failure(.unexpected("K"))), ("-1", 0...Int.max, .failure(.negative)),
        ("+1", 0...Int.max, .failure(.missingNumber(found: "+1"))), ("1.0", 0...Int.max, .failure(.fractionNotAllowed)),
        ("", 0...Int.max, .failure(.empty)), ("5%", 0...Int.max, .failure(.unexpected("%"))),
    ] as [(String, ClosedRange<Int>, Expected<Int>)])
func parsesCounts(_ input: String, _ range: ClosedRange<Int>, _ expected: Expected<Int>) {
    check(input, expected, kind: .integer) { (text: String) throws(SyntaxError) in
        try SystemdSyntax.parseInteger(text, in: range)
    }
}
