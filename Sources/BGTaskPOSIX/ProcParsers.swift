// Parsers for the /proc files the daemon reads; each takes the text and survives hostile or truncated input.
import Glibc

/// A `/proc` file's text did not have the expected shape.
public struct ProcParseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// Which file kind was being parsed, e.g. "stat", "locks".
    public var file: String
    /// The 1-based line the problem is on, when the file has lines that matter.
    public var line: Int?
    /// What was wrong, quoting (a bounded part of) the offending text.
    public var reason: String

    /// Describes a parse failure of `file`, at `line` if known.
    public init(file: String, line: Int? = nil, reason: String) {
        self.file = file
        self.line = line
        self.reason = reason
    }

    public var description: String {
        if let line { return "\(file) line \(line): \(reason)" }
        return "\(file): \(reason)"
    }
}

/// Quotes at most 40 characters of hostile text for an error message, so a garbage file cannot make
/// the log line huge.
package func quoted<Text: StringProtocol>(_ text: Text) -> String {
    let prefix = text.prefix(40)
    return "'" + prefix + (prefix.count < text.count ? "…'" : "'")
}

/// Whitespace-separated fields of a line (spaces and tabs).
package func fields<Text: StringProtocol>(_ line: Text) -> [Text.SubSequence] {
    line.split(whereSeparator: { $0 == " " || $0 == "\t" })
}

/// Parses a decimal `Int64`, rejecting signs the kernel never prints unless `allowNegative`.
func parseInteger<Text: StringProtocol>(_ text: Text, allowNegative: Bool = false) -> Int64? {
    guard let first = text.first, first != "+" else { return nil }
    if first == "-" && !allowNegative { return nil }
    return Int64(text)
}

/// Converts a kibibyte count, as `/proc` prints sizes, to bytes; nil on overflow.
func kibibytesToBytes(_ kibibytes: Int64) -> Int64? {
    let (bytes, overflow) = kibibytes.multipliedReportingOverflow(by: 1024)
    return overflow ? nil : bytes
}

// MARK: - /proc/PID/stat

/// The scheduler state letter of `/proc/PID/stat`.
public enum ProcessState: Hashable, Sendable, CustomStringConvertible {
    /// `R`: running or runnable.
    case running
    /// `S`: interruptible sleep (waiting for an event; also how a cgroup2-frozen task shows).
    case sleeping
    /// `D`: uninterruptible sleep (disk I/O; also how a cgroup v1-frozen task shows).
    case diskSleep
    /// `Z`: exited, waiting to be reaped by its parent.
    case zombie
    /// `T`: stopped by a signal (`SIGSTOP`, `SIGTSTP`).
    case stopped
    /// `t`: stopped by a debugger.
    case tracingStop
    /// `X` or `x`: dead (should never be seen).
    case dead
    /// `I`: idle kernel thread.
    case idle
    /// `P`: parked kernel thread.
    case parked
    /// `W`, `K` or any other letter a kernel may add.
    case other(Character)

    /// Maps the letter of field 3 to a state.
    public init(letter: Character) {
        switch letter {
        case "R": self = .running
        case "S": self = .sleeping
        case "D": self = .diskSleep
        case "Z": self = .zombie
        case "T": self = .stopped
        case "t": self = .tracingStop
        case "X", "x": self = .dead
        case "I": self = .idle
        case "P": self = .parked
        default: self = .other(letter)
        }
    }

    /// The letter as the kernel prints it.
    public var letter: Character {
        switch self {
        case .running: "R"
        case .sleeping: "S"
        case .diskSleep: "D"
        case .zombie: "Z"
        case .stopped: "T"
        case .tracingStop: "t"
        case .dead: "X"
        case .idle: "I"
        case .parked: "P"
        case .other(let letter): letter
        }
    }

    public var description: String { String(letter) }
}

/// The fields of `/proc/PID/stat` the daemon uses.
public struct ProcessStat: Hashable, Sendable {
    /// Field 1: the process id.
    public var pid: pid_t
    /// Field 2: the command name (up to 15 bytes, chosen by the process: may hold spaces and parentheses).
    public var command: String
    /// Field 3: the scheduler state.
    public var state: ProcessState
    /// Field 4: the parent's process id.
    public var parentPID: pid_t
    /// Field 5: the process group id.
    public var processGroupID: pid_t
    /// Field 6: the session id.
    public var sessionID: pid_t
    /// Field 22: start time in clock ticks after boot. With the pid it names one process across PID
    /// reuse: a saved (pid, startTime) that no longer matches means the app is gone.
    public var startTime: UInt64

