// A cgroup a benchmark makes under its own, for the daemon it starts to make apps' cgroups in; removed after.

import BGTaskPOSIX
import BGTaskSystem
import Foundation
import Glibc

/// A child of the benchmark's own cgroup in one hierarchy (cgroup2, the v1 freezer or v1 memory), given to the
/// benchmark's daemon as `CgroupRoot=` or `MemoryCgroupRoot=`; the daemon makes its apps' cgroups inside.
///
/// `remove()` thaws the whole subtree, kills whatever is left in it (every process in it was started for the
/// benchmark: by its daemon, on its `Launch` calls), waits for it to empty and removes the daemon's cgroups and
/// then this one. Making cgroups needs root here.
final class BenchmarkCgroup {
    /// Which hierarchy.
    enum Hierarchy: String, Sendable {
        case unified = "cgroup2"
        case freezer = "v1 freezer"
        case memory = "v1 memory"

        /// The hierarchy's root on this host, nil when it is not mounted.
        func root(in hierarchies: CgroupHierarchies) -> String? {
            switch self {
            case .unified: hierarchies.unified
            case .freezer: hierarchies.freezer
            case .memory: hierarchies.memory
            }
        }

        /// The benchmark process's own cgroup in it.
        func own(in cgroups: ProcessCgroups) -> CgroupDirectory? {
            switch self {
            case .unified: cgroups.unified
            case .freezer: cgroups.freezer
            case .memory: cgroups.memory
            }
        }
    }

    let hierarchy: Hierarchy
    let directory: CgroupDirectory
    private var isRemoved = false

    /// How long `remove()` waits for what it killed to go.
    static let removalTimeout: Duration = .seconds(10)

    /// Makes `name` under this process's own cgroup of `hierarchy`.
    init(_ hierarchy: Hierarchy, name: String) throws {
        let hierarchies = CgroupHierarchies.probe()
        guard hierarchy.root(in: hierarchies) != nil else {
            throw BenchmarkError("this host has no \(hierarchy.rawValue) hierarchy mounted")
        }
        guard let own = hierarchy.own(in: try hierarchies.cgroups(of: getpid())) else {
            throw BenchmarkError("this process has no \(hierarchy.rawValue) cgroup")
        }
        do {
            directory = try own.makeChild(name)
        } catch {
            throw BenchmarkError("cannot make a \(hierarchy.rawValue) cgroup under \(own.path): \(error)")
        }
        self.hierarchy = hierarchy
    }

    /// Thaws, kills what is left, waits (at most `removalTimeout`) for the subtree to empty and removes it, deepest
    /// cgroups first. Returns what could not be removed, empty when all went. Call once; later calls do nothing.
    @discardableResult
    func remove() -> [String] {
        guard !isRemoved else { return [] }
        isRemoved = true
        let deadline = MonotonicClock.now() + Self.removalTimeout.nanosecondCount
        let subtree = Self.subtree(of: directory)
        for cgroup in subtree {
            switch hierarchy {
            case .unified: try? cgroup.requestFreeze(false)
            case .freezer: try? cgroup.requestFreezer(false)
            case .memory: break
            }
        }
        var left: [String] = []
        // Children before parents: a cgroup with children cannot be removed.
        for cgroup in subtree.reversed() {
            while let pids = try? cgroup.processes(), !pids.isEmpty, MonotonicClock.now() < deadline {
                // pidfds for each process (cgroup.kill on cgroup2); a v1 freezer is thawed after, as it must be.
                _ = try? cgroup.killEverything()
                usleep(10_000)
            }
            // A process that just exited may still count for a moment.
            while true {
                do {
                    try cgroup.remove()
                    break
                } catch  where error == .noSuchFileOrDirectory {
                    break
                } catch {
                    guard MonotonicClock.now() < deadline else {
                        left.append("\(cgroup.path) (\(error))")
                        break
                    }
                    usleep(10_000)
                }
            }
        }
        return left
    }

    /// `root` and every cgroup below it, parents before children.
    private static func subtree(of root: CgroupDirectory) -> [CgroupDirectory] {
        var result = [root]
        var index = 0
        while index < result.count {
            let parent = result[index]
            index += 1
            // An unreadable directory has no children to find: it is removed as it is, or reported left.
            guard let entries = try? FileManager.default.contentsOfDirectory(atPath: parent.path) else { continue }
            for entry in entries.sorted() {
                var isDirectory: ObjCBool = false
                let path = parent.path + "/" + entry
                if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
                    result.append(CgroupDirectory(path: path))
                }
            }
        }
        return result
    }

    deinit { remove() }
}
