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

    /// The pids of every process visible in this procfs (its numeric entries), in directory order.
    public func processIDs() throws(Errno) -> [pid_t] {
        try listDirectory("").compactMap { name in
            guard let first = name.utf8.first, (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(first) else {
                return nil
            }
            return pid_t(name)
        }
    }

    /// The locks held through the open files of `pid` (`lock:` lines of `/proc/PID/fdinfo/*`): how an open
    /// file description lock, which `/proc/locks` shows with pid -1, is traced to a process. Files closed while
    /// they are read are skipped; throws when the directory itself cannot be read (the process is gone, or the
    /// caller may not look).
    public func fileDescriptorLocks(_ pid: pid_t) throws -> [FileLock] {
        var locks: [FileLock] = []
        for name in try listDirectory("\(pid)/fdinfo") {
            let text: String
            do {
                text = try read("\(pid)/fdinfo/\(name)")
            } catch {
                // Closed since the listing: it holds nothing any more.
                if error == .noSuchFileOrDirectory { continue }
                throw error
            }
            locks += try FileDescriptorInfo.parseLocks(text)
        }
        return locks
    }

    /// The names in `root/relativePath`, without `.` and `..`.
    public func listDirectory(_ relativePath: String) throws(Errno) -> [String] {
        let path = relativePath.isEmpty ? root : root + "/" + relativePath
        guard let directory = opendir(path) else { throw Errno(rawValue: errno, operation: "opendir(\(path))") }
        defer { closedir(directory) }
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(directory) else {
                if errno != 0 { throw Errno(rawValue: errno, operation: "readdir(\(path))") }
                return names
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
    }

    /// `/proc/pressure/<resource>`. Throws `.noSuchFileOrDirectory` on kernels without PSI (or with
    /// `psi=0` on the command line).
    public func pressure(resource: PressureResource) throws -> Pressure {
        try Pressure.parse(read("pressure/\(resource.rawValue)"))
    }
}
