// bgtaskd's command line and configuration: --dump-config, usage errors, SIGHUP reload, socket activation.

import BGTaskConfig
import BGTaskDaemon
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// Runs `bgtaskd ARGUMENTS` to completion; returns its status, stdout and stderr.
private func runDaemon(_ arguments: [String]) throws -> (
    status: BGTaskPOSIX.ExitStatus, output: String, errors: String
) {
    let directory = try ScratchDirectory()
    let errorPath = directory.path + "/stderr"
    let errorFile = try FileDescriptor.open(errorPath, .writeOnly, options: [.create, .truncate])
    let process = try ChildProcess(
        ["timeout", "30", try Products.path("bgtaskd")] + arguments, standardError: errorFile)
    try errorFile.close()
    var output: [String] = []
    while let line = try process.nextLine() { output.append(line) }
    let status = try process.waitForExit()
    let errors = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
    return (status, output.joined(separator: "\n"), errors)
}

@Suite("bgtaskd command line and configuration")
struct CommandLineTests {
    @Test("--dump-config prints the effective configuration: main file, drop-ins in order, per-app overrides")
    func dumpConfiguration() async throws {
        try await offThePool {
            let directory = try ScratchDirectory()
            let main = try directory.write(
                "bgtaskd.conf", "[Policy]\nBackgroundTimeSec=10min\n[Memory]\nAppsMemoryMax=1G\n")
            try directory.write("bgtaskd.conf.d/10-short.conf", "[Policy]\nBackgroundTimeSec=90s\n")
            try directory.write("bgtaskd.conf.d/20-warn.conf", "[Policy]\nExpirationWarningSec=3s\n")
            try directory.write("apps.d/org.example.mail.conf", "[Policy]\nBackgroundTimeSec=5min\n")
            let result = try runDaemon(["--config", main, "--dump-config"])
            #expect(result.status == .exited(0), "\(result.errors)")
            #expect(result.output.contains("BackgroundTimeSec=1min 30s"), "\(result.output)")
            #expect(result.output.contains("ExpirationWarningSec=3s"))
            #expect(result.output.contains("AppsMemoryMax=1G"))
            #expect(result.output.contains("org.example.mail"))
            #expect(result.output.contains("BackgroundTimeSec=5min"))
            #expect(result.errors.isEmpty)
        }
    }

    @Test("bad configuration is reported with file and line; --dump-config exits 1")
    func badConfiguration() async throws {
        try await offThePool {
            let directory = try ScratchDirectory()
            let main = try directory.write("bgtaskd.conf", "[Policy]\nBackgroundTimeSec=5 parsecs\nNoSuchKey=1\n")
            let result = try runDaemon(["--config", main, "--dump-config"])
            #expect(result.status == .exited(1))
            #expect(result.errors.contains("bgtaskd.conf:2"), "\(result.errors)")
            #expect(result.errors.contains("bgtaskd.conf:3"))
            // The bad value left the default in force.
            #expect(result.output.contains("BackgroundTimeSec=10min"))
        }
    }

    @Test(
        "usage errors print one line and the usage, exit 64",
        arguments: [["--frobnicate"], ["--socket"], ["--user=yes"], ["extra"]])
    func usageErrors(arguments: [String]) async throws {
        try await offThePool {
            let result = try runDaemon(arguments)
            #expect(result.status == .exited(64))
            let lines = result.errors.split(separator: "\n")
            #expect(lines.first?.hasPrefix("bgtaskd: ") == true, "\(result.errors)")
            #expect(result.errors.contains("USAGE: bgtaskd"))
        }
    }

    @Test("--help and --version")
    func helpAndVersion() async throws {
        try await offThePool {
            let help = try runDaemon(["--help"])
            #expect(help.status == .exited(0))
            #expect(help.output.contains("--dump-config"))
            let version = try runDaemon(["--version"])
            #expect(version.output == "bgtaskd \(Manager.version)")
        }
    }

