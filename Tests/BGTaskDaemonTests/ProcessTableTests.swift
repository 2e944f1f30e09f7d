// The process table alone, with a fake owner in place of the manager: a real child is tracked by its pidfd, stopped
// only after a lock check and a save, continued, killed, and its exit reported; a suspension that cannot be checked
// is refused and the process left running.

import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Glibc
import Testing

@testable import BGTaskDaemon

/// The owner the table reports to: the policy's states are the test's, and what the table says is recorded.
final class FakeProcessTableHost: ProcessTableHost {
    let clock: ManagerClock
    let processChanges = ProcessChangeLog()
    var states: [AppID: AppState] = [:]
    var refusals: [(app: AppID, deferred: Bool)] = []
    var exits: [(app: AppID, how: ProcessEnd)] = []
    var exemptions: [(app: AppID, exemption: SuspensionExemption)] = []
    var stateChanges = 0
    /// Actions waiting for the state to be saved; the test saves by running them.
    var unsaved: [() -> Void] = []

    init(clock: ManagerClock) {
        self.clock = clock
    }

    var now: MonotonicInstant { clock.now }
    func policyState(of app: AppID) -> AppState? { states[app] }
    func isWatchingProcess(of app: AppID) -> Bool { states[app] != nil }
    func appName(_ app: AppID) -> String { "app\(app.rawValue)" }
    func suspensionRefused(_ app: AppID, deferred: Bool) { refusals.append((app, deferred)) }
    func suspensionExempted(_ app: AppID, because exemption: SuspensionExemption) {
        exemptions.append((app, exemption))
    }
    func appProcessExited(_ app: AppID, how: ProcessEnd, exit: ProcessExit?) { exits.append((app, how)) }
    func trackedProcessesChanged() {}
    func descriptorsFreed() {}
    func updateStatus() {}
    func stateChanged() { stateChanges += 1 }
    func whenStateSaved(_ action: @escaping () -> Void) { unsaved.append(action) }
    func memorySampleArrived(_ sample: MemorySample) {}
    func launchEnded(_ launch: LaunchAttempt, _ outcome: LaunchOutcome) {}
    func identityRefusal(for request: LaunchRequest, origin: LaunchOrigin) -> IdentityRefusal? { nil }
    func launchNotStarted(_ launch: PendingLaunch, because reason: LaunchNotStarted) {}

    /// Runs what waited for the save.
    func save() {
        let actions = unsaved
        unsaved = []
        for action in actions { action() }
    }
}

@Suite("The process table alone")
struct ProcessTableTests {
    /// A table on a loop of its own, its owner a fake, and a child tracked as `app`.
    private final class Fixture {
        let loop: EventLoop
        let table: ProcessTable
        let host: FakeProcessTableHost
        let child: ChildProcess
        let app = AppID(rawValue: 1 << 24 | 1)

        init(startsWorker: Bool) throws {
            loop = try EventLoop()
            let clock = ManagerClock(mode: .loop, loop: loop)
            table = ProcessTable(
                loop: loop, clock: clock, logger: Logger(destination: .stream, threshold: .error), procFS: ProcFS())
            host = FakeProcessTableHost(clock: clock)
            table.host = host
            table.findDaemonCgroup()
            if startsWorker { try table.startWorker() }
            child = try ChildProcess(["sleep", "30"])
            let stat = try ProcFS().stat(child.pid)
            let peer = PeerProcess(pidFD: try PidFD.open(pid: child.pid), startTime: stat.startTime)
            host.states[app] = .background
            #expect(table.track(app, peer: peer, uid: getuid()))
        }

        /// Turns the loop until `condition` holds, for at most five seconds.
        func turn(until condition: () -> Bool) throws {
            let deadline = MonotonicClock.now() + Duration.seconds(5).nanosecondCount
            while !condition() && MonotonicClock.now() < deadline {
                try loop.runIteration(timeout: .milliseconds(50))
            }
        }

