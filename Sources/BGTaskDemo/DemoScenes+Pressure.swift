// Scenes 4–5: notifications queued for a suspended app and coalesced; memory warnings, then reclamation.
import BGTaskCLI
import BGTaskClient
import BGTaskPOSIX

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

    /// Scene 5: two apps the daemon launches itself, in cgroups of their own where it has them, go to the background
    /// holding memory and are suspended; the editor's allocation puts the apps over `AppsMemoryMax`: every app is
    /// warned, and once the warning's grace is up with the apps still over, the daemon reclaims the heaviest
    /// suspended app, the editor, and no further: maps, lighter, is spared.
    func memoryPressure() throws(DemoFailure) {
        transcript.heading("5. Memory pressure: a warning to every app, then reclamation, heaviest first")
        let before = try listApps(
            "AppsMemoryMax=\(policy.appsMemoryMaxMebibytes)M caps what the apps use together. ListApps now:")
        let total = before.filter { $0.state != .terminated }.compactMap(\.memoryBytes).reduce(0, +)
        transcript.say(
            "Together \(Formatting.bytes(total)), under the limit. Two more apps join, started this time by the "
                + "daemon itself (Launch), as a device's shell has it start apps: each is bgtaskd's child, and writes "
                + "its output to \(stage.daemon?.appLogDirectory ?? "the daemon's --log-dir")/NAME.log, quoted here.")
        let backends = try narrateBackends()
        transcript.say(
            "maps prefetches map tiles in background, under a background task, into a \(policy.cacheMebibytes) MiB "
                + "cache it keeps; its task done, the daemon suspends it.")
        let maps = try launch(
            "maps",
            [
                "--work", Self.secondsArgument(policy.renderLength), "--task", "prefetch",
                "--allocate", String(policy.cacheMebibytes),
            ])
        let mapsMark = audit.entries.mark
        try setState("maps", to: .background)
        try maps.waitForLine(startingWith: "allocated", after: 0, timeout: Self.promptTimeout, transcript: transcript)
        try audit.wait(
            for: .stateChanged, of: "maps", after: mapsMark, timeout: policy.renderLength + Self.promptTimeout,
            transcript: transcript, describedAs: "maps' suspension"
        ) { $0.state == .suspended }
        let cache = policy.cacheMebibytes << 20
        // The daemon records how it suspended an app once the kernel confirms it (a freeze within a second), and
        // measures the apps at most 1 s apart.
        let suspended = try waitForApp(
            "maps", for: "how the daemon suspended maps, and its cache in the daemon's reading of maps"
        ) { $0.suspendedWith != nil && ($0.memoryBytes ?? 0) >= cache }
        try narrateSuspension(of: maps, suspended, backends: backends)

        transcript.say(
            "editor, launched the same way, renders in background, under a background task, into a "
                + "\(policy.allocationMebibytes) MiB buffer it keeps when the render is done: that puts the apps over "
                + "AppsMemoryMax.")
        let editor = try launch(
            "editor",
            [
                "--work", Self.secondsArgument(policy.renderLength), "--task", "render",
                "--allocate", String(policy.allocationMebibytes),
            ])
        let auditMark = audit.entries.mark
        let running: [any QuotedApp] = stage.apps.filter { !$0.hasExited } + [maps]
        let lineMarks = running.map { ($0, $0.lines.mark) }
        try setState("editor", to: .background)
        try editor.waitForLine(
            startingWith: "allocated", after: 0, timeout: Self.promptTimeout, transcript: transcript)
        let warning = try audit.wait(
            for: .memoryWarning, of: "editor", after: auditMark, timeout: Self.promptTimeout, transcript: transcript,
            describedAs: "the daemon's memory warning (its monitor reads the apps' memory at most 1s apart)")
        // One warning goes to every registered app at once: the others' entries are there or on their way.
        var warned = [warning.entry]
        for name in before.filter({ $0.state != .terminated }).map(\.name) + ["maps"] {
            warned.append(
                try audit.wait(
                    for: .memoryWarning, of: name, after: auditMark, timeout: Self.promptTimeout, transcript: transcript
                ).entry)
        }
        let victims = warned.filter { $0.rank != nil }.sorted { ($0.rank ?? 0) < ($1.rank ?? 0) }.map { entry in
            "\(entry.app) (band \(entry.band?.rawValue ?? "?"), \(Formatting.bytes(entry.memoryBytes))) rank "
                + "\(entry.rank ?? 0)"
        }
        let asleep = warned.filter { $0.band == .suspended }.map(\.app)
        transcript.say(
            "The apps went over AppsMemoryMax: the daemon sent memoryWarning to every app, and named as likely "
                + "victims, in the order it would reclaim them at that reading: \(victims.joined(separator: ", ")). "
                + "Running apps get it at once"
                + (asleep.isEmpty ? "." : "; suspended ones (\(asleep.joined(separator: ", "))) when they next run."))
        for (app, mark) in lineMarks {
            guard let entry = warned.first(where: { $0.app == app.name }), entry.band != .suspended else { continue }
            try app.waitForLine(
                startingWith: "event memoryWarning", after: mark, timeout: Self.promptTimeout, transcript: transcript)
        }
        try narrateReclaim(of: editor, after: warning.next)
        let spared = try getApp("maps")
        if spared.state == .suspended {
            transcript.say(
                "maps, suspended too but lighter (\(Formatting.bytes(suspended.memoryBytes))), is spared: at the "
                    + "reclaim the daemon ranks the apps again from the readings then, heaviest first within a band, "
                    + "and stops once they are under its target (90% of AppsMemoryMax), as they are without the "
                    + "editor. GetApp(maps): \(describe(spared))")
        } else {
            transcript.say("GetApp(maps): \(describe(spared))")
        }
        try listApps("ListApps after the reclaim: back under AppsMemoryMax.")
    }
}
