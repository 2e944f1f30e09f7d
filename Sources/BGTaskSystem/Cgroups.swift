// The kernel's cgroup tools for freezing, measuring and killing whole apps: which hierarchies this host has, found
// by looking, and the operations on one cgroup directory, each confirmed rather than assumed.
import BGTaskPOSIX
import CPOSIX
import CSystemd
import Glibc

/// The cgroup hierarchies this host has mounted, found by probing the filesystems (never assumed): a pure cgroup2
/// host has cgroup2 at `/sys/fs/cgroup`; a hybrid one has cgroup2 at `/sys/fs/cgroup/unified` and the v1
/// controllers (`freezer`, `memory`) in directories of their own.
public struct CgroupHierarchies: Hashable, Sendable {
    /// cgroup2's root, or nil.
    public var unified: String?
    /// The v1 freezer hierarchy's root, or nil.
    public var freezer: String?
    /// The v1 memory hierarchy's root, or nil.
    public var memory: String?

    /// Hierarchies from their roots.
    public init(unified: String?, freezer: String?, memory: String?) {
        self.unified = unified
        self.freezer = freezer
        self.memory = memory
    }

    /// `statfs`'s magic of cgroup2 and of a v1 hierarchy.
    static let unifiedMagic = 0x6367_7270
    static let legacyMagic = 0x0027_e0eb

    /// Looks under `root` (`/sys/fs/cgroup`) for mounted hierarchies, by filesystem type.
    public static func probe(root: String = "/sys/fs/cgroup") -> CgroupHierarchies {
        func isMounted(_ path: String, magic: Int) -> Bool {
            bgtask_filesystem_type(path) == magic
        }
        let unified =
            isMounted(root, magic: unifiedMagic)
            ? root : (isMounted(root + "/unified", magic: unifiedMagic) ? root + "/unified" : nil)
        return CgroupHierarchies(
            unified: unified,
            freezer: isMounted(root + "/freezer", magic: legacyMagic) ? root + "/freezer" : nil,
            memory: isMounted(root + "/memory", magic: legacyMagic) ? root + "/memory" : nil)
    }

    /// The cgroups `pid` belongs to in these hierarchies (`/proc/PID/cgroup`).
    public func cgroups(of pid: pid_t, procFS: ProcFS = ProcFS()) throws -> ProcessCgroups {
        let lines = try ProcessCgroup.parse(procFS.readLines("\(pid)/cgroup"))
        func directory(_ root: String?, _ line: ProcessCgroup?) -> CgroupDirectory? {
            guard let root, let line else { return nil }
            return CgroupDirectory(path: line.path == "/" ? root : root + line.path)
        }
        return ProcessCgroups(
            unified: directory(unified, lines.first(where: \.isUnified)),
            freezer: directory(freezer, lines.first { $0.controllers.contains("freezer") }),
            memory: directory(memory, lines.first { $0.controllers.contains("memory") }))
    }
}

/// A process's cgroups in the hierarchies the host has.
public struct ProcessCgroups: Hashable, Sendable {
    public var unified: CgroupDirectory?
    public var freezer: CgroupDirectory?
    public var memory: CgroupDirectory?
}

/// One cgroup: a directory of a hierarchy. The operations name the hierarchy they belong to; each reads or writes
/// one file of the directory, bounded, and reports the kernel's refusal as `Errno`.
public struct CgroupDirectory: Hashable, Sendable, CustomStringConvertible {
    /// The directory, such as `/sys/fs/cgroup/unified/app.scope`.
    public var path: String

    /// The cgroup at `path`.
    public init(path: String) {
        self.path = path
    }

    public var description: String { path }

    /// The largest file read: far above `cgroup.procs` of thousands of processes.
    static let fileSizeLimit = 1 << 20

    /// The text of `name`, whole.
    public func read(_ name: String) throws(Errno) -> String {
        try FileDescriptor.readText(atPath: path + "/" + name, limit: Self.fileSizeLimit)
    }

