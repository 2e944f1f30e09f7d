// The cgroups managed apps run in: where they are made, what each gives (freeze, memory, kill), and
// their removal once the app is gone.

import BGTaskConfig
import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// Where the daemon makes managed apps' cgroups, found once at start: `CgroupRoot=` (a cgroup2 directory, or a v1
/// freezer one on hosts without cgroup2) and `MemoryCgroupRoot=` (a v1 memory directory, for hybrid hosts whose
/// cgroup2 has no memory controller), only where the operator names them. The daemon never makes cgroups in its
/// own: under systemd that is the manager's tree, which it gives no service (no `Delegate=`), and apps are the
/// manager's units instead; started by hand, its cgroup is a shell's or a test runner's.
struct LaunchCgroupRoots: Hashable {
    /// The cgroup2 or v1 freezer directory apps' freeze-and-kill cgroups are made in; nil: none can be made.
    var control: CgroupDirectory?
    /// Whether `control` is cgroup2 (`cgroup.freeze`, `cgroup.kill`, `memory.pressure`) rather than v1 freezer.
    var isUnified: Bool
    /// The v1 memory directory apps' memory cgroups are made in, when `control` gives no `memory.current`.
    var memory: CgroupDirectory?
    /// Why a root is missing where one was asked for or expected, for the startup log (warnings).
    var notes: [String] = []
    /// Why there is none when none was asked for (an informational line).
    var absence: String?

    static let none = LaunchCgroupRoots(control: nil, isUnified: false, memory: nil)

    /// Finds the roots `settings` name.
    static func resolve(_ settings: DaemonConfiguration.Memory, hierarchies: CgroupHierarchies) -> LaunchCgroupRoots {
        var roots = LaunchCgroupRoots.none
        if let path = settings.cgroupRoot {
            let directory = CgroupDirectory(path: path)
            if let unified = hierarchies.unified, path.hasPrefix(unified + "/") || path == unified,
                directory.has("cgroup.procs")
            {
                roots.control = directory
                roots.isUnified = true
            } else if let freezer = hierarchies.freezer, path.hasPrefix(freezer + "/"), directory.has("freezer.state") {
                roots.control = directory
            } else {
                roots.notes.append("CgroupRoot=\(path) is not a cgroup2 or v1 freezer cgroup directory")
            }
        } else {
            roots.absence = "CgroupRoot= is not set"
        }
        if let control = roots.control, roots.isUnified, control.has("memory.current") || enablesMemory(control) {
            return roots
        }
        if let path = settings.memoryCgroupRoot {
            let directory = CgroupDirectory(path: path)
            if let memory = hierarchies.memory, path.hasPrefix(memory + "/"), directory.has("memory.usage_in_bytes") {
                roots.memory = directory
            } else {
                roots.notes.append("MemoryCgroupRoot=\(path) is not a v1 memory cgroup directory")
            }
        }
        return roots
    }

    /// Whether children of `root` get the cgroup2 memory controller: it is enabled for them already, or can be
    /// (it is in `cgroup.controllers`, and `root` holds no process, as cgroup2 wants of a parent with controllers).
    private static func enablesMemory(_ root: CgroupDirectory) -> Bool {
        guard let controllers = try? root.read("cgroup.controllers").split(separator: " ").map(String.init) else {
            return false
        }
        guard controllers.contains(where: { $0.hasPrefix("memory") }) else { return false }
        if let enabled = try? root.read("cgroup.subtree_control"), enabled.contains("memory") { return true }
        guard (try? root.processes())?.isEmpty == true else { return false }
        return (try? root.write("cgroup.subtree_control", "+memory")) != nil
    }

    /// Whether `cgroups` are of the kind `makeCgroups` makes: each an `app-*` child of the root of its hierarchy.
    func made(_ cgroups: AppCgroups) -> Bool {
        func isChild(_ cgroup: CgroupDirectory?, of root: CgroupDirectory?) -> Bool {
            guard let cgroup else { return true }
            guard let root, cgroup.path.hasPrefix(root.path + "/app-") else { return false }
            return !cgroup.path.dropFirst(root.path.count + 1).contains("/")
        }
        return isChild(cgroups.control, of: control) && isChild(cgroups.memory, of: memory)
    }

