// The words the types of `io.bgtask.Lifecycle` take that the policy core does not have, and the vocabulary
// re-exported beside them.
//
// The types themselves (`TaskInfo`, `AppInfo`, `EventInfo`, `HistoryEntry`: `Task`, `App`, `Event` and
// `HistoryEntry` in the interface) are generated at build time from `io.bgtask.Lifecycle.varlink`, their string
// fields typed with these enums as `io.bgtask.Lifecycle.bindings` says. They are plain Codable structs: the codec's
// writer (`JSONTextEncoder`) puts every optional field in a reply, as `null` when absent, so a consumer sees every
// field the interface declares; decoding accepts a missing optional as null.

// The words (states, kinds, reasons, behaviours, bands) are BGTaskVocabulary's, shared with the policy core and
// re-exported here so that every user of the interface has them.
import BGTaskJSON
@_exported import BGTaskVocabulary

/// How the daemon suspends an app (`App.suspendedWith`).
public enum SuspensionMethod: String, Codable, Hashable, Sendable, CaseIterable {
    /// Frozen by the service manager through the unit it runs as (`FreezeUnit`).
    case unit
    /// Frozen through a cgroup2 cgroup of its own (`cgroup.freeze`).
    case cgroup2
    /// Frozen through a v1 freezer cgroup of its own (`freezer.state`).
    case cgroup1
    /// SIGSTOP to the process group it leads.
    case group
    /// SIGSTOP to its process alone.
    case process
}
