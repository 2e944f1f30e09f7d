// The trust rule on the real daemon: an apps.d file someone else could have written never makes the root daemon run
// its command or pin its name, while everything else is served; the refusal shows in GetStatus, bgtask status, the
// journal and --dump-config; SIGHUP applies the rule again; and a per-user daemon trusts its own user's files.

import BGTaskConfig
import BGTaskJSON
import BGTaskPOSIX
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// The stable MESSAGE_ID of a refused configuration file (bgtaskd(8), LOGGING).
private let refusedMessageID = "7e1ee76c47364c91b9092fbb45d141c4"

/// Fails with the system's message when a call fails.
private func check(_ result: Int32, _ what: String) throws {
    guard result == 0 else { throw HarnessError("\(what): \(String(cString: strerror(errno)))") }
}

/// An `apps.d` file whose command leaves `marker` behind when it runs, and pins its name to nobody.
private func markingApp(_ marker: String) -> String {
    "[Launch]\nExecStart=\(CommandLineWords.join(["/bin/sh", "-c", "touch \(marker)"]))\n[Access]\nUser=65534\n"
}

/// Where the apps' commands leave their markers: sticky and writable by all, as /tmp, since a trusted file's command
/// runs as the user the file pins its name to.
private func markerDirectory() throws -> ScratchDirectory {
    let markers = try ScratchDirectory(prefix: "trust-markers")
    try check(chmod(markers.path, 0o1777), "chmod")
    return markers
}

