// docs/PERFORMANCE.md's summary section, which `bgtask-bench all --write-docs` rewrites between its markers and
// leaves the rest of the document untouched.

import Foundation

/// The summary section of docs/PERFORMANCE.md: where it is, what it says, and how it is replaced.
public enum PerformanceDocument {
    /// The document's path from the package root.
    public static let relativePath = "docs/PERFORMANCE.md"
    /// The line before the section.
    public static let beginMarker = "<!-- bgtask-bench all: begin -->"
    /// The line after the section.
    public static let endMarker = "<!-- bgtask-bench all: end -->"

    /// Why the section could not be placed.
    public enum EditError: Error, Equatable, CustomStringConvertible {
        /// One marker without the other, or the end before the begin.
        case unmatchedMarkers
        /// A marker more than once.
        case repeatedMarker(String)
        /// Neither the binary's directory nor the current directory is inside a package holding the document.
        case notFound(searched: [String])

        public var description: String {
            switch self {
            case .unmatchedMarkers:
                "\(relativePath) has one of `\(beginMarker)` and `\(endMarker)` without the other, or the end first"
            case .repeatedMarker(let marker):
                "\(relativePath) has `\(marker)` more than once"
            case .notFound(let searched):
                "no \(relativePath) in a package above " + searched.joined(separator: " or ")
                    + ": run from the package root"
            }
        }
    }

    /// The section between the markers: a heading, when and how it was measured, and the table.
    public static func section(summary: BenchmarkSummary, date: String, command: String) -> String {
        """
        ## Summary (bgtask-bench all)

        Measured \(date) with `\(command)`, every figure beside its floor or reference from the same run. Written by
        `--write-docs` between the markers around this section; the sections below explain each mode. A miss is
        reported, not an error.

        \(summary.markdown)
        """
    }

    /// `document` with the text between its markers replaced by `section`; without markers, `section` inside new
    /// markers before the first second-level heading (at the end when it has none).
    public static func replacingSection(in document: String, with section: String) throws(EditError) -> String {
        let block = beginMarker + "\n" + section + (section.hasSuffix("\n") ? "" : "\n") + endMarker + "\n"
        var lines = document.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let begins = lines.indices.filter { lines[$0].trimmingCharacters(in: .whitespaces) == beginMarker }
        let ends = lines.indices.filter { lines[$0].trimmingCharacters(in: .whitespaces) == endMarker }
        guard begins.count <= 1 else { throw .repeatedMarker(beginMarker) }
        guard ends.count <= 1 else { throw .repeatedMarker(endMarker) }
        switch (begins.first, ends.first) {
        case (let begin?, let end?) where begin < end:
            // The block ends with the end marker's newline; what follows starts with the next line.
            let before = lines[..<begin].map { $0 + "\n" }.joined()
            return before + block + lines[(end + 1)...].joined(separator: "\n")
        case (nil, nil):
            guard let heading = lines.firstIndex(where: { $0.hasPrefix("## ") }) else {
                return document + (document.hasSuffix("\n") || document.isEmpty ? "" : "\n")
                    + (document.isEmpty ? "" : "\n") + block
            }
            lines.insert(
                contentsOf: block.split(separator: "\n", omittingEmptySubsequences: false).map(String.init), at: heading
            )
            return lines.joined(separator: "\n")
        default:
            throw .unmatchedMarkers
        }
    }

    /// The document in the first package found above the directories in `startingPoints` (a package: a
    /// `Package.swift` beside the document), or where it looked.
    public static func locate(from startingPoints: [String]) throws(EditError) -> String {
        for start in startingPoints {
            var directory = URL(fileURLWithPath: start).standardizedFileURL
            while true {
                let candidate = directory.appendingPathComponent(relativePath).path
                if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path),
                    FileManager.default.fileExists(atPath: candidate)
                {
                    return candidate
                }
                let parent = directory.deletingLastPathComponent()
                if parent.path == directory.path { break }
                directory = parent
            }
        }
        throw .notFound(searched: startingPoints)
    }
}
