// The typed effective configuration of bgtaskd, with its defaults and where each number comes from.

import BGTaskCore

/// Everything `bgtaskd.conf`, its drop-ins and `apps.d/` can set, after loading and validation.
///
/// The default value is the configuration of a host with no configuration files.
public struct DaemonConfiguration: Hashable, Sendable {
    /// The policy the core runs: `[Policy]` (and `apps.d/NAME.conf`), `[Limits] TasksPerAppMax` and
    /// `HistorySize`, `[Memory] ReclaimForeground`.
    public var core = CorePolicy()

    /// `[Memory]`: reclamation thresholds and the cgroup location.
    public var memory = Memory()

    /// `[Limits]` that bound clients rather than policy.
    public var limits = Limits()

    /// `[Access]`: who may act as a controller.
    public var access = Access()

    /// `[Launch]` of the `apps.d/NAME.conf` files: how the daemon launches each app.
    public var launch = Launch()

    /// `[Conditions]`: where the host conditions scheduled work waits on are read.
    public var conditions = Conditions()

    /// The shipped defaults, as bgtaskd(8) lists them.
    public init() {}

    /// `[Memory]` settings other than `ReclaimForeground` (which the core owns).
    public struct Memory: Hashable, Sendable {
        /// `AppsMemoryMax`: reclaim when the apps together use more than this many bytes; nil (`infinity`,
        /// the default) turns this trigger off, leaving the host's free memory and PSI as the triggers.
        /// It exists to make reclamation testable without starving the host.
        public var appsMemoryMaxBytes: UInt64? = nil

        /// `MemoryWarnPercent`: send `memoryWarning` when `MemAvailable` falls under this share of RAM.
        /// 10 % is earlyoom's default first threshold (`-m 10`), where it starts sending SIGTERM.
        public var warnPercent: Int = 10

        /// `MemoryCriticalPercent`: reclaim at once under this share. 5 % is earlyoom's default SIGKILL
        /// threshold (half the first one). Must not exceed `warnPercent`.
        public var criticalPercent: Int = 5

        /// `MemoryWarningGraceSec`: the wait between `memoryWarning` and re-measuring. 500 ms is ample for an
        /// app to drop caches (the event arrives in well under a millisecond) yet short next to the seconds
        /// in which a pressure stall turns into a kernel OOM kill.
        public var warningGrace: Duration = .milliseconds(500)

        /// `ReclaimDryRun`: log the reclamation decisions instead of killing. Off by default.
        public var reclaimDryRun: Bool = false

        /// `CgroupRoot`: the cgroup directory (cgroup2, or a v1 freezer hierarchy's on hosts without cgroup2)
        /// under which the daemon forks managed apps into cgroups of their own, even under a service manager; nil
        /// (the default): under systemd apps are units of the service manager, else they get no cgroup. Tests point
        /// it at a tree they own.
        public var cgroupRoot: String? = nil

        /// `MemoryCgroupRoot`: a v1 memory controller directory under which managed apps get memory cgroups, on
        /// hybrid hosts whose cgroup2 has no memory controller; nil means none (the memory of apps the daemon forks
        /// is then their PSS).
        public var memoryCgroupRoot: String? = nil

        /// The shipped defaults, as bgtaskd(8) lists them.
        public init() {}
    }

    /// `[Limits]` settings other than `TasksPerAppMax` and `HistorySize` (which the core owns).
    public struct Limits: Hashable, Sendable {
        /// `ConnectionsPerUserMax`: open Varlink connections per uid. Each app holds two, so 256 covers a
        /// hundred apps of one user plus controllers, while one user cannot exhaust the daemon's descriptors.
        public var connectionsPerUserMax: Int = 256

        /// `ConnectionsMax`: open Varlink connections in total. 1024 covers a device's few hundred apps (two
        /// connections each) several times over; with at most `MessageSizeMax` of input and 256 KiB of output
        /// held per connection, it also bounds what all clients together can make the daemon buffer.
        public var connectionsMax: Int = 1024

        /// `PostPayloadSizeMax`: the largest `Post` payload, as JSON. 4 KiB is Apple's push notification payload
        /// limit; with `QueuedEventsPerAppMax` it caps a suspended app's queue at 256 KiB.
        public var postPayloadSizeMaxBytes: Int = 4 * 1024

        /// `MessageSizeMax`: the largest Varlink message accepted, in bytes. 64 KiB: far above any call of the
        /// interface, small enough that a flood of them stays cheap.
        public var messageSizeMaxBytes: Int = 64 * 1024

        /// The shipped defaults, as bgtaskd(8) lists them.
        public init() {}
    }

    /// `[Access]` settings.
    public struct Access: Hashable, Sendable {
        /// `ControllerGroup`: members of this group (a name or a numeric gid) may make controller calls for
        /// any app; nil (the default) leaves controller calls to root and each app's own uid.
        public var controllerGroup: String? = nil

        /// `User=` of `[Access]` in `apps.d/NAME.conf`, by app name: the user (a name or a numeric uid) the name
        /// is pinned to. Only that user may register the name; unset names are open to every user.
        public var appUsers: [String: String] = [:]

