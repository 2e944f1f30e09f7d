// What the host must provide for bgtaskd to run, checked at start with messages that say what to do.

import BGTaskPOSIX
import BGTaskSystem
import Glibc

/// Startup checks of the kernel features the daemon relies on.
public enum Requirements {
    /// Problems that stop the daemon from running, one sentence each; empty when all is well.
    public static func problems(procFS: ProcFS = ProcFS()) -> [String] {
        var problems: [String] = []
        do {
            let own = try PidFD.open(pid: getpid())
            try? own.close()
        } catch {
            problems.append(
                "pidfd_open(2) is not available (\(error)): bgtaskd needs Linux 5.3 or later to track apps without "
                    + "PID-reuse races")
        }
        do {
            _ = try procFS.stat(getpid())
        } catch {
            problems.append("cannot read \(procFS.root)/self/stat (\(error)): is /proc mounted?")
        }
        return problems
    }
}

extension LogPriority {
    /// The priority named by `BGTASKD_LOG_LEVEL` (`debug`, `info`, `notice`, `warning`, `err`/`error`, ...).
    public init?(name: String) {
        switch name.lowercased() {
        case "emerg", "emergency": self = .emergency
        case "alert": self = .alert
        case "crit", "critical": self = .critical
        case "err", "error": self = .error
        case "warning", "warn": self = .warning
        case "notice": self = .notice
        case "info": self = .info
        case "debug": self = .debug
        default: return nil
        }
    }
}
