// The demo's scenes in order, and what they share: calls to the daemon narrated with their replies, and /proc.
import BGTaskCLI
import BGTaskClient
import BGTaskPOSIX
import Foundation

/// The scenes of the demo, each narrated with real data: the daemon's replies, its audit trail, the apps' own
/// lines and `/proc`. The text around the data says what to look at; every number and state comes from a
/// reading.
struct DemoScenes {
    let stage: DemoStage
    let client: LifecycleClient
    let audit: AuditFollower
    /// How long each sample app may live.
    let lifetime: Duration
    /// Where the history's wall-clock times are shown.
    let timeZone: TimeZone

    /// The longest wait for something that follows a call at once (an app's line, an audit entry): generous,
    /// because a loaded machine is slow, and never reached when things work.
    static let promptTimeout = Duration.seconds(20)

    var transcript: Transcript { stage.transcript }
    var policy: DemoPolicy { stage.policy }

    init(stage: DemoStage, lifetime: Duration, timeZone: TimeZone) throws(DemoFailure) {
        self.stage = stage
        client = try stage.client
        audit = try stage.audit
        self.lifetime = lifetime
        self.timeZone = timeZone
    }

    /// A breath between scenes, so that someone watching can read the end of one before the next begins.
    static let interlude = Duration.seconds(1)

    /// Runs every scene, then the summary.
    func run() throws(DemoFailure) {
        let cast = try appsRegister()
        try leaseEndsInTime(cast.uploader)
        try pause(Self.interlude)
        try taskOverruns(cast.game)
        try pause(Self.interlude)
        try notificationsCoalesce(cast.uploader)
        try pause(Self.interlude)
        try memoryPressure()
        try pause(Self.interlude)
        try scheduledWork()
        try pause(Self.interlude)
        try summary()
    }

    // MARK: Shared steps

    /// Starts a sample app and waits until it has registered.
    func start(_ name: String, _ arguments: [String]) throws(DemoFailure) -> SampleAppProcess {
        let app = try stage.spawn(name, arguments, lifetime: lifetime)
        try app.waitForLine(startingWith: "registered", after: 0, timeout: Self.promptTimeout, transcript: transcript)
        return app
    }

    /// `GetApp`.
    func getApp(_ name: String) throws(DemoFailure) -> AppInfo {
        try daemonCall("GetApp(\(name))") { () throws(ClientError) in try client.getApp(name) }
    }

    /// `GetApp(name)` until `isExpected` holds, at most `timeout`: for what the daemon changes on a schedule of its
    /// own (a memory reading, taken at most 1 s apart).
    func waitForApp(
        _ name: String, for what: String, timeout: Duration = promptTimeout, until isExpected: (AppInfo) -> Bool
    ) throws(DemoFailure) -> AppInfo {
        let started = ContinuousClock.now
        while true {
            let app = try getApp(name)
            if isExpected(app) { return app }
            let waited = ContinuousClock.now - started
            guard waited < timeout else {
                throw DemoFailure(
                    "gave up waiting for \(what) after \(Transcript.seconds(timeout)): GetApp(\(name)) says "
                        + describe(app))
            }
            if transcript.quietFor >= .milliseconds(1_500) {
                transcript.say("... waiting for \(what) (\(Transcript.seconds(waited)) so far)")
            }
            try pause(.milliseconds(100))
        }
    }

    /// `SetState`, narrated with its reply.
    @discardableResult
    func setState(_ name: String, to state: AppState) throws(DemoFailure) -> AppInfo {
        let app = try daemonCall("SetState(\(name), \(state.rawValue))") { () throws(ClientError) in
            try client.setState(name, to: state)
        }
        transcript.say("SetState replied: \(name) is \(describe(app))")
        return app
    }

    /// `ListApps`, printed as `bgtask apps --all` prints it.
    @discardableResult
    func listApps(_ caption: String) throws(DemoFailure) -> [AppInfo] {
        let apps = try daemonCall("ListApps") { () throws(ClientError) in try client.listApps() }
        transcript.say(caption)
        transcript.block(Rendering.appTable(apps))
        return apps
    }

    /// An app as a reader cares about it: state, open tasks, remaining time, memory, exit reason.
    func describe(_ app: AppInfo) -> String {
        var parts = [app.state.rawValue]
        if !app.tasks.isEmpty {
            parts.append("open task " + app.tasks.map { "\($0.id) \"\($0.name)\"" }.joined(separator: ", "))
        } else if app.state != .terminated {
            parts.append("no open task")
        }
        if app.state != .terminated {
            parts.append(
                "backgroundTimeRemaining " + (app.backgroundTimeRemaining.map(Transcript.seconds) ?? "null (unlimited)")
            )
        }
        if app.queuedEvents > 0 { parts.append("queuedEvents \(app.queuedEvents)") }
        if let reason = app.exitReason { parts.append("exitReason \(reason.rawValue)") }
        return parts.joined(separator: ", ")
    }

    /// The app's scheduler state from `/proc/PID/stat`, read until `isExpected` holds or `timeout` passes (the
    /// daemon records a suspension as it signals, and the kernel stops the process a moment later).
    func processState(
        of app: some QuotedApp, timeout: Duration = .seconds(3), until isExpected: (ProcessState) -> Bool
    ) throws(DemoFailure) -> ProcessState {
        let deadline = ContinuousClock.now + timeout
        while true {
            let state: ProcessState
            do {
                state = try ProcFS().stat(app.pid).state
            } catch {
                throw DemoFailure("cannot read /proc/\(app.pid)/stat: \(error)")
            }
            if isExpected(state) || ContinuousClock.now >= deadline { return state }
            try pause(.milliseconds(20))
        }
    }

    /// `T (stopped)`, `S (sleeping)`: a state letter with its meaning.
    func explain(_ state: ProcessState) -> String {
        switch state {
        case .stopped: "T (stopped by a signal)"
        case .sleeping: "S (sleeping: running, waiting for work)"
        case .running: "R (running)"
        case .zombie: "Z (exited, not yet reaped)"
        default: "\(state.letter)"
        }
    }

    /// The value of `key=` in a line the sample app printed (`count=3` gives "3").
    func field(_ key: String, in line: String) -> String? {
        line.split(separator: " ").first { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
    }

    // MARK: Summary

    /// The daemon's history of the whole demo, and its counts.
    func summary() throws(DemoFailure) {
        transcript.heading("Summary")
        let entries = try daemonCall("History") { () throws(ClientError) in try client.history() }
        transcript.say("History: what the daemon kept of the demo, with the reason for every end:")
        transcript.block(Rendering.historyTable(entries, timeZone: timeZone))
        let status = try daemonCall("GetStatus") { () throws(ClientError) in try client.getStatus() }
        transcript.say(
            "GetStatus: \(status.apps) live apps, \(status.suspended) suspended, \(status.tasks) open tasks, "
                + "up \(Transcript.seconds(status.uptimeSec))")
    }
}
