// A launch whose program is slow to start never holds up the daemon: while a launched child is held before exec
// (its cgroup root frozen: the child freezes the moment it joins its cgroup), other clients are served, the Launch
// reply waits (and the calls pipelined after it on its connection), and every way the wait can end leaves nothing
// behind.

import BGTaskPOSIX
import BGTaskProtocol
import BGTaskSystem
import BGTaskTestSupport
import Foundation
import Glibc
import Testing

@Suite("Held launches", .requires(.cgroup(.unified)))
struct HeldLaunchTests {
    static let launch = "io.bgtask.Lifecycle.Launch"
    /// Long enough that no held launch in these tests times out.
    static let patientPolicy = DaemonHarness.fastPolicy("LaunchTimeoutSec", "60s")
    /// How long a client waits for an answer the daemon must give at once: generous, for a loaded machine.
    static let promptly: Duration = .seconds(20)

    @Test("while a launched child is held before exec, other clients are served and the Launch reply waits")
    func otherClientsServedWhileHeld() async throws {
        try await withHeldLaunches("otherClientsServedWhileHeld") { fixture, root in
            let launcher = try fixture.daemon.connect()
            try launcher.send(Self.launch, fixture.launchParameters("org.example.held"))
            let child = try #require(try fixture.heldChildren(count: 1).first)

            let other = try fixture.daemon.connect()
            try other.send("io.bgtask.Lifecycle.GetStatus")
            let status = try #require(try other.receive(timeout: Self.promptly), "closed")
            #expect(status.parameters["version"] != nil, "\(status)")
            try other.send("io.bgtask.Lifecycle.ListApps")
            let list = try #require(try other.receive(timeout: Self.promptly), "closed")
            #expect(list.parameters["apps"]?.arrayValue != nil, "\(list)")
            let bystander = try fixture.daemon.connect()
            try bystander.send("io.bgtask.Lifecycle.Register", ["name": "org.example.bystander"], more: true)
            let registered = try #require(try bystander.receive(timeout: Self.promptly), "closed")
            #expect(registered.parameters["app"]?["state"] == "active", "\(registered)")
            #expect(try launcher.poll() == .nothing, "the Launch was answered before its program started")

            try root.requestFreeze(false)
            let reply = try #require(try launcher.receive(timeout: Self.promptly), "closed")
            let app = try #require(reply.parameters["app"]?.objectValue, "\(reply)")
            #expect(app["pid"]?.intValue == Int(child) && app["state"] == "notRunning", "\(app)")
            try fixture.waitForApp("org.example.held") { $0["state"] == "active" }
        }
    }

    @Test("a call pipelined after a held Launch on the same connection is answered after the Launch reply")
    func pipelinedCallWaits() async throws {
        try await withHeldLaunches("pipelinedCallWaits") { fixture, root in
            let launcher = try fixture.daemon.connect()
            try launcher.send(Self.launch, fixture.launchParameters("org.example.first"))
            try launcher.send("io.bgtask.Lifecycle.GetStatus")
            _ = try fixture.heldChildren(count: 1)
            // Another client answered: the loop has gone round since both calls arrived.
            #expect(try fixture.daemon.connect().call("io.bgtask.Lifecycle.GetStatus").errorName == nil)
            #expect(try launcher.poll() == .nothing, "a reply came while the launch was held")

            try root.requestFreeze(false)
            let first = try #require(try launcher.receive(timeout: Self.promptly), "closed")
            #expect(first.parameters["app"]?["name"] == "org.example.first", "\(first)")
            let second = try #require(try launcher.receive(timeout: Self.promptly), "closed")
            #expect(second.parameters["version"] != nil, "\(second)")
        }
    }

