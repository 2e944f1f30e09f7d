// ServiceManagerConnection against a real systemd user manager, contained: transient units started, read, frozen
// where the host allows, killed, stopped and collected, every step seen through replies and signals on the loop.
import BGTaskTestSupport
import Glibc
import Testing

@testable import BGTaskPOSIX
@testable import BGTaskSystem

/// An object whose release shows that a closure holding it was released.
private final class Token {}

@Suite("systemd's manager over sd-bus", .serialized, .requires(.containedSystemd))
struct ServiceManagerTests {
    /// The properties the daemon will give an app's unit, with a test program.
    static func appUnitProperties(_ unit: String) -> [UnitProperty] {
        [
            .description("bgtask test app \(unit)"),
            .execStart([ExecCommand(path: "/bin/sleep", arguments: ["sleep", "60"])]),
            .environment(["BGTASK_TEST_UNIT=\(unit)", "LANG=C"]),
            .syslogIdentifier("bgtask-test"),
            .collectMode("inactive-or-failed"),
            .serviceType("exec"),
            .slice("app.slice"),
        ]
    }

    @Test("a transient unit started, read, refused a freeze, killed and collected, seen through signals on the loop")
    func transientUnitLifecycle() async throws {
        try await offThePool {
            let systemd = try ContainedSystemd()
            defer { systemd.close() }
            let loop = try EventLoop()

            // The probe finds the manager's private socket, and says so.
            let (connection, probe) = try probedConnection(to: systemd, on: loop)
            defer { connection.close() }
            print("ServiceManagerTests: \(probe)")
            let privateSocket = systemd.runtimeDirectory + "/systemd/private"
            #expect(probe.chosen == ServiceManagerEndpoint(kind: .direct, socketPath: privateSocket))
            let version = try connection.waitFor { connection.managerVersion(completion: $0) }
            let shown = try systemd.systemctl(["show", "-p", "Version", "--value"]).output
            #expect(version == probe.version && version + "\n" == shown, "\(version) against \(shown)")

            var disconnections = 0
            connection.onDisconnect = { disconnections += 1 }
            var signalErrors: [ServiceManagerError] = []
            connection.onSignalError = { signalErrors.append($0) }
            try connection.waitFor { connection.subscribe(completion: $0) }
            var jobs: [JobRemovedSignal] = []
            var removedUnits: [UnitRemovedSignal] = []
            let jobWatch = try connection.onJobRemoved { jobs.append($0) }
            let removalWatch = try connection.onUnitRemoved { removedUnits.append($0) }

            // Started: the start job ends `done`, found by name, by path and by its process.
            let unit = "app-bgtask-test-\(String(UInt32.random(in: 0...UInt32.max), radix: 16)).service"
            let unitPath = ServiceManagerConnection.unitPath(for: unit)
            var changes: [PropertiesChangedSignal] = []
            let changeWatch = try connection.onPropertiesChanged(of: unitPath) { changes.append($0) }
            let startJob = try connection.waitFor {
                connection.startTransientUnit(unit, properties: Self.appUnitProperties(unit), completion: $0)
            }
            #expect(try connection.runLoop(timeout: .seconds(30)) { jobs.contains { $0.job == startJob } })
            let started = jobs.first { $0.job == startJob }
            #expect(started?.unit == unit && started?.result == .done, "\(jobs)")
            #expect(try connection.waitFor { connection.getUnit(unit, completion: $0) } == unitPath)
            let state = try connection.waitFor {
                connection.unitProperties(at: unitPath, interface: .unit, completion: $0)
            }
            #expect(state.activeState == "active" && state.subState == "running", "\(state.values)")
            let service = try connection.waitFor {
                connection.unitProperties(at: unitPath, interface: .service, completion: $0)
            }
            let pid = try #require(service.mainPID, "\(service.values)")
            #expect(try ProcFS().read("\(pid)/comm") == "sleep\n")
            let environment = try ProcFS().read("\(pid)/environ").split(separator: "\0")
            #expect(environment.contains("BGTASK_TEST_UNIT=\(unit)"), "\(environment)")
            let cgroup = try #require(service.controlGroup, "\(service.values)")
            #expect(cgroup.hasSuffix("/app.slice/\(unit)"), "\(cgroup)")
            let memberships = try ProcFS().read("\(pid)/cgroup").split(separator: "\n")
            #expect(memberships.contains { $0.hasSuffix(":" + cgroup) }, "\(cgroup) against \(memberships)")
            #expect(service.execMainCode == 0 && service.result == "success", "\(service.values)")
            #expect(try connection.waitFor { connection.getUnitByPID(pid, completion: $0) } == unitPath)

            // FreezeUnit: done on a pure cgroup2 host, refused (typed) on a hybrid one.
            var freeze: Result<Void, ServiceManagerError>?
            connection.freezeUnit(unit) { freeze = $0 }
            #expect(try connection.runLoop(timeout: .seconds(30)) { freeze != nil })
            print("ServiceManagerTests: FreezeUnit answered \(String(describing: freeze))")
            if access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 {
                #expect(throws: Never.self) { try freeze?.get() }
                try connection.waitFor { connection.thawUnit(unit, completion: $0) }
            } else if case .failure(let error) = freeze {
                #expect(error.busErrorName == .notSupported, "\(error)")
            } else {
                Issue.record("FreezeUnit succeeded on a host that is not pure cgroup2")
            }

            // SIGKILL: the main process ends killed by signal 9, the unit fails and is collected; the properties
            // that say so come in PropertiesChanged before UnitRemoved.
            changes.removeAll()
            try connection.waitFor { connection.killUnit(unit, signal: .kill, completion: $0) }
            #expect(try connection.runLoop(timeout: .seconds(30)) { removedUnits.contains { $0.unit == unit } })
            #expect(removedUnits.first { $0.unit == unit }?.path == unitPath)
            var serviceChanges: [String: BusValue] = [:]
            var unitChanges: [String: BusValue] = [:]
            for change in changes {
                if change.interface == UnitInterface.service.rawValue {
                    serviceChanges.merge(change.changed) { $1 }
                } else if change.interface == UnitInterface.unit.rawValue {
                    unitChanges.merge(change.changed) { $1 }
                }
            }
            let ended = UnitProperties(serviceChanges)
            #expect(ended.execMainCode == 2 && ended.execMainStatus == 9, "\(serviceChanges)")
            #expect(ended.execMainPID == pid && ended.result == "signal", "\(serviceChanges)")
            #expect(UnitProperties(unitChanges).activeState == "failed", "\(unitChanges)")
            #expect(processGone(pid))
            print("ServiceManagerTests: \(changes.count) PropertiesChanged after the kill; the unit's last: \(ended)")

            // Gone: typed NoSuchUnit, for a collected unit and for a name never loaded.
            for name in [unit, "bgtask-never-loaded-\(getpid()).service"] {
                var lookup: Result<BusObjectPath, ServiceManagerError>?
                connection.getUnit(name) { lookup = $0 }
                #expect(try connection.runLoop(timeout: .seconds(30)) { lookup != nil })
                guard case .failure(.method(.noSuchUnit, let message)) = lookup else {
                    Issue.record("GetUnit(\(name)): \(String(describing: lookup))")
                    continue
                }
                #expect(message.contains(name), "\(message)")
            }
            var kill: Result<Void, ServiceManagerError>?
            connection.killUnit("bgtask-never-loaded.service", signal: .terminate) { kill = $0 }
            #expect(try connection.runLoop(timeout: .seconds(30)) { kill != nil })
            if case .failure(let error) = kill {
                #expect(error.busErrorName == .noSuchUnit, "\(error)")
            } else {
                Issue.record("KillUnit of a unit never loaded succeeded")
            }

            // Stopped: the stop job's JobRemoved, then UnitRemoved.
            let second = "app-bgtask-test-\(String(UInt32.random(in: 0...UInt32.max), radix: 16)).service"
            let secondStart = try connection.waitFor {
                connection.startTransientUnit(second, properties: Self.appUnitProperties(second), completion: $0)
            }
            #expect(try connection.runLoop(timeout: .seconds(30)) { jobs.contains { $0.job == secondStart } })
            let stopJob = try connection.waitFor { connection.stopUnit(second, completion: $0) }
            #expect(stopJob != secondStart)
            #expect(
                try connection.runLoop(timeout: .seconds(30)) {
                    jobs.contains { $0.job == stopJob } && removedUnits.contains { $0.unit == second }
                })
            #expect(jobs.first { $0.job == stopJob }?.result == .done, "\(jobs)")

            // Many calls at once: each completes once, and nothing of them is left.
            weak var releasedToken: Token?
            var answers = 0
            do {
                let token = Token()
                releasedToken = token
                for _ in 0..<300 {
                    connection.managerVersion { result in
                        withExtendedLifetime(token) {}
                        if (try? result.get()) == version { answers += 1 }
                    }
                }
            }
            #expect(connection.pendingCallCount == 300)
            #expect(try connection.runLoop(timeout: .seconds(30)) { answers == 300 })
            #expect(connection.pendingCallCount == 0)
            #expect(connection.liveCallObjectCount == 0, "sd-bus kept the slots of answered calls")
            #expect(releasedToken == nil, "a completion was kept after it ran")

            // A connection closed with a call in flight and a subscription: the call completes with .disconnected,
            // on the loop, and the socket is closed (a slot left behind would keep the bus, and the socket, open).
            let endpoint = ServiceManagerEndpoint(kind: .direct, socketPath: privateSocket)
            let closing = try ServiceManagerConnection(endpoint: endpoint, loop: loop)
            let socket = try socketIdentity(try #require(closing.socketDescriptor))
            #expect(socket.target.hasPrefix("socket:"), "\(socket)")
            _ = try closing.onJobRemoved { _ in }
            var cutOff: Result<String, ServiceManagerError>?
            closing.managerVersion { cutOff = $0 }
            closing.close()
            #expect(cutOff == nil, "a completion ran inside close()")
            #expect(try turn(loop) { cutOff != nil })
            #expect(cutOff == .failure(.disconnected))
            #expect(try socketIdentity(socket.descriptor) != socket, "the bus outlived close()")
            // Closed by its own completion, inside sd-bus's dispatch, with another call still waiting.
            let selfClosing = try ServiceManagerConnection(endpoint: endpoint, loop: loop)
            var outcomes: [Result<String, ServiceManagerError>] = []
            selfClosing.managerVersion { result in
                outcomes.append(result)
                selfClosing.close()
            }
            selfClosing.managerVersion { outcomes.append($0) }
            #expect(try turn(loop) { outcomes.count == 2 })
            #expect(outcomes == [.success(version), .failure(.disconnected)])

            for watch in [jobWatch, removalWatch, changeWatch] { watch.cancel() }
            #expect(connection.subscriptionCount == 0)
            #expect(signalErrors.isEmpty, "\(signalErrors)")

            // The manager goes away: reported once; later calls fail as disconnected, on the loop.
            try systemd.systemctlSucceeding(["exit"])
            #expect(try connection.runLoop(timeout: .seconds(30)) { disconnections > 0 })
            #expect(!connection.isConnected)
            var afterwards: Result<String, ServiceManagerError>?
            connection.managerVersion { afterwards = $0 }
            #expect(afterwards == nil)
            #expect(try connection.runLoop(timeout: .seconds(5)) { afterwards != nil })
            #expect(afterwards == .failure(.disconnected))
            #expect(disconnections == 1)
        }
    }
}

