// A netlink socket (rtnetlink, the kernel's uevents) on the daemon's loop, and the parser of a kernel uevent.
import BGTaskPOSIX
import CPOSIX
import Glibc

/// A non-blocking, close-on-exec netlink socket bound to multicast groups: the descriptor a loop source watches, and
/// datagrams read from it with their sender.
public final class NetlinkSocket {
    /// The socket.
    public let fileDescriptor: FileDescriptor
    /// Where each datagram is read; datagrams longer than this are cut and reported as truncated.
    private var buffer: [UInt8]

    /// `NETLINK_KOBJECT_UEVENT`: the kernel's device events.
    public static let ueventProtocol: Int32 = 15
    /// The kernel's own uevent multicast group (udev re-broadcasts on group 2, to its listeners).
    public static let kernelUeventGroup: UInt32 = 1

    /// A socket of `protocolNumber` joined to `groups` (0: none, for requests and their answers), with a receive
    /// buffer of `receiveBufferBytes` asked for (the kernel may give less), reading datagrams of up to
    /// `datagramBytes`. 32 KiB by default: the kernel fills a dump's datagrams up to the reader's buffer, at most
    /// 32 KiB, unless one message alone is larger (a link with many virtual functions); `growBuffer()` is for that.
    public init(protocolNumber: Int32, groups: UInt32, receiveBufferBytes: Int32 = 0, datagramBytes: Int = 32 << 10)
        throws(Errno)
    {
        let descriptor = try systemCall("socket(AF_NETLINK, \(protocolNumber))") {
            bgtask_netlink_open(protocolNumber, groups, receiveBufferBytes)
        }
        fileDescriptor = FileDescriptor(rawValue: descriptor)
        buffer = [UInt8](repeating: 0, count: datagramBytes)
    }

    deinit { try? fileDescriptor.close() }

    /// How long a datagram can be read whole.
    public var datagramCapacity: Int { buffer.count }

    /// Doubles the buffer, up to `limit` bytes; false when it is already that large.
    public func growBuffer(limit: Int) -> Bool {
        guard buffer.count < limit else { return false }
        buffer = [UInt8](repeating: 0, count: min(buffer.count * 2, limit))
        return true
    }

    /// One datagram read from the socket.
    public struct Datagram {
        /// Its bytes (cut at the buffer's size when `isTruncated`).
        public var bytes: ArraySlice<UInt8>
        /// The sender's port id: 0 for the kernel itself.
        public var senderPort: UInt32
        /// The multicast groups it was sent to (0: sent to this socket alone).
        public var groups: UInt32
        /// Whether it was longer than the buffer.
        public var isTruncated: Bool
    }

    /// The next datagram, or nil when none is waiting (`EAGAIN`). `ENOBUFS` (the kernel dropped datagrams because
    /// the socket's buffer was full) is thrown: the caller must then re-read whatever state it follows.
    public func receive() throws(Errno) -> Datagram? {
        var senderPort: UInt32 = 0
        var groups: UInt32 = 0
        var truncated: Int32 = 0
        let count = buffer.count
        let received: Int
        do throws(Errno) {
            received = try systemCall("recvmsg(netlink)") {
                buffer.withUnsafeMutableBytes { raw in
                    bgtask_netlink_receive(
                        fileDescriptor.rawValue, raw.baseAddress, count, &senderPort, &groups, &truncated)
                }
            }
        } catch  where error.rawValue == EAGAIN || error.rawValue == EWOULDBLOCK {
            return nil
        }
        return Datagram(
            bytes: buffer[0..<min(received, count)], senderPort: senderPort, groups: groups,
            isTruncated: truncated != 0)
    }

    /// Sends `bytes` to the kernel.
    public func sendToKernel(_ bytes: [UInt8]) throws(Errno) {
        _ = try systemCall("sendto(netlink)") {
            bytes.withUnsafeBytes { raw in
                bgtask_netlink_send_to_kernel(fileDescriptor.rawValue, raw.baseAddress, raw.count)
            }
        }
    }
}

/// A uevent as the kernel sends it on `NETLINK_KOBJECT_UEVENT`: `ACTION@DEVPATH`, then `KEY=VALUE` fields, each
/// ended by a NUL byte.
public struct KernelUevent: Hashable, Sendable {
    /// `add`, `remove`, `change`, `bind`…
    public var action: String
    /// The device's path under `/sys`.
    public var devicePath: String
    /// The fields, by key (`SUBSYSTEM`, `POWER_SUPPLY_ONLINE`…); a key given twice keeps its last value.
    public var properties: [String: String]

    /// The device's subsystem (`SUBSYSTEM=`), e.g. `power_supply`.
    public var subsystem: String? { properties["SUBSYSTEM"] }

    /// The most fields read from one uevent: the kernel caps an event's environment at 64 (`UEVENT_NUM_ENVP`).
    public static let fieldLimit = 64

    /// Reads one datagram. Nil for anything that is not a kernel uevent: no `@` in the header (udev's `libudev`
    /// messages, which a socket on the kernel's group never gets anyway), an empty action or path, text that is
    /// not UTF-8, a field without `=`, or more fields than the kernel sends.
    public static func parse(_ bytes: some Collection<UInt8>) -> KernelUevent? {
        let parts = bytes.split(separator: 0, omittingEmptySubsequences: true)
        guard let header = parts.first, parts.count - 1 <= fieldLimit,
            let at = header.firstIndex(of: UInt8(ascii: "@"))
        else { return nil }
        guard let action = String(validating: header[..<at], as: UTF8.self),
            let path = String(validating: header[header.index(after: at)...], as: UTF8.self),
            !action.isEmpty, !path.isEmpty
        else { return nil }
        var properties: [String: String] = [:]
        for field in parts.dropFirst() {
            guard let equals = field.firstIndex(of: UInt8(ascii: "=")), equals != field.startIndex,
                let key = String(validating: field[..<equals], as: UTF8.self),
                let value = String(validating: field[field.index(after: equals)...], as: UTF8.self)
            else { return nil }
            properties[key] = value
        }
        return KernelUevent(action: action, devicePath: path, properties: properties)
    }
}
