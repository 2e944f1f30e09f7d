// Loader tests on an in-memory tree: defaults, drop-in order, resets, per-app files, diagnostics, validation.

import BGTaskConfig
import BGTaskCore
import Testing

let mainPath = "/etc/bgtaskd/bgtaskd.conf"
let dropInPath = "/etc/bgtaskd/bgtaskd.conf.d"
let appsPath = "/etc/bgtaskd/apps.d"

func load(_ files: [String: String], unreadable: [String: String] = [:]) -> ConfigurationLoadResult {
    ConfigurationLoader(
        path: mainPath, daemonUserID: 0, fileSystem: InMemoryFileSystem(files: files, unreadable: unreadable)
    )
    .load()
}

/// The diagnostics as `file:line: severity` strings, the part tests pin down exactly.
func places(_ result: ConfigurationLoadResult) -> [String] {
    result.diagnostics.map { diagnostic in
        "\(diagnostic.file):\(diagnostic.line.map(String.init) ?? "-"): \(diagnostic.severity.rawValue)"
    }
}

/// The keys and their defaults as bgtaskd(8) lists them, as a configuration file.
let documentedDefaults = """
    [Policy]
    BackgroundTimeSec=600s
    ExpirationWarningSec=5s
    EnterBackgroundGraceSec=5s
    WillTerminateGraceSec=5s
    LaunchTimeoutSec=5s
    LockedSuspendGraceSec=2s
    BackgroundBudgetPerDaySec=0
    ExitsOnSuspend=no
    [Memory]
    AppsMemoryMax=infinity
    MemoryWarnPercent=10
    MemoryCriticalPercent=5
    MemoryWarningGraceSec=500ms
    ReclaimForeground=no
    ReclaimDryRun=no
    CgroupRoot=
    [Limits]
    TasksPerAppMax=64
    AppsPerUserMax=128
    ConnectionsMax=1024
    ConnectionsPerUserMax=256
    MessageSizeMax=64K
    QueuedEventsPerAppMax=64
    PostPayloadSizeMax=4K
    HistorySize=1000
    ScheduledRequestsPerAppMax=64
    ScheduledRequestsPerUserMax=256
    ScheduledRequestsMax=4096
    [Access]
    ControllerGroup=
    [Conditions]
    PowerSupplyPath=
    BatteryLowPercent=15
    [Scheduling]
    ScheduledTasksMax=2
    ScheduledTimePerDaySec=30min
    RefreshTaskSec=30s
    ProcessingTaskSec=10min
    """

@Test func schedulingKeysSetTheirFields() {
    let result = load([
        mainPath: """
        [Scheduling]
        ScheduledTasksMax=3
        ScheduledTimePerDaySec=0
        RefreshTaskSec=45s
        ProcessingTaskSec=20min
        [Limits]
        ScheduledRequestsPerAppMax=8
        ScheduledRequestsPerUserMax=16
        ScheduledRequestsMax=100
        """
    ])
    #expect(result.diagnostics.isEmpty, "\(result.diagnostics)")
    let core = result.configuration.core
    #expect(core.scheduledTasksMax == 3 && core.scheduledTimePerDay == .zero)
    #expect(core.refreshTaskTime == .seconds(45) && core.processingTaskTime == .seconds(1_200))
    #expect(core.scheduledRequestsPerAppMax == 8 && core.scheduledRequestsPerUserMax == 16)
    #expect(core.scheduledRequestsMax == 100)
    // At least one running task and one request: zero is refused with the key's line.
    let zero = load([mainPath: "[Scheduling]\nScheduledTasksMax=0\n"])
    #expect(zero.diagnostics.count == 1 && zero.configuration.core.scheduledTasksMax == 2, "\(zero.diagnostics)")
}

@Test func conditionsKeysSetTheirFields() {
    let result = load([mainPath: "[Conditions]\nPowerSupplyPath=/run/test/power_supply\nBatteryLowPercent=20\n"])
    #expect(result.diagnostics.isEmpty)
    #expect(result.configuration.conditions.powerSupplyPath == "/run/test/power_supply")
    #expect(result.configuration.conditions.batteryLowPercent == 20)
    #expect(DaemonConfiguration().conditions.powerSupplyPath == nil)
}