/// The contained manager's connection as the probe finds it (its private socket), with what the probe says.
private func probedConnection(
    to systemd: ContainedSystemd, on loop: EventLoop
) throws -> (ServiceManagerConnection, ServiceManagerProbe) {
    var probed: (ServiceManagerConnection?, ServiceManagerProbe)?
    ServiceManagerConnection.probe(.user(runtimeDirectory: systemd.runtimeDirectory), loop: loop) {
        probed = ($0, $1)
    }
    guard try turn(loop, until: { probed != nil }), let (found, probe) = probed else {
        throw HarnessError("the probe of the contained manager never finished")
    }
    guard let connection = found else { throw HarnessError("no connection to the contained manager: \(probe)") }
    return (connection, probe)
}

extension ServiceManagerTests {
    @Test(
        "a command not to be expanded reaches its program exactly: through ExecStartEx with no-env-expand, and through ExecStart with every $ doubled"
    )
    func argumentsReachTheProgramExactly() async throws {
        try await offThePool {
            let systemd = try ContainedSystemd()
            defer { systemd.close() }
            let loop = try EventLoop()
            let (connection, _) = try probedConnection(to: systemd, on: loop)
            defer { connection.close() }
            let versionText = try connection.waitFor { connection.managerVersion(completion: $0) }
            let version = Int(versionText.prefix { $0.isNumber })
            #expect((version ?? 0) >= UnitProperty.execStartExVersion, "ExecStartEx needs systemd 243")

            // The shell's own "$@" is an argument too: expanded by the manager, the script would print nothing.
            let words = ["$HOME", "${X}", "$X", "%n", "a\\b", "$$", "price: 5$"]
            func command(_ report: String, expands: Bool) -> ExecCommand {
                ExecCommand(
                    path: "/bin/sh", arguments: ["sh", "-c", "printf '%s\\n' \"$@\" > \(report)", "sh"] + words,
                    expandsEnvironment: expands)
            }
            var reports: [String: String] = [:]
            for kind in ["ExecStartEx", "ExecStart", "expanded"] {
                let unit = "app-bgtask-argv-\(kind)-\(String(UInt32.random(in: 0...UInt32.max), radix: 16)).service"
                let report = systemd.directory.path + "/\(kind).argv"
                let execute: UnitProperty =
                    switch kind {
                    case "ExecStartEx": .execStartEx([command(report, expands: false)])
                    case "ExecStart": .execStart([command(report, expands: false)])
                    default: .execStart([command(report, expands: true)])
                    }
                let properties = [
                    .description("bgtask argv test"), execute, .environment(["X=expanded-x"]),
                    .collectMode("inactive-or-failed"), .serviceType("exec"),
                ]
                _ = try connection.waitFor {
                    connection.startTransientUnit(unit, properties: properties, completion: $0)
                }
                let deadline = MonotonicClock.now() + Duration.seconds(30).nanosecondCount
                while (try? String(contentsOfFile: report, encoding: .utf8))?.last != "\n" {
                    guard MonotonicClock.now() < deadline else { throw HarnessError("\(unit) wrote no \(report)") }
                    usleep(20_000)
                }
                reports[kind] = try String(contentsOfFile: report, encoding: .utf8)
            }
            let exact = words.joined(separator: "\n") + "\n"
            #expect(reports["ExecStartEx"] == exact, "\(reports)")
            #expect(reports["ExecStart"] == exact, "\(reports)")
            // What the manager does to a command it may expand: why neither above is left to it.
            #expect(reports["expanded"] != exact, "\(reports)")
            #expect(reports["expanded"]?.contains("expanded-x") == true, "\(reports)")
        }
    }