    /// A stat record from its parts (tests, state files).
    public init(
        pid: pid_t, command: String, state: ProcessState, parentPID: pid_t, processGroupID: pid_t,
        sessionID: pid_t, startTime: UInt64
    ) {
        self.pid = pid
        self.command = command
        self.state = state
        self.parentPID = parentPID
        self.processGroupID = processGroupID
        self.sessionID = sessionID
        self.startTime = startTime
    }

    /// Parses the one line of `/proc/PID/stat`.
    ///
    /// The command sits in parentheses and may itself contain ") (", so it ends at the *last* `)`;
    /// everything after it is numeric fields separated by single spaces. The line is read as Unicode scalars,
    /// not `Character`s: the process chooses its command, and one starting with a combining mark would fuse
    /// with the `(` into a single `Character`, hiding it (as a prepended mark at the end would hide the `)`).
    public static func parse(_ text: String) throws(ProcParseError) -> ProcessStat {
        func failure(_ reason: String) -> ProcParseError { ProcParseError(file: "stat", reason: reason) }
        let scalars = text.unicodeScalars
        guard let open = scalars.firstIndex(of: "("), let close = scalars.lastIndex(of: ")"), open < close else {
            throw failure("no parenthesised command in \(quoted(text))")
        }
        let pidText = Substring(scalars[..<open]).trimmingSuffix(while: { $0 == " " })
        guard let pidValue = parseInteger(pidText), let pid = pid_t(exactly: pidValue), pid > 0 else {
            throw failure("bad pid \(quoted(pidText))")
        }
        let command = String(scalars[scalars.index(after: open)..<close])
        // The kernel separates fields by exactly one space; splitting on runs of spaces would let an empty
        // field shift every later one into the wrong place.
        var tail = scalars[scalars.index(after: close)...]
        while tail.last == "\n" { tail.removeLast() }
        guard tail.first == " " else { throw failure("no space after the command in \(quoted(text))") }
        let rest = tail.dropFirst().split(separator: " ", omittingEmptySubsequences: false).map(Substring.init)
        // Fields 3 through 22 are rest[0...19]; later kernels only ever append.
        guard rest.count >= 20 else { throw failure("only \(rest.count) fields after the command, need 20") }
        guard rest[0].unicodeScalars.count == 1, let letter = rest[0].first else {
            throw failure("bad state \(quoted(rest[0]))")
        }
        func processID(_ index: Int, _ name: String) throws(ProcParseError) -> pid_t {
            guard let value = parseInteger(rest[index]), let id = pid_t(exactly: value) else {
                throw failure("bad \(name) \(quoted(rest[index]))")
            }
            return id
        }
        guard let startTime = UInt64(rest[19]), rest[19].first != "+" else {
            throw failure("bad start time \(quoted(rest[19]))")
        }
        return ProcessStat(
            pid: pid, command: command, state: ProcessState(letter: letter),
            parentPID: try processID(1, "parent pid"), processGroupID: try processID(2, "process group"),
            sessionID: try processID(3, "session"), startTime: startTime)
    }
}

extension StringProtocol {
    /// The text without trailing characters matching `predicate`.
    func trimmingSuffix(while predicate: (Character) -> Bool) -> SubSequence {
        var end = endIndex
        while end > startIndex {
            let before = index(before: end)
            guard predicate(self[before]) else { break }
            end = before
        }
        return self[startIndex..<end]
    }
}

// MARK: - /proc/PID/status

/// The user ids of a process, from the `Uid:` line of `/proc/PID/status`: whose process it is, which decides
/// whether the daemon may signal it on an app's behalf.
public struct ProcessUserIDs: Hashable, Sendable {
    /// The real uid: who started it (a setuid program keeps its caller's).
    public var real: uid_t
    /// The effective uid: whose rights it acts with.
    public var effective: uid_t
    /// The saved set-user-id: the uid it may switch its effective uid back to.
    public var saved: uid_t
    /// The filesystem uid: whose rights it opens files with (follows the effective uid unless changed).
    public var filesystem: uid_t

