// Parsers of the cgroup files the daemon reads: /proc/PID/cgroup, cgroup.events, cgroup.procs, single values and
// the v1 freezer's state. Cgroup names are chosen by whoever may create them (a user in a delegated subtree), so
// every parser here takes hostile text and fails closed with a `ProcParseError`.
import BGTaskPOSIX
import Glibc

/// One line of `/proc/PID/cgroup`: a hierarchy the process belongs to, and its cgroup's path there.
public struct ProcessCgroup: Hashable, Sendable {
    /// The hierarchy's id: 0 for cgroup2, a positive number for each v1 hierarchy.
    public var hierarchyID: Int
    /// The v1 controllers of the hierarchy (`memory`, `freezer`, `name=systemd`); empty for cgroup2.
    public var controllers: [String]
    /// The cgroup's path from the hierarchy's root, starting with `/`.
    public var path: String

    /// A membership from its parts.
    public init(hierarchyID: Int, controllers: [String], path: String) {
        self.hierarchyID = hierarchyID
        self.controllers = controllers
        self.path = path
    }

    /// Whether this is the cgroup2 line (`0::/path`).
    public var isUnified: Bool { hierarchyID == 0 && controllers.isEmpty }

    /// Parses `/proc/PID/cgroup`: `ID:CONTROLLERS:PATH` per line. A path may hold `:` (only the first two
    /// separate fields) but never a newline, since the kernel escapes nothing here and a cgroup name cannot
    /// contain one. The kernel appends ` (deleted)` to the path of a removed cgroup: such a line is refused, the
    /// cgroup is gone.
    public static func parse(_ text: String) throws(ProcParseError) -> [ProcessCgroup] {
        var result: [ProcessCgroup] = []
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if lines.last == "" { lines.removeLast() }
        guard !lines.isEmpty else { throw ProcParseError(file: "cgroup", reason: "no line") }
        for (index, line) in lines.enumerated() {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3, let id = Int(parts[0]), id >= 0, parts[0].first != "+" else {
                throw ProcParseError(file: "cgroup", line: index + 1, reason: "bad line \(quoted(line))")
            }
            let controllers =
                parts[1].isEmpty
                ? [] : parts[1].split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            let path = String(parts[2])
            guard path.hasPrefix("/"), !path.hasSuffix(" (deleted)") else {
                throw ProcParseError(file: "cgroup", line: index + 1, reason: "bad path \(quoted(path))")
            }
            guard !controllers.contains(where: \.isEmpty), id != 0 || controllers.isEmpty else {
                throw ProcParseError(file: "cgroup", line: index + 1, reason: "bad controllers \(quoted(parts[1]))")
            }
            result.append(ProcessCgroup(hierarchyID: id, controllers: controllers, path: path))
        }
        return result
    }
}

/// A flat keyed cgroup file (`cgroup.events`, `memory.events`): one `KEY VALUE` line per key, each value a
/// non-negative integer.
public struct CgroupKeyedValues: Hashable, Sendable {
    /// The values by key.
    public var values: [String: UInt64]

    /// The value of `key`, if the file has it.
    public subscript(key: String) -> UInt64? { values[key] }

    /// Parses the file's text; a repeated key, a value that is not a whole number, or a cut file is refused.
    public static func parse(_ text: String, file: String) throws(ProcParseError) -> CgroupKeyedValues {
        guard text.isEmpty || text.hasSuffix("\n") else {
            throw ProcParseError(file: file, reason: "cut short: it does not end in a newline")
        }
        var values: [String: UInt64] = [:]
        for (index, line) in text.split(separator: "\n").enumerated() {
            let parts = fields(line)
            guard parts.count == 2, parts[1].first != "+", let value = UInt64(parts[1]) else {
                throw ProcParseError(file: file, line: index + 1, reason: "bad line \(quoted(line))")
            }
            guard values.updateValue(value, forKey: String(parts[0])) == nil else {
                throw ProcParseError(file: file, line: index + 1, reason: "repeated key \(quoted(parts[0]))")
            }
        }
        return CgroupKeyedValues(values: values)
    }
}

/// The process ids of `cgroup.procs` (or a v1 `tasks` file): one positive number per line.
public enum CgroupProcesses {
    /// Parses the file's text, in the kernel's order.
    public static func parse(_ text: String, file: String = "cgroup.procs") throws(ProcParseError) -> [pid_t] {
        guard text.isEmpty || text.hasSuffix("\n") else {
            throw ProcParseError(file: file, reason: "cut short: it does not end in a newline")
        }
        var pids: [pid_t] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().enumerated() {
            guard line.first != "+", let pid = pid_t(line), pid > 0 else {
                throw ProcParseError(file: file, line: index + 1, reason: "bad pid \(quoted(line))")
            }
            pids.append(pid)
        }
        return pids
    }
}

/// A file holding one whole number and a newline (`memory.current`, `memory.usage_in_bytes`).
public enum CgroupNumber {
    /// Parses the file's text.
    public static func parse(_ text: String, file: String) throws(ProcParseError) -> UInt64 {
        guard text.hasSuffix("\n"), text.first != "+", let value = UInt64(text.dropLast()) else {
            throw ProcParseError(file: file, reason: "expected a whole number, got \(quoted(text))")
        }
        return value
    }
}

/// The state in a v1 `freezer.state` file.
public enum FreezerState: String, Hashable, Sendable, CaseIterable {
    /// Running.
    case thawed = "THAWED"
    /// Asked to freeze, some tasks not yet frozen.
    case freezing = "FREEZING"
    /// Every task frozen.
    case frozen = "FROZEN"

    /// Parses the file's text (`FROZEN` and a newline).
    public static func parse(_ text: String) throws(ProcParseError) -> FreezerState {
        guard text.hasSuffix("\n"), let state = FreezerState(rawValue: String(text.dropLast())) else {
            throw ProcParseError(file: "freezer.state", reason: "unknown state \(quoted(text))")
        }
        return state
    }
}
