// Scene 6: scheduled work: a processing task that waits for external power, runs when the demo's adapter is plugged
// in, and gets its expiration handler when it is unplugged.
import BGTaskCLI
import BGTaskClient
import Foundation

extension DemoScenes {
    /// Scene 6: the backup app submits a processing request needing external power; the demo plugs its adapter in
    /// and out.
    func scheduledWork() throws(DemoFailure) {
        transcript.heading("6. Scheduled work: a backup that waits for external power")
        transcript.say(
            "The daemon reads power from the demo's own power_supply tree (PowerSupplyPath=), with one adapter, AC, "
                + "unplugged. A backup app starts: as an iOS app does with BGTaskScheduler, it registers a launch "
                + "handler for \"nightly\" and submits a processing request that requires external power (ac).")
        let backup = try start("backup", ["--scheduled", "nightly"])
        try backup.waitForLine(
            startingWith: "submitted nightly", after: 0, timeout: Self.promptTimeout, transcript: transcript)
        let pending = try requests("ListRequests: on battery the request waits:")
        guard pending.first?.state == .pending else { throw DemoFailure("the backup's request is not pending") }

        transcript.say("The user plugs the device in: the demo writes 1 to AC/online.")
        var mark = backup.lines.mark
        var changed = ContinuousClock.now
        try stage.setExternalPower(online: true)
        let began = try backup.waitForLine(
            startingWith: "scheduled task nightly began", after: mark, timeout: Self.promptTimeout,
            transcript: transcript)
        transcript.say(
            "\(Self.milliseconds(since: changed)) after the adapter came online, the daemon began a "
                + "task for the request (a lease of the app, with the processing time) and sent runScheduledTask; "
                + "the launch handler got the task.")
        _ = try requests("ListRequests: the request runs as that task:")

        transcript.say("The user unplugs the device: the demo writes 0 to AC/online.")
        mark = began.next
        changed = ContinuousClock.now
        try stage.setExternalPower(online: false)
        try backup.waitForLine(
            startingWith: "expiration handler of scheduled task nightly ran", after: mark,
            timeout: Self.promptTimeout, transcript: transcript)
        transcript.say(
            "\(Self.milliseconds(since: changed)) after the adapter went offline, the daemon sent "
                + "backgroundTaskExpiring for the task: the expiration handler stopped the backup and completed the "
                + "task to be retried. Android's onStopJob, as iOS's expiration handler.")
        try audit.wait(
            for: .taskEnded, of: "backup", after: 0, timeout: Self.promptTimeout, transcript: transcript,
            describedAs: "the scheduled task's end")
        _ = try requests(
            "ListRequests: the request waits for external power again (a task stopped because its condition went "
                + "is no failure of its own, so no backoff):")
    }

    /// The time since `instant`, in milliseconds: the daemon reacts within a few.
    private static func milliseconds(since instant: ContinuousClock.Instant) -> String {
        let elapsed = ContinuousClock.now - instant
        return Formatting.milliseconds(
            Double(elapsed.components.seconds) * 1e3 + Double(elapsed.components.attoseconds) / 1e15)
    }

    /// `ListRequests`, narrated after `caption`.
    private func requests(_ caption: String) throws(DemoFailure) -> [RequestInfo] {
        let requests = try daemonCall("ListRequests") { () throws(ClientError) in try client.listRequests() }
        transcript.say(caption)
        transcript.block(
            Rendering.requestTable(requests, now: Date().timeIntervalSince1970, timeZone: timeZone))
        return requests
    }
}