@Test func noFilesMeansDefaults() {
    let result = load([:])
    #expect(result.configuration == DaemonConfiguration())
    #expect(result.diagnostics.isEmpty)
    #expect(result.filesRead.isEmpty)
    #expect(!result.hasErrors)
}

@Test func defaultsAreTheDocumentedOnes() {
    let result = load([mainPath: documentedDefaults])
    #expect(result.diagnostics.isEmpty, "\(result.diagnostics)")
    #expect(result.configuration == DaemonConfiguration())
    #expect(result.filesRead == [mainPath])
}

@Test func everyKeyIsApplied() throws {
    let result = load([
        mainPath: """
        [Policy]
        BackgroundTimeSec=30s
        ExpirationWarningSec=3s
        EnterBackgroundGraceSec=1500ms
        WillTerminateGraceSec=10s
        LaunchTimeoutSec=1min
        LockedSuspendGraceSec=0
        BackgroundBudgetPerDaySec=1h
        ExitsOnSuspend=yes
        [Memory]
        AppsMemoryMax=1.5G
        MemoryWarnPercent=20%
        MemoryCriticalPercent=7
        MemoryWarningGraceSec=2s
        ReclaimForeground=true
        ReclaimDryRun=on
        CgroupRoot=/sys/fs/cgroup/unified/bgtaskd-test
        [Limits]
        TasksPerAppMax=8
        ConnectionsPerUserMax=16
        MessageSizeMax=1M
        HistorySize=0
        [Access]
        ControllerGroup=bgtask-controllers
        """
    ])
    #expect(result.diagnostics.isEmpty, "\(result.diagnostics)")
    let configuration = result.configuration
    let policy = configuration.core.defaultAppPolicy
    #expect(policy.backgroundTime == .seconds(30))
    #expect(policy.expirationWarning == .seconds(3))
    #expect(policy.enterBackgroundGrace == .milliseconds(1_500))
    #expect(policy.willTerminateGrace == .seconds(10))
    #expect(policy.launchTimeout == .seconds(60))
    #expect(policy.lockedSuspendGrace == .zero)
    #expect(policy.backgroundBudgetPerDay == .seconds(3_600))
    #expect(policy.exitsOnSuspend)
    #expect(configuration.memory.appsMemoryMaxBytes == 3 << 29)
    #expect(configuration.memory.warnPercent == 20)
    #expect(configuration.memory.criticalPercent == 7)
    #expect(configuration.memory.warningGrace == .seconds(2))
    #expect(configuration.core.reclaimForeground)
    #expect(configuration.memory.reclaimDryRun)
    #expect(configuration.memory.cgroupRoot == "/sys/fs/cgroup/unified/bgtaskd-test")
    #expect(configuration.core.tasksPerAppMax == 8)
    #expect(configuration.limits.connectionsPerUserMax == 16)
    #expect(configuration.limits.messageSizeMaxBytes == 1 << 20)
    #expect(configuration.core.historySize == 0)
    #expect(configuration.access.controllerGroup == "bgtask-controllers")
}

@Test func dropInsApplyInByteOrderAfterTheMainFile() {
    let result = load([
        mainPath: "[Policy]\nBackgroundTimeSec=100s\n[Limits]\nHistorySize=1\n",
        "\(dropInPath)/20-b.conf": "[Policy]\nBackgroundTimeSec=200s\n",
        "\(dropInPath)/10-a.conf":
            "[Policy]\nBackgroundTimeSec=300s\nExpirationWarningSec=7s\n[Limits]\nHistorySize=5\n",
        // "9-" sorts after "20-" byte-wise: the order is lexicographic, not numeric, as in systemd.
        "\(dropInPath)/9-late.conf": "[Limits]\nHistorySize=9\n",
        "\(dropInPath)/README": "[Limits]\nHistorySize=77\n",
        "\(dropInPath)/.hidden.conf": "[Limits]\nHistorySize=78\n",
        "\(dropInPath)/30-c.conf.disabled": "[Limits]\nHistorySize=79\n",
    ])
    #expect(result.diagnostics.isEmpty, "\(result.diagnostics)")
    #expect(
        result.filesRead == [
            mainPath, "\(dropInPath)/10-a.conf", "\(dropInPath)/20-b.conf", "\(dropInPath)/9-late.conf",
        ])
    #expect(result.configuration.core.defaultAppPolicy.backgroundTime == .seconds(200))
    #expect(result.configuration.core.defaultAppPolicy.expirationWarning == .seconds(7))
    #expect(result.configuration.core.historySize == 9)
}

