// systemd-style INI parsing of one file's text into sections and assignments that remember their line.

/// The syntax of one systemd-style configuration file, without any knowledge of which keys exist.
///
/// Follows systemd's `config_parse()`: `[Section]` headers; `Key=Value` with the whitespace around the key
/// and the value trimmed; lines starting with `#` or `;` are comments (also in the middle of a continued
/// line); blank lines are skipped; a line ending in an unescaped backslash continues on the next line, the
/// backslash becoming a space. A `#` later in a line is part of the value, as in systemd. A UTF-8 byte order
/// mark at the start is ignored.
///
/// Assignments are kept in file order; applying them in order makes later ones override earlier ones, and
/// an empty value (`Key=`) is how a file resets a key to its default. Malformed lines are skipped with an
/// error in `diagnostics`; where systemd gives up on the rest of a file after a bad section header, this
/// parser skips only the lines up to the next valid header.
public struct INIFile: Hashable, Sendable {
    /// A section header.
    public struct Section: Hashable, Sendable {
        /// The name between the brackets, exactly as written.
        public var name: String
        /// Where the header is.
        public var location: FileLocation
    }

    /// One `Key=Value` assignment.
    public struct Entry: Hashable, Sendable {
        /// The section it appears in.
        public var section: String
        /// The key, trimmed.
        public var key: String
        /// The value, trimmed; empty for a reset (`Key=`).
        public var value: String
        /// Where it starts.
        public var location: FileLocation
    }

    /// The file name given to the parser, used in every location.
    public var fileName: String
    /// The section headers in file order; a name may appear more than once.
    public var sections: [Section]
    /// The assignments in file order, only those inside a valid section header.
    public var entries: [Entry]
    /// Syntax errors: lines that were skipped.
    public var diagnostics: [ConfigurationDiagnostic]

    /// Parses `text`, naming `fileName` in locations and diagnostics. `firstLineNumber` is the number of the
    /// text's first line, for text cut out of a larger file.
    public init(parsing text: String, fileName: String, firstLineNumber: Int = 1) {
        self.fileName = fileName
        sections = []
        entries = []
        diagnostics = []
        var currentSection = SectionState.beforeFirstHeader
        var pending: (text: String, line: Int)?
        var lineNumber = firstLineNumber - 1
        for rawLine in INIFile.lines(of: text) {
            lineNumber += 1
            let trimmed = INIFile.trimmed(rawLine)
            // Comments are skipped even inside a continuation, as systemd does.
            if let first = trimmed.unicodeScalars.first, first == "#" || first == ";" { continue }
            let joined = (pending?.text ?? "") + rawLine
            let startLine = pending?.line ?? lineNumber
            if INIFile.endsWithContinuation(joined) {
                pending = (String(joined.unicodeScalars.dropLast()) + " ", startLine)
                continue
            }
            pending = nil
            parseLogicalLine(joined, line: startLine, currentSection: &currentSection)
        }
        if let pending {
            // The file ended inside a continuation: what was gathered is still one line.
            parseLogicalLine(pending.text, line: pending.line, currentSection: &currentSection)
        }
    }

    /// Which section the next assignment belongs to.
    private enum SectionState {
        /// No header seen yet: an assignment here is an error.
        case beforeFirstHeader
        /// Inside a valid header's section.
        case inside(String)
        /// After a malformed header, whose error covers the lines skipped up to the next header.
        case skipping
    }

    /// Applies one logical (continued and joined) line.
    private mutating func parseLogicalLine(_ rawText: String, line: Int, currentSection: inout SectionState) {
        let location = FileLocation(file: fileName, line: line)
        let text = INIFile.trimmed(rawText)
        if text.isEmpty { return }
        if text.unicodeScalars.first == "[" {
            guard text.unicodeScalars.count >= 2, text.unicodeScalars.last == "]" else {
                currentSection = .skipping
                error(
                    at: location,
                    "invalid section header \(String(reflecting: text)): missing \"]\" at the end; "
                        + "ignoring the lines up to the next section header")
                return
            }
            let name = String(text.unicodeScalars.dropFirst().dropLast())
            guard !name.isEmpty else {
                currentSection = .skipping
                error(at: location, "empty section name \"[]\"; ignoring the lines up to the next section header")
                return
            }
            currentSection = .inside(name)
            sections.append(Section(name: name, location: location))
            return
        }
        guard let equals = text.unicodeScalars.firstIndex(of: "=") else {
            error(at: location, "missing \"=\" in \(String(reflecting: text)); ignoring the line")
            return
        }
        let key = INIFile.trimmed(String(text.unicodeScalars[..<equals]))
        let value = INIFile.trimmed(String(text.unicodeScalars[text.unicodeScalars.index(after: equals)...]))
        guard !key.isEmpty else {
            error(at: location, "missing key before \"=\" in \(String(reflecting: text)); ignoring the line")
            return
        }
        switch currentSection {
        case .beforeFirstHeader:
            error(at: location, "assignment \(String(reflecting: key)) outside of any section; ignoring it")
        case .inside(let section):
            entries.append(Entry(section: section, key: key, value: value, location: location))
        case .skipping:
            break
        }
    }

    private mutating func error(at location: FileLocation, _ message: String) {
        diagnostics.append(ConfigurationDiagnostic(at: location, severity: .error, message: message))
    }

    /// The lines of `text`, split at `\n` with a trailing `\r` removed. Splitting the UTF-8 bytes matters:
    /// Swift treats `\r\n` as one `Character`, so splitting the characters at `\n` would miss those lines.
    static func lines(of text: String) -> [String] {
        var body = Substring(text)
        if body.unicodeScalars.first == "\u{FEFF}" { body = Substring(body.unicodeScalars.dropFirst()) }
        return body.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { bytes in
            // Splitting valid UTF-8 at an ASCII byte leaves valid UTF-8, so the decoding is lossless.
            var line = String(decoding: bytes, as: UTF8.self)
            if line.utf8.last == UInt8(ascii: "\r") { line = String(line.unicodeScalars.dropLast()) }
            return line
        }
    }

    /// Whether `line` ends in a backslash that is not itself escaped: an odd run of trailing backslashes.
    static func endsWithContinuation(_ line: String) -> Bool {
        var count = 0
        for byte in line.utf8.reversed() {
            guard byte == UInt8(ascii: "\\") else { break }
            count += 1
        }
        return count % 2 == 1
    }

    /// `text` without systemd's `WHITESPACE` (space, tab, newline, carriage return) at either end.
    static func trimmed(_ text: String) -> String {
        let scalars = text.unicodeScalars
        guard let start = scalars.firstIndex(where: { !ValueScanner.isWhitespace($0) }),
            let last = scalars.lastIndex(where: { !ValueScanner.isWhitespace($0) })
        else { return "" }
        return String(scalars[start...last])
    }
}