        /// The shipped defaults, as bgtaskd(8) lists them.
        public init() {}
    }

    /// `[Conditions]` settings: where the power_supply class is read, and when a battery counts as low.
    public struct Conditions: Hashable, Sendable {
        /// `PowerSupplyPath`: the kernel's power_supply class directory, read where UPower is not on the system bus;
        /// nil (the default) is `/sys/class/power_supply`. Tests and unusual hosts point it at a tree of the same
        /// shape (each supply a directory with `type`, `online`, `capacity`…), watched with inotify.
        public var powerSupplyPath: String? = nil

        /// `BatteryLowPercent`: from the power_supply class, a system battery at or under this charge is low (as
        /// is one whose `capacity_level` says `Low` or `Critical`). 15 % is where Android's JobScheduler and
        /// WorkManager call the battery low (`BatteryManager`'s low level).
        public var batteryLowPercent: Int = 15

        /// The shipped defaults, as bgtaskd(8) lists them.
        public init() {}
    }

    /// `[Launch]` settings of `apps.d/NAME.conf`: how `Launch` starts the app.
    public struct Launch: Hashable, Sendable {
        /// `OOMScoreAdjust=` of `[Launch]` in `apps.d/NAME.conf`, by app name: the app's `oom_score_adj` when the
        /// daemon launches it (its unit's `OOMScoreAdjust=`, or written by the forked child before exec), from
        /// -1000 (never chosen by the kernel's OOM killer) to 1000 (chosen first). Unset names get
        /// `defaultOOMScoreAdjust`.
        public var appOOMScoreAdjustments: [String: Int32] = [:]

        /// `ExecStart=` of `[Launch]` in `apps.d/NAME.conf`, by app name: the program and its arguments the daemon
        /// starts the app with when one of its scheduled requests is due and it is not running (through the service
        /// manager where there is one, as `Launch` does). Names without one wait for their app to register.
        public var appCommands: [String: [String]] = [:]

        /// The kernel's neutral 0: under the kernel's own OOM killer a launched app weighs as any process does,
        /// never as the daemon, whose unit lowers its own to -500 so that it outlives the apps.
        public static let defaultOOMScoreAdjust: Int32 = 0

        /// The kernel's range of `oom_score_adj` (and systemd's of `OOMScoreAdjust=`).
        public static let oomScoreAdjustRange: ClosedRange<Int32> = -1000...1000

        /// The shipped defaults, as bgtaskd(8) lists them.
        public init() {}

        /// The `oom_score_adj` the app named `name` is launched with.
        public func oomScoreAdjust(for name: String) -> Int32 {
            appOOMScoreAdjustments[name] ?? Self.defaultOOMScoreAdjust
        }
    }
}

extension DaemonConfiguration {
    /// The smallest `MessageSizeMax` accepted: one page. Below it a `Post` with a modest payload, or a
    /// `Launch` with a long command line, would already be refused.
    public static let messageSizeMinimumBytes = 4 * 1024

    /// The smallest `PostPayloadSizeMax` accepted: `{}` and a little more; zero would refuse every payload.
    public static let postPayloadSizeMinimumBytes = 16

    /// The largest `MessageSizeMax` accepted: 16 MiB, systemd's own Varlink buffer limit
    /// (`VARLINK_BUFFER_MAX`). Past it a few hundred connections could pin gigabytes.
    public static let messageSizeMaximumBytes = 16 * 1024 * 1024

