// `bgtask demo`'s implementation: a private daemon, sample apps, and the scenes narrated with what they really do.
import BGTaskArguments
import BGTaskCLI
import Foundation

/// The `DemoRunner` that `bgtask` is built with: starts a private `bgtaskd` in a temporary runtime directory with
/// a short policy, runs sample apps (`bgtask-demo-app`), and narrates each scene with real output — the apps' own
/// lines, the daemon's audit trail, its replies, and `/proc` — then stops everything it started.
///
/// Needs no root: the daemon and the apps run as the calling user, with the signal and PSS backends that need no
/// cgroup. As root, it makes cgroups of its own for the apps the daemon launches (`CgroupRoot=`,
/// `MemoryCgroupRoot=`), so they are frozen, measured and killed through cgroups. Everything it starts is stopped,
/// and its cgroups removed, when it ends, fails, or is interrupted (Ctrl-C, SIGTERM, SIGHUP); if bgtask itself is
/// killed outright, the daemon's `timeout(1)` and the apps' own lifetimes end them (empty cgroups are then left).
public struct LifecycleDemo: DemoRunner {
    /// The demo.
    public init() {}

    public func runDemo(_ request: DemoRequest, in context: CommandContext) async throws(CommandFailure) -> ExitCode {
        let transcript = Transcript(output: context.standardOutput)
        let policy: DemoPolicy
        let products: DemoProducts
        do throws(DemoFailure) {
            policy = try DemoPolicy(backgroundTime: request.backgroundTime)
            products = try DemoProducts.locate()
        } catch {
            throw error.commandFailure
        }
        Interruption.install()
        defer { Interruption.uninstall() }
        transcript.say(
            "bgtask demo: iOS-style background execution on Linux, shown with a private bgtaskd and sample apps")
        // Long enough for every scene at the slowest pace, so nothing outlives a demo that lost track of it.
        let lifetime = policy.backgroundTime * 4 + .seconds(60)
        let stage = DemoStage(transcript: transcript, policy: policy, products: products)
        var failure: DemoFailure?
        do throws(DemoFailure) {
            try stage.setUp(lifetime: lifetime)
            try DemoScenes(stage: stage, lifetime: lifetime, timeZone: context.timeZone).run()
        } catch {
            failure = error
            if error.signal == nil {
                transcript.say("the demo failed: \(error)")
                if let daemon = stage.daemon {
                    // The log goes with the runtime directory: show its end while it is still there.
                    transcript.say("the end of bgtaskd's log:")
                    transcript.block(PrivateDaemon.lastLines(of: daemon.logPath, count: 10).joined(separator: "\n"))
                }
            } else {
                transcript.say("\(error): cleaning up")
            }
        }
        stage.tearDown()
        if let failure { throw failure.commandFailure }
        transcript.say("The demo took \(Transcript.seconds(transcript.elapsed)); nothing it started is left running.")
        return .success
    }
}
