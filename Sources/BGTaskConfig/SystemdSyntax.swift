// Pure parsers and formatters for systemd's value syntax (time spans, sizes, booleans, percentages, counts).

/// Parsers and formatters for the value syntax of systemd configuration files.
///
/// Everything here is a pure function of a `String`, with no Foundation, so the CLI can reuse it.
/// The grammar is systemd's (`systemd.time(7)`, `parse_size()`), made stricter where systemd accepts
/// input that is almost certainly a mistake: every value this parser accepts, systemd reads the same way,
/// but `5sec5`, `1 2`, `+5s`, `.5s` and `64k` are rejected here with a message saying why.
/// Only ASCII digits count as digits, and surrounding ASCII whitespace is ignored.
public enum SystemdSyntax {
    // MARK: Time spans

    /// The units of a time span with their length in microseconds, as in systemd's `parse_time()`.
    /// A month is 30.44 days and a year 365.25 days, as in systemd. Units are case-sensitive (`M` is a month).
    static let timeUnits: [(names: [String], microseconds: UInt64)] = [
        (["us", "usec", "\u{B5}s", "\u{3BC}s"], 1),
        (["ms", "msec"], 1_000),
        (["s", "sec", "second", "seconds"], 1_000_000),
        (["m", "min", "minute", "minutes"], 60_000_000),
        (["h", "hr", "hour", "hours"], 3_600_000_000),
        (["d", "day", "days"], 86_400_000_000),
        (["w", "week", "weeks"], 604_800_000_000),
        (["M", "month", "months"], 2_629_800_000_000),
        (["y", "year", "years"], 31_557_600_000_000),
    ]

    /// The units the formatter uses, largest first: the canonical spelling of systemd's `format_timespan()`,
    /// without months and years, whose fractional days would make `1M` print as `4w 2d 10h 30min`.
    static let formatTimeUnits: [(name: String, microseconds: UInt64)] = [
        ("w", 604_800_000_000), ("d", 86_400_000_000), ("h", 3_600_000_000), ("min", 60_000_000),
        ("s", 1_000_000), ("ms", 1_000), ("us", 1),
    ]

    /// The longest time span accepted: the most microseconds whose nanosecond count fits in `Int64`
    /// (about 292 years), so `Duration.nanosecondCount` never saturates on a parsed value.
    public static let maximumTimeSpanMicroseconds = UInt64(Int64.max / 1_000)

    /// Parses a finite time span: `500ms`, `5s`, `10min`, `1h 30min`, `1h30min`, `1.5s`, `2d`,
    /// or a bare number of seconds (`5`, `0`). `infinity` is rejected.
    ///
    /// The resolution is one microsecond, as in systemd: further fraction digits are ignored.
    public static func parseTimeSpan(_ text: String) throws(SyntaxError) -> Duration {
        try finite(text, kind: .timeSpan, parseTimeSpan)
    }

    /// Parses a time span as `parseTimeSpan(_:)` does, also accepting `infinity`, which returns nil.
    public static func parseTimeSpanOrInfinity(_ text: String) throws(SyntaxError) -> Duration? {
        try parseTimeSpan(text, allowingInfinity: true)
    }

    private static func parseTimeSpan(_ text: String, allowingInfinity: Bool) throws(SyntaxError) -> Duration? {
        func fail(_ reason: SyntaxError.Reason) -> SyntaxError {
            SyntaxError(kind: .timeSpan, input: text, reason: reason)
        }
        guard var scanner = try scanner(for: text, kind: .timeSpan, allowingInfinity: allowingInfinity) else {
            return nil
        }
        // The exact maximum prints as "15250w 1d 23h 47min 16s 854ms 775us": its size says more.
        let tooLarge = SyntaxError.Reason.tooLarge(maximum: "about 292 years")
        var totalMicroseconds: UInt64 = 0
        var componentCount = 0
        while !scanner.isAtEnd {
            let number = try scanner.scanNumber(failing: fail)
            scanner.skipWhitespace()
            let unit = scanner.scanUnit()
            let multiplier: UInt64
            if unit.isEmpty {
                // A bare number means seconds, but only alone: in "5sec5" or "1 2" the bare number is a typo
                // more often than the sum systemd would compute.
                scanner.skipWhitespace()
                guard componentCount == 0, scanner.isAtEnd else { throw fail(.missingUnit(after: number.text)) }
                multiplier = 1_000_000
            } else {
                guard let entry = timeUnits.first(where: { $0.names.contains(unit) }) else {
                    throw fail(.unknownUnit(unit))
                }
                multiplier = entry.microseconds
            }
            guard let whole = number.whole else { throw fail(tooLarge) }
            let (product, overflow) = whole.multipliedReportingOverflow(by: multiplier)
            if overflow { throw fail(tooLarge) }
            // Each fraction digit adds its share of the unit, truncated, exactly as systemd computes it.
            var fraction: UInt64 = 0
            var share = multiplier / 10
            for digit in number.fractionDigits where share > 0 {
                fraction += UInt64(digit) * share
                share /= 10
            }
            let (sum, overflow2) = totalMicroseconds.addingReportingOverflow(product)
            guard !overflow2, sum <= maximumTimeSpanMicroseconds,
                maximumTimeSpanMicroseconds - sum >= fraction
            else { throw fail(tooLarge) }
            totalMicroseconds = sum + fraction
            componentCount += 1
            scanner.skipWhitespace()
        }
        return .microseconds(totalMicroseconds)
    }

