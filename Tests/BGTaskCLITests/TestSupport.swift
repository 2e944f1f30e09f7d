// Shared helpers of the CLI tests: running the tool in-process, snapshots, temporary directories.
import BGTaskArguments
import BGTaskCLI
import BGTaskTestSupport
import Foundation
import Testing

/// The package's root directory, found from this file's compile-time path (Tests/BGTaskCLITests/...).
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// Whether generated files (snapshots, the man page) are to be rewritten instead of compared.
let isRegenerating = ProcessInfo.processInfo.environment["BGTASK_REGENERATE_DOCS"] == "1"

/// What one in-process run of the tool did.
struct ToolRun: Sendable {
    var status: ExitCode
    var standardOutput: String
    var standardError: String

    /// Standard error split into lines, without the empty string after the final newline.
    var errorLines: [String] {
        var lines = standardError.components(separatedBy: "\n")
        if lines.last == "" { lines.removeLast() }
        return lines
    }
}

/// Runs `bgtask WORDS...` in this process with captured output, a fixed environment and UTC times.
func runTool(_ words: [String], environment: [String: String] = [:], demoRunner: (any DemoRunner)? = nil) async
    -> ToolRun
{
    let output = CapturedOutput()
    let error = CapturedOutput()
    let status = await BGTaskTool.main(
        words, standardOutput: output, standardError: error, environment: environment,
        timeZone: TimeZone(identifier: "UTC") ?? .current, demoRunner: demoRunner)
    return ToolRun(status: status, standardOutput: output.text, standardError: error.text)
}

/// Compares `text` with the committed file at `relativePath` (from the package root), or rewrites the file when
/// regenerating. A missing file fails the test with the command that creates it.
func expectMatchesCommittedFile(
    _ text: String, at relativePath: String, sourceLocation: SourceLocation = #_sourceLocation
) throws {
    let url = packageRoot.appendingPathComponent(relativePath)
    if isRegenerating {
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: url, options: .atomic)
    }
    guard let data = FileManager.default.contents(atPath: url.path) else {
        Issue.record(
            "\(relativePath) is missing: run BGTASK_REGENERATE_DOCS=1 swift test", sourceLocation: sourceLocation)
        return
    }
    let committed = String(decoding: data, as: UTF8.self)
    #expect(
        committed == text, "\(relativePath) is stale: run BGTASK_REGENERATE_DOCS=1 swift test",
        sourceLocation: sourceLocation)
}

/// A fresh scratch directory for `body`, removed afterwards.
func withTemporaryDirectory<T>(_ body: (String) async throws -> T) async throws -> T {
    let directory = try ScratchDirectory(prefix: "bgtask-cli-test")
    defer { directory.remove() }
    return try await body(directory.path)
}

/// The usage block of a subcommand's help (`USAGE: ...` with its continuation lines), as the help shows it.
func usageBlock(inHelp help: String) -> [String] {
    let lines = help.components(separatedBy: "\n")
    guard let start = lines.firstIndex(where: { $0.hasPrefix("USAGE: ") }) else { return [] }
    var block = [lines[start]]
    for line in lines[(start + 1)...] {
        guard line.hasPrefix(" ") else { break }
        block.append(line)
    }
    return block
}