    /// The freeze backend managed apps get.
    var freezeBackend: String {
        guard control != nil else { return "sigstop" }
        return isUnified ? "cgroup2" : "cgroup1"
    }

    /// Makes the cgroups of one managed app: `app-NAME-RANDOM` (the name reduced to safe characters, then 32
    /// random bits, so a restarted daemon never meets a name an adopted app still uses) under each root. On
    /// failure, whatever was made is removed again.
    func makeCgroups(name: String) throws(Errno) -> AppCgroups {
        let safe = String(
            name.unicodeScalars.prefix(48).map { scalar -> Character in
                switch scalar {
                case "a"..."z", "A"..."Z", "0"..."9", ".", "_", "-": Character(scalar)
                default: "_"
                }
            })
        let random = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let childName = "app-\(safe)-\(String(repeating: "0", count: 8 - random.count))\(random)"
        var made: [CgroupDirectory] = []
        do throws(Errno) {
            var cgroups = AppCgroups(control: nil, isUnified: isUnified, memory: nil)
            if let control {
                cgroups.control = try control.makeChild(childName)
                made.append(cgroups.control!)
            }
            if let memory {
                cgroups.memory = try memory.makeChild(childName)
                made.append(cgroups.memory!)
            }
            return cgroups
        } catch {
            for cgroup in made.reversed() { try? cgroup.remove() }
            throw error
        }
    }
}

/// The cgroups of one app handled through cgroups: the one it is frozen and killed through (`control`: cgroup2,
/// or v1 freezer) and, on hybrid hosts, a v1 memory cgroup that measures it.
struct AppCgroups: Hashable {
    var control: CgroupDirectory?
    var isUnified: Bool
    var memory: CgroupDirectory?

    /// The cgroups a state file names for a managed app's process; nil for a self-registered one.
    init?(_ saved: SavedProcess) {
        guard saved.controlCgroup != nil || saved.memoryCgroup != nil else { return nil }
        control = saved.controlCgroup.map(CgroupDirectory.init(path:))
        isUnified = control.map { !$0.isV1Freezer } ?? false
        memory = saved.memoryCgroup.map(CgroupDirectory.init(path:))
    }

    init(control: CgroupDirectory?, isUnified: Bool, memory: CgroupDirectory?) {
        self.control = control
        self.isUnified = isUnified
        self.memory = memory
    }

    /// Every directory, for joining (`cgroup.procs`), saving and removing.
    var all: [CgroupDirectory] { [control, memory].compactMap { $0 } }

    /// The file the app's memory in bytes is read from, and the backend's name: cgroup2 `memory.current`, else v1
    /// `memory.usage_in_bytes`; nil: the app is measured by PSS.
    var memorySource: (path: String, backend: String)? {
        if let control, isUnified, control.has("memory.current") {
            return (control.path + "/memory.current", "cgroup2")
        }
        if let memory { return (memory.path + "/memory.usage_in_bytes", "cgroup1") }
        return nil
    }

    /// The `memory.pressure` file of the app's cgroup2 cgroup, for `$MEMORY_PRESSURE_WATCH`.
    var pressureFile: String? {
        guard let control, isUnified, control.has("memory.pressure") else { return nil }
        return control.path + "/memory.pressure"
    }

    /// Kills everything in them (`CgroupDirectory.killEverything`, the memory cgroup's members too).
    func killAll() {
        for cgroup in all { _ = try? cgroup.killEverything() }
    }

    /// Whether any process is left in them.
    var isPopulated: Bool {
        all.contains { !(((try? $0.processes()) ?? [1]).isEmpty) }
    }

    /// Removes the directories that are empty; whether all are gone.
    func removeEmpty() -> Bool {
        var allGone = true
        for cgroup in all {
            do {
                try cgroup.remove()
            } catch {
                if error.rawValue != ENOENT { allGone = false }
            }
        }
        return allGone
    }
}