    /// User ids from their parts.
    public init(real: uid_t, effective: uid_t, saved: uid_t, filesystem: uid_t) {
        self.real = real
        self.effective = effective
        self.saved = saved
        self.filesystem = filesystem
    }

    /// Whether the process is wholly `uid`'s: its real, effective and saved uids are all `uid`, so it cannot act
    /// with another's rights now or later. A setuid-root program `uid` started has `uid` as its real uid and 0 as
    /// the others: it is not.
    public func areAll(_ uid: uid_t) -> Bool {
        real == uid && effective == uid && saved == uid
    }

    /// Parses `/proc/PID/status`: its one `Uid:` line, four decimal ids (real, effective, saved, filesystem)
    /// separated by tabs. The text is read as bytes: only a line that starts with `Uid:` counts, and a second
    /// one, a missing one, or one whose ids are not four plain numbers a uid can hold is refused (the kernel never
    /// prints such; a caller deciding whose a process is must not guess).
    public static func parse(_ text: String) throws(ProcParseError) -> ProcessUserIDs {
        func failure(_ reason: String, line: Int? = nil) -> ProcParseError {
            ProcParseError(file: "status", line: line, reason: reason)
        }
        let prefix = Array("Uid:".utf8)
        var found: (ids: ProcessUserIDs, line: Int)?
        for (index, line) in text.utf8.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            .enumerated()
        where line.starts(with: prefix) {
            let number = index + 1
            let lineText = String(decoding: line, as: UTF8.self)
            if let found {
                throw failure("a second Uid line (the first is line \(found.line))", line: number)
            }
            let parts = line.dropFirst(prefix.count).split(whereSeparator: {
                $0 == UInt8(ascii: "\t") || $0 == UInt8(ascii: " ")
            })
            guard parts.count == 4 else {
                throw failure("\(parts.count) ids in \(quoted(lineText)), need 4", line: number)
            }
            var ids: [uid_t] = []
            for part in parts {
                // Digits only (no sign, no spaces), at most 10 of them, and not (uid_t)-1, which names no user.
                guard part.count <= 10, part.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                    let value = UInt64(String(decoding: part, as: UTF8.self)), value < UInt64(uid_t.max)
                else {
                    throw failure("bad uid \(quoted(String(decoding: part, as: UTF8.self)))", line: number)
                }
                ids.append(uid_t(value))
            }
            found = (ProcessUserIDs(real: ids[0], effective: ids[1], saved: ids[2], filesystem: ids[3]), number)
        }
        guard let found else { throw failure("no Uid line") }
        return found.ids
    }
}

// MARK: - /proc/PID/smaps_rollup

/// Proportional set size (PSS): the process's private memory plus its share of shared pages.
public enum ProportionalSetSize {
    /// Parses the `Pss:` line of `smaps_rollup` into bytes. An empty text (a kernel thread, or a process
    /// that already released its memory) is 0 bytes.
    public static func parse(_ text: String) throws(ProcParseError) -> Int64 {
        if text.allSatisfy({ $0.isWhitespace }) { return 0 }
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
        where line.hasPrefix("Pss:") {
            let parts = fields(line.dropFirst(4))
            guard parts.count == 2, parts[1] == "kB", let kibibytes = parseInteger(parts[0]),
                let bytes = kibibytesToBytes(kibibytes)
            else {
                throw ProcParseError(file: "smaps_rollup", line: number + 1, reason: "bad Pss line \(quoted(line))")
            }
            return bytes
        }
        throw ProcParseError(file: "smaps_rollup", reason: "no Pss line")
    }
}

// MARK: - /proc/locks

/// One row of `/proc/locks`: a file lock held, or a request blocked waiting for one.
public struct FileLock: Hashable, Sendable {
    /// The lock's API (first word after the number).
    public enum Kind: String, Hashable, Sendable {
        /// `flock(2)`: whole-file, owned by the open file description.
        case flock = "FLOCK"
        /// `fcntl(F_SETLK)` record lock, owned by the process.
        case posix = "POSIX"
        /// Open-file-description record lock (`F_OFD_SETLK`); no owning process (pid -1).
        case openFileDescription = "OFDLCK"
        /// `fcntl(F_SETLEASE)` lease.
        case lease = "LEASE"
        /// NFS delegation.
        case delegation = "DELEG"
        /// A transient lock check (`FL_ACCESS`).
        case access = "ACCESS"
        /// The kernel's own "UNKNOWN".
        case unknown = "UNKNOWN"
    }

