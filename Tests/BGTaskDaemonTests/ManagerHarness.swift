// The real manager inside the test's process, on a manual clock and a fake /proc: a test steps the daemon's shell
// through a timeline of minutes in milliseconds.

import BGTaskBenchmarks
import BGTaskConfig
import BGTaskCore
import BGTaskJSON
import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc

@testable import BGTaskDaemon

/// A `Manager` run by the test itself: `ManagerClockMode.manual`, so the policy's deadlines, the memory monitor's
/// samples and every other timer fire only when the test moves the clock; `/proc` read from a `FakeProcTree`, so
/// the test decides each app's memory and file locks; and its loop stepped by the test, which waits only for what
/// the kernel and the inspection worker do (a connection, a process's exit, a sample), never for a policy window.
///
/// The apps are real processes (`AppStandIn`: the stand-in connects, hands its socket over, and waits), because
/// what the manager does to them is real: it stops, continues and kills them through their pidfds, and learns of
/// their exit from the pidfd becoming readable. Each stand-in is in the fake tree under its real pid.
final class ManagerHarness {
    /// One app: its stand-in process and its event stream (the stand-in's connection, on which it registered).
    struct App {
        let name: String
        let standIn: AppStandIn
        let stream: RawVarlinkClient
        var pid: pid_t { standIn.process.pid }
    }

    let directory: ScratchDirectory
    let tree: FakeProcTree
    /// The manager; a new one after `restart(after:)`.
    private(set) var manager: Manager
    let socketPath: String
    /// The state file the manager saves to and restores from.
    let statePath: String

    /// The state file's text followed by that of its journals (`state.journal.N`): what the daemon saved, the
    /// changes after the snapshot included.
    var savedText: String {
        var text = (try? String(contentsOfFile: statePath, encoding: .utf8)) ?? ""
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        for name in names.sorted() where name.hasPrefix("state.journal.") && !name.hasSuffix(".bad") {
            text += (try? String(contentsOfFile: directory.path + "/" + name, encoding: .utf8)) ?? ""
        }
        return text
    }
    private let configuration: DaemonConfiguration
    private let configurationPath: String
    /// The service manager managed apps are launched through (a `FakeUnitManager`); nil: the manager forks them.
    private let unitManager: UnitManagerEndpoint?
    /// The instant the manual clock started at.
    let start: MonotonicInstant
    private let logPath: String
    private let logFile: FileDescriptor
    private var controllerClient: RawVarlinkClient?
    private var standIns: [AppStandIn] = []
    private var isClosed = false

    /// A manager with `configuration` (bgtaskd.conf text; the defaults when empty) and `files` beside it (such as
    /// `apps.d/NAME.conf`), its clock at `start`; its managed apps launched as units of `unitManager` when given.
    init(
        configuration: String = "", files: [String: String] = [:], start: MonotonicInstant = .seconds(1_000),
        unitManager: UnitManagerEndpoint? = nil
    ) throws {
        directory = try ScratchDirectory(prefix: "bgtaskd-manager")
        socketPath = directory.path + "/io.bgtask.Lifecycle"
        configurationPath = try directory.write("bgtaskd.conf", configuration)
        for (name, text) in files { _ = try directory.write(name, text) }
        let loaded = ConfigurationLoader(path: configurationPath, daemonUserID: geteuid()).load()
        if let problem = loaded.diagnostics.first(where: { $0.severity == .error }) {
            throw HarnessError("bad test configuration: \(problem)")
        }
        if let refused = loaded.refused.first { throw HarnessError("test configuration refused: \(refused)") }
        self.configuration = loaded.configuration
        statePath = directory.path + "/state.json"
        tree = try FakeProcTree()
        logPath = directory.path + "/bgtaskd.log"
        logFile = try FileDescriptor.open(logPath, .writeOnly, options: [.create, .append])
        self.start = start
        self.unitManager = unitManager
        manager = try Self.startManager(
            configuration: loaded.configuration, configurationPath: configurationPath, socketPath: socketPath,
            statePath: statePath, logFile: logFile, tree: tree, start: start, unitManager: unitManager)
    }