    /// Writes `text` to `name` in one `write`, as cgroup files want.
    public func write(_ name: String, _ text: String) throws(Errno) {
        let descriptor = try FileDescriptor.open(path + "/" + name, .writeOnly)
        defer { try? descriptor.close() }
        do {
            try descriptor.writeAll(Array(text.utf8))
        } catch {
            throw error.with(operation: "write(\(path)/\(name), \(text))")
        }
    }

    /// Whether the directory has the file `name` (a controller's files exist only where it is enabled).
    public func has(_ name: String) -> Bool {
        access(path + "/" + name, F_OK) == 0
    }

    /// The processes in it (`cgroup.procs`), not those of its children.
    public func processes() throws -> [pid_t] {
        try CgroupProcesses.parse(read("cgroup.procs"))
    }

    /// Whether it has a child cgroup (a subdirectory), whose processes freezing or killing it would reach too;
    /// true when it cannot be read (fail closed: the caller then does not act on it whole).
    public var hasChildCgroups: Bool {
        guard let directory = opendir(path) else { return true }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) {
                String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
            }
            if entry.pointee.d_type == UInt8(DT_DIR) && name != "." && name != ".." { return true }
        }
        return false
    }

    /// Moves `pid` into it.
    public func move(_ pid: pid_t) throws(Errno) {
        try write("cgroup.procs", "\(pid)")
    }

    /// Makes a child cgroup `name` (mode 0755) and returns it.
    public func makeChild(_ name: String) throws(Errno) -> CgroupDirectory {
        let child = path + "/" + name
        _ = try systemCall("mkdir(\(child))") { mkdir(child, 0o755) }
        return CgroupDirectory(path: child)
    }

    /// Removes it (`rmdir`): it must hold no process and no child.
    public func remove() throws(Errno) {
        _ = try systemCall("rmdir(\(path))") { rmdir(path) }
    }

    // MARK: cgroup2

    /// `cgroup.events`: `populated` and `frozen`.
    public func events() throws -> CgroupKeyedValues {
        try CgroupKeyedValues.parse(read("cgroup.events"), file: "cgroup.events")
    }

    /// Asks for every process of it and its children to be frozen or thawed (`cgroup.freeze`); the change is done
    /// once `cgroup.events` says so (`waitUntil(frozen:timeout:)`).
    public func requestFreeze(_ frozen: Bool) throws(Errno) {
        try write("cgroup.freeze", frozen ? "1" : "0")
    }

    /// Waits at most `timeout` until `cgroup.events` shows `frozen` as wanted; whether it did. The kernel wakes a
    /// `POLLPRI` poll on the file at each change (about 0.15 ms after it here), so this does not spin.
    public func waitUntil(frozen: Bool, timeout: Duration) throws -> Bool {
        let descriptor = try FileDescriptor.open(path + "/cgroup.events", .readOnly)
        defer { try? descriptor.close() }
        let deadline = MonotonicClock.now() &+ timeout.nanosecondCount
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            // Read through the polled descriptor itself: reading is what re-arms the notification.
            let count = try systemCall("pread(\(path)/cgroup.events)") {
                buffer.withUnsafeMutableBytes { pread(descriptor.rawValue, $0.baseAddress, $0.count, 0) }
            }
            let events = try CgroupKeyedValues.parse(
                String(decoding: buffer[..<count], as: UTF8.self), file: "cgroup.events")
            if (events["frozen"] == 1) == frozen { return true }
            let remaining = deadline - MonotonicClock.now()
            guard remaining > 0 else { return false }
            _ = try descriptor.poll(for: .priority, timeout: .nanoseconds(remaining))
        }
    }

    /// Kills every process of it and its children at once (`cgroup.kill`, Linux 5.14).
    public func killAll() throws(Errno) {
        try write("cgroup.kill", "1")
    }

    /// Arms a PSI trigger on its `memory.pressure`: the returned descriptor reports `POLLPRI` when some task of it
    /// stalled on memory for `stall` within a `window` (unprivileged, the kernel takes only windows that are whole
    /// multiples of 2 s here). The trigger lives as long as the descriptor. Exactly as asked, or an error;
    /// `MemoryPressureWatch.armPSI(path:trigger:fallback:)` widens a refused window instead.
    public func armMemoryPressureTrigger(stall: Duration, window: Duration) throws(Errno) -> FileDescriptor {
        try MemoryPressureTrigger(kind: .some, stall: stall, window: window).arm(atPath: path + "/memory.pressure")
    }

    // MARK: v1 freezer

    /// The v1 freezer's state (`freezer.state`).
    public func freezerState() throws -> FreezerState {
        try FreezerState.parse(read("freezer.state"))
    }

    /// Asks the v1 freezer to freeze or thaw it (`freezer.state`).
    public func requestFreezer(_ frozen: Bool) throws(Errno) {
        try write("freezer.state", frozen ? FreezerState.frozen.rawValue : FreezerState.thawed.rawValue)
    }

    /// Waits at most `timeout` until `freezer.state` is `FROZEN` (or `THAWED`); whether it was. v1 sends no
    /// notification, so this reads the state every millisecond.
    public func waitUntilFreezer(frozen: Bool, timeout: Duration) throws -> Bool {
        let deadline = MonotonicClock.now() &+ timeout.nanosecondCount
        let wanted: FreezerState = frozen ? .frozen : .thawed
        while true {
            if try freezerState() == wanted { return true }
            guard MonotonicClock.now() < deadline else { return false }
            usleep(1000)
        }
    }

    // MARK: Either freezer

    /// Whether it is frozen through a v1 freezer (`freezer.state`) rather than cgroup2's `cgroup.freeze`: v1
    /// hierarchies have the one file, cgroup2 the other.
    public var isV1Freezer: Bool { has("freezer.state") && !has("cgroup.freeze") }

    /// Freezes or thaws it through whichever freezer its hierarchy has.
    public func setFrozen(_ frozen: Bool) throws(Errno) {
        if isV1Freezer { try requestFreezer(frozen) } else { try requestFreeze(frozen) }
    }

    /// Whether its freezer reports it frozen (`frozen 1` in `cgroup.events`, or `FROZEN` in `freezer.state`).
    public func isFrozen() throws -> Bool {
        if isV1Freezer { return try freezerState() == .frozen }
        return try events()["frozen"] == 1
    }

    /// Kills every process in it: `cgroup.kill` where cgroup2 has it, else SIGKILL through a pidfd to each process
    /// `cgroup.procs` lists, then `process_mrelease`; a v1 freezer is thawed afterwards, since a frozen v1 task
    /// dies only once thawed. Returns how many processes were signalled (`cgroup.kill` counts as one).
    @discardableResult
    public func killEverything() throws -> Int {
        if has("cgroup.kill") {
            try killAll()
            return 1
        }
        var signalled = 0
        for pid in try processes() where pid > 0 {
            // The pidfd pins the process: the signal reaches it even if it exits and its number is reused meanwhile.
            guard let pidFD = try? PidFD.open(pid: pid) else { continue }
            defer { try? pidFD.close() }
            if (try? pidFD.sendSignal(.kill)) != nil { signalled += 1 }
            try? pidFD.releaseMemory()
        }
        if isV1Freezer { try requestFreezer(false) }
        return signalled
    }

    // MARK: v1 memory

    /// An eventfd that becomes readable each time its memory use (v1 `memory.usage_in_bytes`, its children's
    /// included) crosses `bytes`, either way (`cgroup.event_control`). The threshold lives as long as the eventfd.
    public func armUsageThreshold(_ bytes: UInt64) throws(Errno) -> FileDescriptor {
        let eventFD = FileDescriptor(rawValue: try systemCall("eventfd") { bgtask_eventfd(1) })
        do {
            let usage = try FileDescriptor.open(path + "/memory.usage_in_bytes", .readOnly)
            defer { try? usage.close() }
            try write("cgroup.event_control", "\(eventFD.rawValue) \(usage.rawValue) \(bytes)")
        } catch {
            try? eventFD.close()
            throw error
        }
        return eventFD
    }

    /// Its memory use in bytes (v1 `memory.usage_in_bytes`).
    public func memoryUsage() throws -> UInt64 {
        try CgroupNumber.parse(read("memory.usage_in_bytes"), file: "memory.usage_in_bytes")
    }
}
