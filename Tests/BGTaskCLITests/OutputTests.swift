// Tests of what the subcommands print: `--json` lines checked against the protocol's own encoding and the IDL,
// and the human formatting of durations, sizes, times, tables and hostile names.
import BGTaskArguments
import BGTaskCLI
import BGTaskIDL
import BGTaskJSON
import BGTaskProtocol
import Foundation
import Testing

/// Sample values covering every field, set and unset, and hostile strings.
enum Samples {
    static let activeApp = AppInfo(name: "org.example.mail", state: .active, pid: 4242, uid: 1000, managed: false)
    static let backgroundApp = AppInfo(
        name: "org.example.photos", state: .background, pid: 77, uid: 1000, managed: true,
        tasks: [TaskInfo(id: 7, name: "upload", ageSec: 63.5), TaskInfo(id: 9, name: "", ageSec: 0.25)],
        backgroundTimeRemaining: 252.9, memoryBytes: 12_897_485, queuedEvents: 2, droppedEvents: 5)
    static let terminatedApp = AppInfo(
        name: "evil\nname\u{1B}[2J", state: .terminated, pid: 1, uid: 0, managed: false, exitReason: .memoryReclaim)
    static let launchedApp = AppInfo(
        name: "org.example.sync", state: .suspended, pid: 5150, uid: 1000, managed: true, backgroundTimeRemaining: 20,
        memoryBytes: 125_829_120, suspendedWith: .cgroup1, cgroup: "/sys/fs/cgroup/freezer/bgtaskd/org.example.sync",
        memoryBackend: "cgroup1")
    static let crashedApp = AppInfo(
        name: "org.example.crashy", state: .terminated, pid: 5151, uid: 1000, managed: true, exitReason: .crashed,
        cgroup: "/sys/fs/cgroup/bgtaskd.slice/org.example.crashy", exitSignal: "SIGSEGV")
    static let exitedApp = AppInfo(
        name: "org.example.quitter", state: .terminated, pid: 5152, uid: 1000, managed: true, exitReason: .exited,
        exitStatus: 3)
    static let apps = [activeApp, backgroundApp, terminatedApp, launchedApp, crashedApp, exitedApp]

    static let reclaim = HistoryEntry(
        time: 1_714_564_803.25, app: "org.example.photos", kind: .terminated, reason: .memoryReclaim,
        band: .backgroundIdle, memoryBytes: 3 << 30, latencyMs: 35.5)
    static let taskEnded = HistoryEntry(
        time: 1_714_564_800, app: "org.example.photos", kind: .taskEnded, taskId: 7, taskName: "upload",
        taskEnd: .expired)
    static let warning = HistoryEntry(
        time: 1_714_564_795, app: "org.example.photos", kind: .expirationWarning, taskIds: [7, 9])
    static let history = [warning, taskEnded, reclaim]

    static let status = GetStatusReply(
        version: "0.1.0", uptimeSec: 7_500, backends: ["freeze": "cgroup2", "kill": "pidfd", "memory": "pss"],
        apps: 3, suspended: 1, tasks: 2, memory: ["appsBytes": 125_829_120, "level": "normal", "availablePercent": 42])
}

/// Decodes one JSON line into a JSON value; records an issue and returns null when it is not exactly one line of
/// JSON.
func decodeLine(_ line: String) -> JSONValue {
    #expect(line.hasSuffix("\n") && line.dropLast().firstIndex(of: "\n") == nil, "one line: \(line)")
    do {
        return try JSONDecoder().decode(JSONValue.self, from: Data(line.utf8))
    } catch {
        Issue.record("not JSON: \(line)")
        return .null
    }
}

/// The value as the protocol module encodes it, read back as a JSON value.
func protocolEncoding(_ value: some Encodable) throws -> JSONValue {
    try JSONDecoder().decode(JSONValue.self, from: Data(JSONTextEncoder().encode(value)))
}

/// The fields the IDL declares for a named type of io.bgtask.Lifecycle.
func idlFields(of typeName: String) throws -> [String] {
    let interface = try VarlinkInterfaceDefinition(parsing: LifecycleInterface.description)
    let type = try #require(interface.type(named: typeName))
    guard case .structure(let fields) = type.type else { return [] }
    return fields.map(\.name)
}