    /// Formats a time span in systemd's canonical style: `10min`, `1h 30min`, `500ms`, `1s 500ms`, `0`;
    /// nil formats as `infinity`.
    ///
    /// Parts below one microsecond are dropped (the syntax's resolution), and a negative duration gets a
    /// leading `-` that the parser rejects, since no setting can be negative.
    public static func formatTimeSpan(_ duration: Duration?) -> String {
        guard let duration else { return "infinity" }
        let nanoseconds = duration.nanosecondCount
        var remaining = nanoseconds.magnitude / 1_000
        if remaining == 0 { return "0" }
        var parts: [String] = []
        for unit in formatTimeUnits where remaining >= unit.microseconds {
            parts.append("\(remaining / unit.microseconds)\(unit.name)")
            remaining %= unit.microseconds
        }
        return (nanoseconds < 0 ? "-" : "") + parts.joined(separator: " ")
    }

    // MARK: What time spans and sizes share

    /// A scanner at the first component of `text`, a value of `kind`; nil for `infinity` when it is allowed.
    /// Throws for an empty text, and for `infinity` when it is not allowed.
    private static func scanner(
        for text: String, kind: SyntaxError.ValueKind, allowingInfinity: Bool
    ) throws(SyntaxError) -> ValueScanner? {
        let scanner = ValueScanner(text)
        if scanner.isAtEnd { throw SyntaxError(kind: kind, input: text, reason: .empty) }
        guard scanner.remainder == "infinity" else { return scanner }
        if allowingInfinity { return nil }
        throw SyntaxError(kind: kind, input: text, reason: .infinityNotAllowed)
    }

    /// The finite value `parse` finds in `text` with `infinity` refused.
    private static func finite<Value>(
        _ text: String, kind: SyntaxError.ValueKind,
        _ parse: (String, Bool) throws(SyntaxError) -> Value?
    ) throws(SyntaxError) -> Value {
        guard let value = try parse(text, false) else {
            // Unreachable: with infinity refused, "infinity" throws instead of returning nil.
            throw SyntaxError(kind: kind, input: text, reason: .infinityNotAllowed)
        }
        return value
    }

    // MARK: Sizes

