// Applies parsed files to the configuration in load order, then validates across fields, collecting diagnostics.

import BGTaskCore

/// A configuration file or directory the trust rule refused: none of its settings apply (for a directory, none of
/// its files').
public struct RefusedConfiguration: Hashable, Sendable, CustomStringConvertible {
    /// The path the loader looked for it at (`/etc/bgtaskd/apps.d/mail.conf`, `/etc/bgtaskd/apps.d`).
    public var path: String
    /// The rule it fails.
    public var refusal: TrustRefusal
    /// Whether it is a directory the loader would have listed (`bgtaskd.conf.d`, `apps.d`).
    public var isDirectory: Bool

    /// Creates a refusal of `path`.
    public init(path: String, refusal: TrustRefusal, isDirectory: Bool) {
        self.path = path
        self.refusal = refusal
        self.isDirectory = isDirectory
    }

    /// `PATH: the rule it fails`, as `--dump-config` lists it.
    public var description: String { "\(path): \(refusal)" }

    /// What follows from the refusal, for the log: "refused; its settings are not used".
    public var consequence: String {
        isDirectory ? "refused; none of the files in it are used" : "refused; its settings are not used"
    }
}

/// Where the configuration came from: the root, the files read, the files and directories refused.
public struct ConfigurationSources: Hashable, Sendable {
    /// The configuration root: the directory above which nothing is checked.
    public var root: String
    /// The files read and applied, in order.
    public var read: [String]
    /// The files and directories refused by the trust rule, in the order they were met.
    public var refused: [RefusedConfiguration]

    /// Creates sources.
    public init(root: String, read: [String] = [], refused: [RefusedConfiguration] = []) {
        self.root = root
        self.read = read
        self.refused = refused
    }

    /// Comment lines for the top of `--dump-config`: `# read: PATH` for each file read, then `# refused: PATH:
    /// reason` for each file or directory refused. Control characters in paths are escaped so each stays one line.
    public func renderComments() -> String {
        var text = ""
        for path in read { text += "# read: \(Self.printable(path))\n" }
        for refused in refused { text += "# refused: \(Self.printable(refused.description))\n" }
        return text
    }