/// The fields the IDL declares for a method's reply.
func idlReplyFields(of methodName: String) throws -> [String] {
    let interface = try VarlinkInterfaceDefinition(parsing: LifecycleInterface.description)
    return try #require(interface.method(named: methodName)).reply.map(\.name)
}

@Suite struct JSONOutputTests {
    /// Each `--json` line is the reply exactly as the protocol module encodes it (so the field names are the
    /// interface's), with every field the IDL declares present, null ones included.
    @Test func appRepliesCarryTheInterfaceFields() throws {
        for app in Samples.apps {
            let line = try Rendering.json(GetAppReply(app: app))
            let value = decodeLine(line)
            #expect(value == (try protocolEncoding(GetAppReply(app: app))))
            let object = try #require(value["app"]?.objectValue)
            for field in try idlFields(of: "App") { #expect(object[field] != nil, "App.\(field) in \(line)") }
            #expect(try JSONDecoder().decode(GetAppReply.self, from: Data(line.utf8)).app == app)
        }
        let list = try Rendering.json(ListAppsReply(apps: Samples.apps))
        #expect(decodeLine(list) == (try protocolEncoding(ListAppsReply(apps: Samples.apps))))
        #expect(try JSONDecoder().decode(ListAppsReply.self, from: Data(list.utf8)).apps == Samples.apps)
        let moved = try Rendering.json(SetStateReply(app: Samples.activeApp))
        #expect(Set(decodeLine(moved).objectValue?.keys.map { $0 } ?? []) == Set(try idlReplyFields(of: "SetState")))
    }

    @Test func historyRepliesCarryTheInterfaceFields() throws {
        let line = try Rendering.json(HistoryReply(entries: Samples.history))
        #expect(decodeLine(line) == (try protocolEncoding(HistoryReply(entries: Samples.history))))
        #expect(try JSONDecoder().decode(HistoryReply.self, from: Data(line.utf8)).entries == Samples.history)
        for entry in Samples.history {
            let watched = try Rendering.json(WatchReply(entry: entry))
            let object = try #require(decodeLine(watched)["entry"]?.objectValue)
            for field in try idlFields(of: "HistoryEntry") { #expect(object[field] != nil, "\(field) in \(watched)") }
            #expect(object["kind"] == .string(entry.kind.rawValue))
        }
    }

    @Test func otherRepliesCarryTheInterfaceFields() throws {
        let replies: [(String, String, JSONValue)] = [
            ("GetStatus", try Rendering.json(Samples.status), try protocolEncoding(Samples.status)),
            (
                "Post", try Rendering.json(PostReply(delivered: 2, queued: 1)),
                try protocolEncoding(PostReply(delivered: 2, queued: 1))
            ),
            (
                "Launch", try Rendering.json(LaunchReply(app: Samples.launchedApp)),
                try protocolEncoding(LaunchReply(app: Samples.launchedApp))
            ),
            (
                "BeginBackgroundTask", try Rendering.json(BeginBackgroundTaskReply(taskId: 7)),
                try protocolEncoding(BeginBackgroundTaskReply(taskId: 7))
            ),
            (
                "BackgroundTimeRemaining", try Rendering.json(BackgroundTimeRemainingReply(seconds: nil)),
                try protocolEncoding(BackgroundTimeRemainingReply(seconds: nil))
            ),
            (
                "BackgroundTimeRemaining", try Rendering.json(BackgroundTimeRemainingReply(seconds: 4.5)),
                try protocolEncoding(BackgroundTimeRemainingReply(seconds: 4.5))
            ),
        ]
        for (method, line, expected) in replies {
            let value = decodeLine(line)
            #expect(value == expected, "\(method)")
            #expect(Set(value.objectValue?.keys.map { $0 } ?? []) == Set(try idlReplyFields(of: method)), "\(method)")
        }
        // Unlimited time is an explicit null, not a missing field.
        #expect(try Rendering.json(BackgroundTimeRemainingReply(seconds: nil)) == "{\"seconds\":null}\n")
    }

    @Test func valuesJSONCannotHoldFailCleanly() {
        #expect(throws: CommandFailure.self) { try Rendering.json(BackgroundTimeRemainingReply(seconds: .nan)) }
    }
}

@Suite struct HumanOutputTests {
    /// Durations, worked out by hand: two units at most, rounded down, tenths below 10 s.
    static let durationRows: [(Double, String)] = [
        (0.0, "0s"), (0.0004, "0s"), (0.85, "850ms"), (0.9999, "999ms"), (1.0, "1s"), (4.25, "4.2s"),
        (9.99, "9.9s"), (10.0, "10s"), (42.9, "42s"), (60.0, "1m"), (61.0, "1m 1s"), (252.0, "4m 12s"),
        (252.9, "4m 12s"), (600.0, "10m"), (3_600.0, "1h"), (3_725.0, "1h 2m"), (86_399.0, "23h 59m"),
        (3 * 86_400 + 4 * 3_600 + 59, "3d 4h"), (-5.0, "0s"), (Double.nan, "0s"), (Double.infinity, "0s"),
        // Clamped to Int.max seconds: 106751991167300 days and 15 hours.
        (1e300, "106751991167300d 15h"),
    ]

    @Test(arguments: durationRows) func formatsDurations(_ seconds: Double, _ expected: String) {
        #expect(Formatting.duration(seconds: seconds) == expected)
    }

    /// Milliseconds: two decimals below 10, one below 100, none above; rounded to nearest.
    static let millisecondRows: [(Double, String)] = [
        (0.0, "0ms"), (-1, "0ms"), (.nan, "0ms"), (0.004, "0.00ms"), (0.42, "0.42ms"), (1.005, "1.00ms"),
        (2.5, "2.50ms"), (9.996, "10.00ms"), (12.46, "12.5ms"), (99.94, "99.9ms"), (250.4, "250ms"),
        (1_234.5, "1235ms"),
    ]

    @Test(arguments: millisecondRows) func formatsMilliseconds(_ milliseconds: Double, _ expected: String) {
        #expect(Formatting.milliseconds(milliseconds) == expected)
    }

    @Test func formatsRemainingTime() {
        #expect(Formatting.remaining(nil) == "unlimited")
        #expect(Formatting.remaining(252) == "4m 12s")
    }

    /// Sizes with binary units, one decimal, worked out by hand.
    @Test(
        arguments: [
            (nil, "-"), (0, "0 B"), (1_023, "1023 B"), (1_024, "1.0 KiB"), (1_536, "1.5 KiB"),
            (12_897_485, "12.3 MiB"), (1_048_575, "1.0 MiB"), (3 << 30, "3.0 GiB"), (Int.max, "8.0 EiB"),
        ] as [(Int?, String)])
    func formatsBytes(_ bytes: Int?, _ expected: String) {
        #expect(Formatting.bytes(bytes) == expected)
    }

    @Test func formatsWallClockTimes() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        #expect(Formatting.wallClock(0, timeZone: utc) == "1970-01-01 00:00:00")
        // 2024-05-01 00:00:00 UTC is 1714521600; 12 h 0 min 3 s later.
        #expect(Formatting.wallClock(1_714_564_803.9, timeZone: utc) == "2024-05-01 12:00:03")
        let tokyo = try #require(TimeZone(identifier: "Asia/Tokyo"))
        #expect(Formatting.wallClock(0, timeZone: tokyo) == "1970-01-01 09:00:00")
    }

    @Test func alignsTables() {
        let table = Formatting.table(header: ["A", "LONG"], rows: [["xyz", "1"], ["p", "22"]])
        #expect(table == "A    LONG\nxyz  1\np    22\n")
    }

    @Test func rendersAppTable() {
        let lines = Rendering.appTable(Samples.apps).split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 8)  // header, six apps, and the empty string after the final newline
        #expect(lines[0] == "NAME                    STATE       PID   TASKS  REMAINING  MEMORY     VIA      EXIT")
        #expect(lines[1].hasPrefix("org.example.mail    ") && lines[1].contains(" active "))
        #expect(lines[1].contains("unlimited") && lines[1].contains(" signals "))
        #expect(lines[2].contains("4m 12s") && lines[2].contains("12.3 MiB") && lines[2].contains("background"))
        // A hostile name stays on its line, its control characters shown as escapes.
        #expect(lines[3].hasPrefix(#"evil\u{a}name\u{1b}[2J"#) && lines[3].hasSuffix("memory-reclaim"))
        // An app with a cgroup of its own is handled through it, ended or not.
        #expect(lines[4] == "org.example.sync        suspended   5150  0      20s        120.0 MiB  cgroup   -")
        #expect(lines[5].contains(" cgroup   crashed"))
        #expect(lines[6].contains(" signals  exited"))
        #expect(Rendering.appTable([]) == "no apps\n")
    }

