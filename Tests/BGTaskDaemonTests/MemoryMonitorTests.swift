// The memory monitor alone, beside a fake of its host: samples asked for, warnings and reclamations fed to a real
// policy core, victims waited for and given up on, and nothing done once the host is gone.

import BGTaskConfig
import BGTaskCore
import BGTaskPOSIX
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Testing

@testable import BGTaskDaemon

/// A tracked process as the fake host keeps it.
private final class FakeProcess: MonitoredProcess {
    let serial: Int
    let pid: pid_t
    var apps: Set<AppID>
    var memoryBytes: UInt64?
    var isMemoryReadingStale = false
    var inspected: InspectedProcess { InspectedProcess(key: serial, pid: pid, startTime: 1_000) }

    init(serial: Int, pid: pid_t, app: AppID) {
        self.serial = serial
        self.pid = pid
        apps = [app]
    }
}

/// The monitor's neighbour, faked: a real policy core (the monitor reads its reclamation order and feeds it
/// inputs), processes the test adds, a manual clock, a fake `/proc`, and a record of the jobs and actions asked for.
private final class FakeMemoryHost: MemoryMonitorHost {
    let logger: Logger
    let loop: EventLoop
    let clock: ManagerClock
    let tree: FakeProcTree
    let inspector: ProcessInspector
    var procFS: ProcFS { tree.procFS }
    var isStopping = false
    var core = Lifecycle(policy: CorePolicy())
    var processes: [Int: FakeProcess] = [:]
    /// What the monitor handed to the inspection worker, and the actions of the inputs it fed the core.
    var jobs: [InspectionJob] = []
    var performed: [Action] = []
    private let directory: ScratchDirectory
    private let logPath: String

    init() throws {
        directory = try ScratchDirectory(prefix: "memory-monitor")
        logPath = directory.path + "/log"
        logger = Logger(
            destination: .stream, threshold: .debug,
            stream: try FileDescriptor.open(logPath, .writeOnly, options: [.create, .append]))
        loop = try EventLoop()
        clock = ManagerClock(mode: .manual(start: .seconds(1_000)), loop: loop)
        tree = try FakeProcTree()
        inspector = ProcessInspector(procFS: tree.procFS)
    }

    /// What the monitor logged so far.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Registers `name` in the core in the background (reclaimable), with a tracked process of its own.
    func addApp(_ name: String, serial: Int) throws -> AppID {
        let outcome = try core.register(
            name: name, process: ProcessIdentity(pid: Int32(4_000 + serial), uid: 1_000), initialState: .background,
            now: clock.now)
        processes[serial] = FakeProcess(serial: serial, pid: pid_t(4_000 + serial), app: outcome.app)
        return outcome.app
    }

    var hasMonitoredProcesses: Bool { !processes.isEmpty }
    var monitoredProcesses: [any MonitoredProcess] { Array(processes.values) }
    func monitoredProcess(serial: Int) -> (any MonitoredProcess)? { processes[serial] }
    func monitoredProcess(of app: AppID) -> (any MonitoredProcess)? { processes.values.first { $0.apps.contains(app) } }
    func appName(_ app: AppID) -> String { core.snapshot(of: app, now: clock.now)?.name ?? app.description }

    func submit(_ job: InspectionJob) -> Bool {
        jobs.append(job)
        return true
    }

    /// Run on the core after each input the monitor feeds it: what the daemon does in consequence.
    var afterInput: ((inout Lifecycle) -> Void)?

    func feedMemoryInput<Failure: Error>(_ input: (inout Lifecycle) throws(Failure) -> [Action]) throws(Failure) {
        performed += try input(&core)
        afterInput?(&core)
    }

    var appsPressureFile: String? { nil }
    var appsMemoryRoot: CgroupDirectory? { nil }

    /// The apps the performed actions terminated for memory, in order.
    var reclaimed: [AppID] {
        performed.compactMap {
            guard case .audit(let entry) = $0, entry.kind == .terminated, entry.reason == .memoryReclaim else {
                return nil
            }
            return entry.app
        }
    }
}

private let mebibyte: UInt64 = 1 << 20

/// `AppsMemoryMax=100M` with a one-second warning grace; the service manager's pressure watch turned off, so
/// polling is the only trigger.
private func makeMonitor(_ host: FakeMemoryHost) -> MemoryMonitor {
    var settings = DaemonConfiguration.Memory()
    settings.appsMemoryMaxBytes = 100 * mebibyte
    settings.warningGrace = .seconds(1)
    return MemoryMonitor(host: host, settings: settings, environment: ["MEMORY_PRESSURE_WATCH": "/dev/null"])
}