    @Test("the state file: --state-file, else $RUNTIME_DIRECTORY/state.json, else beside the socket")
    func statePath() throws {
        let explicit = try DaemonOptions.parse(["--state-file", "/var/tmp/s.json"])
        #expect(explicit.resolvedStatePath(socketPath: "/run/x/sock", environment: [:]) == "/var/tmp/s.json")
        let plain = try DaemonOptions.parse([])
        #expect(
            plain.resolvedStatePath(socketPath: "/run/x/sock", environment: ["RUNTIME_DIRECTORY": "/run/b:/run/c"])
                == "/run/b/state.json")
        #expect(plain.resolvedStatePath(socketPath: "/run/x/sock", environment: [:]) == "/run/x/state.json")
        #expect(try DaemonOptions.parse(["--release-stopped"]).mode == .releaseStopped)
    }

    @Test(
        "the scheduled file: --schedule-file, else $STATE_DIRECTORY, else beside a --socket, else the state directory")
    func scheduledPath() throws {
        let explicit = try DaemonOptions.parse(["--schedule-file", "/var/tmp/q.json"])
        #expect(explicit.resolvedScheduledPath(socketPath: "/run/x/sock", environment: [:]) == "/var/tmp/q.json")
        let plain = try DaemonOptions.parse([])
        #expect(
            plain.resolvedScheduledPath(socketPath: "/run/x/sock", environment: ["STATE_DIRECTORY": "/var/lib/b:/c"])
                == "/var/lib/b/scheduled.json")
        #expect(
            plain.resolvedScheduledPath(socketPath: "/run/bgtaskd/sock", environment: [:])
                == "/var/lib/bgtaskd/scheduled.json")
        // A private instance, given its own socket, keeps its requests with the rest of its state.
        let own = try DaemonOptions.parse(["--socket", "/tmp/t/sock"])
        #expect(own.resolvedScheduledPath(socketPath: "/tmp/t/sock", environment: [:]) == "/tmp/t/scheduled.json")
        let user = try DaemonOptions.parse(["--user"])
        #expect(
            user.resolvedScheduledPath(socketPath: "/run/user/1/bgtaskd/sock", environment: ["HOME": "/home/u"])
                == "/home/u/.local/state/bgtaskd/scheduled.json")
        #expect(
            user.resolvedScheduledPath(
                socketPath: "/run/user/1/bgtaskd/sock", environment: ["HOME": "/home/u", "XDG_STATE_HOME": "/s"])
                == "/s/bgtaskd/scheduled.json")
    }

    @Test("--release-stopped with no state file has nothing to do and exits 0")
    func releaseWithoutState() async throws {
        try await offThePool {
            let directory = try ScratchDirectory(prefix: "release")
            let result = try runDaemon([
                "--release-stopped", "--socket", directory.path + "/sock", "--config", "/dev/null",
            ])
            #expect(result.status == .exited(0), "\(result.errors)")
            #expect(result.errors.contains("nothing was left stopped"), "\(result.errors)")
        }
    }

    @Test("a socket path too long for sun_path fails to start with a clear message")
    func unusableSocket() async throws {
        try await offThePool {
            let result = try runDaemon([
                "--socket", "/tmp/" + String(repeating: "x", count: 200), "--config", "/dev/null",
            ])
            #expect(result.status == .exited(1))
            #expect(result.errors.contains("cannot listen on"), "\(result.errors)")
            #expect(result.errors.contains("the limit is 107"))
        }
    }

    @Test("SIGHUP reloads the configuration: new registrations get the new policy, existing ones keep theirs")
    func reloadOnSighup() async throws {
        try await offThePool {
            let daemon = try DaemonHarness(configuration: "[Policy]\nBackgroundTimeSec=10min\n")
            let before = try pythonApp(daemon, name: "before")
            try before.send("begin keep")
            try before.waitForLine(startingWith: "began")
            try "[Policy]\nBackgroundTimeSec=30s\n".write(
                toFile: daemon.configurationPath, atomically: true, encoding: .utf8)
            try daemon.daemonPidFD.sendSignal(.hangUp)
            let deadline = MonotonicClock.now() + 10_000_000_000
            while !daemon.log.contains("configuration reloaded") && MonotonicClock.now() < deadline {
                _ = try daemon.daemonPidFD.waitForExit(timeout: .milliseconds(20))
            }
            #expect(daemon.log.contains("configuration reloaded"))
            // systemd hears the reload begin and end: RELOADING=1 (with the time), then READY=1 again.
            try daemon.waitForNotification("RELOADING=1")
            try daemon.waitForNotification("MONOTONIC_USEC=")
            let reloading = try #require(daemon.notifications.lastIndex { $0.contains("RELOADING=1") })
            let readyAgain = { daemon.notifications[(reloading + 1)...].contains { $0.contains("READY=1") } }
            let readyDeadline = MonotonicClock.now() + 10_000_000_000
            while !readyAgain() && MonotonicClock.now() < readyDeadline {
                _ = try daemon.daemonPidFD.waitForExit(timeout: .milliseconds(20))
            }
            #expect(readyAgain(), "\(daemon.notifications)")
            let after = try pythonApp(daemon, name: "after")
            try after.send("begin work")
            try after.waitForLine(startingWith: "began")
            let control = try daemon.connect()
            for app in ["before", "after"] {
                try control.lifecycle("SetState", ["app": .string(app), "state": "background"])
            }
            let oldRemaining = try #require(try control.app("before")["backgroundTimeRemaining"]?.doubleValue)
            let newRemaining = try #require(try control.app("after")["backgroundTimeRemaining"]?.doubleValue)
            #expect(oldRemaining > 590 && oldRemaining <= 600)
            #expect(newRemaining > 20 && newRemaining <= 30)
            #expect(daemon.isRunning)
        }
    }

    @Test("socket activation: the socket systemd passes is served, and left in place at stop")
    func socketActivation() async throws {
        try await offThePool {
            let directory = try ScratchDirectory()
            let socketPath = directory.path + "/activated.sock"
            let configuration = try directory.write("bgtaskd.conf", DaemonHarness.fastPolicy)
            let activator = try ChildProcess(
                [
                    "timeout", "60", "systemd-socket-activate", "-l", socketPath, "--fdname=varlink",
                    try Products.path("bgtaskd"), "--config", configuration, "--socket",
                    directory.path + "/unused.sock",
                ], flags: .newProcessGroup)
            defer { activator.terminate() }
            // systemd-socket-activate listens first and starts bgtaskd on the first connection.
            var client: RawVarlinkClient?
            for _ in 0..<200 where client == nil {
                client = try? RawVarlinkClient(path: socketPath)
                if client == nil { _ = try activator.process.pidFD.waitForExit(timeout: .milliseconds(25)) }
            }
            let connected = try #require(client, "systemd-socket-activate never listened")
            let info = try connected.call("org.varlink.service.GetInfo")
            #expect(info.parameters["product"] == "bgtaskd")
            // It served the passed socket, not one of its own.
            #expect(!FileManager.default.fileExists(atPath: directory.path + "/unused.sock"))
            try ProcessGroup(id: activator.pid).send(.terminate)
            _ = try activator.waitForExit()
            #expect(FileManager.default.fileExists(atPath: socketPath))
        }
    }
}

