// A cgroup a test makes for processes it started, in one hierarchy, removed with everything in it afterwards.

import BGTaskPOSIX
import BGTaskSystem
import Foundation
import Glibc

/// A child cgroup of the test process's own cgroup in one hierarchy (cgroup2, the v1 freezer or the v1 memory
/// controller). Only processes the test started go in it (`move`). `close()` (and deinit) thaws it, kills what is
/// left in it, waits for the processes to go and removes it: nothing frozen, running or made by the test outlives
/// it.
public final class ScratchCgroup {
    /// Which hierarchy.
    public enum Hierarchy: String, Sendable, CaseIterable {
        case unified = "cgroup2"
        case freezer = "v1 freezer"
        case memory = "v1 memory"

        /// Of three values given in the order cgroup2, v1 freezer, v1 memory, this hierarchy's.
        func pick<Value>(_ unified: Value?, _ freezer: Value?, _ memory: Value?) -> Value? {
            switch self {
            case .unified: unified
            case .freezer: freezer
            case .memory: memory
            }
        }
    }

    public let hierarchy: Hierarchy
    public let cgroup: CgroupDirectory
    private var isClosed = false

    /// Why this host cannot give a test such a cgroup, or nil when it can.
    public static func unavailableReason(_ hierarchy: Hierarchy) -> String? {
        if getuid() != 0 { return "making cgroups needs root" }
        let hierarchies = CgroupHierarchies.probe()
        let root = hierarchy.pick(hierarchies.unified, hierarchies.freezer, hierarchies.memory)
        return root == nil ? "this host has no \(hierarchy.rawValue) hierarchy mounted" : nil
    }

    /// Makes the cgroup under the test process's own cgroup of `hierarchy`.
    public init(_ hierarchy: Hierarchy) throws {
        if let reason = Self.unavailableReason(hierarchy) { throw HarnessError(reason) }
        self.hierarchy = hierarchy
        let own = try CgroupHierarchies.probe().cgroups(of: getpid())
        guard let parent = hierarchy.pick(own.unified, own.freezer, own.memory) else {
            throw HarnessError("the test process has no \(hierarchy.rawValue) cgroup")
        }
        cgroup = try parent.makeChild("bgtask-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
    }

    /// Moves a process the test started into it.
    public func move(_ pid: pid_t) throws {
        try cgroup.move(pid)
    }

    /// Thaws, kills what is left, waits (at most 10 s) for it to empty, and removes it.
    public func close() {
        guard !isClosed else { return }
        isClosed = true
        switch hierarchy {
        case .unified:
            try? cgroup.requestFreeze(false)
            if cgroup.has("cgroup.kill") { try? cgroup.killAll() }
        case .freezer, .memory:
            break
        }
        let deadline = MonotonicClock.now() + Duration.seconds(10).nanosecondCount
        while let pids = try? cgroup.processes(), !pids.isEmpty, MonotonicClock.now() < deadline {
            for pid in pids { kill(pid, SIGKILL) }
            // A v1-frozen task dies only once thawed.
            if hierarchy == .freezer { try? cgroup.requestFreezer(false) }
            usleep(10_000)
        }
        // Emptied: the directory can go (a process that just exited may still count for a moment).
        while (try? cgroup.remove()) == nil, MonotonicClock.now() < deadline { usleep(10_000) }
    }

    deinit { close() }
}
