// The rule behind every signal the daemon sends for an app, on real processes described by a fake /proc: a process
// is signalled only when its real, effective and saved uids are all the app's, and one whose uids cannot be read is
// not signalled at all.

import BGTaskPOSIX
import BGTaskTestSupport
import Glibc
import Testing

@testable import BGTaskDaemon

@Suite("Signals sent for an app")
struct AppSignalsTests {
    /// The app's uid in the fake tree (the real processes are the test's own, which it may signal whatever the
    /// tree says).
    private let appUID: uid_t = 4242

    /// Real `sleep` processes (each bounding its own lifetime), listed in a fake /proc as members of one group.
    private struct Family {
        let tree: FakeProcTree
        let processes: [ChildProcess]
        var group: pid_t { processes[0].pid }

        init(count: Int) throws {
            tree = try FakeProcTree()
            processes = try (0..<count).map { _ in try ChildProcess(["sleep", "30"]) }
        }

        /// Puts member `index` in the tree with `status` (nil: no status file) and its real start time.
        func describe(_ index: Int, status: String?) throws {
            let pid = processes[index].pid
            try tree.addProcess(pid: pid, group: group, startTime: try ProcFS().stat(pid).startTime)
            if let status {
                _ = try tree.directory.write("\(pid)/status", status)
            } else {
                try tree.remove("\(pid)/status")
            }
        }

        func state(_ index: Int) throws -> ProcessState {
            try ProcFS().stat(processes[index].pid).state
        }
    }

    private func status(_ real: uid_t, _ effective: uid_t, _ saved: uid_t) -> String {
        "Name:\tsleep\nUid:\t\(real)\t\(effective)\t\(saved)\t\(effective)\nGid:\t0\t0\t0\t0\n"
    }

    @Test("a group: only members wholly of the app's uid are stopped, continued and killed; the rest are reported once")
    func groupMembers() async throws {
        try await offThePool {
            let family = try Family(count: 5)
            try family.describe(0, status: status(appUID, appUID, appUID))  // The leader, the app's.
            try family.describe(1, status: status(appUID, appUID, appUID))
            try family.describe(2, status: status(appUID, 0, 0))  // A setuid-root program the app started.
            try family.describe(3, status: status(0, 0, 0))  // Another user's.
            try family.describe(4, status: "Name:\tsleep\nUid:\tgarbage\n")  // Unreadable: fail closed.
            var reports: [String] = []
            let signals = AppSignals(uid: appUID, procFS: family.tree.procFS) { reports.append($0) }

            let stopped = try signals.send(.stop, toGroup: family.group)
            #expect(Set(stopped.map(\.pid)) == [family.processes[0].pid, family.processes[1].pid])
            for index in 0...1 {
                #expect(try waitForProcessState(family.processes[index].pid) { $0 == .stopped } == .stopped)
            }
            for index in 2...4 { #expect(try family.state(index) != .stopped, "member \(index) was stopped") }
            #expect(reports.count == 3, "\(reports)")
            #expect(reports.contains { $0.contains("pid \(family.processes[2].pid)") && $0.contains("0 and 0") })
            #expect(reports.contains { $0.contains("pid \(family.processes[4].pid)") && $0.contains("cannot be read") })

            let continued = try signals.send(.continue, toGroup: family.group, also: stopped)
            #expect(continued == stopped)
            for index in 0...1 {
                #expect(try waitForProcessState(family.processes[index].pid) { $0 != .stopped } != .stopped)
            }
            #expect(reports.count == 3, "a member reported twice: \(reports)")

            let killed = try signals.send(.kill, toGroup: family.group)
            #expect(Set(killed.map(\.pid)) == [family.processes[0].pid, family.processes[1].pid])
            for index in 0...1 { #expect(try family.processes[index].waitForExit() == .signaled(.kill)) }
            for index in 2...4 { #expect(!family.processes[index].hasExited, "member \(index) was killed") }
        }
    }

    @Test("a stopped member that left the group is continued with the rest")
    func stoppedMemberThatLeft() async throws {
        try await offThePool {
            let family = try Family(count: 2)
            try family.describe(0, status: status(appUID, appUID, appUID))
            try family.describe(1, status: status(appUID, appUID, appUID))
            let signals = AppSignals(uid: appUID, procFS: family.tree.procFS)
            let stopped = try signals.send(.stop, toGroup: family.group)
            #expect(stopped.count == 2)
            // Member 1 is in a group of its own now.
            let pid = family.processes[1].pid
            try family.tree.addProcess(pid: pid, group: pid, startTime: try ProcFS().stat(pid).startTime)
            try family.tree.directory.write("\(pid)/status", status(appUID, appUID, appUID))
            #expect(try signals.send(.continue, toGroup: family.group, also: stopped) == stopped)
            #expect(try waitForProcessState(pid) { $0 != .stopped } != .stopped)
        }
    }

    @Test("the app's own process: signalled only while its uids are the app's")
    func ownProcess() async throws {
        try await offThePool {
            let family = try Family(count: 1)
            let process = family.processes[0].process
            let startTime = try ProcFS().stat(process.pid).startTime
            try family.describe(0, status: status(appUID, 0, 0))
            let signals = AppSignals(uid: appUID, procFS: family.tree.procFS)
            let refused = #expect(throws: Errno.self) {
                try signals.send(.stop, toProcess: process.pidFD, startTime: startTime)
            }
            #expect(refused == .notPermitted)
            #expect(try family.state(0) != .stopped)
            try family.describe(0, status: nil)
            // No status for a live process: it is not signalled.
            #expect(throws: Errno.self) { try signals.send(.kill, toProcess: process.pidFD, startTime: startTime) }
            #expect(!family.processes[0].hasExited)
            try family.describe(0, status: status(appUID, appUID, appUID))
            try signals.send(.kill, toProcess: process.pidFD, startTime: startTime)
            #expect(try family.processes[0].waitForExit() == .signaled(.kill))
            #expect(throws: Errno.noSuchProcess) {
                try signals.send(.kill, toProcess: process.pidFD, startTime: startTime)
            }
        }
    }

    @Test("ownsAll: a cgroup's processes are all the app's only if each one's uids are")
    func ownsAll() async throws {
        try await offThePool {
            let family = try Family(count: 2)
            try family.describe(0, status: status(appUID, appUID, appUID))
            try family.describe(1, status: status(appUID, appUID, appUID))
            var reports: [String] = []
            let signals = AppSignals(uid: appUID, procFS: family.tree.procFS) { reports.append($0) }
            let pids = family.processes.map(\.pid)
            #expect(signals.ownsAll(pids, in: "a cgroup"))
            try family.describe(1, status: status(appUID, appUID, 0))
            #expect(!signals.ownsAll(pids, in: "a cgroup"))
            #expect(reports.count == 1 && reports[0].contains("pid \(pids[1])"), "\(reports)")
            // A pid of no process does not count against it.
            #expect(signals.ownsAll([pids[0], 999_999_999], in: "a cgroup"))
        }
    }
}