@Test func upperCaseSortsBeforeLowerCase() {
    let result = load([
        "\(dropInPath)/a.conf": "[Limits]\nHistorySize=1\n",
        "\(dropInPath)/B.conf": "[Limits]\nHistorySize=2\n",
    ])
    #expect(result.filesRead == ["\(dropInPath)/B.conf", "\(dropInPath)/a.conf"])
    #expect(result.configuration.core.historySize == 1)
}

@Test func dropInsApplyWithoutAMainFile() {
    let result = load(["\(dropInPath)/10-a.conf": "[Memory]\nReclaimDryRun=yes\n"])
    #expect(result.configuration.memory.reclaimDryRun)
    #expect(result.diagnostics.isEmpty)
}

@Test func anEmptyAssignmentResetsToTheDefault() {
    let result = load([
        mainPath: "[Policy]\nBackgroundTimeSec=100s\n[Memory]\nCgroupRoot=/x\nAppsMemoryMax=1G\n",
        "\(dropInPath)/50-reset.conf": "[Policy]\nBackgroundTimeSec=\n[Memory]\nCgroupRoot=\nAppsMemoryMax=\n",
    ])
    #expect(result.diagnostics.isEmpty)
    #expect(result.configuration == DaemonConfiguration())
}

@Test func aBadValueKeepsThePreviousOneAndSaysWhere() throws {
    let dropIn = "\(dropInPath)/10-bad.conf"
    let result = load([
        mainPath: "[Policy]\nBackgroundTimeSec=30s\n",
        dropIn: "# a comment\n[Policy]\nBackgroundTimeSec=5 parsecs\n[Limits]\nTasksPerAppMax=0\nHistorySize=-1\n",
    ])
    #expect(result.configuration.core.defaultAppPolicy.backgroundTime == .seconds(30))
    #expect(result.configuration.core.tasksPerAppMax == 64)
    #expect(result.configuration.core.historySize == 1_000)
    #expect(places(result) == ["\(dropIn):3: error", "\(dropIn):5: error", "\(dropIn):6: error"])
    let first = try #require(result.diagnostics.first)
    #expect(first.message.contains(#"invalid time span "5 parsecs": unknown unit "parsecs""#))
    #expect(first.message.hasSuffix("keeping BackgroundTimeSec=30s"))
    #expect(first.description.hasPrefix("\(dropIn):3: error: BackgroundTimeSec: "))
    #expect(result.hasErrors)
}

@Test func syntaxErrorsCarryTheirFileAndLine() {
    let dropIn = "\(dropInPath)/10-x.conf"
    let result = load([
        mainPath: "Orphan=1\n[Policy]\nno equals here\n",
        dropIn: "[Limits\nTasksPerAppMax=3\n[Access]\n=group\n",
    ])
    #expect(
        places(result) == ["\(mainPath):1: error", "\(mainPath):3: error", "\(dropIn):1: error", "\(dropIn):4: error"])
    #expect(result.configuration == DaemonConfiguration())
}