    private static func startManager(
        configuration: DaemonConfiguration, configurationPath: String, socketPath: String, statePath: String,
        logFile: FileDescriptor, tree: FakeProcTree, start: MonotonicInstant, unitManager: UnitManagerEndpoint?
    ) throws -> Manager {
        let manager = try Manager(
            configuration: configuration, configurationPath: configurationPath, socketPath: socketPath,
            statePath: statePath, logger: Logger(destination: .stream, threshold: .debug, stream: logFile),
            procFS: tree.procFS, clock: .manual(start: start))
        do {
            try manager.start(handlesSignals: false, unitManager: unitManager.map(UnitManagerChoice.given))
        } catch {
            throw HarnessError("the manager did not start: \(error)")
        }
        return manager
    }

    /// Stops the manager as SIGTERM or `systemctl restart` would (it continues what it stopped and saves its
    /// state), runs `whileDown`, and starts a new manager on the same state file `downtime` later on the manual
    /// clock. The apps' event streams are gone; `reattach(_:)` registers an app again from its process. With
    /// `settlingFirst` false it stops at once, whatever writes are under way.
    func restart(after downtime: Duration, settlingFirst: Bool = true, whileDown: () throws -> Void = {}) throws {
        if settlingFirst { try settle() }
        let stoppedAt = manager.currentTime
        manager.stop(because: "the test restarts it")
        _ = try? manager.run()
        controllerClient?.close()
        controllerClient = nil
        try whileDown()
        manager = try Self.startManager(
            configuration: configuration, configurationPath: configurationPath, socketPath: socketPath,
            statePath: statePath, logFile: logFile, tree: tree, start: stoppedAt + downtime, unitManager: unitManager)
        try settle()
    }

    /// Registers `app` again from its own process on a new connection (as the client library does after a daemon
    /// restart); returns the app with its new stream and the Register reply.
    func reattach(_ app: App) throws -> (app: App, reply: [String: JSONValue]) {
        let connection = try app.standIn.reconnect(timeout: .seconds(30))
        let again = App(name: app.name, standIn: app.standIn, stream: RawVarlinkClient(connected: connection))
        try again.stream.send("io.bgtask.Lifecycle.Register", ["name": .string(app.name)], more: true)
        guard let reply = try reply(on: again.stream, to: "Register \(app.name) again") else {
            throw HarnessError("the manager closed \(app.name)'s connection on Register")
        }
        return (again, reply)
    }

    /// What the manager logged so far.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The manager's time since the start.
    var elapsed: Duration { manager.currentTime - start }

    // MARK: Stepping

    /// Dispatches everything ready and fires timers already due, then waits for the state writes under way (the
    /// replies and events they hold go out once they are done).
    func settle() throws {
        let deadline = MonotonicClock.now() + Duration.seconds(20).nanosecondCount
        while true {
            manager.advanceTime(by: .zero)
            while try manager.runIteration(timeout: .zero) {}
            if manager.isStateSettled { return }
            guard MonotonicClock.now() < deadline else { throw HarnessError("the state writes never settled") }
            try manager.runIteration(timeout: .milliseconds(20))
        }
    }

    /// Moves the manual clock forward by `duration` (firing what falls due on the way), then settles.
    func advance(by duration: Duration) throws {
        try settle()
        manager.advanceTime(by: duration)
        try settle()
    }

    /// Moves the manual clock to `elapsed` after the start, then settles.
    func advance(toElapsed elapsed: Duration) throws {
        try settle()
        manager.advanceTime(to: start + elapsed)
        try settle()
    }