    /// The size suffixes, largest first, base 1024 as in systemd's `parse_size(t, 1024, ...)`.
    /// An empty suffix means bytes, like `B`.
    static let sizeUnits: [(name: String, factor: UInt64)] = [
        ("E", 1 << 60), ("P", 1 << 50), ("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1),
    ]

    /// Parses a byte size: `4096`, `64K`, `1.5M`, `2G`, `1T`, or several components with decreasing units
    /// (`1G 512M`). Suffixes are base 1024 and upper case, as in systemd. `infinity` is rejected.
    public static func parseSize(_ text: String) throws(SyntaxError) -> UInt64 {
        try finite(text, kind: .size, parseSize)
    }

    /// Parses a byte size as `parseSize(_:)` does, also accepting `infinity`, which returns nil.
    public static func parseSizeOrInfinity(_ text: String) throws(SyntaxError) -> UInt64? {
        try parseSize(text, allowingInfinity: true)
    }

    private static func parseSize(_ text: String, allowingInfinity: Bool) throws(SyntaxError) -> UInt64? {
        func fail(_ reason: SyntaxError.Reason) -> SyntaxError {
            SyntaxError(kind: .size, input: text, reason: reason)
        }
        guard var scanner = try scanner(for: text, kind: .size, allowingInfinity: allowingInfinity) else {
            return nil
        }
        let tooLarge = SyntaxError.Reason.tooLarge(maximum: String(UInt64.max))
        var total: UInt64 = 0
        var previousUnitIndex = -1
        while !scanner.isAtEnd {
            let number = try scanner.scanNumber(failing: fail)
            scanner.skipWhitespace()
            let unit = scanner.scanUnit()
            let unitIndex: Int
            if unit.isEmpty {
                unitIndex = sizeUnits.count - 1
            } else {
                guard let index = sizeUnits.firstIndex(where: { $0.name == unit }) else {
                    throw fail(.unknownUnit(unit))
                }
                unitIndex = index
            }
            guard unitIndex > previousUnitIndex else { throw fail(.unitOrder(component: number.text + unit)) }
            previousUnitIndex = unitIndex
            let factor = sizeUnits[unitIndex].factor
            if factor == 1 && !number.fractionDigits.isEmpty { throw fail(.fractionNotAllowed) }
            guard let whole = number.whole else { throw fail(tooLarge) }
            let (product, overflow) = whole.multipliedReportingOverflow(by: factor)
            if overflow { throw fail(tooLarge) }
            let (sum, overflow2) = total.addingReportingOverflow(product)
            if overflow2 { throw fail(tooLarge) }
            let fraction = fractionOf(factor, digits: number.fractionDigits)
            let (sum2, overflow3) = sum.addingReportingOverflow(fraction)
            if overflow3 { throw fail(tooLarge) }
            total = sum2
            scanner.skipWhitespace()
        }
        return total
    }

    /// `0.digits × factor`, rounded down. Digits past the 19th are ignored: they change the result by less
    /// than one byte for any factor up to 2⁶⁰, and 10¹⁹ is the largest power of ten in `UInt64`.
    private static func fractionOf(_ factor: UInt64, digits: [UInt8]) -> UInt64 {
        var numerator: UInt64 = 0
        var denominator: UInt64 = 1
        for digit in digits.prefix(19) {
            numerator = numerator * 10 + UInt64(digit)
            denominator *= 10
        }
        // numerator < denominator, so the quotient is below factor and cannot overflow.
        return denominator.dividingFullWidth(numerator.multipliedFullWidth(by: factor)).quotient
    }

    /// Formats a size with the largest suffix that divides it exactly (`64K`, `1536K`, `4097`);
    /// nil formats as `infinity`. The parser reads every result back to the same number.
    public static func formatSize(_ bytes: UInt64?) -> String {
        guard let bytes else { return "infinity" }
        if bytes == 0 { return "0" }
        for unit in sizeUnits where unit.factor > 1 && bytes % unit.factor == 0 {
            return "\(bytes / unit.factor)\(unit.name)"
        }
        return String(bytes)
    }

    // MARK: Booleans, percentages, counts

    /// Parses a boolean as systemd's `parse_boolean()` does, case-insensitively:
    /// `yes`, `y`, `true`, `t`, `on`, `1` are true; `no`, `n`, `false`, `f`, `off`, `0` are false.
    public static func parseBoolean(_ text: String) throws(SyntaxError) -> Bool {
        let scanner = ValueScanner(text)
        if scanner.isAtEnd { throw SyntaxError(kind: .boolean, input: text, reason: .empty) }
        // Lowercasing ASCII only: a Unicode case mapping could turn a lookalike into a match.
        let word = String(String.UnicodeScalarView(scanner.remainderScalars.map(asciiLowercased)))
        switch word {
        case "1", "yes", "y", "true", "t", "on": return true
        case "0", "no", "n", "false", "f", "off": return false
        default: throw SyntaxError(kind: .boolean, input: text, reason: .notABoolean)
        }
    }

    /// Formats a boolean the way systemd writes it: `yes` or `no`.
    public static func formatBoolean(_ value: Bool) -> String {
        value ? "yes" : "no"
    }

    /// Parses a whole percentage from 0 to 100, with or without a trailing `%` (`10`, `10%`).
    public static func parsePercentage(_ text: String) throws(SyntaxError) -> Int {
        try parseWholeNumber(text, kind: .percentage, in: 0...100, allowingPercentSign: true)
    }

    /// Parses a non-negative decimal count that must lie in `range` (`64`, `1000`).
    public static func parseInteger(_ text: String, in range: ClosedRange<Int>) throws(SyntaxError) -> Int {
        try parseWholeNumber(text, kind: .integer, in: range, allowingPercentSign: false)
    }

    private static func parseWholeNumber(
        _ text: String, kind: SyntaxError.ValueKind, in range: ClosedRange<Int>, allowingPercentSign: Bool
    ) throws(SyntaxError) -> Int {
        func fail(_ reason: SyntaxError.Reason) -> SyntaxError {
            SyntaxError(kind: kind, input: text, reason: reason)
        }
        var scanner = ValueScanner(text)
        if scanner.isAtEnd { throw fail(.empty) }
        let number = try scanner.scanNumber(failing: fail)
        if !number.fractionDigits.isEmpty { throw fail(.fractionNotAllowed) }
        let rest = scanner.remainder
        if !(rest.isEmpty || (allowingPercentSign && rest == "%")) { throw fail(.unexpected(rest)) }
        guard let whole = number.whole, whole <= UInt64(Int.max), range.contains(Int(whole)) else {
            // A number too large for Int is out of any range this function can be asked for.
            throw fail(.outOfRange(range))
        }
        return Int(whole)
    }

    private static func asciiLowercased(_ scalar: Unicode.Scalar) -> Unicode.Scalar {
        guard ("A"..."Z").contains(scalar) else { return scalar }
        // Adding 32 to an ASCII capital always gives a valid scalar (its lower-case letter).
        return Unicode.Scalar(UInt8(scalar.value + 32))
    }
}

/// A cursor over the Unicode scalars of one value, with the surrounding whitespace already trimmed.
struct ValueScanner {
    /// A number as written: the whole part (nil if it overflows `UInt64`), the fraction digits, and its text.
    struct Number {
        var whole: UInt64?
        var fractionDigits: [UInt8]
        var text: String
    }