    @Test("through the user's bus: the probe falls back to it, and signals are matched on the manager's name")
    func throughTheBus() async throws {
        try await offThePool {
            let systemd = try ContainedSystemd()
            defer { systemd.close() }
            let loop = try EventLoop()
            // The manager listens on $XDG_RUNTIME_DIR/bus (dbus.socket of sockets.target) and starts the bus on the
            // first connection; the bus then waits for the manager to take its name.
            // The manager answers before its start-up jobs are done: wait for dbus.socket to listen (on a busy
            // machine that can take seconds after the manager first answers).
            let bus = try systemd.waitFor(
                "dbus.socket", ["LoadState", "ActiveState"], timeout: .seconds(60), what: "listening"
            ) { $0["ActiveState"] == "active" || $0["LoadState"] == "not-found" }
            let busSocket = systemd.runtimeDirectory + "/bus"
            guard bus["ActiveState"] == "active", access(busSocket, F_OK) == 0 else {
                Issue.record("the contained manager has no bus socket (no dbus.socket among its user units)")
                return
            }
            var probed: (ServiceManagerConnection?, ServiceManagerProbe)?
            let endpoints = [
                ServiceManagerEndpoint(kind: .direct, socketPath: systemd.runtimeDirectory + "/no-private-socket"),
                ServiceManagerEndpoint(kind: .bus, socketPath: busSocket),
            ]
            ServiceManagerConnection.probe(endpoints, loop: loop, timeout: .seconds(30)) { probed = ($0, $1) }
            #expect(try turn(loop, timeout: .seconds(40)) { probed != nil })
            let (found, probe) = try #require(probed)
            let connection = try #require(found, "\(probe)")
            defer { connection.close() }
            print("ServiceManagerTests: \(probe)")
            #expect(probe.chosen?.kind == .bus && probe.attempts.first?.outcome == .missing, "\(probe)")
            #expect(probe.description.contains("(passed over the manager's socket"), "\(probe)")

            var jobs: [JobRemovedSignal] = []
            var removedUnits: [UnitRemovedSignal] = []
            var changes: [PropertiesChangedSignal] = []
            var signalErrors: [ServiceManagerError] = []
            connection.onSignalError = { signalErrors.append($0) }
            let watches = [
                try connection.onJobRemoved { jobs.append($0) },
                try connection.onUnitRemoved { removedUnits.append($0) },
            ]
            // On a bus the manager sends its signals to subscribers only.
            try connection.waitFor { connection.subscribe(completion: $0) }
            let unit = "app-bgtask-test-\(String(UInt32.random(in: 0...UInt32.max), radix: 16)).service"
            let changeWatch = try connection.onPropertiesChanged(of: ServiceManagerConnection.unitPath(for: unit)) {
                changes.append($0)
            }
            let properties = ServiceManagerTests.appUnitProperties(unit)
            let startJob = try connection.waitFor {
                connection.startTransientUnit(unit, properties: properties, completion: $0)
            }
            #expect(try connection.runLoop(timeout: .seconds(30)) { jobs.contains { $0.job == startJob } })
            #expect(jobs.first { $0.job == startJob }?.result == .done, "\(jobs)")
            try connection.waitFor { connection.killUnit(unit, signal: .kill, completion: $0) }
            #expect(try connection.runLoop(timeout: .seconds(30)) { removedUnits.contains { $0.unit == unit } })
            let ended = UnitProperties(
                changes.filter { $0.interface == UnitInterface.service.rawValue }.reduce(into: [:]) {
                    $0.merge($1.changed) { $1 }
                })
            #expect(ended.execMainCode == 2 && ended.execMainStatus == 9, "\(ended.values)")
            for watch in watches + [changeWatch] { watch.cancel() }
            #expect(signalErrors.isEmpty, "\(signalErrors)")
        }
    }
}

/// What a descriptor of this process refers to (`/proc/self/fd/N`, e.g. `socket:[1234]`), with its number; an
/// empty target once the number is free.
private func socketIdentity(_ descriptor: Int32) throws -> SocketIdentity {
    var buffer = [CChar](repeating: 0, count: 256)
    let length = readlink("/proc/self/fd/\(descriptor)", &buffer, buffer.count - 1)
    let target = length > 0 ? String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
    return SocketIdentity(descriptor: descriptor, target: target)
}

/// A descriptor number and what it refers to.
private struct SocketIdentity: Equatable {
    var descriptor: Int32
    var target: String
}

/// Whether `pid` has exited (gone, or a zombie its parent has not reaped yet).
private func processGone(_ pid: pid_t) -> Bool {
    guard let stat = try? ProcFS().stat(pid) else { return true }
    return stat.state == .zombie
}
