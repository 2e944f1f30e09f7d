// Hands one open descriptor to another process over a Unix socket (SCM_RIGHTS), with a few bytes beside it.

import BGTaskSystem
import Glibc

/// Sending and receiving a descriptor as `SCM_RIGHTS` ancillary data, which `BGTaskSystem` does not offer.
///
/// The benchmark's app stand-ins connect to the daemon and pass the connected socket back this way, so the
/// daemon sees the stand-in as the app's process while the benchmark talks over the socket.
enum DescriptorPassing {
    /// `CMSG_ALIGN`: ancillary data is aligned to `size_t`.
    private static func aligned(_ length: Int) -> Int {
        let alignment = MemoryLayout<Int>.size
        return (length + alignment - 1) & ~(alignment - 1)
    }

    /// `CMSG_LEN(sizeof(int))`: a header and one descriptor number.
    private static var messageLength: Int { aligned(MemoryLayout<cmsghdr>.size) + MemoryLayout<Int32>.size }

    /// `CMSG_SPACE(sizeof(int))`: the control buffer holding that message.
    private static var controlLength: Int {
        aligned(MemoryLayout<cmsghdr>.size) + aligned(MemoryLayout<Int32>.size)
    }

    /// Sends `descriptor` over `socket` with `payload` (at least one byte: a message without data is not
    /// delivered on a stream socket).
    static func send(_ descriptor: FileDescriptor, payload: [UInt8], over socket: FileDescriptor) throws(Errno) {
        precondition(!payload.isEmpty, "SCM_RIGHTS needs at least one byte of data beside it")
        let control = UnsafeMutableRawPointer.allocate(
            byteCount: controlLength, alignment: MemoryLayout<cmsghdr>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0, count: controlLength)
        let header = control.bindMemory(to: cmsghdr.self, capacity: 1)
        header.pointee.cmsg_len = messageLength
        header.pointee.cmsg_level = SOL_SOCKET
        header.pointee.cmsg_type = Int32(SCM_RIGHTS)
        (control + aligned(MemoryLayout<cmsghdr>.size)).storeBytes(of: descriptor.rawValue, as: Int32.self)
        var bytes = payload
        let result = bytes.withUnsafeMutableBytes { buffer -> Int in
            var vector = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                var message = msghdr()
                message.msg_iov = vectorPointer
                message.msg_iovlen = 1
                message.msg_control = control
                message.msg_controllen = controlLength
                while true {
                    let sent = sendmsg(socket.rawValue, &message, Int32(MSG_NOSIGNAL))
                    if sent == -1 && errno == EINTR { continue }
                    return sent
                }
            }
        }
        if result == -1 { throw Errno(rawValue: errno, operation: "sendmsg(SCM_RIGHTS)") }
        if result != payload.count { throw Errno(rawValue: EMSGSIZE, operation: "sendmsg(SCM_RIGHTS) sent part") }
    }

    /// Receives a descriptor and the bytes sent beside it (up to `payloadCapacity`), waiting at most `timeout`.
    ///
    /// Returns nil when the peer closed the socket without sending one. The descriptor arrives close-on-exec.
    static func receive(over socket: FileDescriptor, payloadCapacity: Int, timeout: Duration) throws(Errno)
        -> (descriptor: FileDescriptor, payload: [UInt8])?
    {
        guard try !socket.poll(for: .readable, timeout: timeout).isEmpty else {
            throw Errno(rawValue: ETIMEDOUT, operation: "waiting for a descriptor")
        }
        let control = UnsafeMutableRawPointer.allocate(
            byteCount: controlLength, alignment: MemoryLayout<cmsghdr>.alignment)
        defer { control.deallocate() }
        control.initializeMemory(as: UInt8.self, repeating: 0, count: controlLength)
        var bytes = [UInt8](repeating: 0, count: max(1, payloadCapacity))
        var controlReceived = 0
        let result = bytes.withUnsafeMutableBytes { buffer -> Int in
            var vector = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                var message = msghdr()
                message.msg_iov = vectorPointer
                message.msg_iovlen = 1
                message.msg_control = control
                message.msg_controllen = controlLength
                while true {
                    let received = recvmsg(socket.rawValue, &message, Int32(MSG_CMSG_CLOEXEC))
                    if received == -1 && errno == EINTR { continue }
                    controlReceived = message.msg_controllen
                    return received
                }
            }
        }
        if result == -1 { throw Errno(rawValue: errno, operation: "recvmsg(SCM_RIGHTS)") }
        if result == 0 { return nil }
        let header = control.bindMemory(to: cmsghdr.self, capacity: 1).pointee
        guard controlReceived >= messageLength, header.cmsg_level == SOL_SOCKET,
            header.cmsg_type == Int32(SCM_RIGHTS)
        else {
            throw Errno(rawValue: EPROTO, operation: "recvmsg: no descriptor came with the message")
        }
        let number = (control + aligned(MemoryLayout<cmsghdr>.size)).load(as: Int32.self)
        return (FileDescriptor(rawValue: number), Array(bytes[..<result]))
    }
}
