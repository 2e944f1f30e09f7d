// The fuzz targets are all wired: every file in Fuzz/ is a target scripts/fuzz builds and lists (so the test command's
// short pass runs it), with seeds of its own and a row in docs/TESTING.md.

import BGTaskTestSupport
import Foundation
import Testing

@Suite("Fuzz targets")
struct FuzzTargetTests {
    /// The targets as `scripts/fuzz` declares them (its `TARGETS` block): name and file in `Fuzz/`.
    static func declaredTargets() throws -> [(name: String, file: String)] {
        let script = try String(contentsOfFile: Products.packageRoot + "/scripts/fuzz", encoding: .utf8)
        guard let start = script.range(of: "TARGETS='\n"),
            let end = script.range(of: "\n'", range: start.upperBound..<script.endIndex)
        else { throw HarnessError("scripts/fuzz has no TARGETS block") }
        return script[start.upperBound..<end.lowerBound].split(separator: "\n").compactMap { line in
            let words = line.split(separator: " ", omittingEmptySubsequences: true)
            return words.count >= 4 ? (String(words[0]), String(words[1])) : nil
        }
    }

    @Test("every Fuzz/*.swift is a target of scripts/fuzz, which --list names, with seeds and a row in TESTING.md")
    func everyTargetIsWired() throws {
        let root = Products.packageRoot
        let targets = try Self.declaredTargets()
        let files = try FileManager.default.contentsOfDirectory(atPath: root + "/Fuzz").filter {
            $0.hasSuffix(".swift")
        }
        #expect(Set(targets.map(\.file)) == Set(files), "Fuzz/ holds a file scripts/fuzz does not build, or not")
        #expect(Set(targets.map(\.name)).count == targets.count, "two targets share a name")
        let (status, listed) = try runProgram([root + "/scripts/fuzz", "--list"])
        #expect(status == 0, "\(listed)")
        #expect(listed.split(separator: "\n").map(String.init) == targets.map(\.name))
        let testing = try String(contentsOfFile: root + "/docs/TESTING.md", encoding: .utf8)
        for target in targets {
            let seeds =
                (try? FileManager.default.contentsOfDirectory(atPath: root + "/Fuzz/Corpus/" + target.name)) ?? []
            #expect(seeds.count >= 3, "\(target.name) has \(seeds.count) seeds in Fuzz/Corpus/\(target.name)")
            #expect(testing.contains("| `\(target.name)` |"), "docs/TESTING.md has no row for \(target.name)")
        }
        // The configuration trust rule is among them.
        #expect(targets.contains { $0.name == "config-trust" && $0.file == "ConfigurationTrust.swift" })
    }
}