@Test func unknownSectionsAndKeysAreWarningsWithHints() throws {
    let result = load([
        mainPath: """
        [Policy]
        BackgroundTimeSek=5s
        TasksPerAppMax=3
        backgroundtimesec=7s
        X-Vendor-Thing=ignored
        [policy]
        BackgroundTimeSec=9s
        [Frobnicate]
        Anything=1
        Else=2
        [X-Vendor]
        Whatever=3
        [Memory]
        HistorySize=5
        """
    ])
    #expect(places(result) == [2, 3, 4, 6, 8, 14].map { "\(mainPath):\($0): warning" })
    let messages = result.diagnostics.map(\.message)
    #expect(messages[0].contains(#"unknown key "BackgroundTimeSek" in [Policy]"#))
    #expect(messages[1].contains("it belongs in [Limits]"))
    #expect(messages[2].contains("did you mean BackgroundTimeSec?"))
    #expect(messages[3].contains("unknown section [policy]") && messages[3].contains("did you mean [Policy]?"))
    #expect(messages[4].contains("unknown section [Frobnicate]"))
    #expect(messages[5].contains("did you mean") == false && messages[5].contains("it belongs in [Limits]"))
    #expect(result.configuration == DaemonConfiguration())
    #expect(!result.hasErrors)
}

@Test func aKeySetTwiceInOneFileIsAWarningButAcrossFilesIsNormal() {
    let result = load([
        mainPath: "[Policy]\nBackgroundTimeSec=1min\nExitsOnSuspend=yes\nBackgroundTimeSec=2min\n",
        "\(dropInPath)/10-a.conf": "[Policy]\nBackgroundTimeSec=3min\nExitsOnSuspend=\nExitsOnSuspend=no\n",
    ])
    #expect(places(result) == ["\(mainPath):4: warning"])
    #expect(result.diagnostics.first?.message.contains("already set on line 2") == true)
    #expect(result.configuration.core.defaultAppPolicy.backgroundTime == .seconds(180))
    #expect(result.configuration.core.defaultAppPolicy.exitsOnSuspend == false)
}

@Test func perAppFilesMergeOverTheDefaultPolicy() throws {
    let result = load([
        mainPath: "[Policy]\nExpirationWarningSec=3s\nBackgroundTimeSec=2min\n",
        "\(dropInPath)/10-a.conf": "[Policy]\nLaunchTimeoutSec=9s\n",
        "\(appsPath)/com.example.mail.conf": "[Policy]\nBackgroundTimeSec=30s\nExitsOnSuspend=yes\n",
        "\(appsPath)/com.example.maps.conf":
            "[Policy]\nBackgroundTimeSec=5min\n# back to the default policy's value:\nBackgroundTimeSec=\n",
        "\(appsPath)/notes.txt": "[Policy]\nBackgroundTimeSec=1s\n",
    ])
    #expect(result.diagnostics.isEmpty, "\(result.diagnostics)")
    let defaultPolicy = result.configuration.core.defaultAppPolicy
    var mail = defaultPolicy
    mail.backgroundTime = .seconds(30)
    mail.exitsOnSuspend = true
    #expect(result.configuration.core.appPolicies == ["com.example.mail": mail, "com.example.maps": defaultPolicy])
    #expect(result.configuration.core.appPolicy(for: "com.example.mail").expirationWarning == .seconds(3))
    #expect(result.configuration.core.appPolicy(for: "com.example.mail").launchTimeout == .seconds(9))
    #expect(result.configuration.core.appPolicy(for: "other").backgroundTime == .seconds(120))
    #expect(result.filesRead.suffix(2) == ["\(appsPath)/com.example.mail.conf", "\(appsPath)/com.example.maps.conf"])
}

@Test func appFilesMayHoldOnlyPolicy() {
    let app = "\(appsPath)/mail.conf"
    let result = load([
        app: "[Policy]\nBackgroundTimeSec=30s\n[Memory]\nReclaimDryRun=yes\n[Policy]\nHistorySize=3\nBogus=1\n"
    ])
    #expect(places(result) == ["\(app):3: error", "\(app):6: warning", "\(app):7: warning"])
    #expect(result.diagnostics[1].message.contains("apps.d files may set only [Policy] keys"))
    #expect(result.configuration.memory.reclaimDryRun == false)
    #expect(result.configuration.core.historySize == 1_000)
    #expect(result.configuration.core.appPolicies["mail"]?.backgroundTime == .seconds(30))
}

