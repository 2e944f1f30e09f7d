// What a restarted daemon takes over of the stops its state file records: only what a live stop could have been.

import BGTaskSystem

/// The checks a saved stop passes before a restarted daemon thaws, continues or kills anything through it. The
/// state file is read back from disk and is not trusted to name what to signal: a stop is taken over only on a
/// target the daemon would choose itself for that process now.
enum SavedStop {
    /// A saved stop refused, with what the daemon uses instead.
    struct Refusal: Error, CustomStringConvertible {
        var description: String
        /// The target taken instead: the process alone (its pid and start time were checked already), or nothing.
        var fallback: StopTarget?
    }

    /// What the daemon may treat as stopped of `saved` (nil when the state says nothing was). A frozen cgroup must
    /// be `launchedInto`, the cgroup bgtaskd launched the app into (checked against `CgroupRoot=` by the caller),
    /// or `currentCgroup()`, the cgroup2 cgroup the process is in now as `/proc/PID/cgroup` says (neither the root
    /// nor the daemon's own; whether it may stay frozen whole is the caller's next check); anything else is
    /// refused and nothing is taken as stopped. A stopped process group must be the one the process leads (its id
    /// is the process's pid: the only group the daemon ever stops); anything else is refused and the process
    /// alone is taken.
    static func trusted(
        _ saved: SavedProcess, launchedInto: CgroupDirectory?, currentCgroup: () -> CgroupDirectory?
    ) -> Result<StopTarget?, Refusal> {
        guard saved.isStopped else { return .success(nil) }
        if let path = saved.frozenCgroup {
            if let launchedInto, launchedInto.path == path { return .success(.cgroup(launchedInto)) }
            if let current = currentCgroup(), current.path == path { return .success(.cgroup(current)) }
            return .failure(
                Refusal(
                    description: "the state says pid \(saved.pid) was frozen through \(path), which is neither the "
                        + "cgroup bgtaskd launched it into nor the one it is in: nothing is thawed or killed through it",
                    fallback: nil))
        }
        if let group = saved.stoppedGroup {
            guard group == saved.pid else {
                return .failure(
                    Refusal(
                        description: "the state says process group \(group) was stopped for pid \(saved.pid), which "
                            + "does not lead it: nothing is continued or killed through it",
                        fallback: .process))
            }
            return .success(.group(group))
        }
        return .success(.process)
    }
}
