// Tests of --dump-config: every key shown, app blocks with only what differs, and dump → parse round trips.

import BGTaskConfig
import BGTaskCore
import Testing

/// The keys by section, in the order bgtaskd(8) lists them.
let documentedKeys: [(section: String, keys: [String])] = [
    (
        "Policy",
        [
            "BackgroundTimeSec", "ExpirationWarningSec", "EnterBackgroundGraceSec", "WillTerminateGraceSec",
            "LaunchTimeoutSec", "LockedSuspendGraceSec", "BackgroundBudgetPerDaySec", "ExitsOnSuspend",
        ]
    ),
    (
        "Memory",
        [
            "AppsMemoryMax", "MemoryWarnPercent", "MemoryCriticalPercent", "MemoryWarningGraceSec",
            "ReclaimForeground", "ReclaimDryRun", "CgroupRoot", "MemoryCgroupRoot",
        ]
    ),
    (
        "Limits",
        [
            "TasksPerAppMax", "AppsPerUserMax", "ConnectionsMax", "ConnectionsPerUserMax", "MessageSizeMax",
            "QueuedEventsPerAppMax", "PostPayloadSizeMax", "HistorySize", "ScheduledRequestsPerAppMax",
            "ScheduledRequestsPerUserMax", "ScheduledRequestsMax",
        ]
    ),
    ("Access", ["ControllerGroup"]),
    ("Conditions", ["PowerSupplyPath", "BatteryLowPercent"]),
    ("Scheduling", ["ScheduledTasksMax", "ScheduledTimePerDaySec", "RefreshTaskSec", "ProcessingTaskSec"]),
]

@Test func theDumpShowsEverySectionAndKeyOnce() {
    let text = DaemonConfiguration().renderINI()
    let file = INIFile(parsing: text, fileName: "dump")
    #expect(file.diagnostics.isEmpty)
    #expect(file.sections.map(\.name) == documentedKeys.map(\.section))
    let shown = file.entries.map { "\($0.section).\($0.key)" }
    #expect(shown == documentedKeys.flatMap { section in section.keys.map { "\(section.section).\($0)" } })
}

@Test func theDumpOfTheDefaultsIsTheDocumentedTable() {
    // Loading the dump and loading the documented table of defaults must agree, value for value.
    let dumped = DaemonConfiguration.parseRenderedINI(DaemonConfiguration().renderINI(), fileName: "dump")
    let documented = ConfigurationLoader(
        path: "/c", daemonUserID: 0, fileSystem: InMemoryFileSystem(files: ["/c": documentedDefaults])
    ).load()
    #expect(dumped.diagnostics.isEmpty)
    #expect(dumped.configuration == documented.configuration)
}

@Test func appBlocksHoldOnlyWhatDiffers() throws {
    var configuration = DaemonConfiguration()
    var mail = configuration.core.defaultAppPolicy
    mail.backgroundTime = .seconds(30)
    configuration.core.appPolicies = ["com.example.mail": mail, "same": configuration.core.defaultAppPolicy]
    let text = configuration.renderINI()
    #expect(text.contains("\n# apps.d/com.example.mail.conf\n[Policy]\nBackgroundTimeSec=30s\n"))
    #expect(text.contains("\n# apps.d/same.conf\n[Policy]\n"))
    #expect(text.hasSuffix("\n# apps.d/same.conf\n[Policy]\n"))
    // Apps are sorted, so the output is stable.
    let mailIndex = try #require(text.range(of: "apps.d/com.example.mail.conf")).lowerBound
    let sameIndex = try #require(text.range(of: "apps.d/same.conf")).lowerBound
    #expect(mailIndex < sameIndex)
}