@Test func badAppFileNamesAreRejected() {
    let result = load([
        "\(appsPath)/.hidden.conf": "[Policy]\nBackgroundTimeSec=1s\n",
        "\(appsPath)/.conf": "[Policy]\nBackgroundTimeSec=1s\n",
        "\(appsPath)/good.conf": "[Policy]\nBackgroundTimeSec=10s\n",
    ])
    #expect(Set(result.configuration.core.appPolicies.keys) == ["good"])
    #expect(Set(places(result)) == ["\(appsPath)/.hidden.conf:-: error", "\(appsPath)/.conf:-: error"])
}

@Test(
    arguments: [
        ("com.example.mail", nil), ("My App", nil), ("ünïcödé", nil), ("", AppNameError.empty),
        ("a/b", .containsSlash("a/b")), ("/", .containsSlash("/")), (".hidden", .startsWithDot(".hidden")),
        ("..", .startsWithDot("..")), ("line\nbreak", .containsControlCharacter("line\nbreak")),
        ("tab\there", .containsControlCharacter("tab\there")),
    ] as [(String, AppNameError?)])
func validatesAppNames(_ name: String, _ expected: AppNameError?) {
    do throws(AppNameError) {
        try ConfigurationLoader.validateAppName(name)
        #expect(expected == nil)
    } catch {
        #expect(error == expected)
    }
}

@Test func aMissingMainFileIsFineAnUnreadableOneIsAnError() throws {
    let result = load(
        ["\(dropInPath)/10-a.conf": "[Limits]\nHistorySize=5\n"],
        unreadable: [mainPath: "Permission denied"])
    #expect(places(result) == ["\(mainPath):-: error"])
    let diagnostic = try #require(result.diagnostics.first)
    #expect(diagnostic.message.contains("Permission denied"))
    #expect(diagnostic.description == "\(mainPath): error: \(diagnostic.message)")
    #expect(result.configuration.core.historySize == 5)
    #expect(result.filesRead == ["\(dropInPath)/10-a.conf"])
}

@Test func unreadableFilesAreErrorsAndAFileForADirectoryIsRefused() {
    let result = load(
        [dropInPath: "not a directory", "\(appsPath)/a.conf": "[Policy]\n"],
        unreadable: ["\(appsPath)/b.conf": "Input/output error"])
    #expect(places(result) == ["\(appsPath)/b.conf:-: error"])
    #expect(result.refused.map(\.description) == ["\(dropInPath): a regular file, not a directory"])
    #expect(Set(result.configuration.core.appPolicies.keys) == ["a"])
}

@Test func aMainPathWithoutADirectoryFindsAppsBesideIt() {
    let loader = ConfigurationLoader(path: "bgtaskd.conf", daemonUserID: 0, fileSystem: InMemoryFileSystem())
    #expect(loader.dropInDirectory == "bgtaskd.conf.d")
    #expect(loader.appsDirectory == "apps.d")
    #expect(ConfigurationLoader(path: "/bgtaskd.conf", daemonUserID: 0).appsDirectory == "/apps.d")
    #expect(ConfigurationLoader(daemonUserID: 0).path == "/etc/bgtaskd/bgtaskd.conf")
    #expect(ConfigurationLoader(daemonUserID: 0).appsDirectory == "/etc/bgtaskd/apps.d")
}

// MARK: Value limits and cross-field validation

