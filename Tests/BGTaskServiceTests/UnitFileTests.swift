// The unit files as scripts/install installs them: systemd-analyze verifies them (their man pages resolving), and
// the system service's exposure stays low, each remaining point explained in docs/SERVICE.md.

import BGTaskTestSupport
import Foundation
import Testing

@Suite("The installed unit files", .requires(.programs("systemd-analyze", "man")))
struct UnitFileTests {
    /// Runs systemd-analyze with `arguments`; its status and everything it printed.
    private func analyze(_ arguments: [String], environment: [String: String]) throws -> (Int32, String) {
        try runProgram(["/usr/bin/env", "systemd-analyze"] + arguments, environment: environment)
    }

    /// A scratch directory with the units installed under its `prefix`, and that prefix.
    private func installed() throws -> (ScratchDirectory, String) {
        let scratch = try ScratchDirectory(prefix: "bgtask-units")
        let prefix = scratch.path + "/prefix"
        try InstalledUserService.install(prefix: prefix)
        return (scratch, prefix)
    }

    @Test("systemd-analyze verify passes on the installed units, with their Documentation= man pages found")
    func verify() throws {
        let (scratch, prefix) = try installed()
        let runtime = scratch.path + "/run"
        try FileManager.default.createDirectory(
            atPath: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let environment = ["MANPATH": prefix + "/share/man", "XDG_RUNTIME_DIR": runtime]
        for (instance, flags) in [("system", ["--system"]), ("user", ["--user"])] {
            let units = ["service", "socket"].map { "\(prefix)/lib/systemd/\(instance)/bgtaskd.\($0)" }
            let service = try String(contentsOfFile: units[0], encoding: .utf8)
            #expect(service.contains("ExecStart=\(prefix)/bin/bgtaskd"), "\(instance): ExecStart= not in the prefix")
            let (status, output) = try analyze(flags + ["verify"] + units, environment: environment)
            #expect(status == 0 && output.isEmpty, "\(instance) units: \(output)")
        }
        // Without the man pages, verify fails: the check above is the man pages resolving.
        let units = ["service", "socket"].map { "\(prefix)/lib/systemd/system/bgtaskd.\($0)" }
        let (status, output) = try analyze(
            ["verify"] + units, environment: ["MANPATH": scratch.path + "/none", "XDG_RUNTIME_DIR": runtime])
        #expect(status != 0 && output.contains("man bgtaskd(8)"), "\(output)")
    }

    @Test("the installed services ask for no delegated cgroups, and the system one for no way to change user")
    func noDelegationNorUserChange() throws {
        let (scratch, prefix) = try installed()
        defer { _ = scratch }
        for instance in ["system", "user"] {
            let unit = try String(
                contentsOfFile: "\(prefix)/lib/systemd/\(instance)/bgtaskd.service", encoding: .utf8)
            let settings = unit.split(separator: "\n").filter { !$0.hasPrefix("#") }
            // Apps are units the service manager starts as their users: the daemon neither makes cgroups nor
            // changes user.
            #expect(!settings.contains { $0.hasPrefix("Delegate=") }, "\(instance): Delegate= is set")
            #expect(settings.contains("SystemCallFilter=~@privileged"), "\(instance): set*id calls allowed")
            if instance == "system" {
                let bounding = settings.first { $0.hasPrefix("CapabilityBoundingSet=") } ?? ""
                #expect(!bounding.isEmpty && !bounding.contains("CAP_SETUID") && !bounding.contains("CAP_SETGID"))
                // The daemon writes the cgroup.freeze and cgroup.kill of apps' units.
                #expect(settings.contains("ProtectControlGroups=no"), "the cgroup tree would be read-only")
            }
        }
    }

    @Test("the system service's exposure (systemd-analyze security) is under 3.0, each remaining point documented")
    func exposure() throws {
        let (scratch, prefix) = try installed()
        defer { _ = scratch }
        let (status, output) = try analyze(
            ["security", "--offline=true", prefix + "/lib/systemd/system/bgtaskd.service"], environment: [:])
        #expect(status == 0, "\(output)")
        let overall = try #require(
            output.split(separator: "\n").first { $0.contains("Overall exposure level for bgtaskd.service") },
            "\(output)")
        let level = try #require(
            overall.split(separator: " ").compactMap { Double($0) }.first, "no level in \(overall)")
        #expect(level < 3.0, "\(overall)")
        print("UnitFileTests: systemd-analyze security rates the installed system bgtaskd.service \(level)")
        // Every setting still marked ✗ is named, with its reason, in the docs' table.
        // (A `|` inside a table cell is written `\|`.)
        let documentation = try String(
            contentsOfFile: Products.packageRoot + "/docs/SERVICE.md", encoding: .utf8
        ).replacingOccurrences(of: "\\|", with: "|")
        let failing = output.split(separator: "\n").filter { $0.hasPrefix("✗") }.compactMap {
            $0.dropFirst().split(separator: " ").first.map(String.init)
        }
        #expect(!failing.isEmpty, "\(output)")
        // The daemon makes no cgroups of its own: systemd gives each launched app a unit.
        #expect(!failing.contains("Delegate="), "\(output)")
        for setting in failing {
            #expect(documentation.contains("`\(setting)`"), "docs/SERVICE.md does not explain \(setting)")
        }
        #expect(documentation.contains(String(format: "%.1f", level)), "docs/SERVICE.md does not give \(level)")
    }
}