    @Test("VIA names how a unit's app was last frozen when the service manager did not freeze it")
    func rendersUnitHandling() {
        func app(_ name: String, _ method: SuspensionMethod?) -> AppInfo {
            AppInfo(
                name: name, state: .suspended, pid: 7, uid: 1000, managed: true, suspendedWith: method,
                cgroup: "/sys/fs/cgroup/app.slice/app-bgtask-\(name)-1a2b3c4d.service",
                unit: "app-bgtask-\(name)-1a2b3c4d.service")
        }
        let table = Rendering.appTable([
            app("never", nil), app("manager", .unit), app("file", .cgroup2), app("stopped", .process),
        ])
        let via = table.split(separator: "\n").dropFirst().map { line in
            line.split(separator: " ", omittingEmptySubsequences: true).dropFirst(6).dropLast().joined(separator: " ")
        }
        #expect(via == ["unit", "unit", "unit cgroup2", "unit signals"], "\(table)")
        #expect(Rendering.app(app("manager", .unit)).contains("  suspended:  frozen by the service manager"))
    }

    @Test func rendersOneApp() {
        let text = Rendering.app(Samples.backgroundApp)
        #expect(text.hasPrefix("org.example.photos\n  state:      background\n"))
        #expect(text.contains("  process:    pid 77, uid 1000, managed\n"))
        #expect(text.contains("  remaining:  4m 12s\n"))
        #expect(text.contains("  memory:     12.3 MiB\n"))
        #expect(text.contains("  queued:     2 event(s)\n"))
        #expect(text.contains("  dropped:    5 queued event(s), oldest first (QueuedEventsPerAppMax)\n"))
        #expect(!Rendering.app(Samples.activeApp).contains("dropped:"))
        #expect(text.contains("  tasks:      2\n    ID  NAME    AGE\n    7   upload  1m 3s\n    9           250ms\n"))
        let ended = Rendering.app(Samples.terminatedApp)
        #expect(ended.contains("  exit:       memory-reclaim\n") && ended.contains("  remaining:  -\n"))
        #expect(!ended.contains("\u{1B}"))
        #expect(!text.contains("suspended:"))
        #expect(!text.contains("cgroup:"))
        var frozen = Samples.backgroundApp
        frozen.suspendedWith = .cgroup2
        frozen.cgroup = "/sys/fs/cgroup/app.slice/photos.scope"
        let frozenText = Rendering.app(frozen)
        #expect(frozenText.contains("  cgroup:     /sys/fs/cgroup/app.slice/photos.scope\n"))
        #expect(frozenText.contains("  suspended:  frozen through its cgroup (cgroup2)\n"))
        frozen.suspendedWith = .group
        #expect(Rendering.app(frozen).contains("  suspended:  SIGSTOP to its process group\n"))
    }