@Test(arguments: [
    ("[Limits]\nMessageSizeMax=1K\n", "out of range"),
    ("[Limits]\nMessageSizeMax=17M\n", "out of range"),
    ("[Limits]\nMessageSizeMax=infinity\n", "infinity"),
    ("[Limits]\nConnectionsPerUserMax=0\n", "at least 1"),
    ("[Memory]\nCgroupRoot=relative/path\n", "not an absolute path"),
    ("[Memory]\nCgroupRoot=/sys/fs/cgroup/../etc\n", "\"..\""),
    ("[Memory]\nMemoryWarnPercent=101\n", "from 0 to 100"),
    ("[Access]\nControllerGroup=bad:name\n", "\":\""),
    ("[Access]\nControllerGroup=two words\n", "\" \""),
    ("[Access]\nControllerGroup=-flag\n", "starts with"),
    ("[Access]\nControllerGroup=99999999999\n", "gid"),
    ("[Policy]\nExitsOnSuspend=maybe\n", "expected one of yes"),
    ("[Policy]\nBackgroundTimeSec=infinity\n", "infinity"),
    ("[Conditions]\nPowerSupplyPath=power_supply\n", "not an absolute path"),
    ("[Conditions]\nBatteryLowPercent=101\n", "from 0 to 100"),
])
func valuesOutsideTheirLimitsAreErrors(_ text: String, _ fragment: String) throws {
    let result = load([mainPath: text])
    #expect(places(result) == ["\(mainPath):2: error"])
    let message = try #require(result.diagnostics.first?.message)
    #expect(message.contains(fragment), "\(message)")
    #expect(result.configuration == DaemonConfiguration())
}

@Test func messageSizeLimitsAreInclusive() {
    let low = load([mainPath: "[Limits]\nMessageSizeMax=4K\n"])
    let high = load([mainPath: "[Limits]\nMessageSizeMax=16M\n"])
    #expect(low.diagnostics.isEmpty && high.diagnostics.isEmpty)
    #expect(low.configuration.limits.messageSizeMaxBytes == 4_096)
    #expect(high.configuration.limits.messageSizeMaxBytes == 16 << 20)
}

@Test func controllerGroupAcceptsNamesAndGids() {
    for group in ["wheel", "bgtask-controllers", "_svc", "1000", "Domain_Users", "build$"] {
        let result = load([mainPath: "[Access]\nControllerGroup=\(group)\n"])
        #expect(result.diagnostics.isEmpty, "\(group): \(result.diagnostics)")
        #expect(result.configuration.access.controllerGroup == group)
    }
}

@Test func criticalAboveWarnIsAnErrorAndIsLowered() throws {
    let dropIn = "\(dropInPath)/10-a.conf"
    let result = load([mainPath: "[Memory]\nMemoryWarnPercent=8\n", dropIn: "[Memory]\n\nMemoryCriticalPercent=9\n"])
    #expect(places(result) == ["\(dropIn):3: error"])
    #expect(result.configuration.memory.warnPercent == 8)
    #expect(result.configuration.memory.criticalPercent == 8)
    // Only the warning level set: it is the one to blame.
    let lowWarn = load([mainPath: "[Memory]\nMemoryWarnPercent=3\n"])
    #expect(places(lowWarn) == ["\(mainPath):2: error"])
    #expect(lowWarn.configuration.memory.criticalPercent == 3)
    // Equal levels are allowed.
    #expect(load([mainPath: "[Memory]\nMemoryWarnPercent=5\n"]).diagnostics.isEmpty)
}

@Test func expirationWarningNotBelowTheBudgetIsAWarning() throws {
    let app = "\(appsPath)/short.conf"
    let result = load([
        mainPath: "[Policy]\nBackgroundTimeSec=4s\n",
        "\(appsPath)/inherits.conf": "[Policy]\nExitsOnSuspend=yes\n",
        app: "[Policy]\nBackgroundTimeSec=1min\nExpirationWarningSec=2min\n",
    ])
    // One warning for the default policy (blaming the line that set BackgroundTimeSec), none for the app that
    // inherits it, one for the app that sets its own values.
    #expect(places(result) == ["\(mainPath):2: warning", "\(app):3: warning"])
    #expect(result.diagnostics[0].message.contains("ExpirationWarningSec=5s is not below BackgroundTimeSec=4s"))
    #expect(result.configuration.core.defaultAppPolicy.backgroundTime == .seconds(4))
    #expect(!result.hasErrors)
}