    private let scalars: [Unicode.Scalar]
    private var index: Int

    /// Scans `text` without the ASCII whitespace at either end, as systemd skips it.
    init(_ text: String) {
        var scalars = Array(text.unicodeScalars)
        while let last = scalars.last, ValueScanner.isWhitespace(last) { scalars.removeLast() }
        self.scalars = scalars
        self.index = scalars.firstIndex(where: { !ValueScanner.isWhitespace($0) }) ?? scalars.endIndex
    }

    /// systemd's `WHITESPACE`: space, tab, newline, carriage return. Other Unicode spaces are not skipped.
    static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar == " " || scalar == "\t" || scalar == "\n" || scalar == "\r"
    }

    /// Only ASCII digits: `Character.isNumber` would accept "５" or "٣", which systemd's `strtoll()` does not.
    static func isDigit(_ scalar: Unicode.Scalar) -> Bool {
        ("0"..."9").contains(scalar)
    }

    var isAtEnd: Bool { index == scalars.endIndex }

    var remainderScalars: ArraySlice<Unicode.Scalar> { scalars[index...] }

    var remainder: String { String(String.UnicodeScalarView(scalars[index...])) }

    mutating func skipWhitespace() {
        while index < scalars.endIndex, ValueScanner.isWhitespace(scalars[index]) { index += 1 }
    }

    /// Scans `digits` or `digits.digits`; anything else at this point is an error made by `fail`.
    mutating func scanNumber(failing fail: (SyntaxError.Reason) -> SyntaxError) throws(SyntaxError) -> Number {
        let start = index
        guard index < scalars.endIndex else { throw fail(.missingNumber(found: "")) }
        if scalars[index] == "-" { throw fail(.negative) }
        // The run of digits and dots, to quote in full when it is malformed ("1.5.5", "3.", ".5").
        var runEnd = index
        while runEnd < scalars.endIndex, ValueScanner.isDigit(scalars[runEnd]) || scalars[runEnd] == "." { runEnd += 1 }
        let run = String(String.UnicodeScalarView(scalars[start..<runEnd]))
        guard ValueScanner.isDigit(scalars[index]) else {
            if scalars[index] == "." { throw fail(.malformedNumber(run)) }
            throw fail(.missingNumber(found: remainder))
        }
        var whole: UInt64? = 0
        while index < runEnd, ValueScanner.isDigit(scalars[index]) {
            let digit = UInt64(scalars[index].value - 48)
            if let value = whole {
                let (product, overflow) = value.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = product.addingReportingOverflow(digit)
                whole = overflow || overflow2 ? nil : sum
            }
            index += 1
        }
        var fractionDigits: [UInt8] = []
        if index < runEnd {
            // scalars[index] is a dot: a fraction needs digits after it and no second dot.
            index += 1
            while index < runEnd, ValueScanner.isDigit(scalars[index]) {
                fractionDigits.append(UInt8(scalars[index].value - 48))
                index += 1
            }
            if fractionDigits.isEmpty || index < runEnd { throw fail(.malformedNumber(run)) }
        }
        return Number(whole: whole, fractionDigits: fractionDigits, text: run)
    }

    /// Scans a unit: everything up to whitespace, a digit or a dot (empty if none).
    mutating func scanUnit() -> String {
        let start = index
        while index < scalars.endIndex {
            let scalar = scalars[index]
            if ValueScanner.isWhitespace(scalar) || ValueScanner.isDigit(scalar) || scalar == "." { break }
            index += 1
        }
        return String(String.UnicodeScalarView(scalars[start..<index]))
    }
}