        deinit {
            table.stopThreads()
            table.releaseAll()
            loop.cancelAllSources()
        }
    }

    @Test("a suspension the worker cannot check is refused (after the batch) and the process keeps running")
    func uncheckedSuspensionFailsClosed() throws {
        let fixture = try Fixture(startsWorker: false)
        fixture.host.states[fixture.app] = .suspended
        fixture.table.requestSuspension(of: fixture.app)
        #expect(fixture.host.refusals.map(\.app) == [fixture.app])
        #expect(fixture.host.refusals.first?.deferred == true)
        #expect(!fixture.table.isSuspensionPending(fixture.app))
        #expect(fixture.host.unsaved.isEmpty, "a stop was decided without a lock check")
        #expect(try ProcFS().stat(fixture.child.pid).state != .stopped)
    }

    @Test("a checked suspension stops the process only once the state is saved; resume continues it; exit reported")
    func suspendResumeKillAndExit() throws {
        let fixture = try Fixture(startsWorker: true)
        let app = fixture.app
        let pid = fixture.child.pid
        fixture.host.states[app] = .suspended
        fixture.table.requestSuspension(of: app)
        #expect(fixture.table.isSuspensionPending(app))
        try fixture.turn { !fixture.table.isSuspensionPending(app) }
        #expect(fixture.host.refusals.isEmpty, "the lock check refused a process holding no lock")
        #expect(fixture.host.unsaved.count == 1, "the stop did not wait for the save")
        #expect(try ProcFS().stat(pid).state != .stopped, "stopped before the state said so")
        fixture.host.save()
        #expect(try waitForProcessState(pid) { $0 == .stopped } == .stopped)
        #expect(fixture.table.processOfApp[app]?.isStopped == true)

        fixture.host.states[app] = .active
        fixture.table.resume(app)
        #expect(try waitForProcessState(pid) { $0 != .stopped } != .stopped)
        #expect(fixture.table.processOfApp[app]?.isStopped == false)

        fixture.host.states[app] = .terminated
        fixture.table.kill(app, reason: .taskExpired)
        try fixture.turn { !fixture.host.exits.isEmpty }
        #expect(fixture.host.exits.map(\.app) == [app])
        #expect(fixture.table.processOfApp[app] == nil)
        #expect(fixture.table.processes.isEmpty)
        #expect(fixture.host.processChanges.serials.count == 1)
    }

    @Test("a lock check answered after the policy moved on stops nothing")
    func staleLockCheckIsIgnored() throws {
        let fixture = try Fixture(startsWorker: true)
        let app = fixture.app
        fixture.host.states[app] = .suspended
        fixture.table.requestSuspension(of: app)
        // The app must run again before the check comes back: the check is forgotten.
        fixture.host.states[app] = .active
        fixture.table.resume(app)
        #expect(!fixture.table.isSuspensionPending(app))
        fixture.table.lockCheckFinished(request: 1, .free)
        try fixture.loop.runIteration(timeout: .milliseconds(200))
        #expect(fixture.host.unsaved.isEmpty)
        #expect(try ProcFS().stat(fixture.child.pid).state != .stopped)
    }
    /// A table's app alone in a cgroup2 cgroup of its own (as a `systemd-run --scope` gives it), suspended: its
    /// freeze decided, the lock check done, the save not yet made. Also a process of the same user that is not
    /// the app's, which the test moves in.
    private final class OwnCgroupFixture {
        let fixture: Fixture
        let scope: ScratchCgroup
        let stranger: ChildProcess

        init() throws {
            fixture = try Fixture(startsWorker: true)
            scope = try ScratchCgroup(.unified)
            try scope.move(fixture.child.pid)
            stranger = try ChildProcess(["sleep", "30"])
            let app = fixture.app
            fixture.host.states[app] = .suspended
            fixture.table.requestSuspension(of: app)
            try fixture.turn { !fixture.table.isSuspensionPending(app) }
            #expect(fixture.host.unsaved.count == 1, "the freeze did not wait for the save")
            #expect(fixture.table.processOfApp[app]?.pendingOwnCgroupFreeze?.path == scope.cgroup.path)
        }
    }