@Test func aDailyBudgetOverADayIsAWarning() {
    let result = load([mainPath: "[Policy]\nBackgroundBudgetPerDaySec=25h\n"])
    #expect(places(result) == ["\(mainPath):2: warning"])
    #expect(load([mainPath: "[Policy]\nBackgroundBudgetPerDaySec=24h\n"]).diagnostics.isEmpty)
}

@Test func appsMemoryMaxZeroIsAWarning() {
    let result = load([mainPath: "[Memory]\nAppsMemoryMax=0\n"])
    #expect(places(result) == ["\(mainPath):2: warning"])
    #expect(result.configuration.memory.appsMemoryMaxBytes == 0)
}

@Test func appFilesGiveTheAppAnOOMScoreAdjustOfItsOwn() {
    let result = load([
        "\(appsPath)/mail.conf": "[Launch]\nOOMScoreAdjust=-200\n",
        "\(appsPath)/game.conf": "[Launch]\nOOMScoreAdjust=1000\n[Policy]\nBackgroundTimeSec=30s\n",
        "\(appsPath)/plain.conf": "[Policy]\nBackgroundTimeSec=30s\n",
        "\(appsPath)/reset.conf": "[Launch]\nOOMScoreAdjust=300\nOOMScoreAdjust=\n",
    ])
    #expect(result.diagnostics.isEmpty, "\(result.diagnostics)")
    let launch = result.configuration.launch
    #expect(launch.oomScoreAdjust(for: "mail") == -200)
    #expect(launch.oomScoreAdjust(for: "game") == 1000)
    // Unset, reset, or no file at all: the kernel's neutral 0, never the daemon's own.
    #expect(launch.oomScoreAdjust(for: "plain") == 0)
    #expect(launch.oomScoreAdjust(for: "reset") == 0)
    #expect(launch.oomScoreAdjust(for: "unknown") == DaemonConfiguration.Launch.defaultOOMScoreAdjust)
    #expect(launch.appOOMScoreAdjustments.keys.sorted() == ["game", "mail"])
}

@Test(arguments: [
    ("1001", "1001 is out of range (expected -1000 to 1000)"),
    ("-1001", "-1001 is out of range"),
    ("99999999999", "99999999999 is out of range"),
    ("abc", "\"abc\" is not a whole number"),
    ("1.5", "\"1.5\" is not a whole number"),
    ("-", "\"-\" is not a whole number"),
    ("--5", "\"--5\" is not a whole number"),
    ("5 0", "\"5 0\" is not a whole number"),
    ("0x10", "\"0x10\" is not a whole number"),
])
func aBadOOMScoreAdjustIsAnErrorAndKeepsTheEarlierValue(value: String, message: String) throws {
    let app = "\(appsPath)/mail.conf"
    let result = load([app: "[Launch]\nOOMScoreAdjust=250\nOOMScoreAdjust=\(value)\n"])
    #expect(places(result) == ["\(app):3: error"])
    let diagnostic = try #require(result.diagnostics.first)
    #expect(diagnostic.message.contains("OOMScoreAdjust: "), "\(diagnostic.message)")
    #expect(diagnostic.message.contains(message), "\(diagnostic.message)")
    #expect(diagnostic.message.hasSuffix("keeping OOMScoreAdjust=250"), "\(diagnostic.message)")
    #expect(result.configuration.launch.oomScoreAdjust(for: "mail") == 250)
}

@Test func launchKeysBelongInAppFilesOnly() {
    let app = "\(appsPath)/mail.conf"
    let result = load([
        mainPath: "[Launch]\nOOMScoreAdjust=100\n",
        app: "[Launch]\nOOMScoreAdjust=+7\nNice=5\nOOMScoreAdjust=-7\n[Service]\nOOMScoreAdjust=9\n",
    ])
    #expect(places(result) == ["\(mainPath):1: warning", "\(app):3: warning", "\(app):4: warning", "\(app):5: error"])
    #expect(result.diagnostics[0].message.contains("[Launch] belongs in apps.d/NAME.conf"))
    #expect(result.diagnostics[1].message.contains("the keys there are ExecStart= and OOMScoreAdjust="))
    #expect(result.diagnostics[2].message.contains("already set on line 2"))
    #expect(result.diagnostics[3].message.contains("[Policy], [Access] and [Launch]"))
    #expect(result.configuration.launch.appOOMScoreAdjustments == ["mail": -7])
}