    /// `--dump-config`: every section and key with its value in force, in canonical syntax, then one
    /// `[Policy]` block per app override (after an `# apps.d/NAME.conf` comment) holding the values that
    /// differ from the default policy, an `[Access]` block with `User=` when the app's name is pinned, and a
    /// `[Launch]` block with `ExecStart=` and `OOMScoreAdjust=` when the app has them.
    /// `parseRenderedINI(_:fileName:)` reads it back to the same configuration.
    public func renderINI() -> String {
        var lines = ["# bgtaskd effective configuration: every key with the value in force."]
        lines.append("[\(ConfigurationSection.policy.rawValue)]")
        for key in PolicyKey.allCases {
            lines.append(Self.assignment(key.rawValue, key.field.render(core.defaultAppPolicy)))
        }
        for section in ConfigurationSection.allCases where section != .policy {
            lines.append("")
            lines.append("[\(section.rawValue)]")
            for key in DaemonKey.allCases where key.section == section {
                lines.append(Self.assignment(key.rawValue, key.field.render(self)))
            }
        }
        let appNames = Set(core.appPolicies.keys).union(access.appUsers.keys)
            .union(launch.appOOMScoreAdjustments.keys).union(launch.appCommands.keys)
        for name in appNames.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            lines.append("")
            lines.append("\(DaemonConfiguration.appMarkerPrefix)\(name)\(DaemonConfiguration.appMarkerSuffix)")
            let policy = core.appPolicies[name] ?? core.defaultAppPolicy
            lines.append("[\(ConfigurationSection.policy.rawValue)]")
            for key in PolicyKey.allCases where !key.field.isEqual(policy, core.defaultAppPolicy) {
                lines.append(Self.assignment(key.rawValue, key.field.render(policy)))
            }
            if let user = access.appUsers[name] {
                lines.append("[\(ConfigurationSection.access.rawValue)]")
                lines.append("\(Self.appUserKey)=\(user)")
            }
            let adjustment = launch.appOOMScoreAdjustments[name]
            let command = launch.appCommands[name]
            if adjustment != nil || command != nil {
                lines.append("[\(Self.appLaunchSection)]")
            }
            if let command { lines.append(Self.assignment(Self.appExecStartKey, CommandLineWords.join(command))) }
            if let adjustment { lines.append("\(Self.appOOMScoreAdjustKey)=\(adjustment)") }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `Key=value` as a line that reads back as written. A value ending in an odd run of backslashes (a
    /// `CgroupRoot` or `ControllerGroup` read from `Key=a\\\ `) would continue onto the next line; a trailing
    /// space, which reading trims, ends the line there, as it did in the file the value came from.
    static func assignment(_ key: String, _ value: String) -> String {
        let line = key + "=" + value
        return INIFile.endsWithContinuation(line) ? line + " " : line
    }

    /// Reads `renderINI()` output back: the text before the first `# apps.d/NAME.conf` line is read as the
    /// main file, and each such line starts the text of that app's file. Diagnostics name `fileName` with
    /// the line numbers of `text`.
    public static func parseRenderedINI(_ text: String, fileName: String) -> ConfigurationLoadResult {
        /// Whose text the lines being gathered are.
        enum Chunk {
            case main
            case app(String)
            /// A block under a marker with an invalid name: dropped, never read as part of the main file.
            case ignored
        }
        var builder = ConfigurationBuilder(mainFile: fileName)
        var chunk = Chunk.main
        var chunkLines: [String] = []
        var chunkFirstLine = 1
        func flush(into builder: inout ConfigurationBuilder) {
            let file = INIFile(
                parsing: chunkLines.joined(separator: "\n"), fileName: fileName, firstLineNumber: chunkFirstLine)
            switch chunk {
            case .main: builder.applyMainFile(file)
            case .app(let name): builder.addAppFile(file, appName: name)
            case .ignored: break
            }
        }
        for (offset, line) in INIFile.lines(of: text).enumerated() {
            guard let name = appName(inMarker: line) else {
                chunkLines.append(line)
                continue
            }
            flush(into: &builder)
            chunkLines = []
            chunkFirstLine = offset + 2
            do throws(AppNameError) {
                try ConfigurationLoader.validateAppName(name)
                chunk = .app(name)
            } catch {
                builder.report(
                    .error, at: FileLocation(file: fileName, line: offset + 1), "\(error); ignoring this app's block")
                chunk = .ignored
            }
        }
        flush(into: &builder)
        var result = builder.finish(sources: ConfigurationSources(root: "", read: [fileName]))
        // One file: line order, whichever pass found the problem (app blocks are applied last).
        result.diagnostics = result.diagnostics.enumerated().sorted { lhs, rhs in
            (lhs.element.line ?? 0, lhs.offset) < (rhs.element.line ?? 0, rhs.offset)
        }.map(\.element)
        return result
    }

    /// The key of `[Access]` in an app file that pins the app's name to a user.
    static let appUserKey = "User"

    /// The section of an app file (only) saying how the app is launched, and its key.
    static let appLaunchSection = "Launch"
    static let appOOMScoreAdjustKey = "OOMScoreAdjust"
    static let appExecStartKey = "ExecStart"

    static let appMarkerPrefix = "# apps.d/"
    static let appMarkerSuffix = ".conf"

    /// The app name in an `# apps.d/NAME.conf` line, or nil for any other line.
    static func appName(inMarker line: String) -> String? {
        guard line.hasPrefix(appMarkerPrefix), line.hasSuffix(appMarkerSuffix),
            line.utf8.count >= appMarkerPrefix.utf8.count + appMarkerSuffix.utf8.count
        else { return nil }
        return String(line.dropFirst(appMarkerPrefix.count).dropLast(appMarkerSuffix.count))
    }
}

/// Why a file name in `apps.d/` does not name an app.
public enum AppNameError: Error, Hashable, Sendable, CustomStringConvertible {
    /// `apps.d/.conf`.
    case empty
    /// A `/` would make the name a path.
    case containsSlash(String)
    /// A leading `.` marks hidden and editor files, never apps.
    case startsWithDot(String)
    /// Control characters (a newline in a file name) would break the diagnostics and `--dump-config`.
    case containsControlCharacter(String)

    public var description: String {
        switch self {
        case .empty: return "invalid app name \"\": the name before .conf is empty"
        case .containsSlash(let name): return "invalid app name \(String(reflecting: name)): it contains \"/\""
        case .startsWithDot(let name): return "invalid app name \(String(reflecting: name)): it starts with \".\""
        case .containsControlCharacter(let name):
            return "invalid app name \(String(reflecting: name)): it contains a control character"
        }
    }
}
