// Table-driven tests of the systemd-style INI parser: continuations, comments, malformed lines, line numbers.

import BGTaskConfig
import Testing

/// One expected assignment: section, key, value, line.
struct EntryRow: Equatable, Sendable, CustomStringConvertible {
    var section: String
    var key: String
    var value: String
    var line: Int

    init(_ section: String, _ key: String, _ value: String, line: Int) {
        self.section = section
        self.key = key
        self.value = value
        self.line = line
    }

    var description: String { "[\(section)] \(key)=\(String(reflecting: value)) @\(line)" }
}

struct INIRow: Sendable, CustomTestStringConvertible {
    var name: String
    var text: String
    var entries: [EntryRow]
    /// Lines with an error diagnostic.
    var errorLines: [Int] = []

    var testDescription: String { name }
}

let iniRows: [INIRow] = [
    INIRow(
        name: "plain assignment", text: "[Policy]\nBackgroundTimeSec=30s\n",
        entries: [EntryRow("Policy", "BackgroundTimeSec", "30s", line: 2)]),
    INIRow(
        name: "whitespace around key, = and value is trimmed, inner whitespace kept",
        text: "[A]\n  Key  =  value with  spaces \t\n",
        entries: [EntryRow("A", "Key", "value with  spaces", line: 2)]),
    INIRow(
        name: "comments and blank lines; # inside a value is not a comment",
        text: "# comment\n; other comment\n\n   \n[A]\n  # indented comment\nK=2 # not a comment\n",
        entries: [EntryRow("A", "K", "2 # not a comment", line: 7)]),
    INIRow(
        name: "continuation joins lines, the backslash becomes a space",
        text: "[A]\nK=one \\\n  two\nL=3\n",
        entries: [EntryRow("A", "K", "one    two", line: 2), EntryRow("A", "L", "3", line: 4)]),
    INIRow(
        name: "continuation over three lines",
        text: "[A]\nK=a\\\nb\\\nc\n",
        entries: [EntryRow("A", "K", "a b c", line: 2)]),
    INIRow(
        name: "comment lines inside a continuation are skipped",
        text: "[A]\nK=a\\\n# comment\n; another\nb\nL=1\n",
        entries: [EntryRow("A", "K", "a b", line: 2), EntryRow("A", "L", "1", line: 6)]),
    INIRow(
        name: "an escaped backslash at the end is not a continuation",
        text: "[A]\nK=a\\\\\nL=b\n",
        entries: [EntryRow("A", "K", "a\\\\", line: 2), EntryRow("A", "L", "b", line: 3)]),
    INIRow(
        name: "a backslash followed by spaces is not a continuation",
        text: "[A]\nK=a\\ \nL=b\n",
        entries: [EntryRow("A", "K", "a\\", line: 2), EntryRow("A", "L", "b", line: 3)]),
    INIRow(
        name: "continuation ended by a blank line",
        text: "[A]\nK=a\\\n\nL=b\n",
        entries: [EntryRow("A", "K", "a", line: 2), EntryRow("A", "L", "b", line: 4)]),
    INIRow(
        name: "continuation at the end of the file", text: "[A]\nK=a\\",
        entries: [EntryRow("A", "K", "a", line: 2)]),
    INIRow(
        name: "a continued section header", text: "[Po\\\nlicy]\nK=v\n",
        entries: [EntryRow("Po licy", "K", "v", line: 3)]),
    INIRow(
        name: "CRLF line ends", text: "[A]\r\nK=v\r\nL = w \r\n",
        entries: [EntryRow("A", "K", "v", line: 2), EntryRow("A", "L", "w", line: 3)]),
    INIRow(
        name: "byte order mark", text: "\u{FEFF}[A]\nK=v\n",
        entries: [EntryRow("A", "K", "v", line: 2)]),
    INIRow(name: "no final newline", text: "[A]\nK=v", entries: [EntryRow("A", "K", "v", line: 2)]),
    INIRow(name: "empty file", text: "", entries: []),
    INIRow(
        name: "key outside any section", text: "K=v\n[A]\nL=w\n",
        entries: [EntryRow("A", "L", "w", line: 3)], errorLines: [1]),
    INIRow(
        name: "missing ] skips up to the next header, without more errors",
        text: "[A\nK=v\nJ=u\n[B]\nL=w\n",
        entries: [EntryRow("B", "L", "w", line: 5)], errorLines: [1]),
    INIRow(
        name: "missing ] after a valid section does not leak keys into it",
        text: "[A]\nK=1\n[B\nK=2\n",
        entries: [EntryRow("A", "K", "1", line: 2)], errorLines: [3]),
    INIRow(
        name: "text after ] is a malformed header", text: "[A] # comment\nK=v\n[B]\n",
        entries: [], errorLines: [1]),
    INIRow(name: "empty section name", text: "[]\nK=v\n", entries: [], errorLines: [1]),
    INIRow(name: "a lone bracket", text: "[\nK=v\n", entries: [], errorLines: [1]),
    INIRow(
        name: "section names are kept exactly", text: "[ A ]\nK=v\n",
        entries: [EntryRow(" A ", "K", "v", line: 2)]),
    INIRow(
        name: "= absent", text: "[A]\nJustText\nK=v\n",
        entries: [EntryRow("A", "K", "v", line: 3)], errorLines: [2]),
    INIRow(name: "key absent", text: "[A]\n = v\n", entries: [], errorLines: [2]),
    INIRow(
        name: "= inside the value", text: "[A]\nK=a=b\n",
        entries: [EntryRow("A", "K", "a=b", line: 2)]),
    INIRow(
        name: "duplicate keys are both kept, in order", text: "[A]\nK=1\nK=2\n",
        entries: [EntryRow("A", "K", "1", line: 2), EntryRow("A", "K", "2", line: 3)]),
    INIRow(
        name: "empty assignment", text: "[A]\nK=\nL =  \n",
        entries: [EntryRow("A", "K", "", line: 2), EntryRow("A", "L", "", line: 3)]),
    INIRow(
        name: "repeated sections", text: "[A]\nK=1\n[B]\nL=2\n[A]\nM=3\n",
        entries: [
            EntryRow("A", "K", "1", line: 2), EntryRow("B", "L", "2", line: 4), EntryRow("A", "M", "3", line: 6),
        ]),
    INIRow(
        name: "non-ASCII keys and values", text: "[Ä]\nSchlüssel=Wert ✓\n",
        entries: [EntryRow("Ä", "Schlüssel", "Wert ✓", line: 2)]),
    INIRow(
        name: "a no-break space is not trimmed", text: "[A]\nK=\u{A0}v\n",
        entries: [EntryRow("A", "K", "\u{A0}v", line: 2)]),
    INIRow(
        name: "a lone carriage return inside a line stays", text: "[A]\nK=a\rb\n",
        entries: [EntryRow("A", "K", "a\rb", line: 2)]),
]

