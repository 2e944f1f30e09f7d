// Scenes 1–3: apps register and one leaves the foreground; a lease ends in time; a task overruns its time.
import BGTaskCLI
import BGTaskClient
import BGTaskPOSIX

/// The apps started in the first scene.
struct DemoCast {
    /// An app with nothing to do in background.
    var mail: SampleAppProcess
    /// An app that finishes an upload in background under a lease.
    var uploader: SampleAppProcess
    /// An app whose background task never ends.
    var game: SampleAppProcess
}

extension DemoScenes {
    /// Scene 1: three apps register in the foreground; the uploader is sent to the background.
    func appsRegister() throws(DemoFailure) -> DemoCast {
        transcript.heading("1. Apps register in the foreground, then one leaves it")
        transcript.say(
            "Three sample apps start (bgtask-demo-app, written with BackgroundApplication, the UIApplication-shaped "
                + "client library): mail has nothing to do in background; uploader uploads for "
                + "\(DemoPolicy.readable(policy.uploadLength)) in background; game runs a sync that never ends.")
        let mail = try start("mail", [])
        let uploader = try start(
            "uploader", ["--work", Self.secondsArgument(policy.uploadLength), "--task", "upload"])
        let game = try start("game", ["--work-forever", "--task", "sync"])
        try listApps("ListApps: all three are active, in the foreground, where background time is unlimited:")
        transcript.say("The user leaves the uploader: the shell calls SetState(uploader, background).")
        let mark = uploader.lines.mark
        try setState("uploader", to: .background)
        let resigned = try uploader.waitForLine(
            startingWith: "event willResignActive", after: mark, timeout: Self.promptTimeout, transcript: transcript)
        try uploader.waitForLine(
            startingWith: "event didEnterBackground", after: resigned.next, timeout: Self.promptTimeout,
            transcript: transcript)
        transcript.say("The uploader got willResignActive, then didEnterBackground, as a UIKit app does.")
        return DemoCast(mail: mail, uploader: uploader, game: game)
    }

    /// Scene 2: the uploader's background task, its remaining time counting down, its end, and the suspension.
    func leaseEndsInTime(_ uploader: SampleAppProcess) throws(DemoFailure) {
        transcript.heading("2. A lease: a background task that ends in time")
        transcript.say(
            "In applicationDidEnterBackground the uploader called beginBackgroundTask(withName: \"upload\") before "
                + "returning, so the daemon lets it run:")
        let began = try uploader.waitForLine(
            startingWith: "began background task", after: 0, timeout: Self.promptTimeout, transcript: transcript)
        let interval = policy.uploadLength / 4
        for reading in 1...3 {
            let app = try getApp("uploader")
            transcript.say("GetApp(uploader), reading \(reading) of 3: \(describe(app))")
            if reading < 3 { try pause(interval) }
        }
        transcript.say("When the upload is done, the uploader calls endBackgroundTask:")
        try uploader.waitForLine(
            startingWith: "\"upload\" is done", after: began.next, timeout: policy.uploadLength + Self.promptTimeout,
            transcript: transcript)
        try audit.wait(
            for: .stateChanged, of: "uploader", after: 0, timeout: Self.promptTimeout, transcript: transcript,
            describedAs: "the uploader's suspension"
        ) { $0.state == .suspended }
        let state = try processState(of: uploader) { $0 == .stopped }
        transcript.say(
            "With no task left and didEnterBackground acknowledged, the daemon suspended it: "
                + "/proc/\(uploader.pid)/stat says \(explain(state)) — SIGSTOP to the uploader's process group.")
        transcript.say(
            "GetApp(uploader): \(describe(try getApp("uploader"))) (the budget counts down while suspended too)")
    }

    /// Scene 3: the game's task outlives its background time: the warning, the expiration handler, termination.
    func taskOverruns(_ game: SampleAppProcess) throws(DemoFailure) {
        transcript.heading("3. A task that does not end: expiration warning, then termination")
        let warningDue = policy.backgroundTime - policy.expirationWarning
        transcript.say(
            "The user leaves the game (SetState game background). Its sync never ends and its expiration handler "
                + "does not end the task. With BackgroundTimeSec=\(DemoPolicy.readable(policy.backgroundTime)) and "
                + "ExpirationWarningSec=\(DemoPolicy.readable(policy.expirationWarning)), the warning is due "
                + "\(DemoPolicy.readable(warningDue)) after it enters background, the end "
                + "\(DemoPolicy.readable(policy.backgroundTime)) after.")
        let auditMark = audit.entries.mark
        let lineMark = game.lines.mark
        let entered = ContinuousClock.now
        try setState("game", to: .background)
        try game.waitForLine(
            startingWith: "began background task", after: lineMark, timeout: Self.promptTimeout,
            transcript: transcript)
        let warning = try audit.wait(
            for: .expirationWarning, of: "game", after: auditMark, timeout: policy.backgroundTime + Self.promptTimeout,
            transcript: transcript,
            describedAs: "the expiration warning (due \(DemoPolicy.readable(warningDue)) "
                + "after the game entered background)")
        let tasks = (warning.entry.taskIds ?? []).map(String.init).joined(separator: ", ")
        transcript.say(
            "\(Transcript.seconds(ContinuousClock.now - entered)) after entering background: the daemon sent "
                + "backgroundTaskExpiring for task \(tasks); BackgroundApplication runs that task's expiration handler:"
        )
        let event = try game.waitForLine(
            startingWith: "event backgroundTaskExpiring", after: lineMark, timeout: Self.promptTimeout,
            transcript: transcript)
        try game.waitForLine(
            startingWith: "expiration handler ran", after: event.next, timeout: Self.promptTimeout,
            transcript: transcript)
        let terminated = try audit.wait(
            for: .terminated, of: "game", after: warning.next,
            timeout: policy.expirationWarning + Self.promptTimeout, transcript: transcript,
            describedAs: "the end of the game's background time (due \(DemoPolicy.readable(policy.backgroundTime)) "
                + "after it entered background)")
        transcript.say(
            "\(Transcript.seconds(ContinuousClock.now - entered)) after entering background, the task still open: "
                + "the daemon terminated the game, reason \(terminated.entry.reason?.rawValue ?? "?"), and sent "
                + "willTerminate with \(DemoPolicy.readable(policy.willTerminateGrace)) of grace before SIGKILL:")
        try audit.wait(
            for: .killed, of: "game", after: terminated.next, timeout: policy.willTerminateGrace + Self.promptTimeout,
            transcript: transcript)
        guard let status = try game.waitForExit(timeout: Self.promptTimeout) else {
            throw DemoFailure("the game (pid \(game.pid)) is still running after the daemon killed it")
        }
        transcript.say("The game's process (pid \(game.pid)), as its parent sees it: \(status).")
        let history = try daemonCall("History") { () throws(ClientError) in try client.history() }
            .filter { $0.app == "game" && $0.kind != .registered }
        transcript.say("History, the game's entries: why it ended stays on record for it and for operators:")
        transcript.block(Rendering.historyTable(history, timeZone: timeZone))
        transcript.say("GetApp(game): \(describe(try getApp("game")))")
    }

    /// `2.5`: a duration as the sample app's seconds arguments take it.
    static func secondsArgument(_ duration: Duration) -> String {
        let milliseconds = Int64((duration.inSeconds * 1_000).rounded())
        return "\(milliseconds / 1_000).\(String(milliseconds % 1_000).leftPadded(to: 3))"
    }
}

extension String {
    /// The string with zeros in front up to `width` characters.
    fileprivate func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
