// The key table of bgtaskd.conf as data: each key's section, field, syntax and limits, used to parse and dump.

import BGTaskCore

/// The sections of `bgtaskd.conf`, in `--dump-config` order.
enum ConfigurationSection: String, CaseIterable, Sendable {
    case policy = "Policy"
    case memory = "Memory"
    case limits = "Limits"
    case access = "Access"
    case conditions = "Conditions"
    case scheduling = "Scheduling"
}

/// A `[Policy]` key; these are also the only keys of `apps.d/NAME.conf`. Declared in `--dump-config` order.
enum PolicyKey: String, CaseIterable, Sendable {
    case backgroundTimeSec = "BackgroundTimeSec"
    case expirationWarningSec = "ExpirationWarningSec"
    case enterBackgroundGraceSec = "EnterBackgroundGraceSec"
    case willTerminateGraceSec = "WillTerminateGraceSec"
    case launchTimeoutSec = "LaunchTimeoutSec"
    case lockedSuspendGraceSec = "LockedSuspendGraceSec"
    case backgroundBudgetPerDaySec = "BackgroundBudgetPerDaySec"
    case exitsOnSuspend = "ExitsOnSuspend"

    /// The field of `AppPolicy` the key sets, and its syntax.
    var field: Field<AppPolicy> {
        switch self {
        case .backgroundTimeSec: return .duration(\.backgroundTime)
        case .expirationWarningSec: return .duration(\.expirationWarning)
        case .enterBackgroundGraceSec: return .duration(\.enterBackgroundGrace)
        case .willTerminateGraceSec: return .duration(\.willTerminateGrace)
        case .launchTimeoutSec: return .duration(\.launchTimeout)
        case .lockedSuspendGraceSec: return .duration(\.lockedSuspendGrace)
        case .backgroundBudgetPerDaySec: return .duration(\.backgroundBudgetPerDay)
        case .exitsOnSuspend: return .boolean(\.exitsOnSuspend)
        }
    }
}

/// A key of `[Memory]`, `[Limits]` or `[Access]`. Declared in `--dump-config` order.
enum DaemonKey: String, CaseIterable, Sendable {
    case appsMemoryMax = "AppsMemoryMax"
    case memoryWarnPercent = "MemoryWarnPercent"
    case memoryCriticalPercent = "MemoryCriticalPercent"
    case memoryWarningGraceSec = "MemoryWarningGraceSec"
    case reclaimForeground = "ReclaimForeground"
    case reclaimDryRun = "ReclaimDryRun"
    case cgroupRoot = "CgroupRoot"
    case memoryCgroupRoot = "MemoryCgroupRoot"
    case tasksPerAppMax = "TasksPerAppMax"
    case appsPerUserMax = "AppsPerUserMax"
    case connectionsMax = "ConnectionsMax"
    case connectionsPerUserMax = "ConnectionsPerUserMax"
    case messageSizeMax = "MessageSizeMax"
    case queuedEventsPerAppMax = "QueuedEventsPerAppMax"
    case postPayloadSizeMax = "PostPayloadSizeMax"
    case historySize = "HistorySize"
    case scheduledRequestsPerAppMax = "ScheduledRequestsPerAppMax"
    case scheduledRequestsPerUserMax = "ScheduledRequestsPerUserMax"
    case scheduledRequestsMax = "ScheduledRequestsMax"
    case controllerGroup = "ControllerGroup"
    case powerSupplyPath = "PowerSupplyPath"
    case batteryLowPercent = "BatteryLowPercent"
    case scheduledTasksMax = "ScheduledTasksMax"
    case scheduledTimePerDaySec = "ScheduledTimePerDaySec"
    case refreshTaskSec = "RefreshTaskSec"
    case processingTaskSec = "ProcessingTaskSec"

    /// The section the key belongs to.
    var section: ConfigurationSection {
        switch self {
        case .appsMemoryMax, .memoryWarnPercent, .memoryCriticalPercent, .memoryWarningGraceSec,
            .reclaimForeground, .reclaimDryRun, .cgroupRoot, .memoryCgroupRoot:
            return .memory
        case .tasksPerAppMax, .appsPerUserMax, .connectionsMax, .connectionsPerUserMax, .messageSizeMax,
            .queuedEventsPerAppMax, .postPayloadSizeMax, .historySize, .scheduledRequestsPerAppMax,
            .scheduledRequestsPerUserMax, .scheduledRequestsMax:
            return .limits
        case .controllerGroup:
            return .access
        case .powerSupplyPath, .batteryLowPercent:
            return .conditions
        case .scheduledTasksMax, .scheduledTimePerDaySec, .refreshTaskSec, .processingTaskSec:
            return .scheduling
        }
    }

