// Hands one open descriptor to another process over a Unix socket (SCM_RIGHTS), with a few bytes beside it.

import BGTaskPOSIX
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
        var bytes = payload
        let (result, _, errorNumber) = withMessage(of: &bytes) { control, message in
            let header = control.bindMemory(to: cmsghdr.self, capacity: 1)
            header.pointee.cmsg_len = messageLength
            header.pointee.cmsg_level = SOL_SOCKET
            header.pointee.cmsg_type = Int32(SCM_RIGHTS)
            (control + aligned(MemoryLayout<cmsghdr>.size)).storeBytes(of: descriptor.rawValue, as: Int32.self)
            return sendmsg(socket.rawValue, &message, Int32(MSG_NOSIGNAL))
        }
        if result == -1 { throw Errno(rawValue: errorNumber, operation: "sendmsg(SCM_RIGHTS)") }
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
        var bytes = [UInt8](repeating: 0, count: max(1, payloadCapacity))
        var descriptorNumber: Int32?
        let (result, controlReceived, errorNumber) = withMessage(of: &bytes) { control, message in
            let received = recvmsg(socket.rawValue, &message, Int32(MSG_CMSG_CLOEXEC))
            let header = control.bindMemory(to: cmsghdr.self, capacity: 1).pointee
            if received > 0, message.msg_controllen >= messageLength, header.cmsg_level == SOL_SOCKET,
                header.cmsg_type == Int32(SCM_RIGHTS)
            {
                descriptorNumber = (control + aligned(MemoryLayout<cmsghdr>.size)).load(as: Int32.self)
            }
            return received
        }
        if result == -1 { throw Errno(rawValue: errorNumber, operation: "recvmsg(SCM_RIGHTS)") }
        if result == 0 { return nil }
        guard let descriptorNumber, controlReceived >= messageLength else {
            throw Errno(rawValue: EPROTO, operation: "recvmsg: no descriptor came with the message")
        }
        return (FileDescriptor(rawValue: descriptorNumber), Array(bytes[..<result]))
    }

    /// Calls `transfer` (a `sendmsg` or `recvmsg`) with a message whose data is `bytes` and whose zeroed control
    /// buffer holds one descriptor, again while it fails with `EINTR`; returns its result, the control length it
    /// left in the message, and `errno` when it failed (read at once, before anything else can change it).
    private static func withMessage(
        of bytes: inout [UInt8], _ transfer: (UnsafeMutableRawPointer, inout msghdr) -> Int
    ) -> (result: Int, controlLength: Int, errorNumber: Int32) {
        let control = UnsafeMutableRawPointer.allocate(
            byteCount: controlLength, alignment: MemoryLayout<cmsghdr>.alignment)
        defer { control.deallocate() }
        return bytes.withUnsafeMutableBytes { buffer in
            var vector = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                while true {
                    control.initializeMemory(as: UInt8.self, repeating: 0, count: controlLength)
                    var message = msghdr()
                    message.msg_iov = vectorPointer
                    message.msg_iovlen = 1
                    message.msg_control = control
                    message.msg_controllen = controlLength
                    let result = transfer(control, &message)
                    let errorNumber = result == -1 ? errno : 0
                    if errorNumber == EINTR { continue }
                    return (result, message.msg_controllen, errorNumber)
                }
            }
        }
    }
}
