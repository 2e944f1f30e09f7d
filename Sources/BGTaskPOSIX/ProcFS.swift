// Reads /proc files under an injected root and hands their text to the parsers beside it.
import Glibc

/// The `/proc` filesystem, rooted at `root` so tests can point it at a fake tree.
///
/// Each method reads one file and parses it. Reading throws `Errno` (`.noSuchFileOrDirectory` or
/// `.noSuchProcess` when the process is gone, `.fileTooLarge` past `fileSizeLimit`); parsing throws
/// `ProcParseError`, also for a file cut short: every `/proc` text file ends in a newline, so one that does not
/// was not read whole, and is never parsed as if it were.
public struct ProcFS: Sendable {
    /// The largest file read whole: 16 MiB by default, far above any file read whole here (a stat line,
    /// `meminfo`). Past it the read fails rather than returning a cut file, whose missing part could be what the
    /// reader looks for. `/proc/locks` is scanned line by line instead, with no limit on its size.
    public var fileSizeLimit: Int
    /// The longest line `scanLines` takes: a `/proc/locks` row is under 100 bytes.
    public static let lineLengthLimit = 4096

    /// The mount point, `/proc` on a real system.
    public var root: String

    /// A reader for the procfs mounted at `root`, reading files whole up to `fileSizeLimit` bytes.
    public init(root: String = "/proc", fileSizeLimit: Int = 16 << 20) {
        self.root = root
        self.fileSizeLimit = fileSizeLimit
    }

    /// The text of `root/relativePath`, whole; `.fileTooLarge` past `fileSizeLimit` (bounded so a hostile file
    /// cannot exhaust memory, and never cut short).
    public func read(_ relativePath: String) throws(Errno) -> String {
        try FileDescriptor.readText(atPath: root + "/" + relativePath, limit: fileSizeLimit)
    }

    /// The text of a line-oriented file, which must be empty or end in a newline.
    public func readLines(_ relativePath: String) throws -> String {
        let text = try read(relativePath)
        guard text.isEmpty || text.utf8.last == UInt8(ascii: "\n") else {
            throw ProcParseError(file: relativePath, reason: "cut short: it does not end in a newline")
        }
        return text
    }