    /// The field of `DaemonConfiguration` the key sets, its syntax and its limits.
    var field: Field<DaemonConfiguration> {
        switch self {
        case .appsMemoryMax: return .sizeOrInfinity(\.memory.appsMemoryMaxBytes)
        case .memoryWarnPercent: return .percentage(\.memory.warnPercent)
        case .memoryCriticalPercent: return .percentage(\.memory.criticalPercent)
        case .memoryWarningGraceSec: return .duration(\.memory.warningGrace)
        case .reclaimForeground: return .boolean(\.core.reclaimForeground)
        case .reclaimDryRun: return .boolean(\.memory.reclaimDryRun)
        case .cgroupRoot: return .absolutePath(\.memory.cgroupRoot)
        case .memoryCgroupRoot: return .absolutePath(\.memory.memoryCgroupRoot)
        // At least one lease, connection: zero would make the daemon unusable rather than strict.
        case .tasksPerAppMax: return .count(\.core.tasksPerAppMax, 1...Int.max)
        case .appsPerUserMax: return .count(\.core.appsPerUserMax, 1...Int.max)
        case .connectionsMax: return .count(\.limits.connectionsMax, 1...Int.max)
        case .connectionsPerUserMax: return .count(\.limits.connectionsPerUserMax, 1...Int.max)
        // At least one: a suspended app must be able to learn that something happened.
        case .queuedEventsPerAppMax: return .count(\.core.queuedEventsPerAppMax, 1...Int.max)
        case .postPayloadSizeMax:
            return .size(
                \.limits.postPayloadSizeMaxBytes,
                DaemonConfiguration.postPayloadSizeMinimumBytes...DaemonConfiguration.messageSizeMaximumBytes)
        case .messageSizeMax:
            return .size(
                \.limits.messageSizeMaxBytes,
                DaemonConfiguration.messageSizeMinimumBytes...DaemonConfiguration.messageSizeMaximumBytes)
        // Zero is allowed: no history, and ended apps vanish from GetApp at once.
        case .historySize: return .count(\.core.historySize, 0...Int.max)
        case .controllerGroup: return .groupName(\.access.controllerGroup)
        case .powerSupplyPath: return .absolutePath(\.conditions.powerSupplyPath)
        case .batteryLowPercent: return .percentage(\.conditions.batteryLowPercent)
        // At least one request and one running task: zero would refuse every submit rather than be strict.
        case .scheduledRequestsPerAppMax: return .count(\.core.scheduledRequestsPerAppMax, 1...Int.max)
        case .scheduledRequestsPerUserMax: return .count(\.core.scheduledRequestsPerUserMax, 1...Int.max)
        case .scheduledRequestsMax: return .count(\.core.scheduledRequestsMax, 1...Int.max)
        case .scheduledTasksMax: return .count(\.core.scheduledTasksMax, 1...Int.max)
        // Zero turns the daily budget off.
        case .scheduledTimePerDaySec: return .duration(\.core.scheduledTimePerDay)
        case .refreshTaskSec: return .duration(\.core.refreshTaskTime)
        case .processingTaskSec: return .duration(\.core.processingTaskTime)
        }
    }
}

/// Why a value was not applied to a field.
enum FieldError: Error, CustomStringConvertible {
    /// The text does not follow the syntax.
    case syntax(SyntaxError)
    /// The text is well formed but breaks a limit of the field; the message says which.
    case constraint(String)

    var description: String {
        switch self {
        case .syntax(let error): return error.description
        case .constraint(let message): return message
        }
    }
}

/// One configurable field of `Root`, with the syntax that sets it. The one place that maps text to values
/// and back, so parsing and `--dump-config` cannot drift apart.
enum Field<Root> {
    /// A finite time span.
    case duration(WritableKeyPath<Root, Duration>)
    /// A boolean.
    case boolean(WritableKeyPath<Root, Bool>)
    /// A whole number in a range.
    case count(WritableKeyPath<Root, Int>, ClosedRange<Int>)
    /// A percentage from 0 to 100.
    case percentage(WritableKeyPath<Root, Int>)
    /// A size in bytes, or `infinity` (nil).
    case sizeOrInfinity(WritableKeyPath<Root, UInt64?>)
    /// A finite size in bytes in a range.
    case size(WritableKeyPath<Root, Int>, ClosedRange<Int>)
    /// An absolute path; empty (nil) means automatic.
    case absolutePath(WritableKeyPath<Root, String?>)
    /// A group name or numeric gid; empty (nil) means none.
    case groupName(WritableKeyPath<Root, String?>)

    /// The value of the field in `root`, in canonical syntax. nil optionals render empty, which reads back
    /// as a reset to the default (nil).
    func render(_ root: Root) -> String {
        switch self {
        case .duration(let path): return SystemdSyntax.formatTimeSpan(root[keyPath: path])
        case .boolean(let path): return SystemdSyntax.formatBoolean(root[keyPath: path])
        case .count(let path, _), .percentage(let path): return String(root[keyPath: path])
        case .sizeOrInfinity(let path): return SystemdSyntax.formatSize(root[keyPath: path])
        case .size(let path, _): return SystemdSyntax.formatSize(UInt64(clamping: root[keyPath: path]))
        case .absolutePath(let path), .groupName(let path): return root[keyPath: path] ?? ""
        }
    }