    @Test(
        "a process of the app's user, not its descendant, moved into its own cgroup before the freeze is written: SIGSTOP instead",
        .requires(.cgroup(.unified)))
    func ownCgroupRecheckedBeforeTheWrite() throws {
        let own = try OwnCgroupFixture()
        try own.scope.move(own.stranger.pid)
        own.fixture.host.save()
        // The SIGSTOP that replaces the freeze waits for its own save.
        #expect(own.fixture.table.processOfApp[own.fixture.app]?.frozenCgroup == nil, "the freeze was written")
        own.fixture.host.save()
        #expect(try waitForProcessState(own.fixture.child.pid) { $0 == .stopped } == .stopped)
        #expect(try own.scope.cgroup.events()["frozen"] != 1, "froze a cgroup holding a process not the app's")
        #expect(try ProcFS().stat(own.stranger.pid).state != .stopped)
    }

    @Test(
        "a process of the app's user, not its descendant, found in its own cgroup once frozen: thawed, the app SIGSTOPped",
        .requires(.cgroup(.unified)))
    func ownCgroupRecheckedOnceFrozen() throws {
        let own = try OwnCgroupFixture()
        own.fixture.host.save()
        #expect(try own.scope.cgroup.waitUntil(frozen: true, timeout: .seconds(5)))
        // Moved in before the daemon confirms the freeze (its loop has not turned since the write).
        try own.scope.move(own.stranger.pid)
        try own.fixture.turn { own.fixture.table.processOfApp[own.fixture.app]?.frozenCgroup == nil }
        #expect(own.fixture.table.processOfApp[own.fixture.app]?.isStopped == true)
        #expect(try own.scope.cgroup.waitUntil(frozen: false, timeout: .seconds(5)), "the cgroup stayed frozen")
        own.fixture.host.save()
        #expect(try waitForProcessState(own.fixture.child.pid) { $0 == .stopped } == .stopped)
        #expect(try ProcFS().stat(own.stranger.pid).state != .stopped)
    }

    @Test("the app's own children in its cgroup do not stop the freeze", .requires(.cgroup(.unified)))
    func ownCgroupWithDescendantsIsFrozen() throws {
        let fixture = try Fixture(startsWorker: true)
        let scope = try ScratchCgroup(.unified)
        // A shell that is the app, with a child of its own: both in the cgroup.
        let shell = try ChildProcess(["/bin/sh", "-c", "read go; sleep 30 & wait"])
        try scope.move(shell.pid)
        try shell.send("go")
        let stat = try ProcFS().stat(shell.pid)
        let peer = PeerProcess(pidFD: try PidFD.open(pid: shell.pid), startTime: stat.startTime)
        let app = AppID(rawValue: 1 << 24 | 2)
        fixture.host.states[app] = .background
        #expect(fixture.table.track(app, peer: peer, uid: getuid()))
        try fixture.turn { ((try? scope.cgroup.processes()) ?? []).count == 2 }
        #expect(try scope.cgroup.processes().count == 2, "the shell's child did not start")
        fixture.host.states[app] = .suspended
        fixture.table.requestSuspension(of: app)
        try fixture.turn { !fixture.table.isSuspensionPending(app) }
        fixture.host.save()
        try fixture.turn { fixture.table.processOfApp[app]?.frozenCgroup != nil }
        #expect(try scope.cgroup.waitUntil(frozen: true, timeout: .seconds(5)))
        try fixture.loop.runIteration(timeout: .milliseconds(100))
        #expect(fixture.table.processOfApp[app]?.frozenCgroup?.path == scope.cgroup.path, "fell back to SIGSTOP")
        fixture.host.states[app] = .active
        fixture.table.resume(app)
        #expect(try scope.cgroup.waitUntil(frozen: false, timeout: .seconds(5)))
    }
}