    /// Steps the loop until `condition` holds, waiting for inputs in between. The real-time bound is for the
    /// kernel and the worker (an exit to show, a sample to come back), never a policy window: those are the
    /// manual clock's.
    func step(until what: String, timeout: Duration = .seconds(20), _ condition: () throws -> Bool) throws {
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while try !condition() {
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("waited \(timeout) for \(what); the manager logged:\n\(log)")
            }
            manager.advanceTime(by: .zero)
            try manager.runIteration(timeout: .milliseconds(20))
        }
    }

    // MARK: Talking to the manager

    /// The next reply on `client`, stepping the manager until it comes; nil when the manager closed the
    /// connection.
    func reply(on client: RawVarlinkClient, to what: String) throws -> [String: JSONValue]? {
        var arrival = RawVarlinkClient.Arrival.nothing
        try step(until: "a reply to \(what)") {
            arrival = try client.poll()
            return arrival != .nothing
        }
        if case .reply(let reply) = arrival { return reply }
        return nil
    }

    /// A connection of the test's own (a controller of the same uid as the apps).
    var controller: RawVarlinkClient {
        get throws {
            if let controllerClient { return controllerClient }
            let client = try RawVarlinkClient(path: socketPath)
            controllerClient = client
            return client
        }
    }

    /// Calls an `io.bgtask.Lifecycle` method on the controller connection and returns the reply.
    @discardableResult
    func call(_ method: String, _ parameters: [String: JSONValue] = [:]) throws -> [String: JSONValue] {
        let client = try controller
        try client.send("io.bgtask.Lifecycle." + method, parameters)
        guard let reply = try reply(on: client, to: method) else {
            throw HarnessError("the manager closed the controller connection on \(method)")
        }
        return reply
    }

    /// The app named `name` as `GetApp` shows it.
    func app(_ name: String) throws -> [String: JSONValue] {
        let reply = try call("GetApp", ["app": .string(name)])
        guard let app = reply.parameters["app"]?.objectValue else { throw HarnessError("GetApp \(name): \(reply)") }
        return app
    }

    /// Starts a stand-in process, puts it in the fake tree with `pssMiB` of memory, and registers it as `name`
    /// on its own connection (`state` as Register takes it).
    func register(_ name: String, pssMiB: Int64 = 10, state: String = "active") throws -> App {
        try register(startStandIn(name, pssMiB: pssMiB), as: name, state: state)
    }

    /// Starts a stand-in process, connected to the manager but not registered, and puts it in the fake tree with
    /// `pssMiB` of memory under `command`.
    func startStandIn(_ command: String, pssMiB: Int64 = 10) throws -> AppStandIn {
        let launch = try AppStandIn.launch(
            executable: try Products.path("bgtask-bench"), socketPath: socketPath, lifetime: .seconds(300))
        let standIn = try launch.connected(timeout: .seconds(30))
        standIns.append(standIn)
        // Its group is the `timeout` wrapper's, as in the kernel; it started long before anything is accepted.
        try tree.addProcess(
            pid: standIn.process.pid, group: standIn.wrapper.pid, startTime: 1, pssKiB: pssMiB * 1024,
            command: command)
        return standIn
    }

    /// Registers `standIn` as `name` on its connection (`state` as Register takes it).
    func register(_ standIn: AppStandIn, as name: String, state: String = "active") throws -> App {
        let app = App(name: name, standIn: standIn, stream: RawVarlinkClient(connected: standIn.connection))
        try app.stream.send(
            "io.bgtask.Lifecycle.Register", ["name": .string(name), "state": .string(state)], more: true)
        guard let reply = try reply(on: app.stream, to: "Register \(name)") else {
            throw HarnessError("the manager closed \(name)'s connection on Register")
        }
        guard reply.errorName == nil, reply.parameters["app"]?.objectValue != nil else {
            throw HarnessError("Register \(name) failed: \(reply)")
        }
        return app
    }

    /// The events that reached `app`'s stream so far, as (kind, id) pairs, without waiting.
    func events(of app: App) throws -> [(kind: String, id: Int)] {
        try settle()
        var events: [(kind: String, id: Int)] = []
        while case .reply(let reply) = try app.stream.poll() {
            guard let event = reply.parameters["event"]?.objectValue, case .string(let kind) = event["kind"],
                let id = event["id"]?.doubleValue
            else { throw HarnessError("unexpected reply on \(app.name)'s stream: \(reply)") }
            events.append((kind, Int(id)))
        }
        return events
    }

    /// Acknowledges event `id` of `app`.
    func acknowledge(_ app: App, _ id: Int) throws {
        let reply = try call("Acknowledge", ["app": .string(app.name), "eventId": .number(Double(id))])
        if let error = reply.errorName { throw HarnessError("Acknowledge \(app.name) \(id): \(error)") }
    }

    /// Whether the manager closed `app`'s stream, without waiting.
    func isStreamClosed(_ app: App) throws -> Bool {
        while true {
            switch try app.stream.poll() {
            case .closed: return true
            case .nothing: return false
            case .reply: continue
            }
        }
    }

    /// The real state of `app`'s process (`/proc`, not the fake tree); nil once it is gone.
    func processState(_ app: App) -> ProcessState? {
        guard (try? app.standIn.process.hasExited) == false else { return nil }
        return try? ProcFS().stat(app.pid).state
    }

    // MARK: Ending

    /// Stops the manager as SIGTERM would (every app it stopped is continued), then ends the stand-ins.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        manager.stop(because: "the test is over")
        _ = try? manager.run()
        for standIn in standIns { standIn.stop() }
        controllerClient?.close()
        try? logFile.close()
        directory.remove()
    }

    deinit { close() }
}