@Suite("bgtaskd(8)")
struct DaemonManPageTests {
    static let page = Products.packageRoot + "/docs/man/bgtaskd.8"

    @Test("documents every option of the parser and every configuration key")
    func complete() async throws {
        try await offThePool {
            let text = try String(contentsOfFile: Self.page, encoding: .utf8).replacingOccurrences(of: "\\-", with: "-")
            let options = DaemonOptions.help.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "[" || $0 == "]" }
            )
            .filter { $0.hasPrefix("--") }.map { String($0.prefix { $0 == "-" || $0.isLetter }) }
            #expect(!options.isEmpty)
            for option in Set(options) { #expect(text.contains(option), "\(option) is not in bgtaskd.8") }
            let keys = DaemonConfiguration().renderINI().split(separator: "\n")
                .compactMap { line -> String? in
                    line.contains("=") && !line.hasPrefix("#") ? String(line.split(separator: "=")[0]) : nil
                }
            #expect(keys.count >= 19)
            for key in keys { #expect(text.contains(".B \(key)="), "\(key) is not in bgtaskd.8") }
        }
    }

    @Test("renders with groff without warnings")
    func renders() async throws {
        try await offThePool {
            let groff = try ChildProcess(["sh", "-c", "groff -man -Tutf8 -wall \"$0\" 2>&1 >/dev/null", Self.page])
            var warnings: [String] = []
            while let line = try groff.nextLine() { warnings.append(line) }
            #expect(try groff.waitForExit() == .exited(0))
            #expect(warnings.isEmpty, "\(warnings)")
        }
    }
}
