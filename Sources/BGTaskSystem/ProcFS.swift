// Reads /proc files under an injected root and hands their text to the parsers beside it.
import Glibc

/// The `/proc` filesystem, rooted at `root` so tests can point it at a fake tree.
///
/// Each method reads one file and parses it. Reading throws `Errno` (`.noSuchFileOrDirectory` or
/// `.noSuchProcess` when the process is gone); parsing throws `ProcParseError`.
public struct ProcFS: Sendable {
    /// The mount point, `/proc` on a real system.
    public var root: String

    /// A reader for the procfs mounted at `root`.
    public init(root: String = "/proc") {
        self.root = root
    }

    /// The text of `root/relativePath`, up to 16 MiB (bounded so a hostile file cannot exhaust memory).
    public func read(_ relativePath: String) throws(Errno) -> String {
        let fd = try FileDescriptor.open(root + "/" + relativePath, .readOnly)
        defer { try? fd.close() }  // Read-only: closing cannot lose data, and the read result is what matters.
        do {
            let bytes = try fd.readToEnd()
            return String(decoding: bytes, as: UTF8.self)
        } catch {
            throw error.with(operation: "read(\(root)/\(relativePath))")
        }
    }

    /// `/proc/PID/stat`: state, parent, group, session and start time of a process.
    public func stat(_ pid: pid_t) throws -> ProcessStat {
        try ProcessStat.parse(read("\(pid)/stat"))
    }

    /// `Pss` of `/proc/PID/smaps_rollup` in bytes: the process's fair share of the memory it maps.
    public func proportionalSetSize(_ pid: pid_t) throws -> Int64 {
        try ProportionalSetSize.parse(read("\(pid)/smaps_rollup"))
    }

    /// Every row of `/proc/locks`, held locks and blocked requests.
    public func locks() throws -> [FileLock] {
        try FileLock.parseAll(read("locks"))
    }

    /// `MemTotal` and `MemAvailable` of `/proc/meminfo`.
    public func memoryInfo() throws -> MemoryInfo {
        try MemoryInfo.parse(read("meminfo"))
    }

    /// `/proc/pressure/<resource>`. Throws `.noSuchFileOrDirectory` on kernels without PSI (or with
    /// `psi=0` on the command line).
    public func pressure(resource: PressureResource) throws -> Pressure {
        try Pressure.parse(read("pressure/\(resource.rawValue)"))
    }
}