    /// How the lock is enforced, or a lease's state (second word).
    public enum Enforcement: String, Hashable, Sendable {
        /// Honoured only by processes that check (every lock since Linux 5.15).
        case advisory = "ADVISORY"
        /// Enforced on every read and write (removed in Linux 5.15).
        case mandatory = "MANDATORY"
        /// A lease being held.
        case active = "ACTIVE"
        /// A lease being broken.
        case breaking = "BREAKING"
        /// The request breaking a lease.
        case breaker = "BREAKER"
        /// A lock on an object with no inode.
        case noInode = "*NOINODE*"
        /// The kernel's own "UNKNOWN".
        case unknown = "UNKNOWN"
    }

    /// Read or write (third word).
    public enum Access: String, Hashable, Sendable {
        /// Shared lock (`F_RDLCK`, `LOCK_SH`).
        case read = "READ"
        /// Exclusive lock (`F_WRLCK`, `LOCK_EX`).
        case write = "WRITE"
        /// A lease being released.
        case unlock = "UNLCK"
    }

    /// The file the lock is on: device number and inode.
    public struct FileID: Hashable, Sendable {
        /// Device major number (printed in hex).
        public var deviceMajor: UInt32
        /// Device minor number (printed in hex).
        public var deviceMinor: UInt32
        /// Inode number (printed in decimal).
        public var inode: UInt64

        /// A file id from its parts.
        public init(deviceMajor: UInt32, deviceMinor: UInt32, inode: UInt64) {
            self.deviceMajor = deviceMajor
            self.deviceMinor = deviceMinor
            self.inode = inode
        }
    }

    /// The row's ordinal; a blocked request repeats the ordinal of the lock it waits for.
    public var ordinal: Int64
    /// A `->` row: a request waiting for lock `ordinal`, held by nobody yet. A process on such a row
    /// holds nothing (through this row).
    public var isBlockedWaiter: Bool
    /// The lock's API.
    public var kind: Kind
    /// Advisory or mandatory, or a lease's state.
    public var enforcement: Enforcement
    /// Read or write.
    public var access: Access
    /// The owning process; -1 for open-file-description locks, which belong to no process, and 0 for an
    /// owner outside our PID namespace.
    public var pid: pid_t
    /// The locked file; nil when the kernel printed `<none>`.
    public var file: FileID?
    /// First locked byte.
    public var start: Int64
    /// Last locked byte; nil for "EOF" (to the end of the file, whatever its length).
    public var end: Int64?

    /// A lock row from its parts.
    public init(
        ordinal: Int64, isBlockedWaiter: Bool, kind: Kind, enforcement: Enforcement, access: Access,
        pid: pid_t, file: FileID?, start: Int64, end: Int64?
    ) {
        self.ordinal = ordinal
        self.isBlockedWaiter = isBlockedWaiter
        self.kind = kind
        self.enforcement = enforcement
        self.access = access
        self.pid = pid
        self.file = file
        self.start = start
        self.end = end
    }

    /// Parses every row of `/proc/locks`. Strict: a row it cannot read makes the whole parse fail with the
    /// line number, because a lock silently skipped could let the daemon freeze a lock holder.
    public static func parseAll(_ text: String) throws(ProcParseError) -> [FileLock] {
        var locks: [FileLock] = []
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
        where !line.allSatisfy({ $0 == " " || $0 == "\t" }) {
            locks.append(try parse(line: line, number: number + 1))
        }
        return locks
    }

