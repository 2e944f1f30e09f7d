// Writing to and shutting down connected sockets without the process-wide side effects of plain write(2).
// CSystemd as well as Glibc: its shim includes <sys/socket.h>, and where a module of the same build uses the socket
// constants through it (MemoryPressureWatch), a plain swiftc build (scripts/fuzz) finds MSG_NOSIGNAL only there.
import CPOSIX
import Glibc

extension FileDescriptor {
    /// Sends what the socket takes now (`send(2)` with `MSG_NOSIGNAL`, see `sendAll(_:)`); returns the count.
    /// On a full non-blocking socket throws `.wouldBlock`.
    public func send(_ buffer: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try systemCall("send(fd \(rawValue))") {
            Glibc.send(rawValue, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL))
        }
    }

    /// Sends every byte on a connected socket, looping over short sends (`send(2)` with `MSG_NOSIGNAL`).
    ///
    /// `MSG_NOSIGNAL` makes a send to a peer that hung up fail with `.brokenPipe` instead of raising `SIGPIPE`,
    /// whose default action would kill the process: a library must not depend on its host ignoring the signal.
    /// For blocking sockets; a non-blocking one may throw `.wouldBlock` with part of the bytes sent.
    public func sendAll<Bytes: Collection>(_ bytes: Bytes) throws(Errno) where Bytes.Element == UInt8 {
        let array = Array(bytes)
        var offset = 0
        while offset < array.count {
            offset += try systemCall("send(fd \(rawValue))") {
                // `baseAddress!`: the loop runs only while offset < count, so the array is not empty.
                array.withUnsafeBytes {
                    Glibc.send(rawValue, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL))
                }
            }
        }
    }
}

extension UnixSocket {
    /// Which half of a connection `shutdown(_:_:)` ends.
    public enum ShutdownDirection: Sendable {
        /// `SHUT_RD`: no more receiving; a blocked read returns end of file.
        case read
        /// `SHUT_WR`: no more sending; the peer reads end of file.
        case write
        /// `SHUT_RDWR`: both.
        case both

        var rawValue: Int32 {
            switch self {
            case .read: Int32(SHUT_RD)
            case .write: Int32(SHUT_WR)
            case .both: Int32(SHUT_RDWR)
            }
        }
    }

    /// `shutdown(2)`: ends one or both directions of a connection while the descriptor stays open.
    ///
    /// This is how one thread wakes another blocked in `read` or `poll` on the same socket: closing the
    /// descriptor instead would let its number be reused under the blocked thread. A socket that is no longer
    /// connected (`ENOTCONN`: the peer already went away) counts as shut down. A listening socket shut down for
    /// reading refuses connections (`ECONNREFUSED`) from then on, in every process holding a copy of it.
    public static func shutdown(_ socket: FileDescriptor, _ direction: ShutdownDirection = .both) throws(Errno) {
        do throws(Errno) {
            _ = try systemCall("shutdown(fd \(socket.rawValue))") {
                Glibc.shutdown(socket.rawValue, direction.rawValue)
            }
        } catch  where error == .notConnected {
            return
        }
    }
}
