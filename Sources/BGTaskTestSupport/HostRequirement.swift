// What a test needs of the host, as a trait: where the host lacks it, the test is reported skipped with the reason.

import BGTaskPOSIX
import Foundation
import Glibc
import Testing

/// Something a test needs of the host it runs on (root, a cgroup hierarchy, PSI, a systemd manager, a program),
/// and why this host cannot give it. Used through the `.requires(...)` trait.
public struct HostRequirement: Sendable {
    /// Why this host cannot meet the requirement; nil when it can.
    public let unavailableReason: String?

    /// A requirement this host fails for `unavailableReason`, or meets when it is nil.
    public init(unavailableReason: String?) {
        self.unavailableReason = unavailableReason
    }

    /// Root, for `purpose`: the reason reads "`purpose` needs root".
    public static func root(for purpose: String) -> Self {
        Self(unavailableReason: geteuid() == 0 ? nil : "\(purpose) needs root")
    }

    /// A cgroup of the test's own in `hierarchy` (`ScratchCgroup`), which also needs root.
    public static func cgroup(_ hierarchy: ScratchCgroup.Hierarchy) -> Self {
        Self(unavailableReason: ScratchCgroup.unavailableReason(hierarchy))
    }

    /// System-wide PSI that a trigger can be armed on: `/proc/pressure/memory` readable and writable.
    public static var systemPressure: Self {
        Self(
            unavailableReason: access("/proc/pressure/memory", R_OK | W_OK) == 0
                ? nil : "/proc/pressure/memory is missing or not writable (no PSI, or not root)")
    }

    /// A contained systemd user manager (`ContainedSystemd`).
    public static var containedSystemd: Self {
        Self(unavailableReason: ContainedSystemd.unavailableReason)
    }

    /// Each of the programs `names`, found in `PATH` (or in /usr/bin, /bin or /usr/local/bin).
    public static func programs(_ names: String...) -> Self {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin", "/usr/local/bin"]
        let missing = names.filter { name in
            !directories.contains { access($0 + "/" + name, X_OK) == 0 }
        }
        if missing.isEmpty { return Self(unavailableReason: nil) }
        let verb = missing.count == 1 ? "is" : "are"
        return Self(unavailableReason: "\(missing.joined(separator: " and ")) \(verb) not installed")
    }
}

extension Trait where Self == ConditionTrait {
    /// Runs the test (or every test of the suite) only where the host meets each of `requirements`; elsewhere
    /// Swift Testing reports it skipped with the reasons, instead of the test passing without having run, and
    /// `scripts/test` lists it among the skipped tests. The host is examined once, when the test is planned.
    public static func requires(
        _ requirements: HostRequirement..., sourceLocation: SourceLocation = #_sourceLocation
    ) -> Self {
        let reasons = requirements.compactMap(\.unavailableReason)
        return .enabled(
            if: reasons.isEmpty, reasons.isEmpty ? nil : Comment(rawValue: reasons.joined(separator: "; ")),
            sourceLocation: sourceLocation)
    }
}
