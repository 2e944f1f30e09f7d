// The cgroups the demo makes, as root, for the apps its daemon launches: given to it as CgroupRoot= and
// MemoryCgroupRoot=, emptied and removed at the end.
import BGTaskPOSIX
import BGTaskSystem
import Foundation
import Glibc

/// A cgroup directory of the demo's own under its own cgroup in each hierarchy that gives launched apps a backend:
/// cgroup2 (or, on a host without it, the v1 freezer) to freeze and kill them through, and the v1 memory controller,
/// where the host has it, to measure them by. The daemon makes each launched app a child cgroup in them (`app-*`).
///
/// `remove()` thaws them, kills whatever is left in them and their children, and removes the children and then
/// them; the demo calls it on every path out, after its daemon has stopped.
final class DemoCgroups {
    /// What `CgroupRoot=` names: a cgroup2 directory, or a v1 freezer one; nil when neither hierarchy exists.
    let control: CgroupDirectory?
    /// What `MemoryCgroupRoot=` names: a v1 memory directory; nil where that hierarchy is not mounted.
    let memory: CgroupDirectory?
    private var isRemoved = false

    /// Why the demo cannot make its cgroups (not root, no hierarchy, the kernel refused): said in one line, and the
    /// demo goes on with the backends that need no cgroup.
    struct Unavailable: Error, CustomStringConvertible {
        var reason: String
        var description: String { reason }
    }

    /// Every directory made, for the configuration and the clean-up.
    var all: [CgroupDirectory] { [control, memory].compactMap { $0 } }

    /// Whether `control` is a cgroup2 directory (`cgroup.freeze`, `cgroup.kill`) rather than a v1 freezer one.
    var isUnified: Bool { control.map { !$0.isV1Freezer } ?? false }

    private init(control: CgroupDirectory?, memory: CgroupDirectory?) {
        self.control = control
        self.memory = memory
    }

    /// Makes `bgtask-demo-PID-RANDOM` under the demo's own cgroup in cgroup2 (else the v1 freezer) and in the v1
    /// memory hierarchy, of those the host has. Needs root: cgroups belong to root here.
    static func make(hierarchies: CgroupHierarchies = .probe()) throws(Unavailable) -> DemoCgroups {
        guard geteuid() == 0 else {
            throw Unavailable(reason: "not running as root, so the demo makes no cgroups for its daemon")
        }
        let own: ProcessCgroups
        do {
            own = try hierarchies.cgroups(of: getpid())
        } catch {
            throw Unavailable(reason: "cannot read /proc/\(getpid())/cgroup: \(error)")
        }
        let parent = own.unified ?? own.freezer
        guard parent != nil || own.memory != nil else {
            throw Unavailable(reason: "this host has no cgroup2, v1 freezer or v1 memory hierarchy mounted")
        }
        let name = "bgtask-demo-\(getpid())-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
        var made: [CgroupDirectory] = []
        do throws(Errno) {
            let control = try parent.map { parent throws(Errno) in try parent.makeChild(name) }
            if let control { made.append(control) }
            let memory = try own.memory.map { parent throws(Errno) in try parent.makeChild(name) }
            return DemoCgroups(control: control, memory: memory)
        } catch {
            for cgroup in made { try? cgroup.remove() }
            throw Unavailable(reason: "cannot make a cgroup for the demo's daemon: \(error)")
        }
    }

    /// How `remove()` went.
    struct Removal {
        /// Processes found in them and killed.
        var killed = 0
        /// Directories that could not be removed, with why.
        var leftovers: [String] = []
    }

    /// Thaws them and their children, kills every process left in any of them (cgroup2's `cgroup.kill` on the
    /// whole subtree, else SIGKILL through a pidfd to each, a v1 freezer thawed after), waits at most `timeout` for
    /// them to empty, and removes the children, deepest first, then them. Never throws and ignores interruptions:
    /// this is the clean-up. Later calls do nothing.
    func remove(timeout: Duration = .seconds(10)) -> Removal {
        var removal = Removal()
        guard !isRemoved else { return removal }
        isRemoved = true
        let trees = all.map(Self.tree(under:))
        let cgroups = trees.flatMap { $0 }
        removal.killed = Set(cgroups.flatMap { (try? $0.processes()) ?? [] }).count
        if let control {
            // cgroup2: a child frozen by the daemon stays frozen whatever its parent says, so each is thawed.
            for cgroup in Self.tree(under: control) { try? cgroup.setFrozen(false) }
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            for cgroup in cgroups where (try? cgroup.processes())?.isEmpty == false {
                _ = try? cgroup.killEverything()
            }
            let isEmpty = cgroups.allSatisfy { (try? $0.processes())?.isEmpty ?? true }
            if isEmpty || ContinuousClock.now >= deadline { break }
            // Killed processes leave within milliseconds (a v1-frozen one once thawed, which killEverything does).
            Thread.sleep(forTimeInterval: 0.01)
        }
        for tree in trees {
            for cgroup in tree.reversed() {
                // A process that has just exited may still count for a moment: a few tries, within the deadline.
                while true {
                    do {
                        try cgroup.remove()
                        break
                    } catch {
                        if error == .noSuchFileOrDirectory { break }
                        guard ContinuousClock.now < deadline else {
                            removal.leftovers.append("\(cgroup.path) (\(error))")
                            break
                        }
                        Thread.sleep(forTimeInterval: 0.01)
                    }
                }
            }
        }
        return removal
    }

    /// `root` and every cgroup below it, parents before their children.
    static func tree(under root: CgroupDirectory) -> [CgroupDirectory] {
        var found = [root]
        var index = 0
        while index < found.count {
            let children = (try? FileManager.default.contentsOfDirectory(atPath: found[index].path)) ?? []
            for child in children.sorted() {
                var isDirectory: ObjCBool = false
                let path = found[index].path + "/" + child
                if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
                    found.append(CgroupDirectory(path: path))
                }
            }
            index += 1
        }
        return found
    }
}
