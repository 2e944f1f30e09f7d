// Talks to the service manager: sd_notify state changes, the watchdog, the fd store and socket activation.
import BGTaskPOSIX
import CSystemd
import Glibc

/// `sd_notify(3)` for a `Type=notify` service. Without `NOTIFY_SOCKET` every call does nothing and
/// returns false, so the daemon runs the same way outside systemd.
public struct ServiceNotifier: Sendable {
    /// A notifier for the socket named by `NOTIFY_SOCKET` at the time of each call.
    public init() {}

    /// Whether a service manager listens (`NOTIFY_SOCKET` is set).
    public var isSupervised: Bool { getenv("NOTIFY_SOCKET") != nil }

    /// Sends newline-separated `NAME=value` assignments as they are. Returns whether a message was sent.
    @discardableResult
    public func notify(_ state: String) throws(Errno) -> Bool {
        try systemCall("sd_notify", convention: .returnsNegativeErrno) { sd_notify(0, state) } > 0
    }

    /// `READY=1`: start-up finished (the socket serves); `systemctl start` returns.
    @discardableResult
    public func ready() throws(Errno) -> Bool { try notify("READY=1") }

    /// `STATUS=…`: a one-line status for `systemctl status`. Newlines become spaces, so text that comes from
    /// clients (app names) cannot smuggle in other assignments such as `READY=1`.
    @discardableResult
    public func status(_ text: String) throws(Errno) -> Bool {
        try notify("STATUS=" + ServiceNotifier.singleLine(text))
    }

    /// `STOPPING=1`: shutdown began.
    @discardableResult
    public func stopping() throws(Errno) -> Bool { try notify("STOPPING=1") }

    /// `WATCHDOG=1`: the daemon is alive. `EventLoop.enableWatchdog()` sends this by itself.
    @discardableResult
    public func watchdog() throws(Errno) -> Bool { try notify("WATCHDOG=1") }

    /// The watchdog interval the manager expects pings within (`sd_watchdog_enabled`); nil when off.
    public func watchdogInterval() throws(Errno) -> Duration? {
        var microseconds: UInt64 = 0
        let enabled = try systemCall("sd_watchdog_enabled", convention: .returnsNegativeErrno) {
            sd_watchdog_enabled(0, &microseconds)
        }
        return enabled > 0 ? .microseconds(Int64(clamping: microseconds)) : nil
    }

    /// `FDSTORE=1` with `FDNAME=name`: asks the manager to keep `descriptors` across a daemon restart
    /// (they come back through `listenedDescriptors`). Returns whether a message was sent.
    @discardableResult
    public func storeFileDescriptors(_ descriptors: [FileDescriptor], name: String) throws(Errno) -> Bool {
        let cleanName = Self.descriptorName(name)
        let raw = descriptors.map(\.rawValue)
        return try systemCall("sd_pid_notify_with_fds(FDSTORE)", convention: .returnsNegativeErrno) {
            raw.withUnsafeBufferPointer { buffer in
                sd_pid_notify_with_fds(
                    0, 0, "FDSTORE=1\nFDNAME=\(cleanName)", buffer.baseAddress,
                    UInt32(buffer.count))
            }
        } > 0
    }

    /// `FDSTOREREMOVE=1` with `FDNAME=name`: the manager closes its copies of the descriptors stored as `name`.
    @discardableResult
    public func removeStoredFileDescriptors(name: String) throws(Errno) -> Bool {
        try notify("FDSTOREREMOVE=1\nFDNAME=\(Self.descriptorName(name))")
    }

    /// How many descriptors the manager keeps for this service (`$FDSTORE`, which systemd 254 and later set from
    /// `FileDescriptorStoreMax=`, and the units set for older ones); 0 when there is no fd store.
    public var fileDescriptorStoreLimit: Int {
        guard isSupervised, let text = getenv("FDSTORE") else { return 0 }
        return max(0, Int(String(cString: text)) ?? 0)
    }

    /// A name as `FDNAME=` takes it: at most 255 printable ASCII characters, no ':' (the separator of
    /// LISTEN_FDNAMES); anything else becomes '_'.
    static func descriptorName(_ name: String) -> String {
        String(
            name.map { character -> Character in
                let code = character.asciiValue ?? 0  // Non-ASCII counts as unprintable here.
                return code < 0x20 || code == 0x7f || character == ":" ? "_" : character
            }.prefix(255))
    }

    /// A descriptor passed by the service manager (socket activation or the fd store).
    public struct ListenedDescriptor: Hashable, Sendable {
        /// The descriptor, numbered from 3 (`SD_LISTEN_FDS_START`).
        public var fileDescriptor: FileDescriptor
        /// Its name (`FileDescriptorName=` or `FDNAME=`); "unknown" when the manager gave none.
        public var name: String
    }

    /// The descriptors passed to this process (`sd_listen_fds_with_names`), made close-on-exec.
    /// With `unsetEnvironment` the `LISTEN_*` variables are removed so children do not see them.
    public static func listenedDescriptors(unsetEnvironment: Bool = true) throws(Errno) -> [ListenedDescriptor] {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = try systemCall("sd_listen_fds_with_names", convention: .returnsNegativeErrno) {
            sd_listen_fds_with_names(unsetEnvironment ? 1 : 0, &names)
        }
        defer {
            if let names {
                for index in 0..<Int(count) { free(names[index]) }
                free(names)
            }
        }
        var result: [ListenedDescriptor] = []
        for index in 0..<Int(count) {
            let fd = FileDescriptor(rawValue: SD_LISTEN_FDS_START + Int32(index))
            // The manager passes them inheritable; the daemon's children must not get its listening socket.
            _ = try systemCall("fcntl(fd \(fd.rawValue), F_SETFD)") { fcntl(fd.rawValue, F_SETFD, FD_CLOEXEC) }
            let name = names?[index].map { String(cString: $0) } ?? "unknown"
            result.append(ListenedDescriptor(fileDescriptor: fd, name: name))
        }
        return result
    }

    /// `text` with line breaks replaced by spaces.
    static func singleLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }
}
