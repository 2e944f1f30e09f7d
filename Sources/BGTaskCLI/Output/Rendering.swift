// The human and the JSON renderings of the daemon's replies, as pure functions of the protocol's types.
import BGTaskArguments
import BGTaskJSON
import BGTaskProtocol
import Foundation

/// Renders replies of `io.bgtask.Lifecycle` for people (tables, lines) and for scripts (`--json`).
public enum Rendering {
    // MARK: JSON

    /// `value` as one line of JSON, with the field names the protocol module encodes (docs/PROTOCOL.md), every field
    /// present (absent ones as `null`), keys sorted so output is stable, and a newline.
    ///
    /// Fails only for a value JSON cannot represent (a NaN or infinite number), which the daemon never sends.
    public static func json(_ value: some Encodable) throws(CommandFailure) -> String {
        do {
            return String(decoding: try JSONTextEncoder(sortsKeys: true).encode(value), as: UTF8.self) + "\n"
        } catch {
            throw CommandFailure("cannot print the reply as JSON: \(error)")
        }
    }

    // MARK: Daemon

    /// The daemon's status: version, uptime, backends, counts and memory readings; then the memory of each of
    /// `apps` still running, heaviest first, and those of them never suspended, with why.
    public static func status(_ status: GetStatusReply, apps: [AppInfo] = []) -> String {
        let uptime = Formatting.duration(seconds: status.uptimeSec)
        var lines = ["bgtaskd \(Formatting.printable(status.version)), up \(uptime)"]
        lines.append("backends:  " + members(status.backends))
        lines.append("apps:      \(status.apps) (\(status.suspended) suspended)")
        lines.append("tasks:     \(status.tasks)")
        lines.append("memory:    " + members(status.memory))
        if let conditions = status.conditions {
            lines.append("conditions: " + members(conditions))
        }
        if let configuration = status.configuration {
            lines += self.configuration(configuration)
        }
        if let longest = status.loop["longestIterationMs"]?.doubleValue,
            let iterations = status.loop["iterations"]?.intValue
        {
            let source = status.loop["longestIterationSource"]?.stringValue.map { " (\(Formatting.printable($0)))" }
            lines.append(
                "loop:      \(iterations) dispatches, the longest \(Formatting.milliseconds(longest))\(source ?? "")")
        }
        let measured = apps.filter { $0.state != .terminated && $0.memoryBytes != nil }
            .sorted { ($0.memoryBytes ?? 0, $1.name) > ($1.memoryBytes ?? 0, $0.name) }
        for (index, app) in measured.enumerated() {
            let backend = app.memoryBackend.map { ", \(Formatting.printable($0))" } ?? ""
            lines.append(
                (index == 0 ? "by app:    " : "           ")
                    + "\(Formatting.printable(app.name)) \(Formatting.bytes(app.memoryBytes)) "
                    + "(\(app.state.rawValue)\(backend))")
        }
        let exempt = apps.filter { $0.state != .terminated && $0.suspensionExemption != nil }
        for (index, app) in exempt.enumerated() {
            lines.append(
                (index == 0 ? "exempt:    " : "           ")
                    + "\(Formatting.printable(app.name)) is never suspended: "
                    + Formatting.printable(app.suspensionExemption ?? ""))
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// Where the daemon's configuration came from: the root and how many files were read and refused, then each
    /// refused file or directory with the rule it fails, one to a line.
    static func configuration(_ configuration: ConfigurationInfo) -> [String] {
        let files = configuration.read.count == 1 ? "1 file" : "\(configuration.read.count) files"
        var lines = [
            "config:    \(Formatting.printable(configuration.root)): \(files) read, "
                + "\(configuration.refused.count) refused"
        ]
        for (index, refused) in configuration.refused.enumerated() {
            let what = refused.directory ? " (a directory: none of its files are used)" : ""
            lines.append(
                (index == 0 ? "refused:   " : "           ")
                    + "\(Formatting.printable(refused.path)): \(Formatting.printable(refused.reason))\(what)")
        }
        return lines
    }

    /// The members of a free-form object as `key=value`, sorted by key; byte counts (keys ending in `Bytes`)
    /// with a unit.
    static func members(_ object: [String: JSONValue]) -> String {
        guard !object.isEmpty else { return "-" }
        return object.keys.sorted().map { key in
            let value = object[key] ?? .null
            if key.hasSuffix("Bytes"), let bytes = value.intValue { return "\(key)=\(Formatting.bytes(bytes))" }
            return "\(Formatting.printable(key))=\(scalar(value))"
        }.joined(separator: "  ")
    }

    /// A JSON value for one line: strings bare, integers without a fraction, containers in brackets.
    static func scalar(_ value: JSONValue) -> String {
        switch value {
        case .null: return "-"
        case .bool(let flag): return flag ? "yes" : "no"
        case .number(let number): return Int64(exactly: number).map(String.init) ?? String(number)
        case .string(let text): return Formatting.printable(text)
        case .array(let elements): return "[" + elements.map(scalar).joined(separator: ",") + "]"
        case .object(let members):
            return "{"
                + members.keys.sorted().map { "\(Formatting.printable($0))=\(scalar(members[$0] ?? .null))" }
                .joined(separator: ",") + "}"
        }
    }

    // MARK: Apps

    /// One app in detail: state, process, cgroup, time left, memory and how it is measured, queued events, how it
    /// ended, how it was last suspended, why it is never suspended (when it is not), open tasks.
    public static func app(_ app: AppInfo) -> String {
        var lines = [Formatting.printable(app.name)]
        lines.append("  state:      \(app.state.rawValue)")
        lines.append("  process:    pid \(app.pid), uid \(app.uid), \(app.managed ? "managed" : "self-registered")")
        if let unit = app.unit { lines.append("  unit:       \(Formatting.printable(unit))") }
        if let cgroup = app.cgroup { lines.append("  cgroup:     \(Formatting.printable(cgroup))") }
        lines.append("  remaining:  \(remaining(app))")
        let backend = app.memoryBackend.map { " (\(Formatting.printable($0)))" } ?? ""
        lines.append("  memory:     \(Formatting.bytes(app.memoryBytes))\(backend)")
        if app.queuedEvents > 0 { lines.append("  queued:     \(app.queuedEvents) event(s)") }
        if app.droppedEvents > 0 {
            lines.append("  dropped:    \(app.droppedEvents) queued event(s), oldest first (QueuedEventsPerAppMax)")
        }
        if let exit = exit(app) { lines.append("  exit:       \(exit)") }
        switch app.suspendedWith {
        // The cgroup's path is on a line of its own; these say which freezer held it.
        case .unit: lines.append("  suspended:  frozen by the service manager through its unit (FreezeUnit)")
        case .cgroup2: lines.append("  suspended:  frozen through its cgroup (cgroup2)")
        case .cgroup1: lines.append("  suspended:  frozen through its cgroup (cgroup1 freezer)")
        case .group: lines.append("  suspended:  SIGSTOP to its process group")
        case .process: lines.append("  suspended:  SIGSTOP to its process")
        case nil: break
        }
        if let reason = app.suspensionExemption {
            lines.append("  exempt:     never suspended: \(Formatting.printable(reason))")
        }
        lines.append("  tasks:      \(app.tasks.count)")
        var text = lines.joined(separator: "\n") + "\n"
        if !app.tasks.isEmpty {
            let rows = app.tasks.map { task in
                ["\(task.id)", Formatting.printable(task.name), Formatting.duration(seconds: task.ageSec)]
            }
            text +=
                Formatting.table(header: ["ID", "NAME", "AGE"], rows: rows)
                .split(separator: "\n", omittingEmptySubsequences: false).dropLast()
                .map { "    " + $0 }.joined(separator: "\n") + "\n"
        }
        return text
    }

    /// How an app ended: the reason, with its process's exit status or signal when the daemon saw them
    /// (`crashed (signal SIGSEGV)`, `exited (status 3)`); nil while it has not ended.
    static func exit(_ app: AppInfo) -> String? {
        var how: [String] = []
        if let status = app.exitStatus { how.append("status \(status)") }
        if let signal = app.exitSignal { how.append("signal \(Formatting.printable(signal))") }
        guard let reason = app.exitReason else { return how.isEmpty ? nil : how.joined(separator: ", ") }
        return how.isEmpty ? reason.rawValue : "\(reason.rawValue) (\(how.joined(separator: ", ")))"
    }

    /// How the daemon handles an app, for the table: `unit` when the service manager started it as a unit of its
    /// own (frozen by the manager, measured and killed through the unit's cgroup), followed by how it was last
    /// frozen when the manager did not do it (`unit cgroup2`: through the unit's cgroup; `unit signals`: stopped
    /// with SIGSTOP); `cgroup` when through a cgroup of its own, `signals` when it is stopped and killed with
    /// signals and measured by its processes' PSS.
    static func handling(_ app: AppInfo) -> String {
        if app.unit != nil {
            switch app.suspendedWith {
            case nil, .unit: return "unit"
            case .cgroup2, .cgroup1: return "unit \(app.suspendedWith?.rawValue ?? "")"
            case .group, .process: return "unit signals"
            }
        }
        return app.cgroup == nil ? "signals" : "cgroup"
    }

    /// An app's background time left: `unlimited` in the foreground, `-` when it has none to spend.
    static func remaining(_ app: AppInfo) -> String {
        if let seconds = app.backgroundTimeRemaining { return Formatting.duration(seconds: seconds) }
        return app.state == .active || app.state == .inactive ? "unlimited" : "-"
    }

    /// A table of apps, one line each; a line saying so when there are none.
    public static func appTable(_ apps: [AppInfo]) -> String {
        guard !apps.isEmpty else { return "no apps\n" }
        let rows = apps.map { app in
            [
                Formatting.printable(app.name), app.state.rawValue, "\(app.pid)", "\(app.tasks.count)",
                remaining(app), Formatting.bytes(app.memoryBytes), handling(app), app.exitReason?.rawValue ?? "-",
            ]
        }
        return Formatting.table(
            header: ["NAME", "STATE", "PID", "TASKS", "REMAINING", "MEMORY", "VIA", "EXIT"], rows: rows)
    }

    /// `org.example.mail: active`, after a state change.
    public static func stateLine(_ app: AppInfo) -> String {
        "\(Formatting.printable(app.name)): \(app.state.rawValue)\n"
    }

    /// `org.example.mail: notRunning, pid 4242, cgroup /sys/fs/cgroup/...`, after a launch: the state the app waits
    /// in until it registers, its process, and its cgroup when it has one.
    public static func launched(_ app: AppInfo) -> String {
        let cgroup = app.cgroup.map { ", cgroup \(Formatting.printable($0))" } ?? ""
        return "\(Formatting.printable(app.name)): \(app.state.rawValue), pid \(app.pid)\(cgroup)\n"
    }

    /// What a post did: `delivered to 2 apps, queued for 1`.
    public static func postResult(_ reply: PostReply) -> String {
        "delivered to \(reply.delivered) app\(reply.delivered == 1 ? "" : "s"), queued for \(reply.queued)\n"
    }

    // MARK: Scheduled requests

    /// What a scheduled request waits for, or how it runs: `due 14:05:00`, `waiting on ac,network`, `task 12`.
    static func requestStatus(_ request: RequestInfo, now: Double, timeZone: TimeZone) -> String {
        switch request.state {
        case .running: return request.taskId.map { "task \($0)" } ?? "running"
        case .launching: return "launching its app"
        case .pending:
            var parts: [String] = []
            if let due = request.due, due > now { parts.append("due " + Formatting.wallClock(due, timeZone: timeZone)) }
            if let waiting = request.waitingOn, !waiting.isEmpty {
                parts.append("waiting on " + waiting.map(\.rawValue).joined(separator: ","))
            }
            if request.failures > 0 { parts.append("\(request.failures) failed") }
            return parts.isEmpty ? "runnable" : parts.joined(separator: ", ")
        }
    }

    /// One line per request: app, identifier, kind, conditions, state and what it waits for.
    public static func requestTable(_ requests: [RequestInfo], now: Double, timeZone: TimeZone) -> String {
        guard !requests.isEmpty else { return "no scheduled requests\n" }
        let rows = requests.map { request in
            [
                Formatting.printable(request.app), Formatting.printable(request.identifier), request.kind.rawValue,
                request.requires.isEmpty ? "-" : request.requires.map(\.rawValue).joined(separator: ","),
                request.state.rawValue + (request.replaced ? " (replaced)" : ""),
                requestStatus(request, now: now, timeZone: timeZone),
            ]
        }
        return Formatting.table(header: ["APP", "IDENTIFIER", "KIND", "REQUIRES", "STATE", "STATUS"], rows: rows)
    }

    /// `org.example.mail/sync: pending, due 14:05:00, waiting on ac`, after a submit.
    public static func submitted(_ request: RequestInfo, now: Double, timeZone: TimeZone) -> String {
        "\(Formatting.printable(request.app))/\(Formatting.printable(request.identifier)): \(request.state.rawValue), "
            + requestStatus(request, now: now, timeZone: timeZone) + "\n"
    }

    // MARK: History

    /// The details of a history entry beyond its time, app and kind, in the order a reader asks about them: the
    /// new state, the task and how it ended, the tasks warned, the reason, then a reclaim's band, memory and
    /// latency, and a warned app's rank.
    public static func details(_ entry: HistoryEntry) -> [String] {
        var details: [String] = []
        if let identifier = entry.identifier { details.append("request=\(Formatting.printable(identifier))") }
        if let uid = entry.uid { details.append("uid=\(uid)") }
        if let state = entry.state { details.append("state=\(state.rawValue)") }
        if let taskId = entry.taskId {
            let name = entry.taskName.map { $0.isEmpty ? "" : " (\(Formatting.printable($0)))" } ?? ""
            details.append("task=\(taskId)\(name)")
        }
        if let end = entry.taskEnd { details.append("end=\(end.rawValue)") }
        if let taskIds = entry.taskIds { details.append("tasks=" + taskIds.map(String.init).joined(separator: ",")) }
        if let reason = entry.reason { details.append("reason=\(reason.rawValue)") }
        if let band = entry.band { details.append("band=\(band.rawValue)") }
        if let bytes = entry.memoryBytes { details.append("memory=\(Formatting.bytes(bytes))") }
        if let latency = entry.latencyMs { details.append("latency=\(Formatting.duration(seconds: latency / 1_000))") }
        if let trigger = entry.trigger { details.append("trigger=\(Formatting.printable(trigger))") }
        if let rank = entry.rank { details.append("rank=\(rank)") }
        return details
    }

    /// A table of history entries, oldest first; a line saying so when there are none.
    public static func historyTable(_ entries: [HistoryEntry], timeZone: TimeZone) -> String {
        guard !entries.isEmpty else { return "no history\n" }
        let rows = entries.map { entry in
            [
                Formatting.wallClock(entry.time, timeZone: timeZone), Formatting.printable(entry.app),
                entry.kind.rawValue, details(entry).joined(separator: " "),
            ]
        }
        return Formatting.table(header: ["TIME", "APP", "EVENT", "DETAILS"], rows: rows)
    }

    /// One history entry on one line, for `bgtask watch`: time, app, kind, details.
    public static func historyLine(_ entry: HistoryEntry, timeZone: TimeZone) -> String {
        ([Formatting.wallClock(entry.time, timeZone: timeZone), Formatting.printable(entry.app), entry.kind.rawValue]
            + details(entry)).joined(separator: "  ") + "\n"
    }
}
