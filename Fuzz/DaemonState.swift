// libFuzzer target: bgtaskd's state file as a restarted daemon reads it, and what it takes over of the stops and
// cgroups the file records.
//
// The input is a state file (`state.json`). `StateStore.decodeSnapshot` refuses it with a reason or decodes it;
// every process it holds then goes through the checks a restart applies before it signals anything: its cgroups are
// used only when `LaunchCgroupRoots.made` accepts them, and its stop only as `SavedStop.trusted` allows. Asserts
// that nothing outside the daemon's roots is ever taken as a launched app's cgroup (each path an `app-*` child of
// its root, no `.` or `..` and no deeper path), that a frozen cgroup taken over is the launched one or the one the
// process is in as /proc says (here, a cgroup named after the pid under a root of the fuzzer's), and that a stopped
// process group taken over is the one the process leads.
import BGTaskCore
import BGTaskSystem

@testable import BGTaskDaemon

private let roots = LaunchCgroupRoots(
    control: CgroupDirectory(path: "/sys/fs/cgroup/unified/bgtaskd.service"), isUnified: true,
    memory: CgroupDirectory(path: "/sys/fs/cgroup/memory/bgtaskd.service"))

/// Whether `path` is an `app-*` child of `root` and nothing else.
private func isAppChild(_ path: String, of root: CgroupDirectory?) -> Bool {
    guard let root, path.hasPrefix(root.path + "/app-") else { return false }
    let name = path.dropFirst(root.path.count + 1)
    return !name.contains("/") && name != "." && name != ".."
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDaemonState(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    // The seeds carry this boot id and times well before this instant.
    let decoded = StateStore.decodeSnapshot(
        bytes, bootID: "0c0f4a85-8b2a-4b7b-9d7e-3c1f5f2e6a11", now: MonotonicInstant(nanoseconds: 1 << 62))
    guard case .success(let state) = decoded else { return 0 }
    for saved in state.processes {
        var launchedInto: CgroupDirectory?
        if let cgroups = AppCgroups(saved), roots.made(cgroups) {
            if let control = cgroups.control {
                precondition(isAppChild(control.path, of: roots.control), "took \(control.path) as a launched cgroup")
            }
            if let memory = cgroups.memory {
                precondition(isAppChild(memory.path, of: roots.memory), "took \(memory.path) as a memory cgroup")
            }
            launchedInto = cgroups.control
        }
        // The cgroup the process is in, as /proc would say: for odd pids one named after the pid.
        let own = saved.pid % 2 == 1 ? CgroupDirectory(path: "/sys/fs/cgroup/unified/user.slice/app-\(saved.pid)") : nil
        let taken: StopTarget?
        switch SavedStop.trusted(saved, launchedInto: launchedInto, currentCgroup: { own }) {
        case .success(let target): taken = target
        case .failure(let refusal): taken = refusal.fallback
        }
        switch taken {
        case .cgroup(let cgroup)?:
            precondition(
                cgroup.path == launchedInto?.path || cgroup.path == own?.path,
                "took over a freeze through \(cgroup.path), neither launched into nor the process's")
        case .group(let group)?:
            precondition(group == saved.pid, "took over a stop of group \(group) that pid \(saved.pid) does not lead")
        case .process?:
            precondition(saved.isStopped, "took over a stop the state does not record")
        case nil:
            break
        }
    }
    return 0
}