@Test func aLoadedTreeSurvivesDumpAndParse() {
    let result = ConfigurationLoader(
        path: mainPath, daemonUserID: 0,
        fileSystem: InMemoryFileSystem(files: [
            mainPath: """
            [Policy]
            BackgroundTimeSec=1h 30min
            ExpirationWarningSec=1.5s
            BackgroundBudgetPerDaySec=2h
            [Memory]
            AppsMemoryMax=1536M
            MemoryWarnPercent=15
            MemoryCriticalPercent=15
            MemoryWarningGraceSec=250ms
            ReclaimDryRun=yes
            CgroupRoot=/sys/fs/cgroup/unified/test tree
            [Limits]
            MessageSizeMax=4097
            [Access]
            ControllerGroup=wheel
            """,
            "\(dropInPath)/10-a.conf": "[Limits]\nHistorySize=12\nTasksPerAppMax=3\n",
            "\(appsPath)/com.example.mail.conf": "[Policy]\nBackgroundTimeSec=30s\nExitsOnSuspend=yes\n",
            "\(appsPath)/inherits.conf": "[Policy]\n",
            "\(appsPath)/My App.conf": "[Policy]\nLaunchTimeoutSec=1min\nLockedSuspendGraceSec=100ms\n",
        ])
    ).load()
    #expect(result.diagnostics.isEmpty, "\(result.diagnostics)")
    let text = result.configuration.renderINI()
    let reparsed = DaemonConfiguration.parseRenderedINI(text, fileName: "dump")
    #expect(reparsed.diagnostics.isEmpty, "\(reparsed.diagnostics)")
    #expect(reparsed.configuration == result.configuration)
    #expect(reparsed.configuration.renderINI() == text)
}

/// Values that end in backslashes, as a file can set them (`ControllerGroup=a\ `: the trailing space ends the
/// line), survive dump and parse. Fixed bug, found with the config fuzz target's round trip: an odd run of
/// backslashes at the end of a dumped value read back as a continuation, joining the next line to the value.
@Test(arguments: ["a\\", "a\\\\", "a\\\\\\", "\\"])
func valuesEndingInBackslashesSurviveDumpAndParse(value: String) {
    // From a file, as an administrator would write them.
    let file = "[Memory]\nCgroupRoot=/sys/fs/cgroup/\(value) \n[Access]\nControllerGroup=\(value) \n"
    let loaded = ConfigurationLoader(path: "/c", daemonUserID: 0, fileSystem: InMemoryFileSystem(files: ["/c": file]))
        .load()
    #expect(loaded.diagnostics.isEmpty, "\(loaded.diagnostics)")
    #expect(loaded.configuration.access.controllerGroup == value)
    #expect(loaded.configuration.memory.cgroupRoot == "/sys/fs/cgroup/" + value)
    let reparsed = DaemonConfiguration.parseRenderedINI(loaded.configuration.renderINI(), fileName: "dump")
    #expect(reparsed.diagnostics.isEmpty, "\(reparsed.diagnostics)")
    #expect(reparsed.configuration == loaded.configuration)
}

/// Random valid configurations, built without the parser, survive dump and parse.
@Test func randomConfigurationsSurviveDumpAndParse() {
    var random = SplitMix64(state: 0xC0FF_EE)
    func duration() -> Duration { .microseconds(random.scaled(below: SystemdSyntax.maximumTimeSpanMicroseconds)) }
    func policy() -> AppPolicy {
        var policy = AppPolicy()
        policy.backgroundTime = duration()
        policy.expirationWarning = duration()
        policy.enterBackgroundGrace = duration()
        policy.willTerminateGrace = duration()
        policy.launchTimeout = duration()
        policy.lockedSuspendGrace = duration()
        policy.backgroundBudgetPerDay = duration()
        policy.exitsOnSuspend = random.next() % 2 == 0
        return policy
    }
    for round in 0..<200 {
        var configuration = DaemonConfiguration()
        configuration.core.defaultAppPolicy = policy()
        for index in 0..<Int(random.next() % 4) {
            configuration.core.appPolicies["app-\(round)-\(index)"] =
                random.next() % 3 == 0 ? configuration.core.defaultAppPolicy : policy()
        }
        configuration.core.tasksPerAppMax = Int(random.scaled(below: UInt64(Int.max))) + 1
        configuration.core.historySize = Int(random.scaled(below: UInt64(Int.max)))
        configuration.core.reclaimForeground = random.next() % 2 == 0
        configuration.memory.appsMemoryMaxBytes = random.next() % 3 == 0 ? nil : random.scaled(below: UInt64.max)
        configuration.memory.warnPercent = Int(random.next() % 101)
        configuration.memory.criticalPercent = Int(random.next() % UInt64(configuration.memory.warnPercent + 1))
        configuration.memory.warningGrace = duration()
        configuration.memory.reclaimDryRun = random.next() % 2 == 0
        configuration.memory.cgroupRoot = random.next() % 2 == 0 ? nil : "/sys/fs/cgroup/unified/r\(round)"
        configuration.limits.connectionsPerUserMax = Int(random.scaled(below: 100_000)) + 1
        configuration.limits.messageSizeMaxBytes =
            DaemonConfiguration.messageSizeMinimumBytes
            + Int(
                random.next()
                    % UInt64(
                        DaemonConfiguration.messageSizeMaximumBytes - DaemonConfiguration.messageSizeMinimumBytes + 1))
        configuration.access.controllerGroup = random.next() % 2 == 0 ? nil : "group\(round)"

        let text = configuration.renderINI()
        let reparsed = DaemonConfiguration.parseRenderedINI(text, fileName: "dump")
        #expect(reparsed.configuration == configuration, "\(text)")
        #expect(!reparsed.hasErrors, "\(reparsed.diagnostics)")
    }
}

