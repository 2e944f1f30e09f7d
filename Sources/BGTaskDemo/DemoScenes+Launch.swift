// Scene 5's narration of apps the daemon launches: the backends it chose, a launch, a suspension, a reclaim.
import BGTaskCLI
import BGTaskClient
import BGTaskSystem

/// The backends the daemon uses for the apps it launches, as `GetStatus` reports them.
struct LaunchBackends {
    /// `cgroup2`, `cgroup1` (the v1 freezer) or `sigstop`.
    var freeze: String
    /// `cgroup2` (`memory.current`), `cgroup1` (`memory.usage_in_bytes`) or `pss`.
    var memory: String
    /// `cgroup.kill`, `cgroup2`/`cgroup1` (SIGKILL to each process of the cgroup) or `pidfd`.
    var kill: String
    /// `CgroupRoot=` as the daemon took it; nil when it has none.
    var cgroupRoot: String?
    /// `MemoryCgroupRoot=` as the daemon took it; nil when it has none.
    var memoryCgroupRoot: String?

    /// What a freeze backend does, in words.
    static func explainFreeze(_ backend: String) -> String {
        switch backend {
        case "cgroup2": "cgroup.freeze of its cgroup2 cgroup"
        case "cgroup1": "freezer.state of its v1 freezer cgroup"
        case "sigstop": "SIGSTOP to its process group"
        default: backend
        }
    }

    /// What a memory backend reads, in words.
    static func explainMemory(_ backend: String) -> String {
        switch backend {
        case "cgroup2": "memory.current of its cgroup"
        case "cgroup1": "memory.usage_in_bytes of its v1 memory cgroup"
        case "pss": "the PSS of its processes, from /proc/PID/smaps_rollup"
        default: backend
        }
    }

    /// What a kill backend does, in words.
    static func explainKill(_ backend: String) -> String {
        switch backend {
        case "cgroup.kill": "cgroup.kill: every process of its cgroup at once"
        case "cgroup2", "cgroup1": "SIGKILL to each process of its cgroup"
        case "pidfd": "SIGKILL through a pidfd"
        default: backend
        }
    }
}

extension DemoScenes {
    /// `GetStatus`'s backends, and which of each chain the apps the daemon launches get.
    func narrateBackends() throws(DemoFailure) -> LaunchBackends {
        let status = try daemonCall("GetStatus") { () throws(ClientError) in try client.getStatus() }
        func value(_ key: String) -> String? {
            status.backends[key]?.stringValue.flatMap { $0 == "none" ? nil : $0 }
        }
        func chain(_ key: String) -> [String] {
            (value(key) ?? "").split(separator: "+").map(String.init)
        }
        let cgroupRoot = value("cgroupRoot")
        let memoryCgroupRoot = value("memoryCgroupRoot")
        // Each chain runs from the best backend to the fallback; the best is the launched apps' only where the
        // daemon has a root to make their cgroups in (cgroup2 in the freeze chain is otherwise for a self-registered
        // app found alone in a cgroup of its own).
        let backends = LaunchBackends(
            freeze: cgroupRoot == nil ? "sigstop" : chain("freeze").first ?? "sigstop",
            memory: chain("memory").first ?? "pss",
            kill: cgroupRoot == nil ? "pidfd" : chain("kill").first ?? "pidfd",
            cgroupRoot: cgroupRoot, memoryCgroupRoot: memoryCgroupRoot)
        transcript.say(
            "GetStatus backends, each chain from the best to the fallback: freeze=\(value("freeze") ?? "?") "
                + "memory=\(value("memory") ?? "?") kill=\(value("kill") ?? "?"), cgroupRoot=\(cgroupRoot ?? "none") "
                + "memoryCgroupRoot=\(memoryCgroupRoot ?? "none").")
        let chosen =
            "freeze=\(backends.freeze) (\(LaunchBackends.explainFreeze(backends.freeze))), "
            + "memory=\(backends.memory) (\(LaunchBackends.explainMemory(backends.memory))), "
            + "kill=\(backends.kill) (\(LaunchBackends.explainKill(backends.kill)))"
        if cgroupRoot != nil || memoryCgroupRoot != nil {
            let roots = [cgroupRoot.map { _ in "CgroupRoot=" }, memoryCgroupRoot.map { _ in "MemoryCgroupRoot=" }]
                .compactMap { $0 }.joined(separator: " and ")
            transcript.say(
                "The daemon chose for the apps it launches, each in a cgroup of its own under \(roots): \(chosen). "
                    + "mail and uploader, which registered by themselves and share the demo's cgroup, keep SIGSTOP "
                    + "and PSS.")
        } else {
            transcript.say(
                "With no CgroupRoot= the daemon has no cgroup to put the apps it launches in, and chose for them, as "
                    + "for mail and uploader: \(chosen).")
        }
        return backends
    }