    /// Sets the field from non-empty `text`; on error `root` is unchanged.
    func assign(_ text: String, to root: inout Root) throws(FieldError) {
        switch self {
        case .duration(let path):
            root[keyPath: path] = try Field.parsed { () throws(SyntaxError) in try SystemdSyntax.parseTimeSpan(text) }
        case .boolean(let path):
            root[keyPath: path] = try Field.parsed { () throws(SyntaxError) in try SystemdSyntax.parseBoolean(text) }
        case .count(let path, let range):
            root[keyPath: path] = try Field.parsed { () throws(SyntaxError) in
                try SystemdSyntax.parseInteger(text, in: range)
            }
        case .percentage(let path):
            root[keyPath: path] = try Field.parsed { () throws(SyntaxError) in
                try SystemdSyntax.parsePercentage(text)
            }
        case .sizeOrInfinity(let path):
            root[keyPath: path] = try Field.parsed { () throws(SyntaxError) in
                try SystemdSyntax.parseSizeOrInfinity(text)
            }
        case .size(let path, let range):
            let bytes = try Field.parsed { () throws(SyntaxError) in try SystemdSyntax.parseSize(text) }
            guard bytes >= UInt64(range.lowerBound), bytes <= UInt64(range.upperBound) else {
                throw .constraint(
                    "\(SystemdSyntax.formatSize(bytes)) is out of range (expected a size from "
                        + "\(SystemdSyntax.formatSize(UInt64(range.lowerBound))) to "
                        + "\(SystemdSyntax.formatSize(UInt64(range.upperBound))))")
            }
            root[keyPath: path] = Int(bytes)
        case .absolutePath(let path):
            try Field.checkAbsolutePath(text)
            root[keyPath: path] = text
        case .groupName(let path):
            try Field.checkGroupName(text)
            root[keyPath: path] = text
        }
    }

    private static func parsed<Value>(_ parse: () throws(SyntaxError) -> Value) throws(FieldError) -> Value {
        do {
            return try parse()
        } catch {
            throw .syntax(error)
        }
    }

    /// Copies the field's value from `source` into `root`: how `Key=` resets it.
    func copy(from source: Root, to root: inout Root) {
        switch self {
        case .duration(let path): root[keyPath: path] = source[keyPath: path]
        case .boolean(let path): root[keyPath: path] = source[keyPath: path]
        case .count(let path, _), .percentage(let path), .size(let path, _):
            root[keyPath: path] = source[keyPath: path]
        case .sizeOrInfinity(let path): root[keyPath: path] = source[keyPath: path]
        case .absolutePath(let path), .groupName(let path): root[keyPath: path] = source[keyPath: path]
        }
    }

    /// Whether the field has the same value in both.
    func isEqual(_ lhs: Root, _ rhs: Root) -> Bool {
        switch self {
        case .duration(let path): return lhs[keyPath: path] == rhs[keyPath: path]
        case .boolean(let path): return lhs[keyPath: path] == rhs[keyPath: path]
        case .count(let path, _), .percentage(let path), .size(let path, _):
            return lhs[keyPath: path] == rhs[keyPath: path]
        case .sizeOrInfinity(let path): return lhs[keyPath: path] == rhs[keyPath: path]
        case .absolutePath(let path), .groupName(let path): return lhs[keyPath: path] == rhs[keyPath: path]
        }
    }

    /// A directory (a cgroup, the power_supply class) must be absolute (the daemon's working directory is `/`, and a
    /// relative path would silently mean something else under a test runner), and free of control characters.
    private static func checkAbsolutePath(_ text: String) throws(FieldError) {
        guard text.unicodeScalars.first == "/" else {
            throw .constraint("\(String(reflecting: text)) is not an absolute path")
        }
        if text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw .constraint("\(String(reflecting: text)) contains a control character")
        }
        if text.split(separator: "/").contains("..") {
            throw .constraint("\(String(reflecting: text)) contains a \"..\" component")
        }
    }

    private static func checkGroupName(_ text: String) throws(FieldError) {
        try checkAccountName(text, kind: "group", numericName: "gid")
    }

    /// A user or group is a name as `useradd` accepts it in its relaxed form: no leading `-`, no whitespace,
    /// `:`, `/`, `,` or control characters (`:` and `,` would break `/etc/passwd` and `/etc/group`), at most
    /// 256 bytes. A name of digits only is read as a uid or gid, so it must fit in 32 bits.
    static func checkAccountName(_ text: String, kind: String, numericName: String) throws(FieldError) {
        if text.utf8.count > 256 {
            throw .constraint("\(kind) name \(String(reflecting: text)) is longer than 256 bytes")
        }
        if text.unicodeScalars.first == "-" {
            throw .constraint("\(kind) name \(String(reflecting: text)) starts with \"-\"")
        }
        let forbidden = text.unicodeScalars.first { scalar in
            ValueScanner.isWhitespace(scalar) || scalar == ":" || scalar == "/" || scalar == ","
                || scalar.properties.generalCategory == .control
        }
        if let forbidden {
            throw .constraint(
                "\(kind) name \(String(reflecting: text)) contains \(String(reflecting: String(forbidden)))")
        }
        if text.unicodeScalars.allSatisfy(ValueScanner.isDigit), UInt32(text) == nil {
            throw .constraint("\(numericName) \(text) is out of range (expected at most \(UInt32.max))")
        }
    }
}