    /// Parses one row, e.g. `3: -> POSIX  ADVISORY  WRITE 1234 08:01:4200 0 EOF`.
    public static func parse(line: Substring, number: Int = 1) throws(ProcParseError) -> FileLock {
        func failure(_ reason: String) -> ProcParseError {
            ProcParseError(file: "locks", line: number, reason: reason)
        }
        var words = fields(line)[...]
        guard let ordinalWord = words.popFirst(), ordinalWord.hasSuffix(":"),
            let ordinal = parseInteger(ordinalWord.dropLast())
        else {
            throw failure("no row number in \(quoted(line))")
        }
        let isBlockedWaiter = words.first == "->"
        if isBlockedWaiter { words.removeFirst() }
        // Kind, enforcement, access, pid, file, start, end.
        guard words.count == 7 else { throw failure("expected 7 fields after the number in \(quoted(line))") }
        let values = Array(words)
        guard let kind = Kind(rawValue: String(values[0])) else { throw failure("unknown kind \(quoted(values[0]))") }
        guard let enforcement = Enforcement(rawValue: String(values[1])) else {
            throw failure("unknown enforcement \(quoted(values[1]))")
        }
        guard let access = Access(rawValue: String(values[2])) else {
            throw failure("unknown access \(quoted(values[2]))")
        }
        guard let pidValue = parseInteger(values[3], allowNegative: true), let pid = pid_t(exactly: pidValue),
            pid >= -1
        else {
            throw failure("bad pid \(quoted(values[3]))")
        }
        let file: FileID?
        if values[4].hasPrefix("<none>") {
            file = nil
        } else {
            let parts = values[4].split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty,
                let major = UInt32(parts[0], radix: 16), let minor = UInt32(parts[1], radix: 16),
                parts[2].first != "+", let inode = UInt64(parts[2])
            else {
                throw failure("bad device:inode \(quoted(values[4]))")
            }
            file = FileID(deviceMajor: major, deviceMinor: minor, inode: inode)
        }
        guard let start = parseInteger(values[5], allowNegative: false) else {
            throw failure("bad start \(quoted(values[5]))")
        }
        let end: Int64?
        if values[6] == "EOF" {
            end = nil
        } else if let value = parseInteger(values[6]), value >= start {
            end = value
        } else {
            throw failure("bad end \(quoted(values[6]))")
        }
        return FileLock(
            ordinal: ordinal, isBlockedWaiter: isBlockedWaiter, kind: kind, enforcement: enforcement,
            access: access, pid: pid, file: file, start: start, end: end)
    }
}

// MARK: - /proc/PID/fdinfo/N

/// The lock lines of `/proc/PID/fdinfo/N`.
public enum FileDescriptorInfo {
    /// Every `lock:` line of one fdinfo file, parsed as a `/proc/locks` row (the kernel prints the same row after
    /// `lock:`). Other lines (`pos:`, `flags:`, `mnt_id:`, ...) are ignored.
    public static func parseLocks(_ text: String) throws(ProcParseError) -> [FileLock] {
        var locks: [FileLock] = []
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            guard line.hasPrefix("lock:") else { continue }
            do {
                locks.append(try FileLock.parse(line: line.dropFirst("lock:".count), number: index + 1))
            } catch {
                throw ProcParseError(file: "fdinfo", line: index + 1, reason: error.reason)
            }
        }
        return locks
    }
}

// MARK: - /proc/meminfo

/// The system memory figures the reclamation trigger compares against.
public struct MemoryInfo: Hashable, Sendable {
    /// `MemTotal`: usable RAM, in bytes.
    public var totalBytes: Int64
    /// `MemAvailable`: the kernel's estimate of memory available without swapping, in bytes.
    public var availableBytes: Int64

    /// Memory figures from their parts.
    public init(totalBytes: Int64, availableBytes: Int64) {
        self.totalBytes = totalBytes
        self.availableBytes = availableBytes
    }

    /// Parses `/proc/meminfo`; both `MemTotal` and `MemAvailable` (Linux 3.14+) must be present.
    public static func parse(_ text: String) throws(ProcParseError) -> MemoryInfo {
        var total: Int64?
        var available: Int64?
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let isTotal = line.hasPrefix("MemTotal:")
            guard isTotal || line.hasPrefix("MemAvailable:") else { continue }
            let parts = fields(line)
            guard parts.count == 3, parts[2] == "kB", let kibibytes = parseInteger(parts[1]),
                let bytes = kibibytesToBytes(kibibytes)
            else {
                throw ProcParseError(file: "meminfo", line: number + 1, reason: "bad line \(quoted(line))")
            }
            if isTotal { total = bytes } else { available = bytes }
        }
        guard let total else { throw ProcParseError(file: "meminfo", reason: "no MemTotal line") }
        guard let available else { throw ProcParseError(file: "meminfo", reason: "no MemAvailable line") }
        guard available <= total else {
            throw ProcParseError(file: "meminfo", reason: "MemAvailable \(available) exceeds MemTotal \(total)")
        }
        return MemoryInfo(totalBytes: total, availableBytes: available)
    }
}

