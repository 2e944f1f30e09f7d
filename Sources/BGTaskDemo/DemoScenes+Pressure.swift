// Scenes 4–5: notifications queued for a suspended app and coalesced; memory warnings, then reclamation.
import BGTaskCLI
import BGTaskClient
import BGTaskSystem

extension DemoScenes {
    /// Scene 4: three posts to the suspended uploader become one notification with count 3, delivered on resume.
    func notificationsCoalesce(_ uploader: SampleAppProcess) throws(DemoFailure) {
        transcript.heading("4. Notifications to a suspended app are coalesced")
        let state = try processState(of: uploader) { $0 == .stopped }
        transcript.say(
            "The uploader is still suspended: GetApp says \(try getApp("uploader").state.rawValue), "
                + "/proc/\(uploader.pid)/stat says \(explain(state)). Three new-photos notifications are posted "
                + "to it with behavior coalesce (the default):")
        for photos in 1...3 {
            let reply = try daemonCall("Post(new-photos)") { () throws(ClientError) in
                try client.post(
                    name: "new-photos", payload: ["photos": .number(Double(photos))], behavior: .coalesce,
                    app: "uploader")
            }
            let queued = try getApp("uploader").queuedEvents
            transcript.say(
                "Post(new-photos, {\"photos\":\(photos)}) replied delivered=\(reply.delivered) queued=\(reply.queued); "
                    + "GetApp(uploader) queuedEvents=\(queued)")
        }
        transcript.say(
            "The user opens the uploader again: SetState(uploader, active). The daemon resumes it and delivers what "
                + "was queued before willEnterForeground:")
        let mark = uploader.lines.mark
        try setState("uploader", to: .active)
        let notification = try uploader.waitForLine(
            startingWith: "event notification", after: mark, timeout: Self.promptTimeout, transcript: transcript)
        let foreground = try uploader.waitForLine(
            startingWith: "event willEnterForeground", after: notification.next, timeout: Self.promptTimeout,
            transcript: transcript)
        try uploader.waitForLine(
            startingWith: "event didBecomeActive", after: foreground.next, timeout: Self.promptTimeout,
            transcript: transcript)
        let resumed = try processState(of: uploader) { $0 != .stopped }
        let count = field("count", in: notification.line) ?? "?"
        let payload = field("payload", in: notification.line) ?? "?"
        transcript.say(
            "Three posts, one delivery: count=\(count) with the latest payload \(payload). "
                + "/proc/\(uploader.pid)/stat now says \(explain(resumed)).")
    }

    /// Scene 5: an app's allocation puts the apps over `AppsMemoryMax`: every app is warned, the heaviest as the
    /// likely victim, and once the warning's grace is up with the apps still over, the daemon reclaims it.
    func memoryPressure() throws(DemoFailure) {
        transcript.heading("5. Memory pressure: a warning to every app, then reclamation")
        let before = try listApps(
            "AppsMemoryMax=\(policy.appsMemoryMaxMebibytes)M caps what the apps use together (PSS, from "
                + "/proc/PID/smaps_rollup). ListApps now:")
        let total = before.filter { $0.state != .terminated }.compactMap(\.memoryBytes).reduce(0, +)
        transcript.say(
            "Together \(Formatting.bytes(total)), under the limit. A fourth app, editor, starts; sent to the "
                + "background, it renders under a background task into a \(policy.allocationMebibytes) MiB buffer "
                + "it keeps when the render is done.")
        let editor = try start(
            "editor",
            [
                "--work", Self.secondsArgument(policy.renderLength), "--task", "render",
                "--allocate", String(policy.allocationMebibytes),
            ])
        let auditMark = audit.entries.mark
        let lineMarks = stage.apps.map { ($0, $0.lines.mark) }
        try setState("editor", to: .background)
        try editor.waitForLine(
            startingWith: "allocated", after: 0, timeout: Self.promptTimeout, transcript: transcript)
        let warning = try audit.wait(
            for: .memoryWarning, of: "editor", after: auditMark, timeout: Self.promptTimeout, transcript: transcript,
            describedAs: "the daemon's memory warning (its monitor reads the apps' PSS at most 1s apart)")
        let rank = warning.entry.rank.map { "the likely victim with rank=\($0)" } ?? "not a likely victim"
        let band = warning.entry.band.map { " (band \($0.rawValue))" } ?? ""
        transcript.say(
            "The apps went over AppsMemoryMax: the daemon sent memoryWarning to every app; editor\(band) is \(rank). "
                + "Running apps get it at once (a suspended app would get it when it next runs):")
        for (app, mark) in lineMarks where app !== editor && !app.hasExited {
            try app.waitForLine(
                startingWith: "event memoryWarning", after: mark, timeout: Self.promptTimeout, transcript: transcript)
        }
        let reclaim = try audit.wait(
            for: .terminated, of: "editor", after: warning.next,
            timeout: policy.memoryWarningGrace + Self.promptTimeout, transcript: transcript,
            describedAs: "the reclamation (MemoryWarningGraceSec=\(DemoPolicy.readable(policy.memoryWarningGrace)) "
                + "after the warning, if the apps are still over)")
        let entry = reclaim.entry
        var details = ["reason \(entry.reason?.rawValue ?? "?")"]
        if let band = entry.band { details.append("band \(band.rawValue)") }
        if let bytes = entry.memoryBytes { details.append("memory \(Formatting.bytes(bytes))") }
        if let latency = entry.latencyMs {
            details.append("\(Transcript.seconds(latency / 1_000)) from the first reading over the limit")
        }
        let notice = entry.band == .suspended ? "at once, with no notice, as a suspended app is" : "with willTerminate"
        transcript.say(
            "The apps were still over when the grace was up: the daemon reclaimed editor \(notice) "
                + "(\(details.joined(separator: ", "))).")
        guard let status = try editor.waitForExit(timeout: policy.willTerminateGrace + Self.promptTimeout) else {
            throw DemoFailure("the editor (pid \(editor.pid)) is still running after the daemon reclaimed it")
        }
        transcript.say("The editor's process (pid \(editor.pid)), as its parent sees it: \(status).")
        transcript.say("GetApp(editor): \(describe(try getApp("editor")))")
        try listApps("ListApps after the reclaim: back under AppsMemoryMax.")
    }
}