/// A sample of the apps, as the worker would return it: 8 GiB of RAM, half available.
private func sample(_ bytes: [Int: UInt64]) -> MemorySample {
    MemorySample(
        memoryInfo: MemoryInfo(totalBytes: 8 << 30, availableBytes: 4 << 30), processBytes: bytes,
        includesProcesses: true, finishedAt: 0, durationNanoseconds: 1_000_000)
}

/// The processes of the last memory job the monitor handed to the worker.
private func sampledKeys(_ host: FakeMemoryHost) -> Set<Int> {
    guard case .memory(let processes)? = host.jobs.last else { return [] }
    return Set(processes.map(\.key))
}

@Suite("The memory monitor, alone")
struct MemoryMonitorTests {
    @Test("over AppsMemoryMax: a sample of every app, a warning to each, then the heaviest reclaimed and awaited")
    func warnThenReclaim() throws {
        let host = try FakeMemoryHost()
        let heavy = try host.addApp("heavy", serial: 1)
        let light = try host.addApp("light", serial: 2)
        let monitor = makeMonitor(host)
        monitor.appsChanged()
        host.clock.advance(to: host.clock.now)
        #expect(sampledKeys(host) == [1, 2])

        monitor.sampleArrived(sample([1: 90 * mebibyte, 2: 20 * mebibyte]))
        #expect(host.processes[1]?.memoryBytes == 90 * mebibyte)
        let warned = host.performed.compactMap { action -> (AppID, AppEvent)? in
            guard case .send(let event, let app) = action, event.kind == .memoryWarning else { return nil }
            return (app, event)
        }
        #expect(Set(warned.map(\.0)) == [heavy, light])
        #expect(warned.first { $0.0 == heavy }?.1.likelyVictim == true)
        #expect(host.reclaimed.isEmpty)

        // Still over once the grace is up: the heaviest goes, and the one victim covers what is to be freed.
        host.jobs = []
        host.clock.advance(to: host.clock.now + .seconds(1))
        #expect(sampledKeys(host) == [1, 2])
        monitor.sampleArrived(sample([1: 90 * mebibyte, 2: 20 * mebibyte]))
        #expect(host.reclaimed == [heavy])

        host.clock.advance(to: host.clock.now + .milliseconds(30))
        #expect(monitor.victimExited(heavy) == .milliseconds(30))
        #expect(monitor.victimExited(light) == nil, "light was never a victim")
        #expect(host.log.contains("reclaiming"))
    }

    @Test("an app moved to a later band by a kill's consequences in mid-round is passed over for the earlier band")
    func roundFollowsBandsAsTheyAre() throws {
        let host = try FakeMemoryHost()
        let first = try host.addApp("first", serial: 1)
        let woken = try host.addApp("woken", serial: 2)
        let idle = try host.addApp("idle", serial: 3)
        let busy = try host.addApp("busy", serial: 4)
        _ = try host.core.beginBackgroundTask(busy, name: "upload", now: host.clock.now)
        let monitor = makeMonitor(host)
        monitor.appsChanged()
        host.clock.advance(to: host.clock.now)
        // 145 MiB against 100: about 55 MiB to free, so two victims of the three idle ones, heaviest first.
        let readings: [Int: UInt64] = [1: 45 * mebibyte, 2: 44 * mebibyte, 3: 40 * mebibyte, 4: 16 * mebibyte]
        monitor.sampleArrived(sample(readings))
        #expect(host.reclaimed.isEmpty, "warned first")
        // The first kill has the daemon begin work in the next in line (as a scheduled task begun in an app it
        // woke): from then on it is in background with a task, after every idle app.
        host.afterInput = { core in
            guard core.reclamationBand(of: first) == nil, core.reclamationBand(of: woken) == .backgroundIdle else {
                return
            }
            _ = try? core.beginBackgroundTask(woken, name: "scheduled", now: host.clock.now)
        }
        host.clock.advance(to: host.clock.now + .seconds(1))
        monitor.sampleArrived(sample(readings))
        #expect(host.core.reclamationBand(of: woken) == .backgroundWithTasks)
        #expect(host.reclaimed == [first, idle], "reclaimed \(host.reclaimed) of first \(first), idle \(idle)")
    }