    @Test("an app its unit forbids suspending says why, in its own status and in the daemon's")
    func rendersSuspensionExemption() {
        var pinger = Samples.backgroundApp
        pinger.name = "org.example.pinger"
        pinger.suspensionExemption =
            "its unit pinger.service has a watchdog (WatchdogSec=5s), which a suspended process cannot ping"
        #expect(
            Rendering.app(pinger).contains(
                "  exempt:     never suspended: its unit pinger.service has a watchdog (WatchdogSec=5s), which a "
                    + "suspended process cannot ping\n"))
        #expect(!Rendering.app(Samples.backgroundApp).contains("exempt:"))
        let status = Rendering.status(Samples.status, apps: Samples.apps + [pinger])
        #expect(
            status.hasSuffix(
                "exempt:    org.example.pinger is never suspended: its unit pinger.service has a watchdog "
                    + "(WatchdogSec=5s), which a suspended process cannot ping\n"), "\(status)")
        #expect(!Rendering.status(Samples.status, apps: Samples.apps).contains("exempt:"))
    }

    /// What a launched app, or one found in a cgroup of its own, shows: the cgroup, how its memory is measured,
    /// and how its process ended.
    @Test func rendersCgroupAndExitDetails() {
        #expect(
            Rendering.app(Samples.launchedApp) == """
                org.example.sync
                  state:      suspended
                  process:    pid 5150, uid 1000, managed
                  cgroup:     /sys/fs/cgroup/freezer/bgtaskd/org.example.sync
                  remaining:  20s
                  memory:     120.0 MiB (cgroup1)
                  suspended:  frozen through its cgroup (cgroup1 freezer)
                  tasks:      0

                """)
        let crashed = Rendering.app(Samples.crashedApp)
        #expect(crashed.contains("  exit:       crashed (signal SIGSEGV)\n"))
        // The cgroup stays shown once the app ended, and memory is not measured any more.
        #expect(crashed.contains("  cgroup:     /sys/fs/cgroup/bgtaskd.slice/org.example.crashy\n"))
        #expect(crashed.contains("  memory:     -\n"))
        #expect(Rendering.app(Samples.exitedApp).contains("  exit:       exited (status 3)\n"))
        var hostile = Samples.crashedApp
        hostile.exitSignal = "SIG\u{1B}[2J"
        hostile.cgroup = "/sys/fs/cgroup/a\nb"
        let escaped = Rendering.app(hostile)
        #expect(escaped.contains(#"  exit:       crashed (signal SIG\u{1b}[2J)"#))
        #expect(escaped.contains(#"  cgroup:     /sys/fs/cgroup/a\u{a}b"#))
    }

    @Test func rendersTheLaunchedApp() {
        var launched = AppInfo(
            name: "org.example.sync", state: .notRunning, pid: 5150, uid: 1000, managed: true,
            cgroup: "/sys/fs/cgroup/bgtaskd.slice/org.example.sync")
        #expect(
            Rendering.launched(launched)
                == "org.example.sync: notRunning, pid 5150, cgroup /sys/fs/cgroup/bgtaskd.slice/org.example.sync\n")
        launched.cgroup = nil
        #expect(Rendering.launched(launched) == "org.example.sync: notRunning, pid 5150\n")
    }

    @Test func rendersStatus() {
        #expect(
            Rendering.status(Samples.status) == """
                bgtaskd 0.1.0, up 2h 5m
                backends:  freeze=cgroup2  kill=pidfd  memory=pss
                apps:      3 (1 suspended)
                tasks:     2
                memory:    appsBytes=120.0 MiB  availablePercent=42  level=normal

                """)
        // With the apps: each running one measured, heaviest first, with its state and backend.
        let byApp = Rendering.status(Samples.status, apps: Samples.apps)
            .split(separator: "\n").drop { !$0.hasPrefix("by app:") }.map(String.init)
        let expected = Samples.apps.filter { $0.state != .terminated && $0.memoryBytes != nil }
            .sorted { ($0.memoryBytes ?? 0) > ($1.memoryBytes ?? 0) }
        #expect(byApp.count == expected.count && !expected.isEmpty, "\(byApp)")
        for (line, app) in zip(byApp, expected) {
            #expect(line.contains(app.name) && line.contains(Formatting.bytes(app.memoryBytes)), "\(line)")
            #expect(line.hasSuffix("(\(app.state.rawValue)\(app.memoryBackend.map { ", \($0)" } ?? ""))"), "\(line)")
        }
        var status = Samples.status
        status.loop = ["iterations": 1_234, "longestIterationMs": 2.5, "longestIterationSource": "client-7"]
        #expect(Rendering.status(status).hasSuffix("loop:      1234 dispatches, the longest 2.50ms (client-7)\n"))
    }

    @Test func rendersTheConfigurationReadAndRefused() throws {
        var status = Samples.status
        status.configuration = ConfigurationInfo(
            root: "/etc/bgtaskd", read: ["/etc/bgtaskd/bgtaskd.conf", "/etc/bgtaskd/apps.d/mail.conf"],
            refused: [
                RefusedFileInfo(
                    path: "/etc/bgtaskd/apps.d/photos.conf", reason: "writable by group (mode 0664)", directory: false),
                RefusedFileInfo(
                    path: "/etc/bgtaskd/bgtaskd.conf.d", reason: "owned by uid 65534, not root", directory: true),
            ])
        #expect(
            Rendering.status(status).hasSuffix(
                """
                memory:    appsBytes=120.0 MiB  availablePercent=42  level=normal
                config:    /etc/bgtaskd: 2 files read, 2 refused
                refused:   /etc/bgtaskd/apps.d/photos.conf: writable by group (mode 0664)
                           /etc/bgtaskd/bgtaskd.conf.d: owned by uid 65534, not root (a directory: none of its files are used)

                """), "\(Rendering.status(status))")
        status.configuration = ConfigurationInfo(root: "/etc/bgtaskd", read: ["/etc/bgtaskd/bgtaskd.conf"], refused: [])
        #expect(Rendering.status(status).hasSuffix("config:    /etc/bgtaskd: 1 file read, 0 refused\n"))
        // A path is printed on one line whatever it holds.
        status.configuration?.refused = [
            RefusedFileInfo(path: "/etc/bgtaskd/apps.d/a\nb.conf", reason: "x", directory: false)
        ]
        #expect(Rendering.status(status).hasSuffix("refused:   /etc/bgtaskd/apps.d/a\\u{a}b.conf: x\n"))
        // --json: the reply's fields, the configuration's with them.
        let object = try #require(decodeLine(try Rendering.json(status)).objectValue)
        let configuration = try #require(object["configuration"]?.objectValue)
        #expect(configuration["root"] == "/etc/bgtaskd")
        #expect(configuration["refused"]?.arrayValue?.first?.objectValue?["reason"] == "x")
        for field in try idlFields(of: "Configuration") { #expect(configuration[field] != nil, "\(field)") }
    }

    @Test func rendersHistory() throws {
        let utc = try #require(TimeZone(identifier: "UTC"))
        #expect(
            Rendering.historyLine(Samples.reclaim, timeZone: utc)
                == "2024-05-01 12:00:03  org.example.photos  terminated  reason=memory-reclaim  band=backgroundIdle  "
                + "memory=3.0 GiB  latency=35ms\n")
        #expect(
            Rendering.historyLine(Samples.taskEnded, timeZone: utc)
                == "2024-05-01 12:00:00  org.example.photos  taskEnded  task=7 (upload)  end=expired\n")
        let table = Rendering.historyTable(Samples.history, timeZone: utc)
        #expect(table.hasPrefix("TIME                 APP                 EVENT              DETAILS\n"))
        #expect(table.contains("2024-05-01 11:59:55  org.example.photos  expirationWarning  tasks=7,9\n"))
        #expect(Rendering.historyTable([], timeZone: utc) == "no history\n")
        // A request the daemon cancelled: which request, whose, and why.
        let cancelled = HistoryEntry(
            time: 1_714_564_810, app: "org.example.mail", kind: .requestCancelled,
            trigger: "org.example.mail is now pinned to uid 1001 (User=), not to its owner uid 1000",
            identifier: "nightly", uid: 1000)
        #expect(
            Rendering.historyLine(cancelled, timeZone: utc)
                == "2024-05-01 12:00:10  org.example.mail  requestCancelled  request=nightly  uid=1000  "
                + "trigger=org.example.mail is now pinned to uid 1001 (User=), not to its owner uid 1000\n")
    }

    @Test func rendersSmallReplies() {
        #expect(Rendering.stateLine(Samples.activeApp) == "org.example.mail: active\n")
        #expect(Rendering.postResult(PostReply(delivered: 1, queued: 0)) == "delivered to 1 app, queued for 0\n")
        #expect(Rendering.postResult(PostReply(delivered: 3, queued: 2)) == "delivered to 3 apps, queued for 2\n")
    }
}