@Test func appFilesSayHowToStartTheAppForItsScheduledRequests() {
    let app = "\(appsPath)/mail.conf"
    let result = load([
        app: """
        [Launch]
        ExecStart=/usr/bin/mail-sync --account "Work Mail" 'a b'c --rate=50%% \\"x\\"
        """,
        "\(appsPath)/reset.conf": "[Launch]\nExecStart=/bin/true\nExecStart=\n",
        "\(appsPath)/bad.conf": "[Launch]\nExecStart=/bin/good\nExecStart=/bin/bad \"open\n",
    ])
    #expect(places(result) == ["\(appsPath)/bad.conf:3: error"])
    #expect(result.diagnostics.first?.message == "ExecStart: a \" quote is never closed; keeping /bin/good")
    #expect(
        result.configuration.launch.appCommands == [
            "mail": ["/usr/bin/mail-sync", "--account", "Work Mail", "a bc", "--rate=50%", "\"x\""],
            "bad": ["/bin/good"],
        ])
}

@Test(
    arguments: [
        ("   ", CommandLineWords.Problem.empty),
        ("\"\"", .empty),
        ("/bin/x \"a", .unterminatedQuote("\"")),
        ("/bin/x 'a", .unterminatedQuote("'")),
        ("/bin/x a\\", .trailingBackslash),
        ("/bin/x %n", .unsupported("the % specifier")),
        ("/bin/x \"%h\"", .unsupported("the % specifier")),
        // The manager would expand these from the app's environment: the daemon never does, so they are refused.
        ("/bin/x $HOME", .unsupported("the $ of an environment variable")),
        ("/bin/x ${X}", .unsupported("the $ of an environment variable")),
        ("/bin/x '$HOME'", .unsupported("the $ of an environment variable")),
        ("/bin/x price=5$", .unsupported("the $ of an environment variable")),
        ("-/bin/x", .unsupported("the prefix - of the program")),
        ("@/bin/x name", .unsupported("the prefix @ of the program")),
        ("/bin/x \\x41", .unsupported("the escape \\x")),
        ("/bin/x \\\u{301}", .unsupported("the escape \\\u{301}")),
    ] as [(String, CommandLineWords.Problem)])
func aCommandThatDoesNotSplitIsRefused(line: String, problem: CommandLineWords.Problem) {
    #expect(throws: problem) { try CommandLineWords.split(line) }
}

@Test func aDoubledDollarIsADollarQuotedOrNot() throws {
    #expect(try CommandLineWords.split("/bin/x $$HOME \"$${X}\" '5$$'") == ["/bin/x", "$HOME", "${X}", "5$"])
}

@Test(arguments: [
    ["/bin/x"], ["/bin/x", ""], ["/bin/x", "a b", "tab\there", "new\nline", "cr\r"], ["/bin/x", "50%", "%%"],
    ["/bin/x", "$HOME", "${X}", "$$", "%n", "a \\ $b"],
    ["/bin/x", "\"quoted\"", "it's", "back\\slash"], ["prog", "-", "--flag=value", "ünïcödé"],
    // Read scalar by scalar: CR LF (one Character in Swift) written as two escapes, a backslash or a quote before a
    // combining mark still escaped, a vertical tab and a no-break space (not systemd's whitespace) kept as they are.
    ["/bin/x", "a\r\nb", "\\\u{301}", "\"\u{301}", "v\u{0B}t", "no\u{A0}break"],
])
func aCommandIsWrittenSoThatItSplitsBackTheSame(words: [String]) throws {
    let line = CommandLineWords.join(words)
    #expect(try CommandLineWords.split(line) == words, "\(line)")
}
