// The cgroups a soak run makes under its own: the daemon's `CgroupRoot=` for launched apps, and a scope per
// self-registered scoped app. Removed, with anything left in them, when the run ends.

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// cgroup2 children of the harness's own cgroup; needs root.
final class SoakCgroups {
    /// `CgroupRoot=` of the daemon: it makes a cgroup per launched app in here.
    let launchRoot: CgroupDirectory
    /// The parent of the scoped apps' cgroups.
    let scopesRoot: CgroupDirectory
    private var scopeCount = 0

    init(name: String) throws {
        let hierarchies = CgroupHierarchies.probe()
        guard hierarchies.unified != nil, let own = try hierarchies.cgroups(of: getpid()).unified else {
            throw SoakError("no cgroup2 hierarchy to make the soak's cgroups in")
        }
        do {
            launchRoot = try own.makeChild(name + "-launch")
            scopesRoot = try own.makeChild(name + "-scopes")
        } catch {
            throw SoakError("cannot make cgroups under \(own.path): \(error)")
        }
    }

    /// A new, empty scope for one app.
    func makeScope() throws -> CgroupDirectory {
        scopeCount += 1
        return try scopesRoot.makeChild("app-\(scopeCount)")
    }

    /// Every cgroup under `root`, deepest first, `root` last.
    private func tree(_ root: CgroupDirectory) -> [CgroupDirectory] {
        var result: [CgroupDirectory] = []
        let entries = (try? ProcFS(root: "/").listDirectory(String(root.path.dropFirst()))) ?? []
        for entry in entries {
            var status = stat()
            let path = root.path + "/" + entry
            if lstat(path, &status) == 0, (status.st_mode & S_IFMT) == S_IFDIR {
                result += tree(CgroupDirectory(path: path))
            }
        }
        return result + [root]
    }

    /// Thaws and kills whatever is in the run's cgroups (only processes the run started are there).
    func killEverything() {
        for cgroup in tree(launchRoot) + tree(scopesRoot) {
            try? cgroup.write("cgroup.freeze", "0")
            try? cgroup.killAll()
        }
    }

    /// Kills what is left, waits for it to go, and removes every cgroup, deepest first.
    func remove() {
        killEverything()
        for cgroup in tree(launchRoot) + tree(scopesRoot) {
            for _ in 0..<250 {
                if (try? cgroup.remove()) != nil || errno == ENOENT { break }
                try? cgroup.killAll()
                usleep(20_000)
            }
        }
    }
}