    @Test("an app registered while a sample is out is weighed before anyone is reclaimed, and dies first if heaviest")
    func newcomerWeighedBeforeReclaiming() throws {
        let host = try FakeMemoryHost()
        let first = try host.addApp("first", serial: 1)
        let second = try host.addApp("second", serial: 2)
        let monitor = makeMonitor(host)
        monitor.appsChanged()
        host.clock.advance(to: host.clock.now)
        monitor.sampleArrived(sample([1: 50 * mebibyte, 2: 55 * mebibyte]))
        #expect(host.reclaimed.isEmpty, "a warning first")

        // The grace is up and a sample of the two is out when a heavier app registers (or, after a restart, is
        // adopted again): ranked on that sample alone, `second` would die before it.
        host.jobs = []
        host.clock.advance(to: host.clock.now + .seconds(1))
        #expect(sampledKeys(host) == [1, 2])
        let newcomer = try host.addApp("newcomer", serial: 3)
        monitor.sampleArrived(sample([1: 50 * mebibyte, 2: 55 * mebibyte]))
        #expect(host.reclaimed.isEmpty, "nobody reclaimed before the newcomer is weighed")
        #expect(sampledKeys(host) == [1, 2, 3])

        // Weighed, the newcomer is the heaviest of the band and goes first; the two others were over the limit
        // without it, so the heavier of them follows. An app registered meanwhile does not put the decision off.
        let fourth = try host.addApp("fourth", serial: 4)
        monitor.sampleArrived(sample([1: 50 * mebibyte, 2: 55 * mebibyte, 3: 70 * mebibyte]))
        #expect(host.reclaimed == [newcomer, second])
        #expect(!host.reclaimed.contains(first))
        #expect(!host.reclaimed.contains(fourth))
    }

    @Test("a victim that does not exit within victimExitTimeout is given up on; its memory still counts")
    func stuckVictimIsAbandoned() throws {
        let host = try FakeMemoryHost()
        let heavy = try host.addApp("heavy", serial: 1)
        let light = try host.addApp("light", serial: 2)
        let monitor = makeMonitor(host)
        monitor.appsChanged()
        host.clock.advance(to: host.clock.now)
        monitor.sampleArrived(sample([1: 90 * mebibyte, 2: 20 * mebibyte]))
        host.clock.advance(to: host.clock.now + .seconds(1))
        monitor.sampleArrived(sample([1: 90 * mebibyte, 2: 20 * mebibyte]))
        #expect(host.reclaimed == [heavy])

        // Heavy's process never goes. Past the timeout reclamation stops waiting, and counts heavy's 90 MiB with
        // light's 20 MiB: still over, so light goes next. Heavy's memory counts in the apps' total until it exits.
        host.clock.advance(to: host.clock.now + MemoryMonitor.victimExitTimeout)
        #expect(!host.log.contains("has not exited"))
        monitor.sampleArrived(sample([1: 90 * mebibyte, 2: 20 * mebibyte]))
        #expect(host.log.contains("heavy's process (pid 4001) has not exited"))
        #expect(host.reclaimed == [heavy, light])
        #expect(monitor.appsBytes == 90 * mebibyte)

        host.clock.advance(to: host.clock.now + .seconds(2))
        #expect(monitor.victimExited(heavy) == MemoryMonitor.victimExitTimeout + .seconds(2))
        #expect(host.log.contains("heavy's process exited at last"))
    }

    @Test("an unreadable process keeps its last reading, marked stale, and is logged once")
    func unreadableReadingIsKept() throws {
        let host = try FakeMemoryHost()
        _ = try host.addApp("app", serial: 1)
        let monitor = makeMonitor(host)
        monitor.sampleArrived(sample([1: 10 * mebibyte]))
        var failing = sample([:])
        failing.failures = [1: "permission denied"]
        monitor.sampleArrived(failing)
        monitor.sampleArrived(failing)
        #expect(host.processes[1]?.memoryBytes == 10 * mebibyte)
        #expect(host.processes[1]?.isMemoryReadingStale == true)
        #expect(host.log.components(separatedBy: "cannot read the memory of pid 4001").count == 2)
        monitor.sampleArrived(sample([1: 12 * mebibyte]))
        #expect(host.processes[1]?.isMemoryReadingStale == false)
    }

    @Test("the host is held weakly: once it is gone, the monitor measures and decides nothing")
    func hostGone() throws {
        var host: FakeMemoryHost? = try FakeMemoryHost()
        _ = try host?.addApp("heavy", serial: 1)
        let monitor = makeMonitor(try #require(host))
        let clock = try #require(host?.clock)
        weak let released = host
        host = nil
        #expect(released == nil, "the monitor keeps its host alive")
        monitor.appsChanged()
        clock.advance(to: clock.now + .seconds(10))
        monitor.sampleArrived(sample([1: 500 * mebibyte]))
        #expect(monitor.readings().isEmpty)
    }
}
