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
}