    /// Calls `body` with each line of `root/relativePath` (without its newline), in order, until `body` returns
    /// false. The file is read 64 KiB at a time and never held whole, so its size is bounded by nothing but time:
    /// for files any user can make large (`/proc/locks`). Throws for a line longer than `lineLengthLimit` and for
    /// a file that does not end in a newline (cut short).
    public func scanLines(_ relativePath: String, _ body: (Substring) throws -> Bool) throws {
        let path = root + "/" + relativePath
        let fd = try FileDescriptor.open(path, .readOnly)
        defer { try? fd.close() }  // Read-only: closing cannot lose data.
        var splitter = LineSplitter(file: relativePath, maximumLineLength: Self.lineLengthLimit)
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count: Int
            do {
                count = try chunk.withUnsafeMutableBytes { buffer throws(Errno) in try fd.read(into: buffer) }
            } catch let error as Errno {
                throw error.with(operation: "read(\(path))")
            }
            if count == 0 { break }
            guard try splitter.feed(chunk[..<count], body) else { return }
        }
        try splitter.finish()
    }

    /// `/proc/PID/stat`: state, parent, group, session and start time of a process.
    public func stat(_ pid: pid_t) throws -> ProcessStat {
        try ProcessStat.parse(readLines("\(pid)/stat"))
    }

    /// The real, effective, saved and filesystem uids of a process (the `Uid:` line of `/proc/PID/status`).
    public func userIDs(_ pid: pid_t) throws -> ProcessUserIDs {
        try ProcessUserIDs.parse(readLines("\(pid)/status"))
    }

    /// The stat of every process whose stat shows it in process group `group`, from one pass over every
    /// process's stat. Throws when the process list cannot be read; a process that exits during the pass, or whose
    /// stat cannot be read or understood, is left out (for a caller deciding whom to signal, a process it cannot
    /// see is one it does not signal).
    public func processes(inGroup group: pid_t) throws(Errno) -> [ProcessStat] {
        try processIDs().compactMap { pid in
            guard let stat = try? self.stat(pid), stat.processGroupID == group else { return nil }
            return stat
        }
    }

    /// `/proc/PID/oom_score_adj`: how the kernel's OOM killer weighs the process, from -1000 to 1000; nil when the
    /// file holds anything else.
    public func oomScoreAdjust(_ pid: pid_t) throws(Errno) -> Int32? {
        let text = try read("\(pid)/oom_score_adj")
        guard let value = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).first.flatMap({ Int32($0) }),
            (-1000...1000).contains(value)
        else { return nil }
        return value
    }

    /// `Pss` of `/proc/PID/smaps_rollup` in bytes: the process's fair share of the memory it maps.
    public func proportionalSetSize(_ pid: pid_t) throws -> Int64 {
        try ProportionalSetSize.parse(readLines("\(pid)/smaps_rollup"))
    }

    /// Each row of `/proc/locks` (held locks and blocked requests), in order, until `body` returns false; the
    /// file is never held whole (any user can fill it with locks).
    public func scanLocks(_ body: (FileLock) throws -> Bool) throws {
        var number = 0
        try scanLines("locks") { line in
            number += 1
            if line.allSatisfy({ $0 == " " || $0 == "\t" }) { return true }
            return try body(FileLock.parse(line: line, number: number))
        }
    }

    /// Every row of `/proc/locks`, held locks and blocked requests.
    public func locks() throws -> [FileLock] {
        var locks: [FileLock] = []
        try scanLocks { lock in
            locks.append(lock)
            return true
        }
        return locks
    }

    /// `MemTotal` and `MemAvailable` of `/proc/meminfo`.
    public func memoryInfo() throws -> MemoryInfo {
        try MemoryInfo.parse(readLines("meminfo"))
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

    /// The thread ids of process `pid` (the numeric entries of `PID/task`), in directory order; throws
    /// `.noSuchFileOrDirectory` when the process is gone.
    public func threadIDs(of pid: pid_t) throws(Errno) -> [pid_t] {
        try listDirectory("\(pid)/task").compactMap { pid_t($0) }
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
                text = try readLines("\(pid)/fdinfo/\(name)")
            } catch let error as Errno {
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
        try Pressure.parse(readLines("pressure/\(resource.rawValue)"))
    }
}

/// Splits text arriving in chunks into lines (without their newlines), holding at most one line: how
/// `ProcFS.scanLines` reads a file of any size. A line longer than `maximumLineLength` bytes, or text that does not
/// end in a newline (cut short), is a `ProcParseError`.
public struct LineSplitter: Sendable {
    /// The file the text comes from, for errors.
    public let file: String
    /// The longest line taken, in bytes.
    public let maximumLineLength: Int
    private var pending: [UInt8] = []
    /// Lines passed on so far.
    public private(set) var lineCount = 0

    /// A splitter of `file`'s text.
    public init(file: String, maximumLineLength: Int) {
        self.file = file
        self.maximumLineLength = maximumLineLength
    }

    /// Takes the next chunk of text and calls `body` with each line it completes, in order; returns false as soon
    /// as `body` does (the rest of the chunk is dropped: the caller stops reading).
    public mutating func feed(_ chunk: ArraySlice<UInt8>, _ body: (Substring) throws -> Bool) throws -> Bool {
        var lineStart = chunk.startIndex
        while lineStart < chunk.endIndex {
            let lineEnd = chunk[lineStart...].firstIndex(of: UInt8(ascii: "\n")) ?? chunk.endIndex
            pending.append(contentsOf: chunk[lineStart..<lineEnd])
            guard pending.count <= maximumLineLength else {
                throw ProcParseError(
                    file: file, line: lineCount + 1, reason: "a line longer than \(maximumLineLength) bytes")
            }
            guard lineEnd < chunk.endIndex else { break }
            lineStart = lineEnd + 1
            lineCount += 1
            let line = String(decoding: pending, as: UTF8.self)
            pending.removeAll(keepingCapacity: true)
            guard try body(line[...]) else { return false }
        }
        return true
    }

    /// The end of the text: throws when it did not end in a newline.
    public func finish() throws(ProcParseError) {
        guard pending.isEmpty else {
            throw ProcParseError(file: file, reason: "cut short: it does not end in a newline")
        }
    }
}