@Test func problemsInADumpNameItsLines() {
    let text = """
        [Policy]
        BackgroundTimeSec=10min

        # apps.d/mail.conf
        [Policy]
        BackgroundTimeSec=soon
        # apps.d/.bad.conf
        [Policy]
        BackgroundTimeSec=1s
        """
    let result = DaemonConfiguration.parseRenderedINI(text, fileName: "dump")
    #expect(places(result) == ["dump:6: error", "dump:7: error"])
    #expect(Set(result.configuration.core.appPolicies.keys) == ["mail"])
    // The rejected block is dropped, not read as part of the main file.
    #expect(result.configuration.core.defaultAppPolicy.backgroundTime == .seconds(600))
}

@Test func anAppsOOMScoreAdjustSurvivesDumpAndParse() throws {
    var configuration = DaemonConfiguration()
    configuration.launch.appOOMScoreAdjustments = ["com.example.game": 700, "com.example.mail": -250]
    configuration.access.appUsers = ["com.example.mail": "mail"]
    let text = configuration.renderINI()
    #expect(text.contains("\n# apps.d/com.example.game.conf\n[Policy]\n[Launch]\nOOMScoreAdjust=700\n"), "\(text)")
    #expect(text.contains("[Access]\nUser=mail\n[Launch]\nOOMScoreAdjust=-250\n"), "\(text)")
    let reparsed = DaemonConfiguration.parseRenderedINI(text, fileName: "dump")
    #expect(reparsed.diagnostics.isEmpty, "\(reparsed.diagnostics)")
    #expect(reparsed.configuration.launch == configuration.launch)
}

@Test func anAppsCommandSurvivesDumpAndParse() throws {
    var configuration = DaemonConfiguration()
    configuration.launch.appCommands = [
        "com.example.mail": ["/usr/bin/mail-sync", "--account", "Work Mail", "50%", "\\"],
        "com.example.plain": ["/bin/true"],
        // CR LF is one Character in Swift: written raw, it would end the dumped line.
        "com.example.lines": ["/bin/echo", "a\r\nb"],
    ]
    configuration.launch.appOOMScoreAdjustments = ["com.example.mail": 100]
    let text = configuration.renderINI()
    #expect(
        text.contains(
            "[Launch]\nExecStart=/usr/bin/mail-sync --account \"Work Mail\" 50%% \"\\\\\"\nOOMScoreAdjust=100\n"),
        "\(text)")
    #expect(text.contains("# apps.d/com.example.plain.conf\n[Policy]\n[Launch]\nExecStart=/bin/true\n"), "\(text)")
    let reparsed = DaemonConfiguration.parseRenderedINI(text, fileName: "dump")
    #expect(reparsed.diagnostics.isEmpty, "\(reparsed.diagnostics)")
    #expect(reparsed.configuration.launch == configuration.launch)
}
