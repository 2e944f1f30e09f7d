// Unix stream sockets for the Varlink interface: listening, accepting, connecting and peer credentials.
import CPOSIX
import Glibc

/// Who is on the other end of a Unix socket, as the kernel recorded it at `connect()` (`SO_PEERCRED`).
public struct PeerCredentials: Hashable, Sendable, CustomStringConvertible {
    /// The peer's process id at connect time (0 if the peer is in a PID namespace we cannot see).
    public var pid: pid_t
    /// The peer's effective user id at connect time.
    public var uid: uid_t
    /// The peer's effective group id at connect time.
    public var gid: gid_t

    /// Credentials as read from the kernel, or made up in tests.
    public init(pid: pid_t, uid: uid_t, gid: gid_t) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    public var description: String { "pid \(pid) uid \(uid) gid \(gid)" }
}

/// `AF_UNIX` `SOCK_STREAM` sockets. Every descriptor made here is close-on-exec.
public enum UnixSocket {
    /// The longest path a socket address can hold: `sun_path` is 108 bytes including the terminating NUL.
    public static let maximumPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// Creates a listening socket at `path`: non-blocking, close-on-exec, file mode `mode`.
    ///
    /// A socket file left by a dead daemon is removed first; if another process still accepts on it, this
    /// throws `.addressInUse` instead of stealing the path. Anything at `path` that is not a socket is left
    /// alone and `bind` reports it.
    ///
    /// A listener goes on taking connections while any process holds a copy of its descriptor, and a child holds a
    /// copy of every descriptor of its parent from its clone to its exec, close-on-exec or not. A process that stops
    /// listening and goes on running shuts the listener down (`shutdown(_:_:)`) before closing it: from then on it
    /// refuses connections, whoever holds a copy.
    public static func listen(path: String, mode: mode_t = 0o666, backlog: Int32 = 128) throws(Errno)
        -> FileDescriptor
    {
        var address = try socketAddress(path, operation: "bind")
        try removeStaleSocket(at: path)
        let fd = try makeSocket(nonBlocking: true, operation: "socket(\(path))")
        do throws(Errno) {
            _ = try systemCall("bind(\(path))") {
                withUnsafePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(fd.rawValue, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                    }
                }
            }
            // bind creates the file as 0777 & ~umask; the interface is world-connectable by design
            // (authorization is per call, from the peer's credentials), so set the mode explicitly.
            _ = try systemCall("chmod(\(path))") { chmod(path, mode) }
            _ = try systemCall("listen(\(path))") { Glibc.listen(fd.rawValue, backlog) }
        } catch {
            try? fd.close()  // The bind/listen failure is the error to report.
            throw error
        }
        return fd
    }

    /// Creates a datagram socket bound at `path` (close-on-exec, blocking): what a service manager listens on
    /// for `sd_notify` messages (`NOTIFY_SOCKET`). Anything already at `path` is reported by `bind`.
    public static func bindDatagram(path: String) throws(Errno) -> FileDescriptor {
        var address = try socketAddress(path, operation: "bind")
        let type = SOCK_DGRAM.rawValue | SOCK_CLOEXEC.rawValue
        let fd = FileDescriptor(rawValue: try systemCall("socket(\(path))") { socket(AF_UNIX, Int32(type), 0) })
        do throws(Errno) {
            _ = try systemCall("bind(\(path))") {
                withUnsafePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(fd.rawValue, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                    }
                }
            }
        } catch {
            try? fd.close()  // The bind failure is the error to report.
            throw error
        }
        return fd
    }

    /// Accepts one pending connection as a non-blocking, close-on-exec descriptor; nil when none is
    /// pending (`EAGAIN`), so a loop can drain the listener on each readiness event.
    public static func accept(_ listener: FileDescriptor) throws(Errno) -> FileDescriptor? {
        do throws(Errno) {
            let fd = try systemCall("accept4(fd \(listener.rawValue))") {
                accept4(listener.rawValue, nil, nil, Int32(SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue))
            }
            return FileDescriptor(rawValue: fd)
        } catch  where error == .wouldBlock || error == .connectionAborted {
            // ECONNABORTED: the client gave up before we accepted; there is nothing to serve.
            return nil
        }
    }

    /// Connects to the socket at `path` and returns a blocking, close-on-exec descriptor.
    public static func connect(path: String) throws(Errno) -> FileDescriptor {
        var address = try socketAddress(path, operation: "connect")
        let fd = try makeSocket(nonBlocking: false, operation: "socket(\(path))")
        do throws(Errno) {
            let operation = "connect(\(path))"
            do throws(Errno) {
                _ = try systemCall(operation, retryOnInterrupt: false) {
                    withUnsafePointer(to: &address) { pointer in
                        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            Glibc.connect(fd.rawValue, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                        }
                    }
                }
            } catch  where error == .interrupted {
                // An interrupted connect goes on in the background; calling it again would fail with
                // EALREADY. Wait for it to finish and read its outcome instead.
                _ = try fd.poll(for: .writable, timeout: nil)
                let pending = try socketOption(fd, SO_ERROR, operation: "getsockopt(SO_ERROR)")
                if pending != 0 { throw Errno(rawValue: pending, operation: operation) }
            }
        } catch {
            try? fd.close()  // The connect failure is the error to report.
            throw error
        }
        return fd
    }

    /// `socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC)`: two connected, blocking ends.
    public static func pair() throws(Errno) -> (FileDescriptor, FileDescriptor) {
        var fds: [Int32] = [-1, -1]
        _ = try systemCall("socketpair") {
            socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0, &fds)
        }
        return (FileDescriptor(rawValue: fds[0]), FileDescriptor(rawValue: fds[1]))
    }

    /// The peer's supplementary groups (`SO_PEERGROUPS`, Linux 4.13), fixed when it connected: what decides
    /// group-based access is the connecting process's credentials, not what the user database says now.
    public static func peerGroups(of socket: FileDescriptor) throws(Errno) -> [gid_t] {
        // SO_PEERGROUPS is 59 on every Linux architecture (asm-generic/socket.h).
        let peerGroups: Int32 = 59
        var capacity = 64
        while true {
            var groups = [gid_t](repeating: 0, count: capacity)
            var length = socklen_t(capacity * MemoryLayout<gid_t>.size)
            let result = groups.withUnsafeMutableBytes { buffer in
                Result { () throws(Errno) in
                    try systemCall("getsockopt(fd \(socket.rawValue), SO_PEERGROUPS)") {
                        getsockopt(socket.rawValue, SOL_SOCKET, peerGroups, buffer.baseAddress, &length)
                    }
                }
            }
            switch result {
            case .success:
                return Array(groups.prefix(Int(length) / MemoryLayout<gid_t>.size))
            case .failure(let error)
            where error.rawValue == ERANGE && Int(length) > capacity * MemoryLayout<gid_t>.size:
                // The kernel wrote the size it needs into `length`.
                capacity = Int(length) / MemoryLayout<gid_t>.size
            case .failure(let error):
                throw error
            }
        }
    }

    /// The peer's pid, uid and gid (`SO_PEERCRED`), fixed when it connected.
    public static func peerCredentials(of socket: FileDescriptor) throws(Errno) -> PeerCredentials {
        var credentials = PeerCredentials(pid: 0, uid: 0, gid: 0)
        _ = try systemCall("getsockopt(fd \(socket.rawValue), SO_PEERCRED)") {
            bgtask_peer_credentials(socket.rawValue, &credentials.pid, &credentials.uid, &credentials.gid)
        }
        return credentials
    }

    /// A pidfd for the peer process (`SO_PEERPIDFD`, Linux 6.5), immune to the PID reuse that makes the
    /// PID of `peerCredentials(of:)` stale; nil on kernels without the option, or when the peer has no
    /// process the kernel can name (it already exited, or the socket was never connected).
    ///
    /// The pidfd is the caller's to close.
    public static func peerPidFD(of socket: FileDescriptor) throws(Errno) -> PidFD? {
        let credentials = try peerCredentials(of: socket)
        do throws(Errno) {
            let fd = try systemCall("getsockopt(fd \(socket.rawValue), SO_PEERPIDFD)") {
                bgtask_peer_pidfd(socket.rawValue)
            }
            return PidFD(fileDescriptor: FileDescriptor(rawValue: fd), pid: credentials.pid)
        } catch  where error == .protocolNotAvailable || error == .noSuchProcess || error == .noData {
            return nil
        }
    }

    /// The error pending on the socket (`SO_ERROR`, which reading clears), nil when none: what an `EPOLLERR`
    /// readiness is about.
    public static func pendingError(of socket: FileDescriptor) -> Errno? {
        guard let code = try? socketOption(socket, SO_ERROR, operation: "getsockopt(SO_ERROR)"), code != 0 else {
            return nil
        }
        return Errno(rawValue: code, operation: "socket")
    }

    /// Sets the kernel send buffer (`SO_SNDBUF`); the kernel doubles the value for bookkeeping.
    public static func setSendBufferSize(_ socket: FileDescriptor, bytes: Int32) throws(Errno) {
        try setSocketOption(socket, SO_SNDBUF, bytes, operation: "setsockopt(SO_SNDBUF)")
    }

    /// Sets the kernel receive buffer (`SO_RCVBUF`); the kernel doubles the value for bookkeeping.
    public static func setReceiveBufferSize(_ socket: FileDescriptor, bytes: Int32) throws(Errno) {
        try setSocketOption(socket, SO_RCVBUF, bytes, operation: "setsockopt(SO_RCVBUF)")
    }

    /// The kernel send buffer size (`SO_SNDBUF`) as the kernel reports it.
    public static func sendBufferSize(_ socket: FileDescriptor) throws(Errno) -> Int32 {
        try socketOption(socket, SO_SNDBUF, operation: "getsockopt(SO_SNDBUF)")
    }

    /// The kernel receive buffer size (`SO_RCVBUF`) as the kernel reports it.
    public static func receiveBufferSize(_ socket: FileDescriptor) throws(Errno) -> Int32 {
        try socketOption(socket, SO_RCVBUF, operation: "getsockopt(SO_RCVBUF)")
    }

    // MARK: - Helpers

    /// A `sockaddr_un` for `path`, or `.nameTooLong` naming the length and the limit.
    package static func socketAddress(_ path: String, operation: String) throws(Errno) -> sockaddr_un {
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, !bytes.contains(0) else {
            throw Errno(rawValue: EINVAL, operation: "\(operation)(\(path)) [socket path is empty or contains NUL]")
        }
        guard bytes.count <= maximumPathLength else {
            throw Errno(
                rawValue: ENAMETOOLONG,
                operation: "\(operation)(\(path)) [socket path is \(bytes.count) bytes, the limit is "
                    + "\(maximumPathLength)]")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: bytes)  // The rest stays zero, so the path is NUL-terminated.
        }
        return address
    }

    private static func makeSocket(nonBlocking: Bool, operation: String) throws(Errno) -> FileDescriptor {
        var type = SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue
        if nonBlocking { type |= SOCK_NONBLOCK.rawValue }
        return FileDescriptor(rawValue: try systemCall(operation) { socket(AF_UNIX, Int32(type), 0) })
    }

    /// Removes `path` if it is a socket nobody accepts on; throws `.addressInUse` if someone does.
    private static func removeStaleSocket(at path: String) throws(Errno) {
        var status = stat()
        do throws(Errno) {
            _ = try systemCall("lstat(\(path))") { lstat(path, &status) }
        } catch  where error == .noSuchFileOrDirectory {
            return
        }
        guard status.st_mode & S_IFMT == S_IFSOCK else { return }
        do throws(Errno) {
            let probe = try connect(path: path)
            try? probe.close()  // Only the successful connect mattered.
            throw Errno(rawValue: EADDRINUSE, operation: "listen(\(path)) [another process accepts on it]")
        } catch  where error == .connectionRefused || error == .noSuchFileOrDirectory {
            // Refused: a socket file whose listener is gone. Missing: someone removed it meanwhile.
        }
        do throws(Errno) {
            _ = try systemCall("unlink(\(path))") { unlink(path) }
        } catch  where error == .noSuchFileOrDirectory {
            return
        }
    }

    private static func socketOption(_ socket: FileDescriptor, _ option: Int32, operation: String) throws(Errno)
        -> Int32
    {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = try systemCall(operation) { getsockopt(socket.rawValue, SOL_SOCKET, option, &value, &length) }
        return value
    }

    private static func setSocketOption(
        _ socket: FileDescriptor, _ option: Int32, _ value: Int32,
        operation: String
    ) throws(Errno) {
        var value = value
        _ = try systemCall(operation) {
            setsockopt(socket.rawValue, SOL_SOCKET, option, &value, socklen_t(MemoryLayout<Int32>.size))
        }
    }
}