    /// Has the daemon launch the sample app `name` with `arguments` beyond its name, socket and lifetime, narrates
    /// the reply (its pid and cgroup), and waits until it has registered.
    func launch(_ name: String, _ arguments: [String]) throws(DemoFailure) -> LaunchedApp {
        let app = try stage.launchThroughDaemon(name, arguments, lifetime: lifetime)
        let argv = (["bgtask-demo-app"] + app.argv.dropFirst()).joined(separator: " ")
        let cgroup = app.launched.cgroup.map { "cgroup \($0)" } ?? "no cgroup"
        transcript.say(
            "Launch(\(name), argv: \(argv)) replied: \(name) is \(app.launched.state.rawValue), pid \(app.pid), "
                + "\(cgroup)")
        try app.waitForLine(startingWith: "registered", after: 0, timeout: Self.promptTimeout, transcript: transcript)
        return app
    }

    /// A launched app is suspended: how the daemon did it and measures it (GetApp), and what the kernel says.
    func narrateSuspension(of app: LaunchedApp, _ info: AppInfo, backends: LaunchBackends) throws(DemoFailure) {
        var kernel = ""
        switch info.suspendedWith {
        case .unit?, .cgroup2?, .cgroup1?:
            guard let cgroup = info.cgroup.map(CgroupDirectory.init(path:)) else { break }
            let frozen: Bool
            do {
                // The daemon confirms a freeze within a second, before it counts: this only reads the outcome.
                frozen =
                    try cgroup.isV1Freezer
                    ? cgroup.waitUntilFreezer(frozen: true, timeout: .seconds(3))
                    : cgroup.waitUntil(frozen: true, timeout: .seconds(3))
            } catch {
                throw DemoFailure("cannot read the freezer state of \(cgroup.path): \(error)")
            }
            let state = try processState(of: app) { _ in true }
            kernel =
                cgroup.isV1Freezer
                ? "its freezer.state says \(frozen ? "FROZEN" : "not FROZEN"); /proc/\(app.pid)/stat says "
                    + explain(state)
                : "its cgroup.events says frozen \(frozen ? 1 : 0); /proc/\(app.pid)/stat says \(explain(state)), as "
                    + "a task frozen by cgroup2 shows (not T: no signal was sent)"
        case .group?, .process?:
            let state = try processState(of: app) { $0 == .stopped }
            kernel = "/proc/\(app.pid)/stat says \(explain(state))"
        case nil:
            break
        }
        transcript.say(
            "\(app.name) is suspended, holding its memory. GetApp(\(app.name)): "
                + "suspendedWith \(info.suspendedWith?.rawValue ?? "null"), "
                + "memory \(Formatting.bytes(info.memoryBytes)) by \(info.memoryBackend ?? "null") "
                + "(\(LaunchBackends.explainMemory(info.memoryBackend ?? backends.memory))), "
                + "cgroup \(info.cgroup ?? "null")"
                + (kernel.isEmpty ? "." : "; \(kernel)."))
    }

    /// The reclaim of `app`, after the audit mark `mark`: the daemon's record (band, memory, the trigger reading,
    /// trigger to kill), then the exit as the daemon, the app's parent, reaps it (kill to exit, the signal).
    func narrateReclaim(of app: LaunchedApp, after mark: Int) throws(DemoFailure) {
        let reclaim = try audit.wait(
            for: .terminated, of: app.name, after: mark,
            timeout: policy.memoryWarningGrace + Self.promptTimeout, transcript: transcript,
            describedAs: "the reclamation (MemoryWarningGraceSec=\(DemoPolicy.readable(policy.memoryWarningGrace)) "
                + "after the warning, if the apps are still over)")
        let entry = reclaim.entry
        var details = ["reason \(entry.reason?.rawValue ?? "?")"]
        if let band = entry.band { details.append("band \(band.rawValue)") }
        if let bytes = entry.memoryBytes { details.append("memory \(Formatting.bytes(bytes)) (\(bytes) bytes)") }
        if let trigger = entry.trigger { details.append("trigger reading \"\(trigger)\"") }
        if let latency = entry.latencyMs {
            details.append("\(Transcript.seconds(latency / 1_000)) from that reading to the kill")
        }
        let notice = entry.band == .suspended ? "at once, with no notice, as a suspended app is" : "with willTerminate"
        transcript.say(
            "The apps were still over when the grace was up: the daemon reclaimed \(app.name) \(notice) "
                + "(\(details.joined(separator: ", "))).")
        let exited = try audit.wait(
            for: .processExited, of: app.name, after: reclaim.next,
            timeout: policy.willTerminateGrace + Self.promptTimeout, transcript: transcript,
            describedAs: "\(app.name)'s exit, reaped by bgtaskd, its parent")
        let gone = try getApp(app.name)
        let how =
            gone.exitSignal.map { "killed by \($0)" } ?? gone.exitStatus.map { "exited with status \($0)" } ?? "ended"
        let freed =
            exited.entry.latencyMs.map {
                ", \(Formatting.milliseconds($0)) from the kill to its exit (processExited): its memory is free"
            } ?? ""
        transcript.say(
            "The \(app.name)'s process (pid \(app.pid)), as bgtaskd, its parent, reports it: \(how) "
                + "(exitSignal \(gone.exitSignal ?? "null"), exitStatus \(gone.exitStatus.map(String.init) ?? "null"))"
                + "\(freed).")
        transcript.say("GetApp(\(app.name)): \(describe(gone))")
    }
}