    @Test("a client that ends its input after a held Launch still gets every reply before the connection closes")
    func halfClosedLauncher() async throws {
        try await withHeldLaunches("halfClosedLauncher") { fixture, root in
            let launcher = try fixture.daemon.connect()
            try launcher.send(Self.launch, fixture.launchParameters("org.example.halfclosed"))
            try launcher.send("io.bgtask.Lifecycle.GetStatus")
            #expect(Glibc.shutdown(launcher.descriptor.rawValue, Int32(SHUT_WR)) == 0)
            _ = try fixture.heldChildren(count: 1)
            #expect(try fixture.daemon.connect().call("io.bgtask.Lifecycle.GetStatus").errorName == nil)
            #expect(
                try launcher.poll() == .nothing, "a reply came, or the connection closed, while the launch was held")

            try root.requestFreeze(false)
            let first = try #require(try launcher.receive(timeout: Self.promptly), "closed before the Launch reply")
            #expect(first.parameters["app"]?["name"] == "org.example.halfclosed", "\(first)")
            let second = try #require(try launcher.receive(timeout: Self.promptly), "closed before the second reply")
            #expect(second.parameters["version"] != nil, "\(second)")
            #expect(try launcher.isClosedByServer(timeout: Self.promptly))
        }
    }

    @Test("a second Launch of a name whose launch is in flight is refused with AppExists")
    func sameNameRefused() async throws {
        try await withHeldLaunches("sameNameRefused") { fixture, root in
            let launcher = try fixture.daemon.connect()
            try launcher.send(Self.launch, fixture.launchParameters("org.example.once"))
            _ = try fixture.heldChildren(count: 1)
            let second = try fixture.daemon.connect()
            try second.send(Self.launch, fixture.launchParameters("org.example.once"))
            let refused = try #require(try second.receive(timeout: Self.promptly), "closed")
            #expect(refused.errorName == "io.bgtask.Lifecycle.AppExists", "\(refused)")

            try root.requestFreeze(false)
            let reply = try #require(try launcher.receive(timeout: Self.promptly), "closed")
            #expect(reply.parameters["app"]?["name"] == "org.example.once", "\(reply)")
            try fixture.waitForApp("org.example.once") { $0["state"] == "active" }
            #expect(fixture.appCgroups.count == (fixture.memory == nil ? 1 : 2), "\(fixture.appCgroups)")
        }
    }

    @Test("launches in flight are bounded: past the bound a Launch waits for a slot, and starts once one frees")
    func launchesInFlightBounded() async throws {
        try await withHeldLaunches("launchesInFlightBounded") { fixture, root in
            let bound = 4
            var launchers: [RawVarlinkClient] = []
            for index in 0..<bound {
                let launcher = try fixture.daemon.connect()
                try launcher.send(Self.launch, fixture.launchParameters("org.example.app\(index)"))
                launchers.append(launcher)
            }
            _ = try fixture.heldChildren(count: bound)
            let extra = try fixture.daemon.connect()
            try extra.send(Self.launch, fixture.launchParameters("org.example.extra"))
            // Another client answered: the loop has gone round since the extra Launch arrived; it waits, and nothing
            // more is started for it.
            #expect(try fixture.daemon.connect().call("io.bgtask.Lifecycle.GetStatus").errorName == nil)
            #expect(try extra.poll() == .nothing, "the extra Launch was answered while every slot was taken")
            #expect(try fixture.heldChildren(count: bound).count == bound)
            // A second Launch of the waiting name is refused as for one starting.
            let again = try fixture.daemon.connect()
            try again.send(Self.launch, fixture.launchParameters("org.example.extra"))
            let refused = try #require(try again.receive(timeout: Self.promptly), "closed")
            #expect(refused.errorName == "io.bgtask.Lifecycle.AppExists", "\(refused)")

            try root.requestFreeze(false)
            for (index, launcher) in (launchers + [extra]).enumerated() {
                let reply = try #require(try launcher.receive(timeout: Self.promptly), "closed")
                let name = index < bound ? "org.example.app\(index)" : "org.example.extra"
                #expect(reply.parameters["app"]?["name"] == .string(name), "\(reply)")
            }
        }
    }

    @Test("a client that disconnects while its launch is held: the app is tracked, and nothing is left once it ends")
    func disconnectedLauncher() async throws {
        try await withHeldLaunches("disconnectedLauncher") { fixture, root in
            // Counted once the fixture's own connection is surely accepted.
            #expect(try fixture.client.call("io.bgtask.Lifecycle.GetStatus").errorName == nil)
            let descriptors = try fixture.daemon.openDescriptorCount()
            let launcher = try fixture.daemon.connect()
            try launcher.send(Self.launch, fixture.launchParameters("org.example.orphaned"))
            let child = try #require(try fixture.heldChildren(count: 1).first)
            launcher.close()
            #expect(try fixture.client.call("io.bgtask.Lifecycle.GetStatus").errorName == nil)

            try root.requestFreeze(false)
            // Nobody hears when the launch ends: the app's own output tells.
            try fixture.waitForOutput("org.example.orphaned", "registered active")
            let app = try fixture.waitForApp("org.example.orphaned") { $0["state"] == "active" }
            #expect(app["pid"]?.intValue == Int(child), "\(app)")
            try fixture.client.lifecycle("Terminate", ["app": "org.example.orphaned"])
            try fixture.waitForApp("org.example.orphaned") { $0["state"] == "terminated" }
            #expect(fixture.waitUntilReaped(child), "pid \(child) is left unreaped")
            #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
            #expect(try fixture.daemon.waitForDescriptorCount(atMost: descriptors) <= descriptors)
            // The name is free again.
            let again = try fixture.launch("org.example.orphaned")
            #expect(again.parameters["app"]?["name"] == "org.example.orphaned", "\(again)")
        }
    }

    @Test("a name registered by another process while its launch is held: AppExists, the child killed and reaped")
    func registeredMeanwhile() async throws {
        try await withHeldLaunches("registeredMeanwhile") { fixture, root in
            let launcher = try fixture.daemon.connect()
            try launcher.send(Self.launch, fixture.launchParameters("org.example.race"))
            let child = try #require(try fixture.heldChildren(count: 1).first)
            let holder = try fixture.daemon.connect()
            try holder.send("io.bgtask.Lifecycle.Register", ["name": "org.example.race"], more: true)
            let registered = try #require(try holder.receive(timeout: Self.promptly), "closed")
            #expect(registered.parameters["app"]?["pid"]?.intValue == Int(getpid()), "\(registered)")

            try root.requestFreeze(false)
            let reply = try #require(try launcher.receive(timeout: Self.promptly), "closed")
            #expect(reply.errorName == "io.bgtask.Lifecycle.AppExists", "\(reply)")
            #expect(fixture.waitUntilReaped(child), "pid \(child) is left unreaped")
            #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
            #expect(try fixture.client.app("org.example.race")["pid"]?.intValue == Int(getpid()))
            #expect(fixture.daemon.log.contains("cannot launch org.example.race"), "\(fixture.daemon.log)")
        }
    }

    @Test("a daemon stopped while a launch is held kills the child and removes its cgroups")
    func stoppedWhileHeld() async throws {
        try await withHeldLaunches("stoppedWhileHeld") { fixture, _ in
            let launcher = try fixture.daemon.connect()
            try launcher.send(Self.launch, fixture.launchParameters("org.example.stopped"))
            let child = try #require(try fixture.heldChildren(count: 1).first)
            let pidFD = try PidFD.open(pid: child)
            defer { try? pidFD.close() }
            #expect(try fixture.daemon.stop() == .exited(0), "\(fixture.daemon.log)")
            #expect(try pidFD.waitForExit(timeout: .seconds(10)), "the held child outlived the daemon")
            #expect(fixture.appCgroups.isEmpty, "left behind: \(fixture.appCgroups)")
        }
    }

    @Test("a launch whose program does not start within LaunchTimeoutSec fails, its child killed and reaped")
    func heldPastTheLaunchTimeout() async throws {
        try await withHeldLaunches(
            "heldPastTheLaunchTimeout", policy: DaemonHarness.fastPolicy("LaunchTimeoutSec", "1s")
        ) { fixture, _ in
            let launcher = try fixture.daemon.connect()
            try launcher.send(Self.launch, fixture.launchParameters("org.example.slow"))
            let child = try #require(try fixture.heldChildren(count: 1).first)
            let reply = try #require(try launcher.receive(timeout: Self.promptly), "closed")
            #expect(reply.errorName == "io.bgtask.Lifecycle.LaunchFailed", "\(reply)")
            #expect(fixture.waitUntilReaped(child), "pid \(child) is left unreaped")
            #expect(fixture.waitUntilCgroupsRemoved(), "left behind: \(fixture.appCgroups)")
            #expect(throws: (any Error).self) { try fixture.client.app("org.example.slow") }
        }
    }
}

