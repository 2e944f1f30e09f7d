// libFuzzer target: the systemd value syntax (time spans, sizes, booleans, percentages, counts) on any text.
//
// Asserts that every parser either refuses with a printable `SyntaxError` or returns a value within its bounds
// whose canonical form, as `--dump-config` writes it, parses back to the same value.
import BGTaskConfig

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSystemdSyntax(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: start, count: count), as: UTF8.self)

    check(text, parse: SystemdSyntax.parseTimeSpan, format: SystemdSyntax.formatTimeSpan) { duration in
        duration >= .zero && duration <= .microseconds(SystemdSyntax.maximumTimeSpanMicroseconds)
    }
    check(
        text, parse: SystemdSyntax.parseTimeSpanOrInfinity, format: SystemdSyntax.formatTimeSpan,
        isInBounds: { duration in
            duration.map { $0 >= .zero && $0 <= .microseconds(SystemdSyntax.maximumTimeSpanMicroseconds) } ?? true
        })
    check(text, parse: SystemdSyntax.parseSize, format: { SystemdSyntax.formatSize($0) }) { _ in true }
    check(text, parse: SystemdSyntax.parseSizeOrInfinity, format: SystemdSyntax.formatSize) { _ in true }
    check(text, parse: SystemdSyntax.parseBoolean, format: SystemdSyntax.formatBoolean) { _ in true }
    check(text, parse: SystemdSyntax.parsePercentage, format: { String($0) }) { (0...100).contains($0) }
    for range in [0...Int.max, 1...Int.max, 4096...16_777_216] {
        check(
            text, parse: { (text) throws(SyntaxError) in try SystemdSyntax.parseInteger(text, in: range) },
            format: { String($0) }, isInBounds: range.contains)
    }
    return 0
}

/// Parses `text`; a value must be in bounds and survive `format` then `parse` unchanged.
private func check<Value: Equatable>(
    _ text: String,
    parse: (String) throws(SyntaxError) -> Value,
    format: (Value) -> String,
    isInBounds: (Value) -> Bool
) {
    let value: Value
    do throws(SyntaxError) {
        value = try parse(text)
    } catch {
        _ = error.description
        return
    }
    precondition(isInBounds(value), "\(text.debugDescription) parsed to \(value), out of bounds")
    let formatted = format(value)
    do throws(SyntaxError) {
        let again = try parse(formatted)
        precondition(again == value, "\(text.debugDescription): \(value) formats as \(formatted), read as \(again)")
    } catch {
        preconditionFailure("\(text.debugDescription): \(value) formats as \(formatted), refused: \(error)")
    }
}
