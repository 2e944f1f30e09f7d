// `bgtask demo` end to end: the real binary, every scene's real data, an exit status of 0, and nothing left behind.
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

/// Serialized: each run starts a daemon and four apps and paces itself on wall-clock deadlines; running them one
/// after another keeps them from slowing each other down on a two-core machine.
@Suite("bgtask demo", .serialized)
struct DemoEndToEndTests {
    /// The user the no-root run runs as.
    static let nobody: UInt32 = 65534

    /// The backends the apps the daemon launches must get in a run as root (`asRoot`) or not, on this host: as
    /// root, the best the host's hierarchies give (the demo makes the cgroups); otherwise SIGSTOP and PSS.
    struct ExpectedBackends {
        /// Whether the demo must make cgroups for its daemon.
        var madeCgroups: Bool
        var freeze: String
        /// The memory backends accepted: on a pure cgroup2 host the daemon gets `memory.current` only where the
        /// memory controller reaches the demo's cgroup.
        var memory: Set<String>
        var kill: String
        /// `suspendedWith` of a launched app.
        var suspendedWith: String

        init(asRoot: Bool, hierarchies: CgroupHierarchies = .probe()) {
            let control = hierarchies.unified != nil ? "cgroup2" : hierarchies.freezer != nil ? "cgroup1" : nil
            madeCgroups = asRoot && (control != nil || hierarchies.memory != nil)
            freeze = (madeCgroups ? control : nil) ?? "sigstop"
            memory =
                !madeCgroups ? ["pss"] : hierarchies.memory != nil ? ["cgroup1"] : ["cgroup2", "pss"]
            kill =
                !madeCgroups || control == nil
                ? "pidfd" : hierarchies.unified.map { _ in "cgroup.kill" } ?? "cgroup1"
            suspendedWith = freeze == "sigstop" ? "group" : freeze
        }
    }

