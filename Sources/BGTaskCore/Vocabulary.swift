// The core's own words, beside the shared vocabulary (BGTaskVocabulary) it re-exports.

// Re-exported: every user of the policy speaks its states, kinds and reasons, and they are defined once, in
// BGTaskVocabulary, shared with the interface.
@_exported import BGTaskVocabulary

/// How a process that the daemon tracked went away, as seen by the shell.
public enum ProcessEnd: Sendable, Equatable {
    /// Exited normally, or gone with no status available (an app the daemon did not start).
    case exited
    /// Killed by a signal or exited with a failure status, not at the daemon's request.
    case crashed
}

/// How a process the daemon started (and so could reap) ended, as `waitid` reported it.
public enum ProcessExit: Codable, Sendable, Hashable {
    /// It exited with this status.
    case status(Int32)
    /// This signal ended it (its number).
    case signal(Int32)
}

extension ProcessEnd {
    /// The termination reason a process end is recorded with when the daemon was not ending the app.
    public var reason: TerminationReason {
        switch self {
        case .exited: .exited
        case .crashed: .crashed
        }
    }
}