    /// `text` with control characters as `\xNN`.
    static func printable(_ text: String) -> String {
        var result = ""
        for scalar in text.unicodeScalars {
            if scalar.value < 0x20 || scalar.value == 0x7f {
                result += "\\x" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}

/// What loading produced: the configuration in force and everything worth telling the operator.
public struct ConfigurationLoadResult: Hashable, Sendable {
    /// The effective configuration. Values that failed to parse or validate kept their previous value.
    public var configuration: DaemonConfiguration
    /// Problems in file order, then the cross-field ones.
    public var diagnostics: [ConfigurationDiagnostic]
    /// The files read and the ones refused.
    public var sources: ConfigurationSources

    /// Creates a result.
    public init(
        configuration: DaemonConfiguration, diagnostics: [ConfigurationDiagnostic], sources: ConfigurationSources
    ) {
        self.configuration = configuration
        self.diagnostics = diagnostics
        self.sources = sources
    }

    /// The files that were read and applied, in order (for the startup log).
    public var filesRead: [String] { sources.read }

    /// The files and directories the trust rule refused.
    public var refused: [RefusedConfiguration] { sources.refused }

    /// Whether something written in the files was not applied: an error, or a file refused.
    public var hasErrors: Bool { !sources.refused.isEmpty || diagnostics.contains { $0.severity == .error } }
}

/// Applies main files in order, then app files over the resulting default policy, then validates.
///
/// Keys and sections starting with `X-` are ignored without a diagnostic, as systemd ignores them: they
/// are how other tools keep their own settings in the same file.
struct ConfigurationBuilder {
    /// The name to blame for cross-field problems whose values are all defaults (none, in practice).
    let mainFile: String
    private(set) var configuration = DaemonConfiguration()
    private(set) var diagnostics: [ConfigurationDiagnostic] = []
    /// Where the value in force of each main-file key was set, by key name; absent while it is the default.
    private var origins: [String: FileLocation] = [:]
    /// The app files, applied over the default policy by `finish`, once all main files are in.
    private var appFiles: [(name: String, file: INIFile)] = []
    /// `origins` for each app's own file.
    private var appOrigins: [String: [String: FileLocation]] = [:]

    init(mainFile: String) {
        self.mainFile = mainFile
    }

    mutating func report(_ severity: ConfigurationDiagnostic.Severity, at location: FileLocation, _ message: String) {
        diagnostics.append(ConfigurationDiagnostic(at: location, severity: severity, message: message))
    }

    mutating func report(_ severity: ConfigurationDiagnostic.Severity, file: String, _ message: String) {
        diagnostics.append(ConfigurationDiagnostic(file: file, line: nil, severity: severity, message: message))
    }

    /// Applies `bgtaskd.conf` or one of its drop-ins.
    mutating func applyMainFile(_ file: INIFile) {
        let firstDiagnostic = diagnostics.endIndex
        defer { sortByLine(from: firstDiagnostic) }
        diagnostics += file.diagnostics
        for section in file.sections
        where ConfigurationSection(rawValue: section.name) == nil && !Self.isExtension(section.name) {
            var message = "unknown section [\(section.name)]; ignoring its keys"
            if section.name == DaemonConfiguration.appLaunchSection {
                message += " ([\(section.name)] belongs in apps.d/NAME.conf, for one app)"
            } else if let known = ConfigurationSection.allCases.first(where: {
                $0.rawValue.lowercased() == section.name.lowercased()
            }) {
                message += " (did you mean [\(known.rawValue)]?)"
            }
            report(.warning, at: section.location, message)
        }
        var mainOrigins = origins
        var assignedLines: [String: Int] = [:]
        for entry in file.entries where !Self.isExtension(entry.key) {
            guard let section = ConfigurationSection(rawValue: entry.section) else { continue }
            if section == .policy, let key = PolicyKey(rawValue: entry.key) {
                var policy = configuration.core.defaultAppPolicy
                assign(
                    key.field, entry, to: &policy, defaults: AppPolicy(), origins: &mainOrigins,
                    assignedLines: &assignedLines)
                configuration.core.defaultAppPolicy = policy
            } else if let key = DaemonKey(rawValue: entry.key), key.section == section {
                var updated = configuration
                assign(
                    key.field, entry, to: &updated, defaults: DaemonConfiguration(), origins: &mainOrigins,
                    assignedLines: &assignedLines)
                configuration = updated
            } else {
                report(.warning, at: entry.location, Self.unknownKeyMessage(entry, inAppFile: false))
            }
        }
        origins = mainOrigins
    }

    /// Records `apps.d/NAME.conf`, applied by `finish` over the default policy of all main files.
    mutating func addAppFile(_ file: INIFile, appName: String) {
        appFiles.append((appName, file))
    }

    /// Applies the app files, validates, and returns the result.
    mutating func finish(sources: ConfigurationSources) -> ConfigurationLoadResult {
        for (name, file) in appFiles {
            applyAppFile(file, appName: name)
        }
        validate()
        return ConfigurationLoadResult(configuration: configuration, diagnostics: diagnostics, sources: sources)
    }

    private mutating func applyAppFile(_ file: INIFile, appName: String) {
        let firstDiagnostic = diagnostics.endIndex
        defer { sortByLine(from: firstDiagnostic) }
        diagnostics += file.diagnostics
        let policySection = ConfigurationSection.policy.rawValue
        let accessSection = ConfigurationSection.access.rawValue
        let launchSection = DaemonConfiguration.appLaunchSection
        let appSections = [policySection, accessSection, launchSection]
        for section in file.sections where !appSections.contains(section.name) && !Self.isExtension(section.name) {
            report(
                .error, at: section.location,
                "apps.d files may contain only [\(policySection)], [\(accessSection)] and [\(launchSection)]; "
                    + "ignoring [\(section.name)] and its keys")
        }
        if configuration.core.appPolicies[appName] != nil {
            report(.warning, file: file.fileName, "app \(String(reflecting: appName)) appears twice; the later wins")
        }
        // Resetting a key in an app file (Key=) means "as for every other app", not the built-in default.
        let inherited = configuration.core.defaultAppPolicy
        var policy = inherited
        var fileOrigins: [String: FileLocation] = [:]
        var assignedLines: [String: Int] = [:]
        for entry in file.entries where entry.section == policySection && !Self.isExtension(entry.key) {
            guard let key = PolicyKey(rawValue: entry.key) else {
                report(.warning, at: entry.location, Self.unknownKeyMessage(entry, inAppFile: true))
                continue
            }
            assign(
                key.field, entry, to: &policy, defaults: inherited, origins: &fileOrigins,
                assignedLines: &assignedLines)
        }
        configuration.core.appPolicies[appName] = policy
        appOrigins[appName] = fileOrigins
        applyAppAccess(file, appName: appName)
        applyAppLaunch(file, appName: appName)
    }

    /// `[Launch]` of an app file: `OOMScoreAdjust=` gives the app an `oom_score_adj` of its own, a whole number
    /// from -1000 to 1000; `ExecStart=` is the command that starts the app for its scheduled requests, split as
    /// systemd splits its own (`CommandLineWords`). A bad value is reported and leaves the earlier one (or the
    /// default: 0, no command) in force; a key assigned empty goes back to the default.
    private mutating func applyAppLaunch(_ file: INIFile, appName: String) {
        let launchSection = DaemonConfiguration.appLaunchSection
        let adjustKey = DaemonConfiguration.appOOMScoreAdjustKey
        let commandKey = DaemonConfiguration.appExecStartKey
        var assignedLines: [String: Int] = [:]
        for entry in file.entries where entry.section == launchSection && !Self.isExtension(entry.key) {
            guard entry.key == adjustKey || entry.key == commandKey else {
                report(
                    .warning, at: entry.location,
                    "unknown key \(String(reflecting: entry.key)) in [\(launchSection)] of an apps.d file; "
                        + "ignoring it (the keys there are \(commandKey)= and \(adjustKey)=)")
                continue
            }
            if entry.value.isEmpty {
                if entry.key == adjustKey {
                    configuration.launch.appOOMScoreAdjustments[appName] = nil
                } else {
                    configuration.launch.appCommands[appName] = nil
                }
                assignedLines[entry.key] = nil
                continue
            }
            if entry.key == adjustKey {
                let range = DaemonConfiguration.Launch.oomScoreAdjustRange
                guard let value = Int32(entry.value), range.contains(value) else {
                    let kept = configuration.launch.oomScoreAdjust(for: appName)
                    let problem =
                        Int(entry.value) == nil
                        ? "\(String(reflecting: entry.value)) is not a whole number"
                        : "\(entry.value) is out of range"
                    report(
                        .error, at: entry.location,
                        "\(adjustKey): \(problem) (expected \(range.lowerBound) to \(range.upperBound)); "
                            + "keeping \(adjustKey)=\(kept)")
                    continue
                }
                configuration.launch.appOOMScoreAdjustments[appName] = value
            } else {
                let words: [String]
                do {
                    words = try CommandLineWords.split(entry.value)
                } catch {
                    let kept =
                        configuration.launch.appCommands[appName].map { "keeping \(CommandLineWords.join($0))" }
                        ?? "leaving it unset"
                    report(.error, at: entry.location, "\(commandKey): \(error); \(kept)")
                    continue
                }
                configuration.launch.appCommands[appName] = words
            }
            if let assignedLine = assignedLines[entry.key] {
                report(
                    .warning, at: entry.location,
                    "\(entry.key) is already set on line \(assignedLine) of this file; the later value wins")
            }
            assignedLines[entry.key] = entry.location.line
        }
    }

    /// `[Access]` of an app file: `User=` pins the app's name to one user. A bad value is reported and leaves the
    /// name unpinned only when no earlier valid value pinned it (a typo never unpins silently: the earlier value
    /// stays); `User=` empty unpins.
    private mutating func applyAppAccess(_ file: INIFile, appName: String) {
        let accessSection = ConfigurationSection.access.rawValue
        var assignedLine: Int?
        for entry in file.entries where entry.section == accessSection && !Self.isExtension(entry.key) {
            guard entry.key == DaemonConfiguration.appUserKey else {
                report(
                    .warning, at: entry.location,
                    "unknown key \(String(reflecting: entry.key)) in [\(accessSection)] of an apps.d file; "
                        + "ignoring it (the only key there is \(DaemonConfiguration.appUserKey)=)")
                continue
            }
            if entry.value.isEmpty {
                configuration.access.appUsers[appName] = nil
                assignedLine = nil
                continue
            }
            do throws(FieldError) {
                try Field<DaemonConfiguration>.checkAccountName(entry.value, kind: "user", numericName: "uid")
            } catch {
                let kept = configuration.access.appUsers[appName].map { "keeping User=\($0)" } ?? "leaving User unset"
                report(.error, at: entry.location, "User: \(error); \(kept)")
                continue
            }
            if let assignedLine {
                report(
                    .warning, at: entry.location,
                    "User is already set on line \(assignedLine) of this file; the later value wins")
            }
            assignedLine = entry.location.line
            configuration.access.appUsers[appName] = entry.value
        }
    }

    /// Applies one assignment: `Key=` copies the field from `defaults`; a bad value is reported and leaves
    /// the field as it was; a second valid value for the key in the same file gets a warning.
    private mutating func assign<Root>(
        _ field: Field<Root>, _ entry: INIFile.Entry, to root: inout Root, defaults: Root,
        origins: inout [String: FileLocation], assignedLines: inout [String: Int]
    ) {
        if entry.value.isEmpty {
            field.copy(from: defaults, to: &root)
            origins[entry.key] = nil
            assignedLines[entry.key] = nil
            return
        }
        let previous = field.render(root)
        do throws(FieldError) {
            try field.assign(entry.value, to: &root)
        } catch {
            let kept = previous.isEmpty ? "leaving \(entry.key) unset" : "keeping \(entry.key)=\(previous)"
            report(.error, at: entry.location, "\(entry.key): \(error); \(kept)")
            return
        }
        if let earlierLine = assignedLines[entry.key] {
            report(
                .warning, at: entry.location,
                "\(entry.key) is already set on line \(earlierLine) of this file; the later value wins")
        }
        assignedLines[entry.key] = entry.location.line
        origins[entry.key] = entry.location
    }

    // MARK: Cross-field validation

    private mutating func validate() {
        let memory = configuration.memory
        if memory.criticalPercent > memory.warnPercent {
            let location =
                origins[DaemonKey.memoryCriticalPercent.rawValue]
                ?? origins[DaemonKey.memoryWarnPercent.rawValue]
            let message =
                "MemoryCriticalPercent=\(memory.criticalPercent) exceeds MemoryWarnPercent=\(memory.warnPercent): "
                + "the critical level must not be above the warning level; using "
                + "MemoryCriticalPercent=\(memory.warnPercent)"
            report(.error, location, message)
            configuration.memory.criticalPercent = memory.warnPercent
        }
        if memory.appsMemoryMaxBytes == 0 {
            report(
                .warning, origins[DaemonKey.appsMemoryMax.rawValue],
                "AppsMemoryMax=0 keeps the apps over their limit all the time: every app is a reclamation candidate")
        }
        let defaultPolicy = configuration.core.defaultAppPolicy
        checkPolicy(defaultPolicy, origins: [origins])
        let appNames = configuration.core.appPolicies.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        for name in appNames {
            guard let policy = configuration.core.appPolicies[name] else { continue }
            // Only what the app file changed: the default policy's problems are already reported once.
            checkPolicy(policy, comparedWith: defaultPolicy, origins: [appOrigins[name] ?? [:], origins])
        }
    }

    /// Warns about policy values that work against each other. `origins` are searched in order for the
    /// location to blame. With `base`, a problem is reported only if the policy's values behind it differ
    /// from `base`'s: an app that inherits them shares the default policy's warning.
    private mutating func checkPolicy(
        _ policy: AppPolicy, comparedWith base: AppPolicy? = nil, origins: [[String: FileLocation]]
    ) {
        func location(_ keys: PolicyKey...) -> FileLocation? {
            for candidates in origins {
                for key in keys {
                    if let location = candidates[key.rawValue] { return location }
                }
            }
            return nil
        }
        func inherited(_ keys: PolicyKey...) -> Bool {
            guard let base else { return false }
            return keys.allSatisfy { $0.field.isEqual(policy, base) }
        }
        if policy.expirationWarning >= policy.backgroundTime,
            !inherited(.expirationWarningSec, .backgroundTimeSec)
        {
            report(
                .warning, location(.expirationWarningSec, .backgroundTimeSec),
                "ExpirationWarningSec=\(SystemdSyntax.formatTimeSpan(policy.expirationWarning)) is not below "
                    + "BackgroundTimeSec=\(SystemdSyntax.formatTimeSpan(policy.backgroundTime)), so apps get "
                    + "backgroundTaskExpiring as soon as they enter background")
        }
        if policy.backgroundBudgetPerDay > .seconds(86_400), !inherited(.backgroundBudgetPerDaySec) {
            report(
                .warning, location(.backgroundBudgetPerDaySec),
                "BackgroundBudgetPerDaySec=\(SystemdSyntax.formatTimeSpan(policy.backgroundBudgetPerDay)) is longer "
                    + "than the 24 h it is counted over, so it never limits anything (use 0 to turn it off)")
        }
    }

    private mutating func report(
        _ severity: ConfigurationDiagnostic.Severity, _ location: FileLocation?, _ message: String
    ) {
        if let location {
            report(severity, at: location, message)
        } else {
            report(severity, file: mainFile, message)
        }
    }

    // MARK: Helpers

    /// Puts one file's diagnostics (those from `start` on) in line order, file-wide ones first, keeping the
    /// order of those on the same line: syntax, section and key problems are found in separate passes.
    private mutating func sortByLine(from start: Int) {
        let sorted = diagnostics[start...].enumerated().sorted { lhs, rhs in
            (lhs.element.line ?? 0, lhs.offset) < (rhs.element.line ?? 0, rhs.offset)
        }
        diagnostics.replaceSubrange(start..., with: sorted.map(\.element))
    }

    /// systemd ignores sections and keys starting with `X-`; so does bgtaskd.
    static func isExtension(_ name: String) -> Bool {
        name.hasPrefix("X-")
    }

    /// "unknown key", with a hint when the key exists in another section or in another case.
    static func unknownKeyMessage(_ entry: INIFile.Entry, inAppFile: Bool) -> String {
        var message = "unknown key \(String(reflecting: entry.key)) in [\(entry.section)]; ignoring it"
        let known: [(key: String, section: ConfigurationSection)] =
            PolicyKey.allCases.map { ($0.rawValue, .policy) } + DaemonKey.allCases.map { ($0.rawValue, $0.section) }
        if let match = known.first(where: { $0.key == entry.key }) {
            message +=
                inAppFile
                ? " (apps.d files may set only [Policy] keys)"
                : " (it belongs in [\(match.section.rawValue)])"
        } else if let match = known.first(where: { $0.key.lowercased() == entry.key.lowercased() }) {
            message +=
                " (did you mean \(match.key)"
                + (match.section.rawValue == entry.section ? "?)" : " in [\(match.section.rawValue)]?)")
        }
        return message
    }
}