    /// What every complete run must show, checked against the run's own data.
    static func expectEveryScene(
        in run: DemoRun, backends: ExpectedBackends, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let transcript = run.transcript
        // Cgroups for the apps the daemon launches: made as root where the host has them, else one line saying so.
        if backends.madeCgroups {
            let made = try #require(run.line(containing: "as root, the demo made cgroups"), "\(transcript)")
            #expect(made.line.contains("CgroupRoot=/") || made.line.contains("MemoryCgroupRoot=/"), "\(made.line)")
        } else {
            let lines = run.lines(containing: "the apps the daemon launches run without a cgroup")
            #expect(lines.count == 1, "\(transcript)")
        }
        // The daemon: ready through its NOTIFY_SOCKET, reporting the roots it got.
        let ready = try #require(run.line(containing: "sent READY=1"), "\(transcript)")
        #expect(ready.line.contains("cgroupRoot=\(backends.freeze == "sigstop" ? "none" : "/")"), "\(ready.line)")

        // 1. Registration in the foreground, then willResignActive before didEnterBackground.
        for app in ["mail", "uploader", "game"] {
            #expect(run.line(containing: "\(app) | registered pid=") != nil, "\(app) never registered")
        }
        let resigned = try #require(run.line(containing: "uploader | event willResignActive"))
        let entered = try #require(run.line(containing: "uploader | event didEnterBackground"))
        #expect(resigned.index < entered.index)

        // 2. The lease: three readings counting down, the task ended, then a stop the kernel reports as T.
        let readings = run.lines(containing: "GetApp(uploader), reading").compactMap {
            seconds(after: "backgroundTimeRemaining", in: $0)
        }
        #expect(readings.count == 3, "\(transcript)")
        #expect(readings == readings.sorted(by: >) && Set(readings).count == readings.count, "\(readings)")
        #expect(run.line(containing: "uploader | began background task") != nil)
        #expect(run.line(containing: "uploader | \"upload\" is done: ended background task") != nil)
        let uploaderLine = try #require(run.line(containing: "uploader | registered pid=")).line
        let uploaderPID = try #require(value(of: "pid", in: uploaderLine))
        #expect(run.line(containing: "/proc/\(uploaderPID)/stat says T (stopped") != nil, "\(transcript)")
        #expect(run.line(containing: "bgtaskd | uploader  stateChanged  state=suspended") != nil)

        // 3. The overrun: the warning names the open task, which the app's event lists; then task-expired.
        let warning = try #require(run.line(containing: "bgtaskd | game  expirationWarning"), "\(transcript)")
        let warnedTasks = try #require(value(of: "tasks", in: warning.line))
        let expiring = try #require(run.line(containing: "game | event backgroundTaskExpiring"))
        #expect(value(of: "taskIds", in: expiring.line) == "[\(warnedTasks)]")
        #expect(run.line(containing: "game | expiration handler ran") != nil)
        #expect(run.line(containing: "bgtaskd | game  terminated  reason=task-expired") != nil)
        #expect(run.line(containing: "game | event willTerminate") != nil)
        #expect(run.line(containing: "bgtaskd | game  killed  reason=task-expired") != nil)
        #expect(run.line(containing: "The game's process")?.line.contains("killed by SIGKILL") == true)
        let historyRows = run.lines.filter {
            !$0.contains(" | ") && $0.contains(" game ") && $0.contains(" terminated ")
                && $0.contains("reason=task-expired")
        }
        #expect(historyRows.count == 2, "the game's history and the summary's both show it: \(historyRows)")
        #expect(run.line(containing: "GetApp(game): terminated, exitReason task-expired") != nil)

        // 4. Three coalesced posts arrive as one notification, count=3 and the latest payload, before
        // willEnterForeground.
        let posts = run.lines(containing: "Post(new-photos")
        #expect(posts.count == 3 && posts.allSatisfy { $0.contains("delivered=0 queued=1") }, "\(posts)")
        let notification = try #require(run.line(containing: "uploader | event notification"), "\(transcript)")
        #expect(value(of: "count", in: notification.line) == "3")
        #expect(value(of: "payload", in: notification.line) == "{\"photos\":3}")
        let foreground = try #require(run.line(containing: "uploader | event willEnterForeground"))
        #expect(notification.index < foreground.index)

        // 5. Memory: the backends the daemon chose for the apps it launches, named.
        let chosen = try #require(
            run.line(
                containing: backends.madeCgroups ? "The daemon chose for the apps it launches" : "With no CgroupRoot="),
            "\(transcript)")
        #expect(chosen.line.contains("freeze=\(backends.freeze) ("), "\(chosen.line)")
        #expect(backends.memory.contains { chosen.line.contains("memory=\($0) (") }, "\(chosen.line)")
        #expect(chosen.line.contains("kill=\(backends.kill) ("), "\(chosen.line)")
        // Two apps launched by the daemon: their pid as Launch replied is the one they register with, and their
        // cgroup is under the demo's.
        let cgroupRoot = value(of: "cgroupRoot", in: ready.line)
        for app in ["maps", "editor"] {
            let launched = try #require(run.line(containing: "Launch(\(app), argv: bgtask-demo-app"), "\(transcript)")
            #expect(launched.line.contains("replied: \(app) is notRunning, pid "), "\(launched.line)")
            let registered = try #require(run.line(containing: "\(app) | registered pid="), "\(transcript)")
            #expect(pids(in: launched.line) == pids(in: registered.line), "\(launched.line)\n\(registered.line)")
            if backends.freeze == "sigstop" {
                #expect(launched.line.hasSuffix("no cgroup"), "\(launched.line)")
            } else {
                let root = try #require(cgroupRoot)
                #expect(launched.line.contains(", cgroup \(root)/app-\(app)-"), "\(launched.line)")
            }
        }
        // maps, suspended with its cache, as the daemon and the kernel report it.
        let suspension = try #require(run.line(containing: "maps is suspended, holding its memory"), "\(transcript)")
        #expect(suspension.line.contains("suspendedWith \(backends.suspendedWith),"), "\(suspension.line)")
        #expect(backends.memory.contains { suspension.line.contains(" by \($0) (") }, "\(suspension.line)")
        switch backends.freeze {
        case "cgroup2": #expect(suspension.line.contains("cgroup.events says frozen 1"), "\(suspension.line)")
        case "cgroup1": #expect(suspension.line.contains("freezer.state says FROZEN"), "\(suspension.line)")
        default: #expect(suspension.line.contains("stat says T (stopped"), "\(suspension.line)")
        }
        // The warning: a launched app is a likely victim (the editor, or maps when the warning comes in the editor's
        // allocation, as the usage threshold has it); the foreground apps are warned too but are not.
        let editorWarning = try #require(run.line(containing: "bgtaskd | editor  memoryWarning"), "\(transcript)")
        let mapsWarning = try #require(run.line(containing: "bgtaskd | maps  memoryWarning"), "\(transcript)")
        #expect(
            value(of: "rank", in: editorWarning.line) != nil || value(of: "rank", in: mapsWarning.line) != nil,
            "\(editorWarning.line)\n\(mapsWarning.line)")
        for app in ["mail", "uploader"] {
            let line = try #require(run.line(containing: "\(app) | event memoryWarning"), "\(transcript)")
            #expect(value(of: "likelyVictim", in: line.line) == "false")
        }
        // The reclaim: the heaviest suspended app, with its band, bytes, trigger reading and trigger-to-kill time;
        // then its exit as its parent, the daemon, reports it, with kill-to-exit time.
        let reclaim = try #require(run.line(containing: "bgtaskd | editor  terminated  reason=memory-reclaim"))
        #expect(reclaim.line.contains("band=suspended"), "\(reclaim.line)")
        let reclaimed = try #require(run.line(containing: "the daemon reclaimed editor"), "\(transcript)")
        for detail in ["band suspended", " bytes)", "trigger reading \"apps use ", "from that reading to the kill"] {
            #expect(reclaimed.line.contains(detail), "\(reclaimed.line)")
        }
        let exited = try #require(run.line(containing: "bgtaskd | editor  processExited"), "\(transcript)")
        #expect(value(of: "latency", in: exited.line) != nil, "\(exited.line)")
        let exit = try #require(run.line(containing: "The editor's process"), "\(transcript)")
        #expect(
            exit.line.contains("as bgtaskd, its parent, reports it: killed by SIGKILL (exitSignal SIGKILL"),
            "\(exit.line)")
        #expect(exit.line.contains("from the kill to its exit (processExited)"), "\(exit.line)")
        #expect(run.line(containing: "GetApp(editor): terminated, exitReason memory-reclaim") != nil)
        // Heaviest first and no further: maps, lighter, is spared.
        #expect(run.line(containing: "bgtaskd | maps  terminated  reason=memory-reclaim") == nil, "\(transcript)")
        #expect(run.line(containing: "maps, suspended too but lighter") != nil, "\(transcript)")

        // 6. Scheduled work: the request waits on ac, its task runs once the adapter is plugged in, is warned once
        // it is unplugged, and the request waits for power again.
        #expect(
            run.line(containing: "backup | submitted nightly (processing, requires ac): pending, waiting on ac") != nil,
            "\(transcript)")
        let run6 = try #require(run.line(containing: "backup | event runScheduledTask"), "\(transcript)")
        #expect(value(of: "name", in: run6.line) == "nightly", "\(run6.line)")
        let began6 = try #require(run.line(containing: "backup | scheduled task nightly began"), "\(transcript)")
        let expiring6 = try #require(run.line(containing: "backup | event backgroundTaskExpiring"), "\(transcript)")
        #expect(began6.index < expiring6.index)
        #expect(value(of: "taskIds", in: expiring6.line) == value(of: "taskIds", in: run6.line), "\(expiring6.line)")
        #expect(run.line(containing: "backup | expiration handler of scheduled task nightly ran") != nil)
        #expect(run.line(containing: "bgtaskd | backup  taskEnded") != nil, "\(transcript)")
        #expect(run.line(containing: "the request waits for external power again") != nil)

        // The summary and the clean-up.
        #expect(run.line(containing: "== Summary ==") != nil)
        #expect(run.line(containing: "SIGTERM; exited with status 0") != nil, "the daemon stopped cleanly")
    }

    /// Nothing the run started is left: no process in its session, none of the pids it printed (the apps the
    /// daemon launched have sessions of their own: none of them may be left at all), none of the cgroups it made,
    /// no file in TMPDIR (runtime directory, socket, logs).
    static func expectNothingLeft(
        by run: DemoRun, startedAtLeast minimumPIDs: Int = 5, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(run.processesLeft().isEmpty, "left running: \(run.processesLeft())", sourceLocation: sourceLocation)
        for pid in run.printedPIDs {
            let survivor = try? ProcFS().stat(pid)
            #expect(
                survivor == nil || survivor?.sessionID != run.session,
                "pid \(pid) is still there: \(String(describing: survivor))",
                sourceLocation: sourceLocation)
        }
        for launched in run.lines(containing: "Launch(").flatMap(pids(in:)) {
            let survivor = try? ProcFS().stat(launched)
            #expect(
                survivor.map { !$0.command.hasPrefix("bgtask-demo") } ?? true,
                "launched app \(launched) is still there: \(String(describing: survivor))",
                sourceLocation: sourceLocation)
        }
        for cgroup in run.cgroupsMade {
            #expect(
                !FileManager.default.fileExists(atPath: cgroup), "cgroup \(cgroup) is still there",
                sourceLocation: sourceLocation)
        }
        #expect(
            run.printedPIDs.count >= minimumPIDs, "too few pids printed: \(run.printedPIDs)",
            sourceLocation: sourceLocation)
        #expect(
            run.temporaryLeftovers().isEmpty, "left in TMPDIR: \(run.temporaryLeftovers())",
            sourceLocation: sourceLocation)
        if let directory = run.line(containing: "runtime directory ")?.line.split(separator: " ").first(where: {
            $0.hasPrefix("/")
        }) {
            #expect(!FileManager.default.fileExists(atPath: String(directory)), sourceLocation: sourceLocation)
        } else {
            Issue.record("no runtime directory line", sourceLocation: sourceLocation)
        }
    }

    /// What `fullRun` needs: root on a host with a cgroup hierarchy, where the demo makes cgroups for the apps its
    /// daemon launches and the test checks them (`runsAsNobody` is the run without them).
    static let makesCgroups = HostRequirement(
        unavailableReason: ExpectedBackends(asRoot: geteuid() == 0).madeCgroups
            ? nil : "the demo makes cgroups for its apps only as root, on a host with a cgroup hierarchy")

    @Test(
        "runs to completion with every scene's real data, in well under a minute, and leaves nothing behind",
        .requires(DemoEndToEndTests.makesCgroups))
    func fullRun() async throws {
        try await offThePool {
            let run = try DemoRun(bgtask: try Products.path("bgtask"))
            let (status, took) = try run.finish()
            #expect(status == .exited(0), "stderr: \(run.errors)\n\(run.transcript)")
            #expect(run.errors.isEmpty, "\(run.errors)")
            #expect(took < .seconds(60), "took \(took)")
            let backends = ExpectedBackends(asRoot: true)
            // Cgroups of the demo's own for the daemon, handed to it and named in its GetStatus.
            #expect(!run.cgroupsMade.isEmpty, "\(run.transcript)")
            let ready = try #require(run.line(containing: "sent READY=1"))
            for cgroup in run.cgroupsMade { #expect(ready.line.contains(cgroup), "\(ready.line)") }
            try Self.expectEveryScene(in: run, backends: backends)
            Self.expectNothingLeft(by: run)
        }
    }

    @Test("needs no root: runs to completion as nobody, from a copy of the binaries any user may run")
    func runsAsNobody() async throws {
        try await offThePool {
            // The build directory may sit where only root can enter: copy the three executables out, as
            // PermissionTests does.
            let tools = try ScratchDirectory(prefix: "bgtask-demo-tools")
            for name in ["bgtask", "bgtaskd", "bgtask-demo-app"] {
                try Products.copy(name, into: tools.path)
            }
            let run = try DemoRun(
                bgtask: tools.path + "/bgtask",
                launcher: ["setpriv", "--reuid=\(Self.nobody)", "--regid=\(Self.nobody)", "--clear-groups"])
            // While it runs, the daemon and the apps are nobody's processes.
            let ready = try run.waitForLine(containing: "sent READY=1")
            let registered = try run.waitForLine(containing: "mail | registered pid=")
            let started = pids(in: ready) + pids(in: registered)
            #expect(started.count == 2, "\(ready)\n\(registered)")
            for pid in started {
                let owner = try FileManager.default.attributesOfItem(atPath: "/proc/\(pid)")[.ownerAccountID]
                #expect(
                    (owner as? NSNumber)?.uint32Value == Self.nobody,
                    "pid \(pid) is owned by \(String(describing: owner))")
            }
            let (status, _) = try run.finish()
            #expect(status == .exited(0), "stderr: \(run.errors)\n\(run.transcript)")
            #expect(run.lines(containing: "not running as root, so the demo makes no cgroups").count == 1)
            try Self.expectEveryScene(in: run, backends: ExpectedBackends(asRoot: false))
            Self.expectNothingLeft(by: run)
        }
    }

    /// A signal arriving at a given moment of the demo.
    struct Interruption: CustomTestStringConvertible, Sendable {
        var signal: Signal
        /// The transcript line after which the signal is sent.
        var after: String
        var testDescription: String { "\(signal.name) after \"\(after)\"" }
    }

    @Test(
        "a signal stops the demo at once and it cleans up the same way",
        arguments: [
            // The uploader has just been suspended: clean-up must end a stopped process too.
            Interruption(signal: .interrupt, after: "bgtaskd | uploader  stateChanged  state=suspended"),
            // Mid-wait for the expiration warning, a task open.
            Interruption(signal: .terminate, after: "game | began background task"),
            Interruption(signal: .hangUp, after: "mail | registered pid="),
            // maps, launched by the daemon, is suspended (frozen in its cgroup, as root): clean-up must thaw and end
            // it, and remove the cgroups.
            Interruption(signal: .interrupt, after: "maps is suspended, holding its memory"),
        ])
    func interrupted(_ interruption: Interruption) async throws {
        try await offThePool {
            let run = try DemoRun(bgtask: try Products.path("bgtask"))
            try run.waitForLine(containing: interruption.after)
            try run.child.process.pidFD.sendSignal(interruption.signal)
            let (status, _) = try run.finish(timeout: .seconds(30))
            #expect(status == .exited(128 + interruption.signal.rawValue), "\(run.transcript)")
            #expect(run.errors.contains("interrupted by \(interruption.signal.name)"), "\(run.errors)")
            #expect(run.line(containing: "== Cleaning up ==") != nil)
            #expect(run.line(containing: "== Summary ==") == nil)
            // At least the daemon and the mail app had started.
            Self.expectNothingLeft(by: run, startedAtLeast: 2)
        }
    }
}
