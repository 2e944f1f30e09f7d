// The repository stands alone: no file cites the project's private design notes, or a Markdown page it does not hold.

import BGTaskTestSupport
import Foundation
import Testing

@Suite("Self-contained repository")
struct SelfContainedTests {
    /// What is scanned, relative to the package root: everything a clone holds but the build's own files.
    static let scannedRoots = [
        "Sources", "Tests", "docs", "scripts", "systemd", "Examples", "Fuzz", "Plugins", "README.md", "Package.swift",
    ]

    /// Markdown names the text uses for files a command writes (the soak's report), not for pages it cites.
    static let writtenFiles: Set<String> = ["PATH.md", "soak.md"]

    // The patterns are computed: a `Regex` is not `Sendable`, so it cannot be a stored static.

    /// The private notes by the names comments used to cite them: a section (`§`), a possessive, or the file.
    static var notesCitation: Regex<(Substring, Substring, Substring)> { #/\b(DESIGN|REFERENCE)( §|'s|\.md)/# }
    /// A Markdown file name, with or without a directory before it.
    static var markdownName: Regex<Substring> { #/[\w-]+\.md\b/# }
    /// A link of a Markdown page: `[text](target)`.
    static var markdownLink: Regex<(Substring, Substring)> { #/\]\(([^)\s]+)\)/# }
    /// An address on the web, which may name a Markdown page of another repository.
    static var webAddress: Regex<Substring> { #/[a-z]+:\/\/\S+/# }

    /// Every text file under the scanned roots, by path relative to the package root. Directories git ignores here
    /// (hidden ones, `__pycache__`) are left out, and so are files that are not UTF-8 (fuzz seeds of raw bytes).
    static func textFiles() -> [(path: String, text: String)] {
        let root = Products.packageRoot
        var paths: [String] = []
        for scanned in scannedRoots {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root + "/" + scanned, isDirectory: &isDirectory) else {
                continue
            }
            guard isDirectory.boolValue else {
                paths.append(scanned)
                continue
            }
            guard let walk = FileManager.default.enumerator(atPath: root + "/" + scanned) else { continue }
            for case let relative as String in walk {
                let components = relative.split(separator: "/")
                guard !components.contains(where: { $0.hasPrefix(".") || $0 == "__pycache__" }) else { continue }
                paths.append(scanned + "/" + relative)
            }
        }
        return paths.sorted().compactMap { path in
            guard let text = try? String(contentsOfFile: root + "/" + path, encoding: .utf8) else { return nil }
            return (path, text)
        }
    }

    /// The lines of `text` (the file at `path`) that cite something the repository does not hold, as
    /// `path:line: why: the line`: the private notes, a Markdown name not among `markdownNames`, or a Markdown link whose
    /// target `exists` says is missing.
    static func citations(
        in text: String, path: String, markdownNames: Set<String>, exists: (String) -> Bool
    ) -> [String] {
        var found: [String] = []
        let directory = (path as NSString).deletingLastPathComponent
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            // Plain substring checks first: the patterns are slow, and almost no line needs them.
            let mentionsNotes = line.contains("DESIGN") || line.contains("REFERENCE")
            guard mentionsNotes || line.contains(".md") || line.contains("](") else { continue }
            var reasons: [String] = []
            if mentionsNotes && line.contains(notesCitation) { reasons.append("cites notes outside the repository") }
            let local = line.contains("://") ? String(line).replacing(webAddress, with: "") : String(line)
            for match in local.matches(of: markdownName) {
                let name = String(match.output)
                if !markdownNames.contains(name) && !writtenFiles.contains(name) {
                    reasons.append("names \(name), which the repository does not hold")
                }
            }
            if path.hasSuffix(".md") {
                for match in local.matches(of: markdownLink) {
                    let target = String(match.output.1.prefix { $0 != "#" })
                    guard !target.isEmpty, !target.hasPrefix("mailto:") else { continue }
                    if !exists(directory.isEmpty ? target : directory + "/" + target) {
                        reasons.append("links to \(target), which the repository does not hold")
                    }
                }
            }
            for reason in reasons {
                found.append("\(path):\(index + 1): \(reason): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
        return found
    }

    @Test("no text file of the repository cites the private design notes or a Markdown page it does not hold")
    func nothingCitesOutside() throws {
        let files = Self.textFiles()
        // A walk that found next to nothing would pass vacuously.
        #expect(files.count > 300, "only \(files.count) text files found under \(Products.packageRoot)")
        try #require(files.contains { $0.path == "docs/ARCHITECTURE.md" })
        let markdownNames = Set(files.map { ($0.path as NSString).lastPathComponent }.filter { $0.hasSuffix(".md") })
        let root = Products.packageRoot
        var found: [String] = []
        for file in files {
            found += Self.citations(in: file.text, path: file.path, markdownNames: markdownNames) {
                FileManager.default.fileExists(atPath: root + "/" + $0)
            }
        }
        #expect(found.isEmpty, "say the meaning in place, or point to docs/:\n\(found.joined(separator: "\n"))")
    }

    /// Lines the scan must report, and lines it must leave alone. The cited names are put together from pieces so
    /// that this file, which the scan reads too, does not cite them itself.
    @Test(
        "the scan reports citations of files outside the repository, and only those",
        arguments: [
            ("// The policy of DESIGN" + " §1.", true),
            ("/// Added to DESIGN" + "'s list.", true),
            ("Measured here (REFERENCE" + ".md).", true),
            ("See [the notes](../NOTES" + ".md).", true),
            ("as STYLE" + ".md asks", true),
            ("See docs/ARCHITECTURE.md, Backends.", false),
            ("[docs/SERVICE.md](docs/SERVICE.md)", false),
            ("[the unit](Examples/missing.service)", true),
            ("the report goes to PATH.md and PATH.json", false),
            ("https://github.com/apple/swift-nio/blob/main/CONTRIBUTING.md", false),
            ("the reference design of the interface", false),
        ])
    func scanReports(line: String, isCitation: Bool) {
        let found = Self.citations(
            in: line, path: "README.md", markdownNames: ["ARCHITECTURE.md", "SERVICE.md", "README.md"],
            exists: { $0 == "docs/SERVICE.md" })
        #expect(found.isEmpty != isCitation, "\(line): \(found)")
    }
}