/// Runs `bgtaskd ARGUMENTS` to completion: its status, standard output and standard error, apart.
private func runDaemonOnce(_ arguments: [String]) throws -> (
    status: BGTaskPOSIX.ExitStatus, output: String, errors: String
) {
    let directory = try ScratchDirectory(prefix: "dump-config")
    let errorPath = directory.path + "/stderr"
    let errorFile = try FileDescriptor.open(errorPath, .writeOnly, options: [.create, .truncate])
    let process = try ChildProcess(
        ["timeout", "30", try Products.path("bgtaskd")] + arguments, standardError: errorFile)
    try errorFile.close()
    var output: [String] = []
    while let line = try process.nextLine() { output.append(line) }
    let status = try process.waitForExit()
    return (status, output.joined(separator: "\n"), (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "")
}

/// `GetStatus`'s `configuration` object.
private func configurationStatus(_ control: RawVarlinkClient) throws -> [String: JSONValue] {
    let reply = try control.lifecycle("GetStatus")
    guard let configuration = reply.parameters["configuration"]?.objectValue else {
        throw HarnessError("GetStatus has no configuration: \(reply)")
    }
    return configuration
}

/// The refused entries of a `configuration` object, as `path: reason`.
private func refusals(_ configuration: [String: JSONValue]) -> [String] {
    (configuration["refused"]?.arrayValue ?? []).compactMap(\.objectValue).map {
        "\($0["path"]?.stringValue ?? "?"): \($0["reason"]?.stringValue ?? "?")"
    }
}

/// Waits (at most 20 s) for `path` to exist.
private func waitForFile(_ path: String, timeout: Duration = .seconds(20)) throws {
    let deadline = MonotonicClock.now() + timeout.nanosecondCount
    while access(path, F_OK) != 0 {
        guard MonotonicClock.now() < deadline else { throw HarnessError("\(path) never appeared") }
        usleep(20_000)
    }
}

@Suite("configuration trust end to end", .serialized)
struct ConfigurationTrustEndToEndTests {
    @Test(
        "apps.d files others could write are refused: no launch, no pin, the rest served, the refusal shown everywhere",
        .requires(.root(for: "changing owners and a private mount namespace")))
    func untrustedAppFilesNeverLaunch() async throws {
        try await offThePool {
            let capture = try JournalCapture()
            let markers = try markerDirectory()
            // A world-writable directory, as one a user could fill.
            let drop = try ScratchDirectory(prefix: "trust-drop")
            try check(chmod(drop.path, 0o777), "chmod")
            let untrusted = ["groupwritable", "worldwritable", "foreign", "linked"]
            var files = ["apps.d/trusted.conf": markingApp(markers.path + "/trusted")]
            for name in untrusted where name != "linked" {
                files["apps.d/\(name).conf"] = markingApp(markers.path + "/" + name)
            }
            let daemon = try DaemonHarness(
                files: files, environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(markers.path)/no-bus"],
                launchPrefix: JournalTests.launchPrefix(capture), standardErrorIsJournalStream: true
            ) { directory in
                let apps = directory.path + "/apps.d"
                try check(chown(apps + "/groupwritable.conf", 0, 100), "chown")
                try check(chmod(apps + "/groupwritable.conf", 0o664), "chmod")
                try check(chmod(apps + "/worldwritable.conf", 0o666), "chmod")
                try check(chown(apps + "/foreign.conf", 65534, 65534), "chown")
                // Root's own file, but in a directory anyone may replace it in.
                try drop.write("linked.conf", markingApp(markers.path + "/linked"))
                try check(symlink(drop.path + "/linked.conf", apps + "/linked.conf"), "symlink")
            }
            defer {
                _ = try? daemon.stop()
                capture.stop()
            }
            let root = daemon.directory.path
            let control = try daemon.connect()

            // GetStatus: what was read and what was refused, with the rule each fails.
            let configuration = try configurationStatus(control)
            #expect(configuration["root"] == .string(root))
            #expect(
                configuration["read"]
                    == .array([.string("\(root)/bgtaskd.conf"), .string("\(root)/apps.d/trusted.conf")]))
            let refused = refusals(configuration)
            #expect(refused.count == 4, "\(refused)")
            #expect(refused.contains("\(root)/apps.d/groupwritable.conf: writable by group (mode 0664)"), "\(refused)")
            #expect(
                refused.contains("\(root)/apps.d/worldwritable.conf: writable by group and others (mode 0666)"),
                "\(refused)")
            #expect(refused.contains("\(root)/apps.d/foreign.conf: owned by uid 65534, not root"), "\(refused)")
            let linked = refused.first { $0.hasPrefix("\(root)/apps.d/linked.conf: ") } ?? ""
            #expect(
                linked.hasPrefix("\(root)/apps.d/linked.conf: a symlink to \(drop.path)/linked.conf, whose directory "))
            #expect(linked.contains(" is writable by group and others (mode "), "\(linked)")

            // A request for each refused name, due now with no condition: none is launchable, and none belongs to
            // the user the refused file pins the name to.
            for name in untrusted {
                let submitted = try control.lifecycle("SubmitRequest", ["app": .string(name), "identifier": "now"])
                let request = submitted.parameters["request"]
                #expect(request?["state"] == "pending", "\(name): \(submitted)")
                #expect(request?["uid"] == 0, "\(name): \(submitted)")
            }
            // The trusted file beside them launches its command for its request, submitted last: by the time it ran,
            // the daemon had acted on every earlier one.
            let trusted = try control.lifecycle("SubmitRequest", ["app": "trusted", "identifier": "now"])
            #expect(trusted.parameters["request"]?["uid"] == 65534, "\(trusted)")
            try waitForFile(markers.path + "/trusted")
            for name in untrusted {
                #expect(access(markers.path + "/" + name, F_OK) != 0, "\(name)'s ExecStart= ran")
                let held = try control.lifecycle("ListRequests", ["app": .string(name)]).parameters["requests"]
                #expect(held?.arrayValue?.first?["state"] == "pending", "\(name): \(String(describing: held))")
            }
            #expect(!capture.entries.contains { ($0["MESSAGE"] ?? "").contains("launched groupwritable") })

            // The pins of refused files do not apply: root registers those names, and leases work.
            let app = try pythonApp(daemon, name: "foreign")
            defer { app.terminate() }
            try app.send("begin upload")
            _ = try app.waitForLine(startingWith: "began")
            #expect(try control.app("foreign")["uid"] == 0)

            // bgtask status, as people and scripts read it.
            let bgtask = try Products.path("bgtask")
            let (status, human) = try runProgram([bgtask, "--socket", daemon.socketPath, "status"])
            #expect(status == 0, "\(human)")
            #expect(human.contains("config:    \(root): 2 files read, 4 refused"), "\(human)")
            #expect(human.contains("\(root)/apps.d/foreign.conf: owned by uid 65534, not root"), "\(human)")
            let (jsonStatus, json) = try runProgram([bgtask, "--socket", daemon.socketPath, "status", "--json"])
            #expect(jsonStatus == 0, "\(json)")
            let reply = try JSONDecoder().decode(JSONValue.self, from: Data(json.utf8))
            #expect(reply["configuration"]?["refused"]?.arrayValue?.count == 4, "\(json)")

            // The journal: one error per refused file under its MESSAGE_ID, naming the file, the rule and what
            // happens.
            try capture.wait(for: "the refusals") { entries in
                entries.filter { $0["MESSAGE_ID"] == refusedMessageID }.count >= 4
            }
            for name in untrusted {
                let path = "\(root)/apps.d/\(name).conf"
                let entry = try #require(
                    capture.entries.first { $0["MESSAGE_ID"] == refusedMessageID && $0["BGTASK_CONFIG_FILE"] == path },
                    "\(capture.entries)")
                #expect(entry["PRIORITY"] == "3")
                let message = entry["MESSAGE"] ?? ""
                #expect(message.hasPrefix(path + ": "), "\(message)")
                #expect(message.hasSuffix("; refused; its settings are not used"), "\(message)")
                #expect(refused.contains { message.hasPrefix($0 + ";") }, "\(message)")
            }

            // --dump-config on the same files: what it read and refused, on top; exit 1.
            let dump = try runDaemonOnce(["--config", daemon.configurationPath, "--dump-config"])
            #expect(dump.status == .exited(1), "\(dump.errors)")
            let lines = dump.output.split(separator: "\n").map(String.init)
            #expect(lines.prefix(2) == ["# read: \(root)/bgtaskd.conf", "# read: \(root)/apps.d/trusted.conf"])
            #expect(Set(lines.dropFirst(2).prefix(4)) == Set(refused.map { "# refused: " + $0 }), "\(dump.output)")
            #expect(dump.output.contains("ExecStart=/bin/sh -c"), "\(dump.output)")
            #expect(!dump.output.contains("# apps.d/foreign.conf"), "\(dump.output)")
            #expect(dump.errors.contains("\(root)/apps.d/foreign.conf: error: owned by uid 65534, not root"))
        }
    }

    @Test(
        "SIGHUP applies the rule again: a file made safe is read, one made writable is refused, as GetStatus shows",
        .requires(.root(for: "changing owners")))
    func reloadAppliesTheRule() async throws {
        try await offThePool {
            let markers = try markerDirectory()
            let daemon = try DaemonHarness(
                files: [
                    "apps.d/fixed.conf": markingApp(markers.path + "/fixed"),
                    "apps.d/broken.conf": markingApp(markers.path + "/broken"),
                ],
                environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(markers.path)/no-bus"]
            ) { directory in
                try check(chmod(directory.path + "/apps.d/fixed.conf", 0o666), "chmod")
            }
            defer { _ = try? daemon.stop() }
            let root = daemon.directory.path
            let control = try daemon.connect()
            #expect(
                refusals(try configurationStatus(control)) == [
                    "\(root)/apps.d/fixed.conf: writable by group and others (mode 0666)"
                ])
            // The administrator fixes one file and someone opens another up; then the daemon reloads.
            try check(chmod(root + "/apps.d/fixed.conf", 0o644), "chmod")
            try check(chmod(root + "/apps.d/broken.conf", 0o646), "chmod")
            try daemon.daemonPidFD.sendSignal(.hangUp)
            let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
            var configuration = try configurationStatus(control)
            while refusals(configuration).first?.contains("broken.conf") != true, MonotonicClock.now() < deadline {
                usleep(50_000)
                configuration = try configurationStatus(control)
            }
            #expect(refusals(configuration) == ["\(root)/apps.d/broken.conf: writable by others (mode 0646)"])
            #expect(
                configuration["read"]
                    == .array([.string("\(root)/bgtaskd.conf"), .string("\(root)/apps.d/fixed.conf")]))
            #expect(daemon.log.contains("\(root)/apps.d/broken.conf: writable by others (mode 0646); refused"))
            // The command of the file now read runs; the one now refused does not.
            let broken = try control.lifecycle("SubmitRequest", ["app": "broken", "identifier": "now"])
            #expect(broken.parameters["request"]?["state"] == "pending", "\(broken)")
            try control.lifecycle("SubmitRequest", ["app": "fixed", "identifier": "now"])
            try waitForFile(markers.path + "/fixed")
            #expect(access(markers.path + "/broken", F_OK) != 0)
        }
    }

    @Test(
        "a per-user daemon trusts its own user's files, and refuses another user's and group-writable ones",
        .requires(.root(for: "running the daemon as another user")))
    func perUserDaemon() async throws {
        try await offThePool {
            let user = try ForeignUser(uid: 65534, gid: 65534, executables: ["bgtaskd"])
            let files = [
                "apps.d/mine.conf": "[Launch]\nExecStart=/usr/bin/mine\n",
                "apps.d/theirs.conf": "[Launch]\nExecStart=/usr/bin/theirs\n",
                "apps.d/shared.conf": "[Launch]\nExecStart=/usr/bin/shared\n",
                "bgtaskd.conf.d/10-limits.conf": "[Limits]\nHistorySize=77\n",
            ]
            let daemon = try DaemonHarness(files: files, perUserInstance: user) { directory in
                let apps = directory.path + "/config/bgtaskd/apps.d"
                try check(chown(apps + "/theirs.conf", 4242, 4242), "chown")
                try check(chmod(apps + "/shared.conf", 0o664), "chmod")
            }
            defer { _ = try? daemon.stop() }
            let root = daemon.directory.path + "/config/bgtaskd"
            #expect(daemon.configurationPath == root + "/bgtaskd.conf")
            let control = try daemon.connect()
            let configuration = try configurationStatus(control)
            #expect(configuration["root"] == .string(root))
            #expect(
                configuration["read"]
                    == .array([
                        .string("\(root)/bgtaskd.conf"), .string("\(root)/bgtaskd.conf.d/10-limits.conf"),
                        .string("\(root)/apps.d/mine.conf"),
                    ]))
            #expect(
                refusals(configuration) == [
                    "\(root)/apps.d/shared.conf: writable by group (mode 0664)",
                    "\(root)/apps.d/theirs.conf: owned by uid 4242, not root or uid 65534 (the daemon's user)",
                ])
            // What is in force, as the daemon's own user reads it: the trusted files' settings only.
            let dump = try runProgram(
                user.command("bgtaskd", ["--user", "--dump-config"]),
                environment: ["XDG_CONFIG_HOME": daemon.directory.path + "/config"])
            #expect(dump.status == 1, "\(dump.output)")
            #expect(dump.output.contains("ExecStart=/usr/bin/mine"), "\(dump.output)")
            #expect(dump.output.contains("HistorySize=77"), "\(dump.output)")
            #expect(!dump.output.contains("/usr/bin/theirs\n"), "\(dump.output)")
            #expect(!dump.output.contains("ExecStart=/usr/bin/shared"), "\(dump.output)")
            #expect(dump.output.contains("# refused: \(root)/apps.d/theirs.conf: owned by uid 4242"), "\(dump.output)")
        }
    }
}