@Test(arguments: iniRows)
func parsesINI(_ row: INIRow) {
    let file = INIFile(parsing: row.text, fileName: "test.conf")
    let entries = file.entries.map { EntryRow($0.section, $0.key, $0.value, line: $0.location.line) }
    #expect(entries == row.entries)
    #expect(file.entries.allSatisfy { $0.location.file == "test.conf" })
    #expect(file.diagnostics.map(\.line) == row.errorLines.map { Optional($0) })
    #expect(file.diagnostics.allSatisfy { $0.severity == .error && $0.file == "test.conf" })
}

@Test func sectionHeadersRememberTheirLines() {
    let file = INIFile(parsing: "# x\n[A]\nK=1\n\n[B]\n[A]\n", fileName: "f")
    #expect(file.sections.map(\.name) == ["A", "B", "A"])
    #expect(file.sections.map(\.location.line) == [2, 5, 6])
}

@Test func firstLineNumberOffsetsEveryLocation() {
    let file = INIFile(parsing: "[A]\nK=1\nbroken\n", fileName: "dump", firstLineNumber: 40)
    #expect(file.entries.map(\.location) == [FileLocation(file: "dump", line: 41)])
    #expect(file.diagnostics.map(\.line) == [42])
}

@Test func malformedLinesAreDescribed() {
    let file = INIFile(parsing: "[Policy\nK=v\n", fileName: "/etc/x.conf")
    #expect(file.diagnostics.count == 1)
    #expect(file.diagnostics.first?.description.hasPrefix("/etc/x.conf:1: error: invalid section header") == true)
    let noEquals = INIFile(parsing: "[A]\nBackgroundTimeSec 5s\n", fileName: "y.conf")
    #expect(noEquals.diagnostics.first?.message.contains("missing \"=\"") == true)
}