// MARK: - PSI: /proc/pressure/<resource> and cgroup *.pressure

/// A pressure-stall resource of `/proc/pressure/`.
public enum PressureResource: String, Hashable, Sendable, CaseIterable {
    /// `/proc/pressure/memory`: time stalled waiting for memory (reclaim, swap-in, thrashing).
    case memory
    /// `/proc/pressure/cpu`: time runnable but waiting for a CPU.
    case cpu
    /// `/proc/pressure/io`: time waiting for block I/O.
    case io
    /// `/proc/pressure/irq` (Linux 6.1, with CONFIG_IRQ_TIME_ACCOUNTING): time spent in interrupts.
    case irq
}

/// One line of a PSI file: the share of wall time some (or all) tasks were stalled.
public struct PressureStall: Hashable, Sendable {
    /// Percentage of the last 10 s (0–100).
    public var average10: Double
    /// Percentage of the last 60 s (0–100).
    public var average60: Double
    /// Percentage of the last 300 s (0–100).
    public var average300: Double
    /// Total stall time since boot, in microseconds.
    public var totalMicroseconds: UInt64

    /// A stall record from its parts.
    public init(average10: Double, average60: Double, average300: Double, totalMicroseconds: UInt64) {
        self.average10 = average10
        self.average60 = average60
        self.average300 = average300
        self.totalMicroseconds = totalMicroseconds
    }
}

/// A PSI file: `some` (at least one task stalled) and `full` (all non-idle tasks stalled at once).
public struct Pressure: Hashable, Sendable {
    /// The `some` line.
    public var some: PressureStall
    /// The `full` line; nil where the kernel prints none (system-wide cpu before Linux 5.13).
    public var full: PressureStall?

    /// Pressure from its parts.
    public init(some: PressureStall, full: PressureStall?) {
        self.some = some
        self.full = full
    }

    /// Parses the text of a PSI file (`/proc/pressure/memory`, a cgroup's `memory.pressure`).
    public static func parse(_ text: String) throws(ProcParseError) -> Pressure {
        var some: PressureStall?
        var full: PressureStall?
        for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let parts = fields(line)
            guard let label = parts.first else { continue }
            guard label == "some" || label == "full" else {
                throw ProcParseError(file: "pressure", line: number + 1, reason: "unknown line \(quoted(line))")
            }
            let stall = try parseStall(parts.dropFirst(), line: number + 1)
            if label == "some" { some = stall } else { full = stall }
        }
        guard let some else { throw ProcParseError(file: "pressure", reason: "no 'some' line") }
        return Pressure(some: some, full: full)
    }

    private static func parseStall(_ parts: ArraySlice<Substring>, line: Int) throws(ProcParseError)
        -> PressureStall
    {
        var averages: [String: Double] = [:]
        var total: UInt64?
        for part in parts {
            let pair = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard pair.count == 2 else {
                throw ProcParseError(file: "pressure", line: line, reason: "expected key=value, got \(quoted(part))")
            }
            let key = String(pair[0])
            if key == "total" {
                guard pair[1].first != "+", let value = UInt64(pair[1]) else {
                    throw ProcParseError(file: "pressure", line: line, reason: "bad total \(quoted(pair[1]))")
                }
                total = value
            } else if key.hasPrefix("avg") {
                // Double(_:) also accepts "nan", "inf" and hex floats; a percentage is a finite 0...100.
                guard pair[1].allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
                    let value = Double(pair[1]), value.isFinite, value >= 0, value <= 100
                else {
                    throw ProcParseError(file: "pressure", line: line, reason: "bad \(key) \(quoted(pair[1]))")
                }
                averages[key] = value
            }
            // Other keys: a later kernel's addition, ignored.
        }
        guard let average10 = averages["avg10"], let average60 = averages["avg60"],
            let average300 = averages["avg300"], let total
        else {
            throw ProcParseError(file: "pressure", line: line, reason: "missing avg10, avg60, avg300 or total")
        }
        return PressureStall(
            average10: average10, average60: average60, average300: average300,
            totalMicroseconds: total)
    }
}
