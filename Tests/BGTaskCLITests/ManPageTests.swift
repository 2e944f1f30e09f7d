// Tests of docs/man/bgtask.1: generated from the specs, committed in sync, and rendered by groff without warnings.
import BGTaskArguments
import BGTaskCLI
import Foundation
import Testing

@Suite struct ManPageTests {
    let page = ManPage.generate(BGTaskTool.spec)

    @Test func manPageIsInSync() throws {
        try expectMatchesCommittedFile(page, at: "docs/man/bgtask.1")
    }

    @Test func manPageHasEverySection() {
        for section in [
            ".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH COMMANDS", ".SH OPTIONS", ".SH ENVIRONMENT",
            #".SH "EXIT STATUS""#, ".SH EXAMPLES", #".SH "SEE ALSO""#,
        ] {
            #expect(page.contains("\n\(section)\n"), "\(section)")
        }
        for command in BGTaskTool.spec.commands {
            #expect(page.contains(".SS \"bgtask \(command.name)\"\n"), "\(command.name)")
        }
        for status in BGTaskTool.spec.exitStatuses {
            #expect(page.contains(".TP\n\\fB\(status.status)\\fR\n"), "\(status.status)")
        }
        // No text line may start a roff request by accident.
        for line in page.split(separator: "\n") where line.hasPrefix(".") || line.hasPrefix("'") {
            let request = line.dropFirst().prefix { $0 != " " }
            let known = ["\\\"", "TH", "nh", "ad", "SH", "SS", "PP", "TP", "RS", "RE", "nf", "fi"]
            #expect(known.contains(String(request)), "\(line)")
        }
    }

    /// groff renders the committed page with every warning enabled and none given, and the text shows the
    /// sections and options as a reader sees them.
    @Test func manPageRendersWithGroff() throws {
        let process = Process()
        // groff found through PATH, as a reader's `man` would.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "groff", "-man", "-Tutf8", "-wall", packageRoot.appendingPathComponent("docs/man/bgtask.1").path,
        ]
        var environment = ProcessInfo.processInfo.environment
        environment["LC_ALL"] = "C.UTF-8"
        process.environment = environment
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let rendered = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let warnings = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(warnings.isEmpty, "\(warnings)")
        // Strip overstriking (bold as c, backspace, c; underline as _, backspace, c) to read the text.
        var text = ""
        for character in rendered {
            if character == "\u{8}" {
                if !text.isEmpty { text.removeLast() }
            } else {
                text.append(character)
            }
        }
        for heading in [
            "NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "ENVIRONMENT", "EXIT STATUS",
            "EXAMPLES", "SEE ALSO",
        ] {
            #expect(text.contains("\n\(heading)\n"), "\(heading)")
        }
        #expect(text.contains("bgtask run [--name NAME]"))
        #expect(text.contains("--on-expire SIGNAL"))
        #expect(text.contains("bgtask - control bgtaskd"))
    }
}