/// Runs `body` with a launch fixture whose apps' cgroup root is frozen (thawed again after), so every launched
/// child stops the moment it joins its cgroup, before it execs.
private func withHeldLaunches(
    _ test: String, policy: String = HeldLaunchTests.patientPolicy,
    _ body: @escaping @Sendable (LaunchFixture, CgroupDirectory) throws -> Void
) async throws {
    try await withLaunchFixture(policy: policy) { fixture in
        guard let root = fixture.control?.cgroup, root.has("cgroup.freeze") else {
            Issue.record("\(test): the apps' cgroup root cannot be frozen")
            return
        }
        try root.requestFreeze(true)
        defer { try? root.requestFreeze(false) }
        #expect(try root.waitUntil(frozen: true, timeout: .seconds(10)))
        try body(fixture, root)
    }
}

extension LaunchFixture {
    /// Waits until `count` launched children sit frozen in their cgroups under the frozen root, not yet exec'd
    /// (still running the daemon's executable); their pids.
    fileprivate func heldChildren(count: Int, timeout: Duration = .seconds(20)) throws -> [pid_t] {
        guard let root = control?.cgroup else { throw HarnessError("no CgroupRoot") }
        let deadline = MonotonicClock.now() + timeout.nanosecondCount
        while true {
            let cgroups = appCgroups.filter { $0.hasPrefix(root.path + "/") }.map { CgroupDirectory(path: $0) }
            let held = cgroups.filter { (try? $0.processes().isEmpty) == false }
            if held.count >= count {
                var pids: [pid_t] = []
                for cgroup in held {
                    guard try cgroup.waitUntil(frozen: true, timeout: .seconds(10)) else {
                        throw HarnessError("\(cgroup.path) is not frozen")
                    }
                    pids += try cgroup.processes()
                }
                let daemonExecutable = try Self.executable(of: daemon.pid)
                for pid in pids where try Self.executable(of: pid) != daemonExecutable {
                    throw HarnessError("pid \(pid) exec'd although its cgroup is frozen")
                }
                return pids
            }
            guard MonotonicClock.now() < deadline else {
                throw HarnessError("\(held.count) of \(count) launched children held\ndaemon log:\n\(daemon.log)")
            }
            usleep(10_000)
        }
    }

    private static func executable(of pid: pid_t) throws -> String {
        try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
    }

    /// Waits (at most 10 s) until `pid` is gone from `/proc`: dead and reaped by its parent; whether it is.
    fileprivate func waitUntilReaped(_ pid: pid_t) -> Bool {
        let deadline = MonotonicClock.now() + Duration.seconds(10).nanosecondCount
        while access("/proc/\(pid)", F_OK) == 0 {
            guard MonotonicClock.now() < deadline else { return false }
            usleep(10_000)
        }
        return true
    }
}
