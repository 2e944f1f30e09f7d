// libFuzzer target: the configuration parser on any text: INI syntax, every key's value syntax, the loader and
// the `--dump-config` reader.
//
// The input is read three ways: as one INI file (whose entries must be trimmed, keyed and placed on a line of
// the text), as `--dump-config` output (`DaemonConfiguration.parseRenderedINI`), and through the loader, its
// NUL-separated parts being the main file, drop-ins and `apps.d` files of an in-memory tree. Each configuration
// must satisfy the loader's validation, and render to text that reads back, without errors, to the same
// configuration.
import BGTaskConfig

/// Where the loader's in-memory tree puts the main file; drop-ins and app files go beside it.
private let mainPath = "/etc/bgtaskd/bgtaskd.conf"

/// Configurations already rendered and read back. The check is a pure function of the configuration and most
/// inputs load to one of a few (the defaults above all), so checking each once makes the target several times
/// faster. Cleared when full, to bound memory. libFuzzer calls the target from one thread only, so the unsynchronised
/// access is safe.
nonisolated(unsafe) private var checkedConfigurations: Set<DaemonConfiguration> = []

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfiguration(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: start, count: count)
    let text = String(decoding: bytes, as: UTF8.self)
    checkINI(text)
    checkRoundTrip(DaemonConfiguration.parseRenderedINI(text, fileName: "dump.conf"), lines: lineCount(text))

    var files: [String: String] = [:]
    for (index, part) in bytes.split(separator: 0, omittingEmptySubsequences: false).enumerated() {
        let path: String
        switch index {
        case 0: path = mainPath
        case _ where index % 2 == 1: path = "\(mainPath).d/\(index).conf"
        default: path = "/etc/bgtaskd/apps.d/app\(index).conf"
        }
        files[path] = String(decoding: part, as: UTF8.self)
    }
    let loader = ConfigurationLoader(path: mainPath, daemonUserID: 0, fileSystem: InMemoryFileSystem(files: files))
    checkRoundTrip(loader.load(), lines: nil)
    return 0
}

/// The number of lines of `text` as the parser counts them: one more than the newlines.
private func lineCount(_ text: String) -> Int {
    text.utf8.lazy.filter { $0 == UInt8(ascii: "\n") }.count + 1
}

/// Whether `scalar` is systemd's `WHITESPACE`, which the parser trims.
private func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
    scalar == " " || scalar == "\t" || scalar == "\n" || scalar == "\r"
}

/// Parses `text` as one file and checks the shape of what came out.
private func checkINI(_ text: String) {
    let file = INIFile(parsing: text, fileName: "fuzz.conf")
    let lines = lineCount(text)
    for section in file.sections {
        precondition(!section.name.isEmpty, "empty section name")
        precondition((1...lines).contains(section.location.line), "section outside the text")
    }
    for entry in file.entries {
        precondition(!entry.key.isEmpty, "empty key")
        precondition(!entry.key.unicodeScalars.contains("="), "key \(entry.key.debugDescription) holds '='")
        for part in [entry.key, entry.value] {
            let scalars = part.unicodeScalars
            let isTrimmed = scalars.first.map(isWhitespace) != true && scalars.last.map(isWhitespace) != true
            precondition(isTrimmed, "untrimmed \(part.debugDescription)")
        }
        precondition(file.sections.contains { $0.name == entry.section }, "entry outside a known section")
        precondition((1...lines).contains(entry.location.line), "entry outside the text")
    }
    for diagnostic in file.diagnostics {
        precondition(diagnostic.line.map { (1...lines).contains($0) } ?? false, "diagnostic outside the text")
        _ = diagnostic.description
    }
}

/// Checks a loaded configuration against the loader's validation and round-trips it through `renderINI`.
private func checkRoundTrip(_ result: ConfigurationLoadResult, lines: Int?) {
    for diagnostic in result.diagnostics {
        if let line = diagnostic.line {
            precondition(line >= 1 && line <= (lines ?? Int.max), "diagnostic line \(line) outside the text")
        }
        _ = diagnostic.description
    }
    let configuration = result.configuration
    guard !checkedConfigurations.contains(configuration) else { return }
    if checkedConfigurations.count >= 10_000 { checkedConfigurations.removeAll() }
    precondition(
        configuration.memory.criticalPercent <= configuration.memory.warnPercent,
        "MemoryCriticalPercent above MemoryWarnPercent was kept")
    precondition(
        (DaemonConfiguration.messageSizeMinimumBytes...DaemonConfiguration.messageSizeMaximumBytes)
            .contains(configuration.limits.messageSizeMaxBytes), "MessageSizeMax out of range was kept")
    let rendered = configuration.renderINI()
    let again = DaemonConfiguration.parseRenderedINI(rendered, fileName: "rendered.conf")
    let errors = again.diagnostics.filter { $0.severity == .error }
    precondition(errors.isEmpty, "the rendered configuration has errors: \(errors)\n\(rendered)")
    precondition(again.configuration == configuration, "the configuration changed when rendered:\n\(rendered)")
    checkedConfigurations.insert(configuration)
}
