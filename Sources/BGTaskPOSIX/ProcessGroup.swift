// Process groups: finding a process's group and signalling a whole group.
import CPOSIX
import Glibc

/// A process group, named by its id (the pid of the process that leads it).
public struct ProcessGroup: Hashable, Sendable, CustomStringConvertible {
    /// The group id.
    public let id: pid_t

    /// Wraps a group id.
    public init(id: pid_t) {
        self.id = id
    }

    public var description: String { "process group \(id)" }

    /// The group `pid` belongs to (`getpgid(2)`). Throws `.noSuchProcess` when it is gone.
    public static func of(_ pid: pid_t) throws(Errno) -> ProcessGroup {
        ProcessGroup(id: try systemCall("getpgid(\(pid))") { getpgid(pid) })
    }

    /// Whether `pid` leads its own group (`getpgid(pid) == pid`): only then may a signal meant for the
    /// app go to the whole group; a group the app merely belongs to could be a shell's.
    public static func isLeader(_ pid: pid_t) throws(Errno) -> Bool {
        try of(pid).id == pid
    }

    /// Sends `signal` to every process of the group (`kill(-id, signal)`).
    public func send(_ signal: Signal) throws(Errno) {
        precondition(id > 1, "refusing to signal process group \(id)")
        _ = try systemCall("kill(-\(id), \(signal.name))") { kill(-id, signal.rawValue) }
    }
}
